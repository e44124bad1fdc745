"""Second derivatives through pompy.utils.safety's ops and a whole step.

The safe ops' backward and jvp compute their derivative from the op's
input or output as saved, with its graph and tangent, and apply the
gradient policy with torch.where, so double backward, torch.func.hessian
(forward over reverse), jacrev of jacrev and jvp of a gradient are exact;
forward over forward mode (jacfwd of jacfwd), which torch does not
differentiate through a custom Function's jvp, raises.

Measured (torch 2.13 CPU, float64): the ops' second derivatives equal the
analytic ones to 4.8e-16 relative at most (the analytic formula's own
rounding); torch.func.hessian, jacrev of jacrev and of jacfwd, jvp of
grad and forward_ad over autograd.grad equal double backward to 2.2e-16
of the largest entry on the small function below; through one
internal step of an 8x7x5 seamount the Hessian-vector product equals
central differences of the gradient to 1.2e-8 relative (the bar: 1e-6),
and forward over reverse equals double backward to 9e-17.
"""
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.autograd import forward_ad

from pompy import cores
from pompy.autodiff.policies import GradientPolicy
from pompy.config import load_config
from pompy.utils.safety import (safe_abs_pow, safe_divide, safe_log, safe_reciprocal,
                                safe_sqrt)

DT = torch.float64
P = GradientPolicy
CONFIGS = Path(__file__).parents[1] / "configs"

# op, its second derivative (analytic), points away from the guards
SECOND = {
    "sqrt": (safe_sqrt, lambda x: -0.25 * x ** -1.5, [1e-6, 0.04, 2.5, 7e4]),
    "abs_pow 1.5": (lambda x: safe_abs_pow(x, 1.5), lambda x: 0.75 * x.abs() ** -0.5,
                    [-3.0, -0.2, 1e-4, 0.3, 9.0]),
    "abs_pow -0.5": (lambda x: safe_abs_pow(x, -0.5), lambda x: 0.75 * x.abs() ** -2.5,
                     [-3.0, -0.2, 1e-4, 0.3, 9.0]),
    "abs_pow 3": (lambda x: safe_abs_pow(x, 3.0), lambda x: 6.0 * x.abs(), [-3.0, -0.2, 0.3, 9.0]),
    "log": (safe_log, lambda x: -1.0 / x ** 2, [1e-9, 0.04, 2.5, 7e4]),
    "reciprocal": (safe_reciprocal, lambda x: 2.0 / x ** 3, [-4.0, -1e-5, 0.04, 2.5, 7e4]),
}


def second_derivative(op, x: torch.Tensor) -> torch.Tensor:
    """d2 op(x_i) / dx_i2 by double backward (op is elementwise)."""
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(op(x).sum(), x, create_graph=True)
    if not g.requires_grad:          # REJECT: the zero gradient, a constant
        return torch.zeros_like(x)
    (h,) = torch.autograd.grad(g.sum(), x)
    return h


@pytest.mark.parametrize("name", sorted(SECOND))
def test_double_backward_of_each_safe_op_is_the_analytic_second_derivative(name):
    op, want, points = SECOND[name]
    x = torch.tensor(points, dtype=DT)
    torch.testing.assert_close(second_derivative(op, x), want(x), rtol=4.5e-16, atol=0)


def test_double_backward_of_safe_divide_in_both_arguments():
    """n/d: d2/dn2 = 0, d2/dn dd = -1/d**2, d2/dd2 = 2n/d**3 (d broadcast)."""
    n = torch.tensor([[0.5], [-1.2], [2.0]], dtype=DT, requires_grad=True)
    d = torch.tensor([1.5, -0.7, 3e-4], dtype=DT, requires_grad=True)
    gn, gd = torch.autograd.grad(safe_divide(n, d).sum(), (n, d), create_graph=True)
    hnn, hnd = torch.autograd.grad(gn.sum(), (n, d), retain_graph=True, allow_unused=True,
                                   materialize_grads=True)
    hdn, hdd = torch.autograd.grad(gd.sum(), (n, d))
    nn, dd = n.detach(), d.detach()
    assert torch.equal(hnn, torch.zeros_like(nn))
    torch.testing.assert_close(hnd, (-1.0 / dd ** 2).expand(3, 3).sum(0), rtol=1e-15, atol=0)
    torch.testing.assert_close(hdn, (-1.0 / dd ** 2).expand(3, 3).sum(1, keepdim=True),
                               rtol=1e-15, atol=0)
    torch.testing.assert_close(hdd, (2.0 * nn / dd ** 3).sum(0), rtol=1e-15, atol=0)


