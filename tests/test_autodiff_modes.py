"""Autodiff that is right in every mode or says no: forward mode
against reverse mode through whole steps, the safe ops under torch.func,
gradients through load_state and inject, dtype conversion of a leaf, a
core's own gradient policies (argument and &gradient_policy group), and
which policy wins when the forward and the backward pass see different
contexts, on the caller's thread and on another one.

Forward and reverse mode are two independent computations of the same
Jacobian (the jvp of every custom function against its backward);
test_gradcheck checks both against central differences routine by routine.
"""
from __future__ import annotations

import dataclasses
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch.autograd import forward_ad

import pompy.utils.safety as safety
from pompy.autodiff.policies import GradientPolicy, GradientPolicyConfig, gradient_policy
from pompy.config import ConfigError, load_config
from pompy.core.explicit import ExplicitCore
from pompy.utils.safety import safe_abs_pow, safe_divide, safe_log, safe_reciprocal, safe_sqrt

CONFIGS = Path(__file__).parents[1] / "configs"
P = GradientPolicy


def tiny(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, im=8, jm=7, kb=5, kl1=2, kl2=3, isplit=3, ispadv=3,
                               **changes)


def developed(config=None, **kw) -> ExplicitCore:
    """A core two steps in (the cold start's first step has no internal mode)."""
    core = ExplicitCore(config or tiny(), **kw)
    core.run_initialization()
    core.iend = 2
    core.run_time_loop()
    return core


def loss_of(core) -> torch.Tensor:
    return core.rho.square().sum() + core.u.square().sum() + core.el.sum()


def three_steps(core, name, value):
    setattr(core, name, value)
    core.iend = 5
    core.run_time_loop()
    return loss_of(core)


# --------------------------------------------------------------- forward mode

@pytest.mark.parametrize("name", ["s", "t", "el"])
def test_forward_mode_equals_reverse_mode_through_three_steps(name):
    """The issue's case (forward mode was -16.13 against reverse -15.25
    before the safe ops had a jvp). Measured: relative difference <= 5e-16
    for s, t and el; the issue's bar is 1e-10."""
    base = developed()
    x0 = getattr(base, name).detach().clone()
    direction = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3),
                            dtype=torch.float64)
    leaf = x0.clone().requires_grad_(True)
    three_steps(developed(), name, leaf).backward()
    reverse = float((leaf.grad * direction).sum())
    with forward_ad.dual_level():
        loss = three_steps(developed(), name, forward_ad.make_dual(x0.clone(), direction))
        forward = float(forward_ad.unpack_dual(loss).tangent)
    assert reverse != 0.0
    assert abs(forward - reverse) <= 1e-10 * abs(reverse), (forward, reverse)


OPS = {
    "sqrt": lambda x, **kw: safe_sqrt(x, **kw),
    "abs_pow": lambda x, **kw: safe_abs_pow(x, 1.5, **kw),
    "abs_pow_negative": lambda x, **kw: safe_abs_pow(x, -0.5, **kw),
    "log": lambda x, **kw: safe_log(x, **kw),
    "divide_by": lambda x, **kw: safe_divide(x.flip(0) + 1.0, x, **kw),
    "divide": lambda x, **kw: safe_divide(x, x.flip(0) + 2.0, **kw),
    "reciprocal": lambda x, **kw: safe_reciprocal(x, **kw),
}
# ordinary points and guarded ones (0 and values below every eps)
POINTS = torch.tensor([0.04, 2.5, 0.0, 1e-30, 7.0, -0.3], dtype=torch.float64)


@pytest.mark.parametrize("policy", [P.PROJECT, P.REJECT, P.PASSTHROUGH])
@pytest.mark.parametrize("op", sorted(OPS))
def test_jacfwd_equals_jacrev_for_every_safe_op_and_linear_policy(op, policy):
    """Same guard, same policy at the guarded points in both modes."""
    fn = lambda x: OPS[op](x, policy=policy)               # noqa: E731
    fwd = torch.func.jacfwd(fn)(POINTS)
    rev = torch.func.jacrev(fn)(POINTS)
    assert torch.equal(fwd, rev), (fwd, rev)
    assert torch.isfinite(fwd).all() or policy is P.PASSTHROUGH


