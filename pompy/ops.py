"""Stencil operators on (i, j, k) tensors, indexed like the Fortran.

Tensors are indexed ``a[i-1, j-1, k-1]`` for pom2k's ``a(i,j,k)``. Every
operator is shape-preserving and edge-blind: where a neighbour falls
outside the array the edge slab is repeated, so the edge result is a
placeholder that routines never keep; a routine chooses the index ranges
it writes with :func:`inside`, in pom2k's inclusive 1-based bounds. No
operator wraps around (no ``torch.roll``) and none divides by a metric.

A neighbour is read with the operator named after the Fortran index it
reads; the arithmetic stays at the call, written as pom2k writes it:

    xm(a) = a(i-1)    xp(a) = a(i+1)      along dim 0 (i)
    ym(a) = a(j-1)    yp(a) = a(j+1)      along dim 1 (j)
    zm(a) = a(k-1)    zp(a) = a(k+1)      along the last dim (k)

so pom2k's ``.25*(dx(i,j)+dx(i-1,j))`` is ``.25 * (dx + xm(dx))``, operands
and grouping as the Fortran writes them. k is the last dimension of every
pompy array that has one: (i, j, k) fields, (1, 1, k) :func:`levels`,
(j, k) and (i, k) boundary slices and (k,) profiles; an (i, j) field has no
k, and ``zm`` of it would read j. :func:`shift` is the general offset the
six are built on.

A routine written for speed reads pom2k's ranges directly, as views, and
writes them with :func:`put`: ``span(2, imm1)`` is the slice of pom2k's
``i = 2..imm1`` and ``span(2, imm1, -1)`` the same range read at i-1, so
pom2k's ``u(i,j,k)+u(i-1,j,k)`` over i = 2..imm1 is ``u[I, J, K] +
u[Im, J, K]`` with ``I, Im = span(2, imm1), span(2, imm1, -1)``. Nothing is
computed outside the ranges, nothing is copied to shift, and each point
is computed by the same operations in the same order as with the
neighbour operators (the same bits).
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch
from torch import Tensor
from torch._C._functorch import is_batchedtensor as _is_batched
from torch.autograd import forward_ad

X, Y, Z = 0, 1, 2


def shift(a: torch.Tensor, dim: int, offset: int) -> torch.Tensor:
    """``a[index + offset]`` along ``dim``; the edge slab repeats beyond the ends."""
    n = a.size(dim)
    if offset == 0 or n == 1:
        return a
    if offset == 1:             # the neighbours: the edge slab is one slab, no expand
        return torch.cat([a.narrow(dim, 1, n - 1), a.narrow(dim, n - 1, 1)], dim)
    if offset == -1:
        return torch.cat([a.narrow(dim, 0, 1), a.narrow(dim, 0, n - 1)], dim)
    if abs(offset) >= n:
        raise ValueError(f"shift by {offset} along a dimension of size {n}")
    if offset > 0:
        edge = a.narrow(dim, n - 1, 1).expand_as(a.narrow(dim, 0, offset))
        return torch.cat([a.narrow(dim, offset, n - offset), edge], dim)
    edge = a.narrow(dim, 0, 1).expand_as(a.narrow(dim, 0, -offset))
    return torch.cat([edge, a.narrow(dim, 0, n + offset)], dim)


def xm(a: Tensor) -> Tensor:
    """``a(i-1)``: ``shift(a, X, -1)``; at i = 1 the edge slab a(1) is repeated."""
    return shift(a, X, -1)


def xp(a: Tensor) -> Tensor:
    """``a(i+1)``: ``shift(a, X, 1)``; at i = im the edge slab a(im) is repeated."""
    return shift(a, X, 1)


def ym(a: Tensor) -> Tensor:
    """``a(j-1)``: ``shift(a, Y, -1)``; at j = 1 the edge slab a(:,1) is repeated."""
    return shift(a, Y, -1)


def yp(a: Tensor) -> Tensor:
    """``a(j+1)``: ``shift(a, Y, 1)``; at j = jm the edge slab a(:,jm) is repeated."""
    return shift(a, Y, 1)


def zm(a: Tensor) -> Tensor:
    """``a(k-1)`` along the last dimension (k): ``shift(a, -1, -1)``, which is
    ``shift(a, Z, -1)`` for an (i, j, k) field; at k = 1 the edge slab a(..,1)
    is repeated."""
    return shift(a, -1, -1)


def zp(a: Tensor) -> Tensor:
    """``a(k+1)`` along the last dimension (k): ``shift(a, -1, 1)``, which is
    ``shift(a, Z, 1)`` for an (i, j, k) field; at k = kb the edge slab a(..,kb)
    is repeated."""
    return shift(a, -1, 1)


def _range_mask(size: int, bounds, device) -> torch.Tensor:
    lo, hi = bounds
    idx = torch.arange(1, size + 1, device=device)
    return (idx >= lo) & (idx <= hi)


def _build_mask(ndim: int, ranges: tuple, device) -> torch.Tensor:
    """The boolean mask of ``ranges`` ((dim, size, bounds), ...), broadcastable
    against an ``ndim``-dimensional array."""
    mask = None
    for dim, size, bounds in ranges:
        shape = [1] * ndim
        shape[dim] = -1
        m = _range_mask(size, bounds, device).view(shape)
        mask = m if mask is None else mask & m
    return mask


# Masks by (device, ndim, ranges): constants (bool, no autograd history),
# built once outside inference mode so a gradient pass may save them. Never
# filled while torch.compile traces or a dispatch mode (fake tensors, make_fx)
# is active: there a mask is built afresh, as a traced graph needs.
_MASKS: dict = {}


def _mask(ndim: int, ranges: tuple, device) -> torch.Tensor:
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 \
            or not all(type(x) is int for _, _, bounds in ranges for x in bounds):
        return _build_mask(ndim, ranges, device)
    key = (device, ndim, ranges)
    mask = _MASKS.get(key)
    if mask is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return _build_mask(ndim, ranges, device)    # a CUDA graph's memory is not ours to keep
        with torch.inference_mode(False):
            mask = _build_mask(ndim, ranges, device)
        # built under a torch.func transform (functionalize, grad) it may be
        # that transform's wrapper, dead once it ends: keep plain tensors only
        if not torch._C._functorch.is_functorch_wrapped_tensor(mask):
            _MASKS[key] = mask
    return mask


def inside(value: torch.Tensor, rest: torch.Tensor | float = 0.0, *,
           i=None, j=None, k=None) -> torch.Tensor:
    """``value`` inside the inclusive 1-based Fortran ranges, ``rest`` outside.

    ``inside(v, rest=old, i=(2, imm1), k=(1, kbm1))`` is pom2k's
    ``do k=1,kbm1; do i=2,imm1: a(i,j,k) = v`` applied to ``old``; a range
    left out (None) spans the whole dimension. Returns a new tensor.
    """
    ranges = tuple((dim, value.size(dim), tuple(bounds))
                   for dim, bounds in ((X, i), (Y, j), (Z, k)) if bounds is not None)
    if not ranges:
        return value.clone()
    mask = _mask(value.dim(), ranges, value.device)
    if isinstance(rest, (int, float)) and value.is_floating_point():
        return torch.where(mask, value, rest)        # the number in value's dtype
    if not (torch.is_tensor(rest) and rest.dtype == value.dtype and rest.device == value.device):
        rest = torch.as_tensor(rest, dtype=value.dtype, device=value.device)
    return torch.where(mask, value, rest)


def span(lo: int, hi: int, shift: int = 0) -> slice:
    """pom2k's inclusive 1-based range ``lo..hi`` read at ``index + shift``,
    as a 0-based slice: ``a[span(2, imm1, -1)]`` is a(i-1) for i = 2..imm1.
    The range must lie inside the array: a slice past its end is silently
    shorter (and broadcasts if it shrinks to one), so routines write only
    ranges pom2k's loops read. ``hi = lo - 1`` is an empty range, as
    pom2k's ``do i=3,imm1`` on a grid of im = 3."""
    if lo + shift < 1 or hi < lo - 1:
        raise ValueError(f"span({lo}, {hi}, {shift}) reads before index 1 or ends before it starts")
    return slice(lo - 1 + shift, hi + shift)


