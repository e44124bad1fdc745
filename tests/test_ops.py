"""Stencil operators against hand-indexed loops on small random arrays."""
import math

import numpy as np
import pytest
import torch

from pompy import ops


@pytest.fixture
def a():
    g = torch.Generator().manual_seed(0)
    return torch.rand(5, 4, 3, generator=g, dtype=torch.float64)


def test_shift_forward_and_back_repeat_the_edge(a):
    fwd, back = ops.shift(a, ops.X, 1), ops.shift(a, ops.X, -1)
    for i in range(5):
        assert torch.equal(fwd[i], a[min(i + 1, 4)])
        assert torch.equal(back[i], a[max(i - 1, 0)])
    two = ops.shift(a, ops.Z, 2)
    assert torch.equal(two[:, :, 0], a[:, :, 2]) and torch.equal(two[:, :, 2], a[:, :, 2])
    with pytest.raises(ValueError, match="shift by 5"):
        ops.shift(a, ops.X, 5)


# (operator, dimension it reads along, offset): xm(a)[i] = a[i-1], ...; zm, zp
# read along the last dimension, k in every pompy array that has one.
NEIGHBOURS = [("xm", 0, -1), ("xp", 0, 1), ("ym", 1, -1), ("yp", 1, 1),
              ("zm", -1, -1), ("zp", -1, 1)]
SHAPES = [(5,), (5, 4), (5, 4, 3)]


def _by_hand(x: np.ndarray, dim: int, offset: int) -> np.ndarray:
    """x[n + offset] along dim by a loop, the edge element where n + offset
    falls outside 0..size-1."""
    x = np.moveaxis(x, dim, 0)
    size = x.shape[0]
    out = np.empty_like(x)
    for n in range(size):
        out[n] = x[min(max(n + offset, 0), size - 1)]
    return np.moveaxis(out, 0, dim)


@pytest.mark.parametrize("name,dim,offset,shape", [
    (name, dim, offset, shape) for name, dim, offset in NEIGHBOURS for shape in SHAPES
    if dim != 1 or len(shape) > 1],                    # a 1-D array has no j
    ids=lambda v: f"{len(v)}d" if isinstance(v, tuple) else None)
def test_neighbour_reads_the_named_index_and_repeats_the_edge(name, dim, offset, shape):
    g = torch.Generator().manual_seed(3)
    a = torch.rand(*shape, generator=g, dtype=torch.float64)
    out = getattr(ops, name)(a)
    assert out.shape == a.shape
    np.testing.assert_array_equal(out.numpy(), _by_hand(a.numpy(), dim, offset))
    # interior and edge explicitly, on the first element of the other dimensions
    x = np.moveaxis(a.numpy(), dim, 0).reshape(a.size(dim), -1)[:, 0]
    o = np.moveaxis(out.numpy(), dim, 0).reshape(a.size(dim), -1)[:, 0]
    size = x.shape[0]
    for n in range(1, size - 1):                       # interior: the neighbour
        assert o[n] == x[n + offset]
    if offset < 0:                                     # edge: the edge slab repeated
        assert o[0] == x[0] and o[-1] == x[-2]
    else:
        assert o[-1] == x[-1] and o[0] == x[1]


def test_neighbours_by_fortran_index(a):
    """a(i-1,j,k), a(i,j+1,k), a(i,j,k-1), ... on a 3-D (i, j, k) field, and
    the edge of each: a(0,j,k) reads as a(1,j,k), a(i,jm+1,k) as a(i,jm,k)."""
    im, jm, kb = a.shape
    for i in range(im):
        for j in range(jm):
            for k in range(kb):
                assert ops.xm(a)[i, j, k] == a[max(i - 1, 0), j, k]
                assert ops.xp(a)[i, j, k] == a[min(i + 1, im - 1), j, k]
                assert ops.ym(a)[i, j, k] == a[i, max(j - 1, 0), k]
                assert ops.yp(a)[i, j, k] == a[i, min(j + 1, jm - 1), k]
                assert ops.zm(a)[i, j, k] == a[i, j, max(k - 1, 0)]
                assert ops.zp(a)[i, j, k] == a[i, j, min(k + 1, kb - 1)]
    # composed: a(i-1,j-1) is xm(ym(a)) = ym(xm(a))
    assert torch.equal(ops.xm(ops.ym(a)), ops.ym(ops.xm(a)))
    assert torch.equal(ops.xm(ops.ym(a))[2:, 2:], a[1:-1, 1:-1])