def test_forward_mode_derivatives_are_exact_away_from_the_guards():
    x = torch.tensor([0.04, 2.0], dtype=torch.float64)
    ones = torch.ones_like(x)
    assert torch.func.jvp(safe_sqrt, (x,), (ones,))[1].tolist() == [2.5, 0.5 / 2.0 ** 0.5]
    assert torch.func.jvp(safe_log, (x,), (ones,))[1].tolist() == [25.0, 0.5]
    _, tangent = torch.func.jvp(lambda n, d: safe_divide(n, d), (x, x + 1.0), (ones, ones))
    assert torch.allclose(tangent, 1.0 / (x + 1.0) - x / (x + 1.0) ** 2, rtol=1e-15, atol=0)


def test_forward_mode_under_clamp_is_refused_not_wrong():
    """CLAMP clips each reverse-mode product grad*derivative; no tangent can
    reproduce that, so forward mode says so (naming the layer)."""
    x = torch.tensor([0.04], dtype=torch.float64)
    with gradient_policy(P.CLAMP):
        with pytest.raises(RuntimeError, match="forward-mode AD is not defined under the CLAMP.*'profq'"):
            torch.func.jvp(lambda v: safe_sqrt(v, layer="profq"), (x,), (torch.ones_like(x),))
        # an explicit policy opts out of the context, in forward mode too
        _, t = torch.func.jvp(lambda v: safe_sqrt(v, policy=P.PROJECT), (x,), (torch.ones_like(x),))
    assert float(t) == 2.5


def test_safe_ops_vectorise_under_vmap_of_grad():
    x = torch.stack([POINTS.abs() + 0.01, POINTS.abs() + 1.0])
    got = torch.func.vmap(torch.func.grad(lambda v: safe_sqrt(v).sum()))(x)
    assert torch.allclose(got, 0.5 / torch.sqrt(x), rtol=1e-15, atol=0)


def test_safe_sqrt_exact_without_layer_and_explicit_beats_context():
    """The issue's "done when": exact derivative with no layer and no
    context, and policy=PROJECT inside a CLAMP context."""
    x = torch.tensor(0.04, dtype=torch.float64, requires_grad=True)
    safe_sqrt(x).backward()
    assert float(x.grad) == 2.5
    x.grad = None
    with gradient_policy(P.CLAMP):
        safe_sqrt(x, policy=P.PROJECT).backward()
    assert float(x.grad) == 2.5


# --------------------------------------------------------------- load_state, inject, dtype

def test_a_leaf_given_to_load_state_gets_its_gradient():
    """The trainer's path: a network-corrected state goes in through
    load_state; the gradient must come back to it (it equals the gradient
    of the same run with the leaf set as an attribute)."""
    base = developed()
    record = base.capture()
    leaf = record["t"].clone().requires_grad_(True)
    core = ExplicitCore(tiny())
    core.load_state(dict(record, t=leaf), iint=record["iint"])
    core.iend = 5
    core.run_time_loop()
    loss_of(core).backward()
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
    assert float(leaf.grad.abs().max()) > 0
    same = record["t"].clone().requires_grad_(True)
    three_steps(developed(), "t", same).backward()
    assert torch.equal(leaf.grad, same.grad)


def test_load_state_copies_data_without_grad():
    base = developed()
    record = base.capture()
    core = ExplicitCore(tiny())
    core.load_state(record, iint=record["iint"])
    record["t"].add_(1.0)                         # the caller's array, changed afterwards
    assert not torch.equal(core.t, record["t"]) and not core.t.requires_grad


def _pom2k_order(t):
    """t with pom2k's memory order (i fastest): the same values, other strides."""
    return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))