def put(rest, value, *, i=None, j=None, k=None, like: Tensor | None = None) -> Tensor:
    """pom2k's loop assignment ``a(i,j,k) = value`` over inclusive 1-based
    ranges, as a new tensor: ``value`` (shaped like the ranges, or
    broadcasting to them) inside, ``rest`` outside. ``rest`` is a tensor,
    or a number filling a tensor shaped like ``like``; a range left out
    (None) spans the whole dimension (i, j, k are dims 0, 1, 2, as for
    :func:`inside`). Under torch.vmap (an ensemble's members) a batched
    value may go over an unbatched ``rest`` and the reverse. Host arrays
    (:func:`host`) in, a host array out."""
    out = _fresh(rest, (value,), like)
    out[_index(i, j, k)] = value
    return out


def puts(rest: Tensor, *writes: tuple[Tensor | float, dict]) -> Tensor:
    """Several of pom2k's loop assignments in order, into one new copy of
    the tensor ``rest``: ``puts(a, (v1, dict(i=(1, 2))), (v2, dict(j=(1, 1))))``
    is ``put(put(a, v1, i=(1, 2)), v2, j=(1, 1))`` without the second copy
    (a boundary condition writes several edges of a field); of a host
    array, a host array."""
    out = _fresh(rest, [value for value, _ in writes])
    for value, ranges in writes:
        out[_index(**ranges)] = value
    return out


