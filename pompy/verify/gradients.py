"""How a gradient case is measured (re-implemented from
tests/test_gradcheck.py): torch.autograd.gradcheck (float64, eps 1e-6, its
default tolerances atol 1e-5, rtol 1e-3) of a scalar objective, inputs in
units of their magnitude, outputs reduced to one weighted, normalised
scalar (:func:`scalar_objective`); no safe-op guard may fire where a
gradient flows (:func:`guards_watched`); forward mode agrees with reverse
mode (1e-10). gradcheck compares every component of the gradient where a
case has at most FULL_GRADCHECK_LIMIT input elements (400: on the 8x7x5
grid the cases of 2-D fields or one 3-D field), one random direction
(fast_mode) beyond (a full check of two 2-D fields through internal_step
took 128 s at 21x17x11).

Besides gradcheck's verdict each case measures one directional derivative
against its central difference; the figure is that error in units of
gradcheck's tolerance (atol + rtol |numerical|): <= 1 passes
(:func:`gradient_check`).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.autograd import forward_ad

from pompy.verify.checks import Check, within

GD = torch.float64
GRAD_EPS, GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-5, 1e-3      # torch.autograd.gradcheck's
FORWARD_MODE_TOL = 1e-10
# gradcheck computes every component of the gradient (one central
# difference per input element) up to this many elements, one random
# direction (fast_mode) beyond
FULL_GRADCHECK_LIMIT = 400


@contextlib.contextmanager
def guards_watched() -> Iterator[list]:
    """Record, during a backward, every safe-op guard that fires at a point
    receiving a non-zero gradient: yields the list of (layer, count). It
    replaces pompy.utils.safety.apply_policy for the block (this thread's
    verification only: restored on exit)."""
    import pompy.utils.safety as safety

    fired = []
    original = safety.apply_policy

    def watching(grad, is_bottom, policy=None, layer=None):
        hit = int((is_bottom & (grad != 0)).sum())
        if hit:
            fired.append((layer, hit))
        return original(grad, is_bottom, policy=policy, layer=layer)

    safety.apply_policy = watching
    try:
        yield fired
    finally:
        safety.apply_policy = original


def scalar_objective(forward: Callable, state: dict, params: dict, wrt, outputs, seed: int = 0):
    """(f, x0): f(*x) is the weighted, normalised sum of ``outputs`` of
    ``forward`` with input ``wrt[i]`` (a state array, or a scalar parameter
    as a 0-d tensor) set to ``x[i] * scale_i``; x0 the scaled inputs
    (leaves requiring grad)."""
    device = next(iter(state.values())).device
    values = {n: state[n] if n in state else torch.tensor(float(params[n]), dtype=GD,
                                                          device=device) for n in wrt}
    scales = {n: float(v.abs().max()) or 1.0 for n, v in values.items()}
    with torch.no_grad():
        base = forward(dict(state), dict(params))
    gen = torch.Generator().manual_seed(seed)
    weights, norms = {}, {}
    for n in outputs:
        v = base[n]
        if not torch.isfinite(v).all():
            raise ValueError(f"output {n} is not finite at the base state")
        weights[n] = torch.randn(v.shape, generator=gen, dtype=GD).to(device)
        norms[n] = float(v.abs().max()) or 1.0

    def f(*x):
        s, p = dict(state), dict(params)
        for n, xi in zip(wrt, x):
            (s if n in state else p)[n] = xi * scales[n]
        out = forward(s, p)
        return sum((weights[n] * out[n]).sum() / norms[n] for n in outputs)

    x0 = tuple((values[n] / scales[n]).detach().clone().requires_grad_(True) for n in wrt)
    return f, x0


def check_gradients(f: Callable, x0: tuple, fast: bool | None = None, seed: int = 0,
                    eps: float = GRAD_EPS) -> dict[str, Any]:
    """Everything measured on one gradient case: the guards that fired
    where a gradient flows, the gradient's finiteness, forward mode against
    reverse mode, one directional derivative against its central
    difference (in units of gradcheck's tolerance), and gradcheck itself
    (every component up to FULL_GRADCHECK_LIMIT input elements, one random
    direction beyond, unless ``fast`` says)."""
    grads, seen = _reverse(f, x0)
    gen = torch.Generator().manual_seed(seed + 1)
    directions = [torch.randn(x.shape, generator=gen, dtype=GD).to(x.device) for x in x0]
    m = {**seen, **_along(f, x0, grads, directions, eps)}
    if fast is None:
        fast = sum(x.numel() for x in x0) > FULL_GRADCHECK_LIMIT
    with torch.random.fork_rng(devices=[]), _no_slow_mode_message():
        torch.manual_seed(seed)
        try:
            verdict = bool(torch.autograd.gradcheck(f, x0, eps=eps, atol=GRAD_ATOL,
                                                    rtol=GRAD_RTOL, fast_mode=fast,
                                                    raise_exception=False))
        except Exception:
            verdict = False
    return {**m, "gradcheck": verdict, "gradcheck_mode": "fast" if fast else "full"}


def directional_checks(f: Callable, x0: tuple, directions: dict[str, tuple[tuple, float]]
                       ) -> dict[str, dict[str, Any]]:
    """Directional derivatives without gradcheck, for a grid too large for
    it: one backward, then along each named direction (one tensor per input
    and its eps) forward mode against reverse mode and the central
    difference, as :func:`check_gradients` measures its one direction
    (gradcheck's fast mode is itself one random direction)."""
    grads, seen = _reverse(f, x0)
    measured = {}
    for label, (d, eps) in directions.items():
        m = _along(f, x0, grads, d, eps)
        if not m["directional"] <= 1.0:
            m = _refined(f, x0, d, m)
        measured[label] = {**seen, **m, "gradcheck": None, "gradcheck_mode": "directional"}
    return measured


# A central difference that misses is taken again at eps / REFINE; where the
# two differ beyond gradcheck's tolerance, the step at eps crossed a branch
# of the objective (on millions of cells some branch lies within 1e-6 of a
# random direction: measured at 360x240x25, 3308 at eps 1e-6, 2975.8130 at
# 3e-7, 2975.8125 at 1e-7, reverse mode 2975.81) and the finer one is the
# figure; a wrong gradient misses at both.
REFINE = 10


def _refined(f: Callable, x0: tuple, directions: list, m: dict) -> dict:
    """``m`` with its central difference taken again at eps / REFINE (the
    modes' figures as they were), the coarse step's kept."""
    fine = _central(f, x0, directions, m["eps"] / REFINE, m["analytical"])
    if abs(fine["numerical"] - m["numerical"]) <= GRAD_ATOL + GRAD_RTOL * abs(fine["numerical"]):
        return m                      # the difference had converged: the gradient is off
    return {**m, **fine, "coarse": {k: m[k] for k in ("eps", "numerical", "directional")}}


def _reverse(f: Callable, x0: tuple) -> tuple[tuple, dict[str, Any]]:
    """The gradient of f at x0 (zeros for an unused input) and what its
    backward showed: guards fired where a gradient flows, finiteness,
    unused inputs."""
    with guards_watched() as fired:
        grads = torch.autograd.grad(f(*x0), x0, allow_unused=True)
    unused = [i for i, g in enumerate(grads) if g is None]
    grads = tuple(torch.zeros_like(x) if g is None else g for x, g in zip(x0, grads))
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    return grads, {"guards_fired": sum(n for _, n in fired),
                   "guard_layers": sorted({str(l) for l, _ in fired}),
                   "finite": finite, "unused_inputs": len(unused)}


def _along(f: Callable, x0: tuple, grads: tuple, directions: list, eps: float) -> dict[str, Any]:
    """Along ``directions``: the reverse-mode derivative (grads . d) against
    forward mode (relative to sum |g d|) and against the central difference
    at ``eps`` (in units of gradcheck's tolerance)."""
    terms = torch.cat([(g * d).reshape(-1) for g, d in zip(grads, directions)])
    reverse = float(terms.sum())
    forward_error = ""
    try:
        with torch.no_grad(), forward_ad.dual_level():
            out = f(*(forward_ad.make_dual(x.detach(), d) for x, d in zip(x0, directions)))
            forward = float(forward_ad.unpack_dual(out).tangent)
    except Exception as exc:          # a routine without forward mode: measured as a failure
        forward, forward_error = math.nan, f"{type(exc).__name__}: {exc}"
    scale = float(terms.abs().sum()) or 1.0
    return {"forward_mode": abs(forward - reverse) / scale, "forward_mode_error": forward_error,
            "analytical": reverse, **_central(f, x0, directions, eps, reverse)}


def _central(f: Callable, x0: tuple, directions: list, eps: float, reverse: float
             ) -> dict[str, Any]:
    """The central difference along ``directions`` at ``eps`` and its error
    against ``reverse`` in units of gradcheck's tolerance."""
    with torch.no_grad():
        plus = float(f(*(x + eps * d for x, d in zip(x0, directions))))
        minus = float(f(*(x - eps * d for x, d in zip(x0, directions))))
    numerical = (plus - minus) / (2 * eps)
    directional = abs(reverse - numerical) / (GRAD_ATOL + GRAD_RTOL * abs(numerical))
    return {"directional": directional, "numerical": numerical, "eps": eps}


@contextlib.contextmanager
def _no_slow_mode_message() -> Iterator[None]:
    """A failing fast-mode gradcheck recomputes the whole Jacobian in slow
    mode, only for its error message: hours on a large grid (measured 211
    s for 6 fields on 8x7x5). Verify records the failure without it
    (torch's private helper replaced for the block, where it exists)."""
    import sys

    module = sys.modules.get("torch.autograd.gradcheck")
    original = getattr(module, "_run_slow_mode_and_get_error", None)
    if original is None:
        yield
        return
    module._run_slow_mode_and_get_error = lambda *args, **kwargs: " (slow mode not run)"
    try:
        yield
    finally:
        module._run_slow_mode_and_get_error = original


def gradient_check(suite: str, name: str, m: dict[str, Any], extra: str = "") -> Check:
    """A Check from :func:`check_gradients`' figures: passes when gradcheck
    passes, the directional error is within gradcheck's tolerance (<= 1),
    forward mode agrees to 1e-10, no guard fires where a gradient flows,
    the gradient is finite and every input is used."""
    problems = []
    if m["gradcheck"] is False:          # None: not run (directional_checks)
        problems.append(f"gradcheck ({m['gradcheck_mode']}) failed")
    if not m["forward_mode"] <= FORWARD_MODE_TOL:
        problems.append(m["forward_mode_error"] or f"forward mode off by {m['forward_mode']:.2e}")
    if m["guards_fired"]:
        problems.append(f"guards fire where a gradient flows: {m['guard_layers']}")
    if not m["finite"]:
        problems.append("non-finite gradient")
    if m["unused_inputs"]:
        problems.append(f"{m['unused_inputs']} inputs unused")
    passed = not problems and within(m["directional"], 1.0)
    detail = "; ".join(problems) or (f"{m['gradcheck_mode']} gradcheck; forward mode "
                                     f"{m['forward_mode']:.1e}")
    return Check(suite, name, m["directional"], 1.0, passed, (extra + "; " if extra else "") + detail,
                 {k: v for k, v in m.items() if k != "guard_layers"})