GUARDED = {    # op, points at its guard (the first derivative there is the policy's)
    "sqrt": (safe_sqrt, [0.0, -2.0, 1e-20]),
    "abs_pow -0.5": (lambda x, **kw: safe_abs_pow(x, -0.5, **kw), [0.0, 1e-30, -1e-12]),
    "log": (safe_log, [0.0, -1.0, 1e-15]),
    "reciprocal": (safe_reciprocal, [0.0, 1e-25, -1e-30]),
}


@pytest.mark.parametrize("policy", list(P))
@pytest.mark.parametrize("name", sorted(GUARDED))
def test_second_derivative_at_the_guards_is_zero(name, policy):
    """The derivative at a guarded point is that of the clamped input, a
    constant: its derivative is 0, finite under every policy (no NaN from
    the branch not taken)."""
    op, points = GUARDED[name]
    h = second_derivative(lambda x: op(x, policy=policy), torch.tensor(points, dtype=DT))
    assert torch.equal(h, torch.zeros_like(h)), h


def small(x: torch.Tensor) -> torch.Tensor:
    """Every safe op, mixing the components (a full Hessian); torch's own
    ops in :func:`reference`."""
    y = x.roll(1)
    return (safe_sqrt(x * y + 1.0) * safe_log(x + 2.0) + safe_divide(x, y * y + 3.0)
            + safe_abs_pow(x - y, 1.5) + safe_reciprocal(x + 4.0)).sum()


def reference(x: torch.Tensor) -> torch.Tensor:
    y = x.roll(1)
    return (torch.sqrt(x * y + 1.0) * torch.log(x + 2.0) + x / (y * y + 3.0)
            + (x - y).abs() ** 1.5 + 1.0 / (x + 4.0)).sum()


X = torch.tensor([0.3, 1.7, -0.4, 2.2, 0.9], dtype=DT)   # x * roll(x) + 1 > 0.1: unguarded


def test_hessian_and_jvp_of_grad_agree_with_double_backward():
    """Measured, of the largest entry: torch's own ops 1.7e-16, hessian 4e-17,
    jacrev of jacrev 0, of jacfwd 5e-18, jvp of grad 2.2e-16 (rounding, in
    another order): asserted to 1e-15 (the entries are ~1)."""
    double = torch.autograd.functional.hessian(small, X)
    close = {"rtol": 1e-15, "atol": 1e-15}
    torch.testing.assert_close(torch.autograd.functional.hessian(reference, X), double, **close)
    torch.testing.assert_close(torch.func.hessian(small)(X), double, **close)
    torch.testing.assert_close(torch.func.jacrev(torch.func.jacrev(small))(X), double, **close)
    torch.testing.assert_close(torch.func.jacrev(torch.func.jacfwd(small))(X), double, **close)
    batched = torch.func.vmap(torch.func.hessian(small))(torch.stack([X, X + 1.0]))
    torch.testing.assert_close(batched[0], double, **close)
    v = torch.linspace(-1.0, 2.0, 5, dtype=DT)
    hv = double @ v
    torch.testing.assert_close(torch.func.jvp(torch.func.grad(small), (X,), (v,))[1], hv, **close)
    with forward_ad.dual_level():                    # forward_ad over autograd.grad
        x = forward_ad.make_dual(X.clone().requires_grad_(True), v)
        (g,) = torch.autograd.grad(small(x), x)
        torch.testing.assert_close(forward_ad.unpack_dual(g).tangent, hv, **close)


@pytest.mark.parametrize("op", [safe_sqrt, lambda x: safe_divide(1.0 + x, x + 2.0)])
def test_forward_over_forward_mode_is_refused(op):
    """torch does not differentiate a custom Function's jvp under an outer
    jvp: without the refusal jacfwd(jacfwd(f)) gives 0 where the Hessian is not."""
    def f(x):
        return op(x).sum()
    with pytest.raises(RuntimeError, match="^pompy: second derivatives in forward over forward"):
        torch.func.jacfwd(torch.func.jacfwd(f))(X.abs())
    one = torch.ones_like(X)
    with pytest.raises(RuntimeError, match="^pompy: second derivatives in forward over forward"):
        torch.func.jvp(lambda x: torch.func.jvp(f, (x,), (one,))[1], (X.abs(),), (one,))