def _index(i=None, j=None, k=None) -> tuple:
    """The slices of the 1-based ranges i, j, k (None: the whole dimension);
    cached for ranges of ints (some 300 writes a step, a few dozen ranges)."""
    try:
        return _cached_index(i, j, k)
    except TypeError:           # a list, or a symbolic size: not hashable
        return _slices(i, j, k)


def _slices(i=None, j=None, k=None) -> tuple:
    index = tuple(slice(None) if r is None else span(*r) for r in (i, j, k))
    while index and index[-1] == slice(None):
        index = index[:-1]
    return index


_cached_index = functools.lru_cache(maxsize=4096)(_slices)


def _fresh(rest, values, like: Tensor | None = None) -> Tensor:
    """A new tensor holding ``rest`` (a number filling ``like``'s shape),
    batched under torch.vmap where a value written into it is (a host
    array where ``rest`` or the first value is one: :func:`host`)."""
    if host(rest):
        return rest.copy()
    if not torch.is_tensor(rest):
        if host(values[0]):
            return np.full(like.shape, rest, dtype=values[0].dtype)
        return values[0].new_full(like.shape, rest)
    if not torch.compiler.is_compiling() and not _is_batched(rest):
        for value in values:
            if torch.is_tensor(value) and _is_batched(value):
                out = value.new_empty(rest.shape, dtype=rest.dtype)   # batched, as the value
                out.copy_(rest)
                return out
    return rest.clone()