def test_k_neighbours_of_profiles_and_boundary_slices(a):
    """zm, zp read k, the last dimension, in (k,) profiles and (j, k) slices,
    as in the (i, j, k) field they come from."""
    zz = a[0, 0]                                            # (k,)
    np.testing.assert_array_equal(ops.zm(zz).numpy(), [zz[0], zz[0], zz[1]])
    np.testing.assert_array_equal(ops.zp(zz).numpy(), [zz[1], zz[2], zz[2]])
    for op in (ops.zm, ops.zp):
        assert torch.equal(op(a[3]), op(a)[3])              # (j, k) slice at i = 4
        assert torch.equal(op(a[:, 2]), op(a)[:, 2])        # (i, k) slice at j = 3
        assert torch.equal(op(ops.levels(zz)).view(-1), op(zz))


def test_neighbours_of_a_single_point_dimension_are_itself():
    a = torch.arange(6.0, dtype=torch.float64).view(1, 6, 1)
    for op in (ops.xm, ops.xp, ops.zm, ops.zp):
        assert torch.equal(op(a), a)


def test_neighbours_carry_gradients():
    a = torch.rand(4, 3, 2, dtype=torch.float64, requires_grad=True)
    for op in (ops.xm, ops.xp, ops.ym, ops.yp, ops.zm, ops.zp):
        assert torch.autograd.gradcheck(op, (a,))


def test_only_one_stencil_vocabulary():
    for name in ("axf", "axb", "ayf", "ayb", "azf", "azb",
                 "dxf", "dxb", "dyf", "dyb", "dzf", "dzb"):
        assert not hasattr(ops, name)


def test_inside_keeps_rest_outside_fortran_ranges(a):
    rest = torch.full_like(a, -1.0)
    out = ops.inside(a, rest, i=(2, 4), k=(1, 2))
    for i in range(5):
        for k in range(3):
            want = a[i, :, k] if (2 <= i + 1 <= 4 and k + 1 <= 2) else rest[i, :, k]
            assert torch.equal(out[i, :, k], want)
    assert torch.equal(ops.inside(a, j=(1, 4)), a)
    zero_outside = ops.inside(a, i=(2, 2))
    assert zero_outside[0].abs().sum() == 0 and torch.equal(zero_outside[1], a[1])


def test_sqrt_rn_is_correctly_rounded():
    g = torch.Generator().manual_seed(1)
    x = torch.exp(torch.randn(200000, generator=g, dtype=torch.float64) * 20)
    assert np.array_equal(ops.sqrt_rn(x).numpy(), np.sqrt(x.numpy()))
    x32 = x.float()
    assert np.array_equal(ops.sqrt_rn(x32).numpy(), np.sqrt(x32.numpy()))