WRT = ("el", "t", "u")
OUT = ("el", "u", "v", "t", "s", "q2")


def step_objective(checkpoint=None, graph=False):
    """(f, x0, v): f(el, t, u), a fixed weighted sum of one internal step's
    (4 external passes') new el, u, v, t, s, q2, each over its magnitude,
    from step 3 of an 8x7x5 seamount; v a direction, each field's in units
    of its magnitude, u's zero where u is (on land and the walls, where the
    upwind switches sit on their kink)."""
    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                                 kl2=3, isplit=4, ispadv=2)
    core = cores.get("explicit").make(config, device="cpu", dtype=DT, checkpoint=checkpoint)
    core.checkpoint_graph = graph
    core.run_initialization()
    core.iend = 3
    core.run_time_loop()
    base, iint0, time0 = dict(core.state), core.iint, core.time

    def run(*x):
        object.__setattr__(core, "state", dict(base))
        core.iint, core.time, core.iend = iint0, time0, iint0 + 1
        for name, value in zip(WRT, x):
            setattr(core, name, value)
        core.run_time_loop()
        return dict(core.state)

    x0 = tuple(base[n].detach().clone() for n in WRT)
    with torch.no_grad():
        after = run(*x0)
    gen = torch.Generator().manual_seed(0)
    weights = {n: torch.randn(after[n].shape, generator=gen, dtype=DT) / after[n].abs().max()
               for n in OUT}
    gen.manual_seed(1)
    v = [torch.randn(x.shape, generator=gen, dtype=DT) * x.abs().max() for x in x0]
    v[2] = v[2] * (x0[2] != 0)

    def f(*x):
        out = run(*x)
        return sum((weights[n] * out[n]).sum() for n in OUT)
    return f, x0, tuple(v)


def gradient(f, x, create_graph=False):
    x = tuple(xi.detach().clone().requires_grad_(True) for xi in x)
    return x, torch.autograd.grad(f(*x), x, create_graph=create_graph)


def hessian_vector(f, x0, v):
    x, g = gradient(f, x0, create_graph=True)
    return torch.autograd.grad(g, x, v)


def test_hessian_vector_product_through_a_whole_step_equals_central_differences():
    """Measured, relative to each input's central difference (h = 1e-5):
    el 1.2e-8, t 9.3e-10, u 5.3e-10 (over directions seeded 1 to 5: at
    most 2.6e-8; the differences' rounding, ~1e-16 |g| / h, sets it;
    truncation reaches it at h = 1e-4): asserted below 1e-7. With the ops
    once-differentiable (derivatives without their own graph) it was 28%,
    6.8% and 22% off. Forward over reverse: 9e-17 of double backward."""
    f, x0, v = step_objective()
    hv = hessian_vector(f, x0, v)
    h = 1e-5
    plus = gradient(f, tuple(a + h * b for a, b in zip(x0, v)))[1]
    minus = gradient(f, tuple(a - h * b for a, b in zip(x0, v)))[1]
    for name, got, p, m in zip(WRT, hv, plus, minus):
        central = (p - m) / (2 * h)
        error = float((got - central).norm() / central.norm())
        assert error < 1e-7, (name, error)
    _, tangent = torch.func.jvp(lambda *x: torch.func.grad(f, argnums=(0, 1, 2))(*x), x0, v)
    for name, got, want in zip(WRT, tangent, hv):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0, msg=name)
    routines = step_objective(checkpoint="routines")
    for name, got, want in zip(WRT, hessian_vector(*routines), hv):
        assert torch.equal(got, want), name


@pytest.mark.parametrize("graph", [False, True], ids=["one node", "graph kept"])
def test_checkpointed_steps_refuse_second_derivatives(graph):
    """checkpoint="steps" reruns its steps from detached inputs (with its
    graph kept, its saved tensors come back detached): a double backward
    through it raises (it once dropped the steps' curvature silently when
    the loss had another term)."""
    f, x0, v = step_objective(checkpoint="steps", graph=graph)
    x = tuple(xi.detach().clone().requires_grad_(True) for xi in x0)
    with pytest.raises(RuntimeError, match="pompy: second derivatives are not supported through "
                                           "checkpoint='steps'"):
        torch.autograd.grad(f(*x) + (x[1] ** 3).sum(), x, create_graph=True)