def above_kb(value: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``value`` at k = 1..kbm1 of the last dimension (the k of a (j, k) or
    (i, k) boundary array, or of an (i, j, k) field), ``old`` at k = kb."""
    kb = old.size(-1)
    return torch.where(_mask(1, ((0, kb, (1, kb - 1)),), old.device), value, old)


def between(value: torch.Tensor, old: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """A 1-D boundary array (along j or i): ``value`` at the 1-based indices
    lo..hi, ``old`` elsewhere."""
    return inside(value, old, i=(lo, hi))


def expand3(a: torch.Tensor) -> torch.Tensor:
    """A 2-D (i, j) field as (i, j, 1), to broadcast against (i, j, k)."""
    return a.unsqueeze(-1)


def levels(a: torch.Tensor) -> torch.Tensor:
    """A 1-D (k) profile as (1, 1, k), to broadcast against (i, j, k)."""
    return a.view(1, 1, -1)


# Correct rounding where torch's CPU kernels round differently from Fortran.

# Where the Newton step of sqrt_rn is exact (the products neither underflow
# nor overflow), measured: outside these it missed the rounded sqrt for
# float64 values up to 2**-1008 and float32 ones up to 2**-108 and from
# 2**127.99; none in 8e6 values of each dtype spread over the ranges.
_SQRT_EXACT = {torch.float64: (2.0 ** -960, 2.0 ** 1020), torch.float32: (2.0 ** -100, 2.0 ** 125)}


# True while pompy.core.compiled calls an Inductor graph, whose C++ kernels
# on the CPU take the hardware's sqrt (IEEE, correctly rounded: equal to
# numpy's, tests/test_ops.py; GPU graphs, not measured, keep the Newton
# step: sqrt_rn checks the device); set by hardware_sqrt, read (and guarded
# on by Dynamo) where sqrt_rn is traced
_HARDWARE_SQRT = False


@contextlib.contextmanager
def hardware_sqrt(on: bool = True):
    """sqrt_rn as one torch.sqrt in the graphs traced inside: for a backend
    whose CPU sqrt is rounded already (Inductor's), where the Newton step
    would only repeat it (some 30 vector operations a value)."""
    global _HARDWARE_SQRT
    before, _HARDWARE_SQRT = _HARDWARE_SQRT, on
    try:
        yield
    finally:
        _HARDWARE_SQRT = before


def sqrt_rn(x: Tensor) -> Tensor:
    """sqrt correctly rounded, as the Fortran's (IEEE) sqrt.

    torch's vectorised CPU sqrt is off by one ulp for about 1% of float64
    values; in profq that ulp of the sound speed is amplified ~1e4 times by
    the cancellation in boygr (stratification against compressibility) and
    showed up as 3e-13 in sh. One Newton step with the residual x - s*s
    computed exactly (Dekker's product) restores the rounded value. A CPU
    tensor outside autograd takes numpy's sqrt (the hardware's, correctly
    rounded) where that gives the same bits: one call instead of twenty; a
    graph traced under :func:`hardware_sqrt`, torch.sqrt alone. A host
    array (:func:`host`) is that CPU tensor's, bits and all."""
    if host(x):
        return sqrt_rn(torch.from_numpy(x)).numpy()
    if _HARDWARE_SQRT and torch.compiler.is_compiling() and x.device.type == "cpu":
        return torch.sqrt(x)
    fast = _sqrt_numpy(x)
    if fast is not None:
        return fast
    s = torch.sqrt(x)
    split = 134217729.0 if x.dtype == torch.float64 else 4097.0  # 2**27+1, 2**12+1
    t = split * s
    hi = t - (t - s)
    lo = s - hi
    p = s * s
    e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo   # s*s = p + e exactly
    r = (x - p) - e
    return torch.where((s > 0) & torch.isfinite(s), s + r / (2.0 * s), s)


def on_host(x: Tensor) -> bool:
    """Whether ``x``'s value may be read in Python at no cost to what a
    step computes: a plain CPU tensor (no subclass) outside autograd (no
    gradient mode, no reverse or forward graph), torch.compile, jit tracing,
    dispatch modes and torch.func transforms, so the read neither
    synchronises a device nor decides what a gradient-enabled step records."""
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
                or torch.is_grad_enabled() or type(x) is not torch.Tensor
                or x.device.type != "cpu" or x.requires_grad or torch.jit.is_tracing()
                or forward_ad._current_level >= 0
                or torch._C._functorch.is_functorch_wrapped_tensor(x))


def _sqrt_numpy(x: Tensor) -> Tensor | None:
    """sqrt_rn's bits through numpy, or None where that cannot be used: with
    gradients enabled (a gradient step reads nothing on the host but its
    two checks: tests/test_differentiable_core.py), a tensor in a graph
    (reverse or forward mode, torch.func, torch.compile, a dispatch mode),
    off the CPU, strided, or holding a value outside _SQRT_EXACT, where the
    Newton step's bits are not the rounded sqrt."""
    if not on_host(x) or x.dtype not in _SQRT_EXACT or not x.is_contiguous():
        return None
    a = x.numpy()
    lo, hi = _SQRT_EXACT[x.dtype]
    if a.size and lo <= a.min() and a.max() <= hi:      # the common case (NaN fails both)
        return torch.from_numpy(np.asarray(np.sqrt(a)))
    with np.errstate(invalid="ignore"):
        if np.any(~((a >= lo) & (a <= hi)) & (a > 0) & (a != np.inf)):   # NaN: neither
            return None
        r = np.asarray(np.sqrt(a))           # a 0-d tensor gives numpy a scalar
    np.copyto(r, np.nan, where=a < 0)      # torch's NaN (numpy's has the sign bit set)
    return torch.from_numpy(r)


def over(number: float, x: Tensor) -> Tensor:
    """number/x rounded once: torch's ``number / x`` is reciprocal(x)*number."""
    if host(x):
        return number / x           # numpy's: one division, rounded once
    return torch.full_like(x, number) / x


# Host arrays: outside autograd on the CPU the external passes run on numpy
# views of the state's 1-D and 2-D fields (pompy.core.external.split):
# numpy's +, -, *, / round as torch's CPU kernels do (IEEE, once per
# operation), each at a fraction of a small torch call's cost, and sqrt_rn
# takes the tensor path's bits. The routines they call take either; these
# are the few calls that differ.

def host(x) -> bool:
    """Whether ``x`` is a host array (numpy) rather than a tensor."""
    return isinstance(x, np.ndarray)


def cat(arrays, dim: int = 0):
    """torch.cat, or numpy's concatenate of host arrays."""
    if host(arrays[0]):
        return np.concatenate(arrays, dim)
    return torch.cat(arrays, dim)


def clone(a):
    """A copy of a tensor or a host array."""
    return a.copy() if host(a) else a.clone()