def _sqrt_values(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.exp(torch.randn(100003, generator=g, dtype=torch.float64) * 20).to(dtype)
    return torch.cat([x, torch.tensor([0.0, 2.0 ** -1000, float("inf")]).to(dtype)])


def test_sqrt_rn_under_hardware_sqrt_traces_one_sqrt():
    """In a graph traced under hardware_sqrt sqrt_rn is torch.sqrt alone;
    outside it, the Newton step's operations (traced only: backend
    "eager", no code generated). Eager calls ignore the flag."""
    def ops_traced(on):
        graphs = []

        def backend(gm, inputs):
            graphs.append(gm)
            return gm.forward
        torch._dynamo.reset()
        try:
            with ops.hardware_sqrt(on):
                torch.compile(ops.sqrt_rn, backend=backend, dynamic=False)(_sqrt_values(torch.float64))
        finally:
            torch._dynamo.reset()
        return [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]

    assert ops_traced(True) == [str(torch.sqrt)]
    assert len(ops_traced(False)) > 10
    x = _sqrt_values(torch.float64)
    with ops.hardware_sqrt():
        assert np.array_equal(ops.sqrt_rn(x).numpy(), np.sqrt(x.numpy()))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_inductor_cpu_sqrt_is_correctly_rounded(dtype):
    """What hardware_sqrt relies on: Inductor's C++ kernels' sqrt (vector
    loop and scalar tail; 100006 values over 2**-1000..inf) is numpy's,
    where ATen's eager sqrt is not (about 1% of float64 values differ).
    Compiles one small kernel (seconds)."""
    x = _sqrt_values(dtype)
    torch._dynamo.reset()
    try:
        with ops.hardware_sqrt():
            got = torch.compile(ops.sqrt_rn, backend="inductor", dynamic=False)(x)
    finally:
        torch._dynamo.reset()
    assert np.array_equal(got.numpy(), np.sqrt(x.numpy()))


def test_over_rounds_once():
    g = torch.Generator().manual_seed(2)
    x = torch.rand(100000, generator=g, dtype=torch.float64) + 0.5
    assert np.array_equal(ops.over(19.230, x).numpy(), 19.230 / x.numpy())


# ---------------------------------------------------------------- bit for bit
# The helpers against numpy slicing written from pom2k's inclusive 1-based
# ranges (a(lo:hi) is x[lo-1:hi]), compared bit for bit: the values, -0.0,
# inf and NaN as they are, the dtype, and the gradients autograd sends back.

def _bits(x) -> np.ndarray:
    x = np.asarray(x.detach().numpy() if torch.is_tensor(x) else x)
    return x.view(f"i{x.itemsize}")


def _same_bits(got, want) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape \
        and np.array_equal(_bits(got), _bits(want))


def _special(shape, dtype, seed):
    """Random values with -0.0, +0.0, inf, -inf and NaN at random points,
    the edges included."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    flat = x.view(-1)
    picks = torch.randperm(flat.numel(), generator=g)[:max(5, flat.numel() // 4)]
    for n, p in enumerate(picks):
        flat[p] = (-0.0, 0.0, float("inf"), float("-inf"), float("nan"))[n % 5]
    flat[0], flat[-1] = -0.0, float("nan")
    return x.to(dtype)


# bounds as pom2k's loops write them on a 6 x 5 x 4 grid (im, jm, kb)
RANGES = [dict(i=(2, 6)), dict(i=(2, 5)), dict(j=(2, 5)), dict(j=(2, 4), i=(2, 5)),
          dict(i=(2, 5), j=(2, 4), k=(1, 3)), dict(k=(1, 3)), dict(k=(2, 3)), dict(k=(2, 4)),
          dict(i=(3, 5), j=(3, 4)), dict(i=(1, 6), j=(1, 5), k=(1, 4)), dict(i=(4, 3))]


def _inside_by_slicing(value, rest, i=None, j=None, k=None):
    out = np.array(np.broadcast_to(rest, value.shape), dtype=value.dtype)
    index = tuple(slice(None) if b is None else slice(b[0] - 1, b[1]) for b in (i, j, k))
    out[index[:value.ndim]] = value[index[:value.ndim]]
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bounds", RANGES, ids=str)
def test_inside_bit_for_bit_against_slicing(bounds, dtype):
    shape = (6, 5, 4) if "k" in bounds else (6, 5)
    value, old = _special(shape, dtype, 1), _special(shape, dtype, 2)
    for _ in range(2):                                   # a built mask, then the cached one
        got = ops.inside(value, old, **bounds)
        assert _same_bits(got.numpy(), _inside_by_slicing(value.numpy(), old.numpy(), **bounds))
    for rest in (0.0, -0.0, 0.1, 7):                     # a number, in value's dtype
        want = _inside_by_slicing(value.numpy(), np.asarray(rest, dtype=value.numpy().dtype),
                                  **bounds)
        assert _same_bits(ops.inside(value, rest, **bounds).numpy(), want)
    # a rest of another dtype is converted to value's, as before
    want = _inside_by_slicing(value.numpy(), old.double().to(dtype).numpy(), **bounds)
    assert _same_bits(ops.inside(value, old.double(), **bounds).numpy(), want)


def test_inside_masks_are_per_size_and_bounds():
    """One bound on arrays of several sizes and several bounds on one size:
    each call gets its own range (the cache's key)."""
    for im in (4, 5, 6, 7):
        for hi in range(2, im + 1):
            value, old = torch.ones(im, 3, dtype=torch.float64), torch.zeros(im, 3, dtype=torch.float64)
            want = _inside_by_slicing(value.numpy(), old.numpy(), i=(2, hi))
            assert _same_bits(ops.inside(value, old, i=(2, hi)).numpy(), want)
            want = _inside_by_slicing(value.numpy(), old.numpy(), j=(2, 3))
            assert _same_bits(ops.inside(value, old, j=(2, 3)).numpy(), want)


@pytest.mark.parametrize("bounds", RANGES, ids=str)
def test_inside_gradients_bit_for_bit(bounds):
    """d/dvalue is the incoming gradient inside the ranges and +0 outside,
    d/drest the reverse; -0.0 and NaN in it pass through unchanged."""
    shape = (6, 5, 4) if "k" in bounds else (6, 5)
    value = torch.rand(*shape, dtype=torch.float64, requires_grad=True)
    old = torch.rand(*shape, dtype=torch.float64, requires_grad=True)
    grad = _special(shape, torch.float64, 3)
    gv, gr = torch.autograd.grad(ops.inside(value, old, **bounds), (value, old), grad)
    zeros = np.zeros(shape)
    assert _same_bits(gv.numpy(), _inside_by_slicing(grad.numpy(), zeros, **bounds))
    assert _same_bits(gr.numpy(), _inside_by_slicing(zeros, grad.numpy(), **bounds))
    assert torch.autograd.gradcheck(lambda v, o: ops.inside(v, o, **bounds), (value, old))
    assert torch.autograd.gradcheck(lambda v: ops.inside(v, -0.0, **bounds), (value,))


def _shift_by_slicing(x: np.ndarray, dim: int, offset: int) -> np.ndarray:
    """a(n+offset) by slices: the interior, then the edge slab repeated."""
    x = np.moveaxis(x, dim, 0)
    out = np.empty_like(x)
    n = x.shape[0]
    if offset > 0:
        out[:n - offset], out[n - offset:] = x[offset:], x[n - 1:]
    else:
        out[-offset:], out[:-offset] = x[:n + offset], x[:1]
    return np.moveaxis(out, 0, dim)


def _shift_adjoint(g: np.ndarray, dim: int, offset: int) -> np.ndarray:
    """The gradient of the shift by slices: the interior's contribution and
    the edge slab's (summed over the repeats), each zero elsewhere, added
    (so +0 where neither contributes, and -0.0 + 0.0 is +0)."""
    g = np.moveaxis(g, dim, 0)
    n, m = g.shape[0], abs(offset)
    interior, edge = np.zeros_like(g), np.zeros_like(g)
    with np.errstate(invalid="ignore"):                # inf - inf is NaN, as in torch
        if offset > 0:
            interior[m:] = g[:n - m]
            edge[n - 1] = g[n - m:].sum(0) if m > 1 else g[n - 1]
        else:
            interior[:n - m] = g[m:]
            edge[0] = g[:m].sum(0) if m > 1 else g[0]
        return np.moveaxis(interior + edge, 0, dim)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("offset", [-2, -1, 1, 2])
def test_shift_bit_for_bit_against_slicing(dim, offset, dtype):
    a = _special((6, 5, 4), dtype, 4).requires_grad_(True)
    out = ops.shift(a, dim, offset)
    assert _same_bits(out.detach().numpy(), _shift_by_slicing(a.detach().numpy(), dim, offset))
    grad = _special((6, 5, 4), dtype, 5)
    grad[:, :, :] = torch.where(torch.rand(6, 5, 4) < .5, -0.0, grad)   # many -0.0 side by side
    got, = torch.autograd.grad(out, a, grad)
    assert _same_bits(got.numpy(), _shift_adjoint(grad.numpy(), dim, offset))


@pytest.mark.parametrize("offset", [-2, -1, 1, 2])
def test_shift_gradcheck(offset):
    a = torch.rand(5, 4, 3, dtype=torch.float64, requires_grad=True)
    for dim in (0, 1, 2):
        assert torch.autograd.gradcheck(lambda x: ops.shift(x, dim, offset), (a,))


def test_above_kb_and_between_bit_for_bit():
    """above_kb: k = 1..kbm1 from value, kb from old, on a (j, k) boundary
    slice and an (i, j, k) field; between: lo..hi of a 1-D boundary array."""
    for shape in ((5, 4), (6, 5, 4), (4,)):
        value, old = _special(shape, torch.float64, 6), _special(shape, torch.float64, 7)
        want = old.numpy().copy()
        want[..., :shape[-1] - 1] = value.numpy()[..., :shape[-1] - 1]
        assert _same_bits(ops.above_kb(value, old).numpy(), want)
        assert _same_bits(ops.above_kb(value.float(), old.float()).numpy(),
                          want.astype(np.float32))
    value, old = _special((7,), torch.float64, 8), _special((7,), torch.float64, 9)
    for lo, hi in ((2, 6), (3, 5), (1, 7), (4, 4)):
        want = old.numpy().copy()
        want[lo - 1:hi] = value.numpy()[lo - 1:hi]
        assert _same_bits(ops.between(value, old, lo, hi).numpy(), want)
    v = torch.rand(5, 4, dtype=torch.float64, requires_grad=True)
    o = torch.rand(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ops.above_kb, (v, o))
    assert torch.autograd.gradcheck(lambda a, b: ops.between(a[:, 0], b[:, 0], 2, 4), (v, o))


def test_masks_made_in_inference_mode_serve_a_gradient_pass():
    """A mask first built under torch.inference_mode is a normal tensor: a
    later gradient pass can save it for backward."""
    ops._MASKS.clear()
    with torch.inference_mode():
        ops.inside(torch.ones(6, 5), i=(2, 5))
        ops.above_kb(torch.ones(6, 5), torch.zeros(6, 5))
    value = torch.rand(6, 5, dtype=torch.float64, requires_grad=True)
    (ops.inside(value, i=(2, 5)).sum() + ops.above_kb(value, value.detach()).sum()).backward()
    want = np.zeros((6, 5))
    want[1:5] = 1.0
    want[:, :4] += 1.0
    assert np.array_equal(value.grad.numpy(), want)


def test_no_fake_or_traced_mask_is_kept():
    """Under a fake-tensor mode and under torch.compile the masks are built
    afresh (a traced graph needs its own), the cache keeps only real ones,
    and the compiled result equals the eager one bit for bit."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    ops._MASKS.clear()
    with FakeTensorMode():
        fake = ops.inside(torch.ones(9, 8, 3), torch.zeros(9, 8, 3), i=(2, 7), k=(1, 2))
        ops.above_kb(torch.ones(9, 8, 3), torch.zeros(9, 8, 3))
    assert fake.shape == (9, 8, 3) and not ops._MASKS

    def f(a, b):
        return (ops.inside(ops.xm(a) * ops.zp(b), b, i=(2, 8), j=(2, 7)) + ops.above_kb(a, b)
                + ops.sqrt_rn(a.abs()))

    a, b = _special((9, 8, 3), torch.float64, 10), _special((9, 8, 3), torch.float64, 11)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = compiled(a, b)
    assert all(type(m) is torch.Tensor for m in ops._MASKS.values())
    assert _same_bits(got.numpy(), f(a, b).numpy())
    assert _same_bits(compiled(a, b).numpy(), f(a, b).numpy())     # after the cache filled


@torch.no_grad()                 # the numpy path is for runs without gradients
def test_sqrt_rn_numpy_path_has_the_newton_steps_bits():
    """A CPU tensor outside autograd takes numpy's sqrt only where that gives
    the Newton step's bits: over every exponent (subnormals and the top of
    the range fall back), and at -0.0, 0, inf, NaN and negatives (torch's
    NaN, sign bit clear). The Newton step runs on a tensor that requires
    grad, and with gradients enabled (test_the_numpy_path_is_not_taken_with_gradients)."""
    for dtype, (lo, hi) in ((torch.float64, (-1074, 1023)), (torch.float32, (-149, 127))):
        g = torch.Generator().manual_seed(7)
        k = torch.randint(lo, hi + 1, (20000,), generator=g).double()
        x = torch.ldexp(1.0 + torch.rand(20000, generator=g, dtype=torch.float64), k).to(dtype)
        special = torch.tensor([-0.0, 0.0, float("inf"), float("nan"), -1.0, -float("inf"),
                                torch.finfo(dtype).max, torch.finfo(dtype).tiny, 2.0 ** lo],
                               dtype=dtype)
        normal = x.abs().clamp(2.0 ** -90, 2.0 ** 100)
        for a in (x, special, normal, torch.cat([normal, special[:6]])):
            newton = ops.sqrt_rn(a.clone().requires_grad_(True)).detach()
            assert _same_bits(ops.sqrt_rn(a).numpy(), newton.numpy())
        assert ops._sqrt_numpy(torch.cat([normal, special[:6]])) is not None     # it was used
        for a in (torch.tensor(0.04, dtype=dtype), torch.tensor(-1.0, dtype=dtype)):  # 0-d
            newton = ops.sqrt_rn(a.clone().requires_grad_(True)).detach()
            assert ops.sqrt_rn(a).shape == () and _same_bits(ops.sqrt_rn(a).numpy(), newton.numpy())
        assert ops._sqrt_numpy(x) is None                                        # subnormals
        got = ops.sqrt_rn(special[:6]).numpy()
        nan = np.array(np.nan, dtype=got.dtype)                                  # sign bit clear
        want = np.array([-0.0, 0.0, np.inf, np.nan, np.nan, np.nan], dtype=got.dtype)
        assert _same_bits(got[:3], want[:3])
        assert np.array_equal(_bits(got[4:]), np.broadcast_to(_bits(nan), (2,)))


def test_sqrt_rn_in_graphs_takes_the_newton_step():
    """Reverse and forward mode, torch.func and a fake-tensor mode get the
    torch path (gradients and tangents through it), with the same values."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    import torch.autograd.forward_ad as fwAD

    x = torch.rand(6, 5, dtype=torch.float64) + 0.5
    want = np.sqrt(x.numpy())
    assert torch.autograd.gradcheck(ops.sqrt_rn, (x.clone().requires_grad_(True),))
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        primal, tangent = fwAD.unpack_dual(ops.sqrt_rn(dual))
    assert np.array_equal(primal.numpy(), want)
    np.testing.assert_allclose(tangent.numpy(), 0.5 / want, rtol=1e-15)
    jac = torch.func.vmap(torch.func.grad(lambda v: ops.sqrt_rn(v).sum()))(x)
    np.testing.assert_allclose(jac.numpy(), 0.5 / want, rtol=1e-15)
    assert np.array_equal(torch.func.vmap(ops.sqrt_rn)(x).numpy(), want)
    with FakeTensorMode():
        assert ops.sqrt_rn(torch.ones(6, 5)).shape == (6, 5)
    assert np.array_equal(ops.sqrt_rn(x.t()).numpy(), want.T)                   # strided


def test_no_mask_is_kept_from_a_torch_func_transform():
    """A mask first built under torch.func.functionalize is that transform's
    wrapper: kept, it made a later plain inside() return garbage."""
    from pompy import ops
    from pompy.ops import inside

    ops._MASKS.clear()
    x = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
    torch.func.functionalize(lambda v: inside(v, 0.0, i=(2, 3)))(x)
    want = np.zeros((4, 3))
    want[1:3] = x.numpy()[1:3]
    np.testing.assert_array_equal(inside(x, 0.0, i=(2, 3)).numpy(), want)
    xr = x.clone().requires_grad_()
    inside(xr, 0.0, i=(2, 3)).sum().backward()
    np.testing.assert_array_equal(xr.grad.numpy(), np.isin(np.arange(4), (1, 2))[:, None] * np.ones((4, 3)))


def test_the_numpy_path_is_not_taken_with_gradients():
    """A gradient-enabled step reads nothing on the host but its two checks
    (tests/test_differentiable_core.py): sqrt_rn stays in torch there."""
    x = torch.rand(10, dtype=torch.float64) + 0.5
    assert ops._sqrt_numpy(x) is None
    with torch.no_grad():
        assert ops._sqrt_numpy(x) is not None


# ------------------------------------------------------------ span and put


def test_span_is_the_fortran_range_read_at_an_offset(a):
    """a[span(lo, hi, s)] holds a(lo+s..hi+s) by hand-indexed loops."""
    for lo, hi, s in ((2, 4, 0), (2, 4, -1), (2, 4, 1), (1, 5, 0), (3, 3, -2)):
        got = a[ops.span(lo, hi, s)]
        assert got.shape[0] == hi - lo + 1
        for n, i in enumerate(range(lo, hi + 1)):
            assert torch.equal(got[n], a[i + s - 1])
    assert a[ops.span(3, 2)].shape[0] == 0             # pom2k's do i=3,2: no point
    for bad in ((1, 4, -1), (3, 1, 0)):
        with pytest.raises(ValueError, match="span"):
            ops.span(*bad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bounds", [b for b in RANGES if b.get("i", (1, 1))[0] <= b.get("i", (1, 1))[1]],
                         ids=str)
def test_put_bit_for_bit_against_slicing(bounds, dtype):
    """put writes value's bits on pom2k's ranges and rest's elsewhere
    (NaN, inf and signed zeros included), as inside does for a whole-array
    value; a number as rest fills a tensor shaped like ``like``."""
    shape = (6, 5, 4) if "k" in bounds else (6, 5)
    value, old = _special(shape, dtype, 1), _special(shape, dtype, 2)
    index = tuple(slice(None) if b is None else slice(b[0] - 1, b[1])
                  for b in (bounds.get("i"), bounds.get("j"), bounds.get("k")))[:len(shape)]
    want = _inside_by_slicing(value.numpy(), old.numpy(), **bounds)
    got = ops.put(old, value[index], **bounds)
    assert _same_bits(got.numpy(), want) and got.data_ptr() != old.data_ptr()
    want = _inside_by_slicing(value.numpy(), np.asarray(-0.0, dtype=value.numpy().dtype), **bounds)
    assert _same_bits(ops.put(-0.0, value[index], like=old, **bounds).numpy(), want)
    # host arrays (the external passes'): the same bits, a new array
    got = ops.put(old.numpy(), value.numpy()[index], **bounds)
    assert ops.host(got) and _same_bits(got, _inside_by_slicing(value.numpy(), old.numpy(), **bounds))
    assert not np.shares_memory(got, old.numpy())
    assert _same_bits(ops.put(-0.0, value.numpy()[index], like=old.numpy(), **bounds), want)


def test_put_gradients_vmap_and_tangents(a):
    """put's gradient reaches value on the ranges and rest outside them;
    under torch.vmap a batched value goes over an unbatched rest and the
    reverse (each member as its own call); forward mode carries the
    tangents the same way."""
    value = torch.rand(3, 4, 2, dtype=torch.float64, requires_grad=True)
    rest = a.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda v, r: ops.put(r, v, i=(2, 4), k=(1, 2)), (value, rest))
    members = torch.rand(4, 3, 4, 2, dtype=torch.float64)
    batched = torch.vmap(lambda v: ops.put(a, v, i=(2, 4), k=(1, 2)))(members)
    for m in range(4):
        assert torch.equal(batched[m], ops.put(a, members[m], i=(2, 4), k=(1, 2)))
    rests = torch.rand(4, 5, 4, 3, dtype=torch.float64)     # and an unbatched value over batched rests
    batched = torch.vmap(lambda r: ops.put(r, value.detach(), i=(2, 4), k=(1, 2)))(rests)
    for m in range(4):
        assert torch.equal(batched[m], ops.put(rests[m], value.detach(), i=(2, 4), k=(1, 2)))
    jvp = torch.func.jvp(lambda v: ops.put(a, v, i=(2, 4), k=(1, 2)),
                         (value.detach(),), (torch.ones_like(value),))[1]
    assert torch.equal(jvp, ops.put(torch.zeros_like(a), torch.ones_like(value), i=(2, 4), k=(1, 2)))


