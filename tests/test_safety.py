"""pompy.utils.safety: forward values are pom2k's, gradients are exact away
from the guards, and at the guards each gradient policy gives what it says.
"""
import math
import warnings

import numpy as np
import pytest
import torch

from pompy.autodiff.policies import GradientPolicy, gradient_policy
from pompy.ops import over, sqrt_rn
from pompy.utils.safety import (SAFE_DIV_EPS, SAFE_LOG_EPS, SAFE_SQRT_EPS, safe_abs_pow,
                                safe_divide, safe_log, safe_reciprocal, safe_sqrt)

P = GradientPolicy


def rand(*shape, low=0.0, high=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(*shape, generator=g, dtype=torch.float64)


def test_forward_values_are_pom2ks():
    x = torch.cat([rand(2000, high=100.0), torch.zeros(3)])
    assert torch.equal(safe_sqrt(x), sqrt_rn(x))
    s = rand(2000, low=-40, high=40, seed=1)
    assert torch.equal(safe_abs_pow(s, 1.5), torch.abs(s) ** 1.5)
    y = rand(2000, low=1e-3, high=1e4, seed=2)
    assert torch.equal(safe_log(y), torch.log(y))
    assert torch.equal(safe_divide(s, y), s / y)
    assert torch.equal(safe_divide(2.5, y), over(2.5, y))
    assert torch.equal(safe_reciprocal(y), over(1.0, y))
    # host arrays (the external passes'): IEEE's rounded root (numpy's), 0
    # below zero, -0.0 kept as torch.clamp keeps it
    x = torch.cat([x, -x[:5], torch.tensor([-0.0])]).numpy()
    want = np.sqrt(np.where(x < 0.0, 0.0, x))
    assert np.array_equal(safe_sqrt(x).view(np.int64), want.view(np.int64))
    assert np.signbit(safe_sqrt(x)[-1])


def test_forward_values_on_the_gradient_path_too():
    x = rand(500, high=100.0).requires_grad_(True)
    y = rand(500, low=1e-3, high=1e4, seed=2).requires_grad_(True)
    assert torch.equal(safe_sqrt(x), sqrt_rn(x.detach()))
    assert torch.equal(safe_log(y), torch.log(y.detach()))
    assert torch.equal(safe_abs_pow(x - 50, 1.5), torch.abs(x.detach() - 50) ** 1.5)
    assert torch.equal(safe_divide(x, y), x.detach() / y.detach())
    assert torch.equal(safe_divide(2.5, y), over(2.5, y.detach()))


def test_second_derivatives_are_computed_not_refused():
    """Double backward is exact (tests/test_second_order.py for the rest)."""
    x = rand(4, low=1.0, high=2.0).requires_grad_(True)
    for op, second in ((safe_sqrt, -0.25 * x.detach() ** -1.5),
                       (lambda v: safe_divide(1.5, v), 3.0 / x.detach() ** 3)):
        g, = torch.autograd.grad(op(x).sum(), x, create_graph=True)
        h, = torch.autograd.grad(g.sum(), x)
        torch.testing.assert_close(h, second, rtol=1e-15, atol=0)


def test_the_forward_passs_override_holds_when_the_backward_sees_none():
    """autograd may run a backward on its own thread (CUDA), where the
    caller's gradient_policy context is not visible: the override active in
    the forward pass then applies."""
    x = torch.tensor([4.0], dtype=torch.float64, requires_grad=True)
    with gradient_policy(P.REJECT):
        y = safe_sqrt(x, layer="smagorinsky")
    y.backward()
    assert float(x.grad[0]) == 0.0
    x.grad = None
    y = safe_sqrt(x, layer="smagorinsky")
    with gradient_policy(P.REJECT):             # the backward's own override first
        y.backward()
    assert float(x.grad[0]) == 0.0


def test_forward_at_the_guards_is_finite():
    zero = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(safe_sqrt(torch.tensor([-1e-30, 0.0], dtype=torch.float64)), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(safe_log(zero), torch.full_like(zero, math.log(SAFE_LOG_EPS)))
    assert torch.isfinite(safe_divide(torch.ones(3, dtype=torch.float64), zero)).all()
    assert torch.equal(safe_reciprocal(zero), torch.full_like(zero, 1.0 / SAFE_DIV_EPS))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("grad", [False, True])
def test_the_divisor_held_at_the_guard_keeps_its_sign(dtype, grad):
    """d where |d| >= eps, eps with d's sign where smaller (signed zeros,
    subnormals), inf and NaN as they are: against numpy's select, bit for
    bit, on the plain and the gradient path."""
    d = np.array([0.0, -0.0, 1e-21, -1e-21, SAFE_DIV_EPS, -SAFE_DIV_EPS, 2e-20, -2e-20,
                  5e-324, -5e-324, 1e-40, -1e-40, np.inf, -np.inf, 1.0, -3.0, 7e300], dtype=np.float64)
    with np.errstate(over="ignore"):        # 7e300 is inf in float32
        d = d.astype(torch.empty(0, dtype=dtype).numpy().dtype)
        eps = d.dtype.type(SAFE_DIV_EPS)
        held = np.where(np.abs(d) < eps, np.copysign(eps, d), d)
        expected = np.ones_like(d) / held
    x = torch.from_numpy(d.copy()).requires_grad_(grad)
    got = safe_divide(torch.ones_like(x), x).detach().numpy()
    assert got.tobytes() == expected.tobytes()
    nan = torch.tensor([math.nan, -math.nan], dtype=dtype, requires_grad=grad)
    assert torch.isnan(safe_divide(torch.ones_like(nan), nan)).all()
    # a host array (the external passes', pompy.ops.host): the same bits
    assert safe_divide(np.ones_like(d), d).tobytes() == expected.tobytes()
    assert safe_divide(1.0, d).tobytes() == expected.tobytes()
    assert np.isnan(safe_divide(1.0, nan.detach().numpy())).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", ["positive", "negative", "one at the guard", "one NaN"])
def test_a_run_reads_whether_the_guard_holds_any_divisor(dtype, case):
    """Outside autograd a 3-D divisor is first read for |d| < eps (one
    pass): d of one sign divides as it is, else the guard holds as always.
    Either way the quotients are numpy's with pom2k's held divisor, bit for bit."""
    d = rand(65, 49, 21, low=1e-3, high=10.0, seed=3).to(dtype).numpy()
    if case == "negative":
        d = -d
    elif case == "one at the guard":
        d[7, 5, 3] = -1e-30
    elif case == "one NaN":
        d[7, 5, 3] = np.nan
    n = rand(65, 49, 21, low=-5.0, high=5.0, seed=4).to(dtype).numpy()
    eps = d.dtype.type(SAFE_DIV_EPS)
    with np.errstate(invalid="ignore"):
        expected = n / np.where(np.abs(d) < eps, np.copysign(eps, d), d)
    with torch.inference_mode():
        got = safe_divide(torch.from_numpy(n), torch.from_numpy(d)).numpy()
    assert got.tobytes() == expected.tobytes()


def test_safe_divide_is_batched_without_a_per_member_loop():
    """Under torch.vmap (an ensemble's members) every op of safe_divide has
    a batching rule: no fallback loop over members, no warning; the
    values numpy's select gives, bit for bit."""
    n, d = rand(4, 6, seed=5), rand(4, 6, low=-1.0, high=1.0, seed=6)
    d[1, 2], d[3, 0] = 0.0, -1e-30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch.vmap(safe_divide)(n, d)
    a = d.numpy()
    want = n.numpy() / np.where(np.abs(a) < SAFE_DIV_EPS, np.copysign(SAFE_DIV_EPS, a), a)
    assert got.numpy().tobytes() == want.tobytes()


def test_safe_ops_under_vmap_give_each_member_its_own_values_and_gradients():
    """Under torch.vmap the safe ops run once for all members (their own
    vmap rules): each member's quotient and gradients equal its own
    call's to the bit, with a member-less numerator of fewer dimensions
    that broadcasts, and a member-less input that carries a gradient
    (its gradient then the members' sum, as vmap's generated rule gives)."""
    n = rand(3, 4, 6, seed=7).requires_grad_(True)
    d = rand(3, 4, 6, low=-1.0, high=1.0, seed=8)
    d[1, 2, 3] = 0.0
    d.requires_grad_(True)
    row = rand(6, seed=9).requires_grad_(True)           # shared by the members, (k,) only

    def member(n, d):
        return (safe_divide(n, d) + safe_divide(row, d) + safe_sqrt(n * row)).square().sum()

    def gradients(loss_of):
        grads = torch.autograd.grad(loss_of(), (n, d, row))
        return [g.detach().clone() for g in grads]

    batched = gradients(lambda: torch.vmap(
        lambda n, d: (safe_divide(n, d) + safe_divide(row, d) + safe_sqrt(n * row)))(n, d)
        .square().sum((1, 2)).sum())
    singles = [gradients(lambda m=m: member(n[m], d[m])) for m in range(3)]
    for m in range(3):
        assert torch.equal(batched[0][m], singles[m][0][m])
        assert torch.equal(batched[1][m], singles[m][1][m])
    assert torch.allclose(batched[2], sum(s[2] for s in singles), rtol=1e-15, atol=0)
    values = torch.vmap(lambda n, d: safe_divide(row, d))(n, d)
    assert all(torch.equal(values[m], safe_divide(row, d[m])) for m in range(3))


OPS = [
    ("sqrt", lambda x: safe_sqrt(x), (1e-3, 10.0)),
    ("abs_pow", lambda x: safe_abs_pow(x, 1.5), (-40.0, 40.0)),
    ("log", lambda x: safe_log(x), (1e-3, 10.0)),
    ("reciprocal", lambda x: safe_reciprocal(x), (0.5, 10.0)),
    ("divide by", lambda x: safe_divide(torch.linspace(-3, 3, x.numel(), dtype=x.dtype), x), (0.5, 10.0)),
    ("divide", lambda x: safe_divide(x, torch.linspace(1, 3, x.numel(), dtype=x.dtype)), (-3.0, 3.0)),
]


@pytest.mark.parametrize("name, op, bounds", OPS, ids=[o[0] for o in OPS])
def test_gradcheck_away_from_the_guards(name, op, bounds):
    x = rand(12, low=bounds[0], high=bounds[1], seed=3).requires_grad_(True)
    with gradient_policy(P.PROJECT):
        assert torch.autograd.gradcheck(op, (x,))


def grad_of(op, x0: float, policy) -> float:
    x = torch.tensor([x0], dtype=torch.float64, requires_grad=True)
    with gradient_policy(policy):
        op(x).sum().backward()
    return float(x.grad[0])


# (op, guarded input, unguarded input, its exact derivative, derivative at the clamped input)
POINTS = [
    ("sqrt", safe_sqrt, 0.0, 1e-4, 0.5 / 1e-2, 0.5 / SAFE_SQRT_EPS),
    ("log", safe_log, 0.0, 0.02, 50.0, 1.0 / SAFE_LOG_EPS),
    ("reciprocal", safe_reciprocal, 0.0, 0.2, -25.0, -1.0 / SAFE_DIV_EPS ** 2),
    ("abs_pow", lambda x: safe_abs_pow(x, 0.5), 0.0, 1e-4, 0.5 / 1e-2, 0.0),
]


@pytest.mark.parametrize("name, op, bottom, fine, exact, clamped", POINTS, ids=[p[0] for p in POINTS])
def test_each_policy_at_guarded_and_unguarded_points(name, op, bottom, fine, exact, clamped):
    # away from the guard: the exact derivative, but clamped (CLAMP) or zero (REJECT)
    assert grad_of(op, fine, P.PROJECT) == pytest.approx(exact, rel=1e-12)
    assert grad_of(op, fine, P.PASSTHROUGH) == pytest.approx(exact, rel=1e-12)
    assert grad_of(op, fine, P.CLAMP) == pytest.approx(max(-1.0, min(1.0, exact)), rel=1e-12)
    assert grad_of(op, fine, P.REJECT) == 0.0
    # at the guard: zero, except PASSTHROUGH, which passes the derivative at the clamped input
    for policy in (P.PROJECT, P.CLAMP, P.REJECT):
        assert grad_of(op, bottom, policy) == 0.0
    assert grad_of(op, bottom, P.PASSTHROUGH) == pytest.approx(clamped, rel=1e-12)


def test_divide_masks_both_inputs_at_a_zero_denominator():
    n = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    d = torch.tensor([0.0, 4.0], dtype=torch.float64, requires_grad=True)
    with gradient_policy(P.PROJECT):
        safe_divide(n, d).sum().backward()
    assert n.grad.tolist() == [0.0, 0.25] and d.grad.tolist() == [0.0, -3.0 / 16.0]


def test_no_nan_from_the_branch_not_taken():
    """torch.where on outputs would send 0*inf = NaN back; the guards do not."""
    x = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    for policy in GradientPolicy:
        x.grad = None
        with gradient_policy(policy):
            (safe_sqrt(x) + safe_log(x) + safe_reciprocal(x) + safe_abs_pow(x, 0.5)).sum().backward()
        assert torch.isfinite(x.grad).all(), policy


def test_layer_defaults_of_the_physics_routines_are_project():
    """pompy's layers have the built-in policy PROJECT: exact gradients away
    from the guards (CLAMP, the global default, would clip them to [-1, 1]);
    importing pompy registers nothing, and a registration overrides the
    built-in policy of its layer."""
    from pompy.autodiff.policies import (BUILTIN_POLICIES, POLICY_REGISTRY, register_policy,
                                         restore_policy_registry, selected_policy)
    from pompy.core import PHYSICS_LAYERS

    assert set(PHYSICS_LAYERS) >= {"smagorinsky", "bottom_drag", "profq", "bcond", "dens"}
    for layer in PHYSICS_LAYERS:
        assert layer not in POLICY_REGISTRY
        assert BUILTIN_POLICIES[layer] is P.PROJECT and selected_policy(layer) is P.PROJECT
    x = torch.tensor([1e-4], dtype=torch.float64, requires_grad=True)
    safe_sqrt(x, layer="smagorinsky").backward()
    assert float(x.grad[0]) == pytest.approx(50.0, rel=1e-12)
    before = register_policy("smagorinsky", P.CLAMP)
    try:
        assert selected_policy("smagorinsky") is P.CLAMP
        x.grad = None
        safe_sqrt(x, layer="smagorinsky").backward()
        assert float(x.grad[0]) == 1.0
    finally:
        restore_policy_registry({k: v for k, v in POLICY_REGISTRY.items() if k != "smagorinsky"})
    assert before is None


def test_smagorinsky_gradient_at_a_uniform_flow_is_finite():
    """The seamount starts from a uniform flow: the deformation is exactly
    zero and a raw sqrt would give an infinite gradient on the first step."""
    from pompy.core.viscosity import smagorinsky

    im, jm, kb = 6, 5, 4
    u = torch.full((im, jm, kb), 0.2, dtype=torch.float64, requires_grad=True)
    v = torch.zeros((im, jm, kb), dtype=torch.float64, requires_grad=True)
    dx = torch.full((im, jm), 8000.0, dtype=torch.float64)
    out = smagorinsky(0.2, dx, dx, u, v, torch.zeros(im, jm, kb, dtype=torch.float64))
    out.aam.sum().backward()
    assert torch.isfinite(u.grad).all() and torch.isfinite(v.grad).all()
    z = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    torch.sqrt(z).sum().backward()            # what a raw sqrt would give
    assert torch.isinf(z.grad).all()


@pytest.mark.parametrize("op, x0, exact", [(safe_sqrt, 0.04, 2.5), (safe_log, 0.04, 25.0),
                                           (safe_reciprocal, 0.2, -25.0),
                                           (lambda x, **kw: safe_abs_pow(x, 1.5, **kw), 0.04, 0.3)])
def test_an_op_without_a_layer_is_exact_and_an_explicit_policy_wins(op, x0, exact):
    """No layer, no context: the "safety" layer's built-in PROJECT (the exact
    derivative, not CLAMP's clipped one); an explicit policy= beats a
    surrounding context, in both directions."""
    def grad(context=None, **kw):
        x = torch.tensor([x0], dtype=torch.float64, requires_grad=True)
        if context is None:
            op(x, **kw).sum().backward()
        else:
            with gradient_policy(context):
                op(x, **kw).sum().backward()
        return float(x.grad[0])

    assert grad() == pytest.approx(exact, rel=1e-12)
    assert grad(P.CLAMP, policy=P.PROJECT) == pytest.approx(exact, rel=1e-12)
    assert grad(P.PROJECT, policy=P.CLAMP) == pytest.approx(max(-1.0, min(1.0, exact)), rel=1e-12)
    assert grad(P.PROJECT, policy=P.REJECT) == 0.0


def test_abs_pow_with_a_negative_exponent_is_finite_at_zero():
    x = torch.tensor([0.0, 1e-12, 4.0], dtype=torch.float64, requires_grad=True)
    y = safe_abs_pow(x, -1.0)
    assert torch.isfinite(y).all() and float(y[2]) == 0.25 and float(y[0]) == 1.0 / SAFE_SQRT_EPS
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad[0] == 0.0