def test_a_state_in_another_memory_order_is_held_contiguous():
    """Fields given in another memory order (a transposed tensor) come into
    the state contiguous, through load_state, inject and attributes, with
    their values and their gradient path: a compiled step's graphs are
    traced for contiguous fields (pompy.core.model.Core._tensor)."""
    base = developed()
    record = base.capture()
    given = {n: _pom2k_order(v) if torch.is_tensor(v) and v.dim() > 1 else v
             for n, v in record.items()}
    assert not given["t"].is_contiguous() and not given["el"].is_contiguous()
    core = ExplicitCore(tiny())
    core.load_state(given, iint=record["iint"])
    for name, value in core.state.items():
        assert value.is_contiguous(), name
        if name in record:
            assert torch.equal(value, record[name].to(value.dtype)), name
    core.inject({"s": _pom2k_order(record["s"])})
    assert core.s.is_contiguous() and torch.equal(core.s, record["s"])
    leaf = _pom2k_order(record["el"]).requires_grad_(True)
    core.el = leaf
    assert core.el.is_contiguous() and torch.equal(core.el, record["el"])
    core.iend = record["iint"] + 2
    core.run_time_loop()
    loss_of(core).backward()
    same = record["el"].clone().requires_grad_(True)
    reference = ExplicitCore(tiny())
    reference.load_state(record, iint=record["iint"])
    reference.el = same
    reference.iend = record["iint"] + 2
    reference.run_time_loop()
    loss_of(reference).backward()
    assert float(leaf.grad.abs().max()) > 0 and torch.equal(leaf.grad, same.grad)
    contiguous = core.el.contiguous()
    core.el = contiguous
    assert core.el is contiguous                # a contiguous leaf is kept as given


def test_inject_keeps_the_gradient_path():
    core = developed()
    leaf = core.el.detach().clone().requires_grad_(True)
    core.inject({"el": leaf})
    core.iend = 4
    core.run_time_loop()
    loss_of(core).backward()
    assert float(leaf.grad.abs().max()) > 0


def test_a_float64_leaf_given_to_a_float32_core_is_converted_with_a_warning():
    core = developed(dtype=torch.float32)
    leaf = core.t.detach().double().requires_grad_(True)
    with pytest.warns(UserWarning, match="pompy: t is torch.float64 and requires grad; this "
                                         "torch.float32 core converts it"):
        core.t = leaf
    assert {v.dtype for v in core.state.values()} == {torch.float32}
    core.iend = 4
    core.run_time_loop()
    loss_of(core).backward()
    assert leaf.grad.dtype == torch.float64 and float(leaf.grad.abs().max()) > 0
    with warnings.catch_warnings():               # data without grad: converted quietly
        warnings.simplefilter("error")
        core.s = core.s.detach().double()
    assert core.s.dtype == torch.float32


# --------------------------------------------------------------- the core's policies

@dataclasses.dataclass
class Seen:
    """(layer, policy applied) of every guarded backward, by layer."""
    by_layer: dict

    def policies(self, layer):
        return self.by_layer.get(layer, set())


@pytest.fixture
def seen(monkeypatch):
    """Record which policy the safe ops' backward applies, per layer."""
    record = Seen({})
    original = safety.apply_policy

    def watching(grad, is_bottom, policy=None, layer=None):
        chosen = safety.selected_policy(layer, policy)
        record.by_layer.setdefault(layer, set()).add(chosen)
        return original(grad, is_bottom, policy=policy, layer=layer)

    monkeypatch.setattr(safety, "apply_policy", watching)
    return record


def backward_of_three_steps(core, context=None, thread=False):
    """Three steps from t as a leaf; the backward under CONTEXT (a policy),
    on another thread if THREAD. Returns the leaf's gradient."""
    leaf = core.t.detach().clone().requires_grad_(True)
    loss = three_steps(core, "t", leaf)

    def run():
        if context is None:
            loss.backward()
        else:
            with gradient_policy(context):
                loss.backward()
    if thread:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
    else:
        run()
    return leaf.grad