def _puts_writes(v1, v2):
    """Four writes for puts: numbers, broadcasting values, the last over the
    first at i = 2, j = 3."""
    return ((v1, dict(i=(1, 2), j=(2, 4))), (-0.0, dict(i=(2, 5), j=(1, 1), k=(2, 3))),
            (v2[:, None, None], dict(j=(5, 5), k=(4, 4))),
            (v2[:4, None, None], dict(i=(2, 5), j=(3, 3))))


def _numpy_writes(old, v1, v2):
    """The same writes as numpy's slice assignments (0-based, end excluded)."""
    want = old.numpy().copy()
    want[0:2, 1:4] = v1.numpy()
    want[1:5, 0:1, 1:3] = -0.0
    want[:, 4:5, 3:4] = v2.numpy()[:, None, None]
    want[1:5, 2:3] = v2.numpy()[:4, None, None]
    return want


def _puts_values(dtype, seed):
    return (_special((6, 5, 4), dtype, seed), _special((2, 3, 4), dtype, seed + 1),
            _special((6,), dtype, seed + 2))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_puts_is_the_writes_in_order_against_numpy(dtype):
    """puts writes each value on its ranges in order (a later write over an
    earlier one where they overlap), rest's bits elsewhere, into one new
    tensor; numbers and broadcasting values as put takes them; the same
    traced by Dynamo. Checked against numpy's slice assignments (NaN, inf
    and signed zeros included); an unknown range name is an error, a list
    as a range is read as the tuple (uncached)."""
    old, v1, v2 = _puts_values(dtype, 3)
    writes, want = _puts_writes(v1, v2), _numpy_writes(old, v1, v2)
    got = ops.puts(old, *writes)
    assert _same_bits(got.numpy(), want) and got.data_ptr() != old.data_ptr()
    assert _same_bits(old.numpy(), _puts_values(dtype, 3)[0].numpy())      # rest untouched
    traced = torch.compile(lambda r: ops.puts(r, *writes), backend="eager", fullgraph=True)(old)
    assert _same_bits(traced.numpy(), want)
    with pytest.raises(TypeError):
        ops.puts(old, (1.0, dict(i=(1, 2), jj=(1, 1))))
    want = old.numpy().copy()
    want[1:3] = 1.0
    assert _same_bits(ops.put(old, 1.0, i=[2, 3]).numpy(), want)
    host = ops.puts(old.numpy(), *_puts_writes(v1.numpy(), v2.numpy()))
    assert ops.host(host) and _same_bits(host, _numpy_writes(old, v1, v2))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_host_arrays_calls_are_the_tensors_bits(dtype):
    """The calls that differ for a host array (pompy.ops.host: the external
    passes' numpy views) give the tensor calls' bits: cat, clone, over
    (one division) and sqrt_rn against its Newton step (tiny values, where
    that step is not always the rounded root, inf and signed zeros
    included; a NaN stops a run, whatever its sign bit)."""
    a = _special((6, 5), dtype, 5)
    for dim, other in ((0, _special((3, 5), dtype, 6)), (1, _special((6, 2), dtype, 7))):
        got = ops.cat([a.numpy(), other.numpy()], dim)
        assert ops.host(got) and _same_bits(got, torch.cat([a, other], dim).numpy())
    copy = ops.clone(a.numpy())
    assert _same_bits(copy, a.numpy()) and not np.shares_memory(copy, a.numpy())
    x = torch.rand(100000, generator=torch.Generator().manual_seed(8), dtype=dtype) * 100 - 1
    assert _same_bits(ops.over(19.230, x.numpy()), ops.over(19.230, x).numpy())
    # and IEEE's quotient rounded once: float64's by Python's division, a
    # float32 one in float64 then rounded (exact: 53 >= 2*24 + 2 bits)
    n = float(np.asarray(19.230, dtype=x.numpy().dtype))
    ieee = np.array([n / float(v) for v in x.numpy()]).astype(x.numpy().dtype)
    assert _same_bits(ops.over(19.230, x.numpy()), ieee)
    tiny = torch.logspace(-320 if dtype == torch.float64 else -44, -10, 1000, dtype=dtype)
    x = torch.cat([x.abs(), tiny, torch.tensor([0.0, -0.0, math.inf], dtype=dtype)])
    newton = ops.sqrt_rn(x.clone().requires_grad_()).detach()      # not the numpy path
    assert _same_bits(ops.sqrt_rn(x.numpy()), newton.numpy())
    # IEEE's rounded root (numpy's) wherever the Newton step is it: all but
    # the tiny float32 values
    exact = x.numpy() >= 2.0 ** -100
    assert _same_bits(ops.sqrt_rn(x.numpy())[exact], np.sqrt(x.numpy()[exact]))