def test_core_policies_are_explicit_for_their_layers(seen):
    """ExplicitCore(..., policies=...): a layer given a policy keeps it
    inside a surrounding context (the seed's opt-out); the others follow
    the context."""
    core = developed(policies=GradientPolicyConfig(layers={"dens": P.REJECT}))
    with gradient_policy(P.PASSTHROUGH):
        backward_of_three_steps(core)
    assert seen.policies("dens") == {P.REJECT}
    assert seen.policies("smagorinsky") == {P.PASSTHROUGH}


def test_core_policy_override_applies_to_every_layer(seen):
    core = developed(policies=GradientPolicyConfig(override=P.REJECT))
    grad = backward_of_three_steps(core)
    assert set().union(*seen.by_layer.values()) == {P.REJECT}
    assert {"dens", "smagorinsky", "profq"} <= set(seen.by_layer)
    assert not torch.equal(grad, backward_of_three_steps(developed()))


def test_policies_from_the_config_group(tmp_path):
    """&gradient_policy in the config file gives the core's policies; it
    survives to_namelist (as written into output files) and a bad entry
    names the group."""
    text = (CONFIGS / "seamount.nml").read_text()
    path = tmp_path / "run.nml"
    path.write_text(text + "\n&gradient_policy\n    override = 'project'\n    Profq = 'reject'\n/\n")
    config = load_config(path)
    assert config.policies == GradientPolicyConfig(override=P.PROJECT, layers={"profq": P.REJECT})
    assert ExplicitCore(config).policies is config.policies
    config.to_namelist().write(tmp_path / "again.nml")
    assert load_config(tmp_path / "again.nml").policies == config.policies
    assert load_config(CONFIGS / "seamount.nml").policies == GradientPolicyConfig()
    path.write_text(text + "\n&gradient_policy\n    profq = 'gentle'\n/\n")
    with pytest.raises(ConfigError, match="&gradient_policy: unknown gradient policy 'gentle' "
                                          "for layer 'profq'"):
        load_config(path)


def test_the_core_refuses_policies_of_the_wrong_type():
    with pytest.raises(TypeError, match="policies must be a GradientPolicyConfig"):
        ExplicitCore(tiny(), policies={"dens": "reject"})


# --------------------------------------------------------------- forward vs backward context

def test_the_forward_pass_decides_and_a_backward_context_fills_in(seen):
    """The documented rule (pompy.autodiff.policies, "Forward and backward
    pass"): a context active in the forward pass wins over one around the
    backward, on the caller's thread or another; a context around the
    backward alone applies where the forward set none (the seed's usage);
    a backward on a thread without a context gets the built-in defaults."""
    with gradient_policy(P.REJECT):
        forward = developed()
        leaf = forward.t.detach().clone().requires_grad_(True)
        loss = three_steps(forward, "t", leaf)
    with gradient_policy(P.PASSTHROUGH):
        loss.backward()
    assert set().union(*seen.by_layer.values()) == {P.REJECT}
    seen.by_layer.clear()
    backward_of_three_steps(developed(), context=P.REJECT, thread=True)
    assert set().union(*seen.by_layer.values()) == {P.REJECT}
    seen.by_layer.clear()
    backward_of_three_steps(developed(), thread=True)
    assert set().union(*seen.by_layer.values()) == {P.PROJECT}


@pytest.mark.parametrize("checkpoint", ["steps", "routines"])
def test_a_recomputed_step_keeps_the_policies_of_its_forward_pass(checkpoint):
    """Checkpointing recomputes steps inside the backward, where the
    forward's context is gone (here: another thread, as on CUDA): the
    policies are still those the forward pass recorded, and the gradient is
    the one without checkpointing, to the last bit."""
    def gradient(**kw):
        core = developed(**kw)
        leaf = core.t.detach().clone().requires_grad_(True)
        with gradient_policy(P.REJECT):
            loss = three_steps(core, "t", leaf)
        worker = threading.Thread(target=loss.backward)
        worker.start()
        worker.join()
        return leaf.grad
    plain = gradient()
    assert torch.equal(gradient(checkpoint=checkpoint), plain)
    default = backward_of_three_steps(developed())
    assert not torch.equal(plain, default)