def test_puts_under_vmap_against_numpy():
    """Under torch.vmap (an ensemble's members) the writes go over batched
    rests with unbatched values, and batched values over an unbatched
    rest: each member as numpy writes it."""
    members = [_puts_values(torch.float64, seed) for seed in (3, 13, 23)]
    old0, v10, v20 = members[0]
    rests = torch.stack([old for old, _, _ in members])
    got = torch.vmap(lambda r: ops.puts(r, *_puts_writes(v10, v20)))(rests)
    for m, (old, _, _) in enumerate(members):
        assert _same_bits(got[m].numpy(), _numpy_writes(old, v10, v20))
    v1s, v2s = torch.stack([v1 for _, v1, _ in members]), torch.stack([v2 for _, _, v2 in members])
    got = torch.vmap(lambda v1, v2: ops.puts(old0, *_puts_writes(v1, v2)))(v1s, v2s)
    for m, (_, v1, v2) in enumerate(members):
        assert _same_bits(got[m].numpy(), _numpy_writes(old0, v1, v2))


def test_puts_gradients_and_tangents(a):
    """Gradients reach each value where it was written last and rest
    elsewhere (gradcheck against finite differences); forward mode
    carries the tangents the same way."""
    def f(r, v, w):
        return ops.puts(r, (v, dict(i=(2, 4), k=(1, 2))), (w, dict(i=(4, 5), j=(2, 2))))
    value = torch.rand(3, 4, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(2, 1, 3, dtype=torch.float64, requires_grad=True)
    rest = a.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (rest, value, w))
    tangents = (torch.zeros_like(a), torch.ones_like(value), torch.full_like(w, 2.0))
    jvp = torch.func.jvp(f, (a, value.detach(), w.detach()), tangents)[1]
    want = np.zeros(a.shape)
    want[1:4, :, 0:2] = 1.0
    want[3:5, 1:2] = 2.0                  # the later write, over the first at i = 4
    assert _same_bits(jvp.numpy(), want)
