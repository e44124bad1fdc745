"""ExplicitCore under autograd: long gradients with and without
checkpointing, the generation fast path and its snapshots, the seed's
pitfalls 1, 3 and 5."""
import dataclasses
from pathlib import Path

import pytest
import torch

from pompy import variables
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.core.model import forward_only
from pompy.errors import CFLViolation

CONFIGS = Path(__file__).parents[1] / "configs"


def tiny(**changes):
    """An 8x7x5 seamount with 3 external passes per step: 240 steps with
    their graph fit in ~1 GB."""
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, im=8, jm=7, kb=5, kl1=2, kl2=3, isplit=3, ispadv=3,
                               **changes)


def developed(config, **kw) -> ExplicitCore:
    """A core two steps in (the cold start's first step has no internal mode)."""
    core = ExplicitCore(config, **kw)
    core.run_initialization()
    core.iend = 2
    core.run_time_loop()
    return core


def gradient(config, steps: int, checkpoint=None):
    core = developed(config, checkpoint=checkpoint)
    el0 = core.el.clone().requires_grad_(True)
    t0 = core.t.clone().requires_grad_(True)
    core.el, core.t = el0, t0
    core.iend = 2 + steps
    core.run_time_loop()
    (core.u.square().sum() + core.el.sum() + 1e-3 * core.t.sum()).backward()
    return el0.grad, t0.grad


@pytest.mark.parametrize("steps", [48, pytest.param(240, marks=pytest.mark.slow)])
def test_long_gradients_are_finite_and_checkpointing_changes_nothing(steps):
    """The issue's bar is 1e-12 over 240 steps; measured: the three
    gradients are equal to the last bit, which is asserted. The 240-step
    case (about 60 s) runs from validation/slow_tests.py."""
    config = tiny()
    plain = gradient(config, steps)
    for name, g in zip(("el", "t"), plain):
        assert torch.isfinite(g).all() and g.abs().max() > 0, name
    for mode in ("routines", "steps"):
        got = gradient(config, steps, checkpoint=mode)
        for name, g, want in zip(("el", "t"), got, plain):
            assert torch.equal(g, want), (mode, name, float((g - want).abs().max()))


def test_a_checkpointed_step_recomputes_with_the_parameters_of_its_forward():
    """Parameters changed between the forward and the backward pass (as a
    training loop may) do not reach the recomputation of a checkpointed step."""
    config = tiny()
    want = gradient(config, 3)
    core = developed(config, checkpoint="steps")
    el0 = core.el.clone().requires_grad_(True)
    t0 = core.t.clone().requires_grad_(True)
    core.el, core.t = el0, t0
    core.iend = 5
    core.run_time_loop()
    loss = core.u.square().sum() + core.el.sum() + 1e-3 * core.t.sum()
    core.params["smoth"], core.params["horcon"] = 0.5, 0.3
    loss.backward()
    assert torch.equal(el0.grad, want[0]) and torch.equal(t0.grad, want[1])


def test_checkpoint_choice_is_checked():
    with pytest.raises(ValueError, match="checkpoint='all'"):
        ExplicitCore(tiny(), checkpoint="all")


def test_generation_fast_path_captures_detached_snapshots():
    config = tiny()
    reference = developed(config)
    reference.iend = 8
    reference.run_time_loop()
    core = ExplicitCore(config)
    core.run_initialization()
    core.generation_fast_path, core.capture_interval = True, 3
    core.el = core.el.clone().requires_grad_(True)    # the fast path builds no graph anyway
    core.iend = 8
    core.run_time_loop()
    assert [r["iint"] for r in core.generation_records] == [3, 6]
    last = core.generation_records[-1]
    assert set(variables.names("prognostic")) <= set(last)
    assert not any(t.requires_grad for n, t in last.items() if torch.is_tensor(t))
    assert not core.u.requires_grad
    assert all(last[n].data_ptr() != core.state[n].data_ptr() for n in variables.names("prognostic"))
    # the fast path computes the same model
    for name in variables.names("prognostic"):
        assert torch.equal(core.state[name], reference.state[name]), name
    core.run_initialization()                           # a new run starts a new record
    assert core.generation_records == []


def test_a_forward_only_run_leaves_ordinary_snapshots_and_a_state_to_differentiate():
    """pompy run and generation step under forward_only() (inference mode):
    their snapshots are ordinary tensors that a backward pass can save, and
    a gradient run from the state such a run left gives the gradients of a
    core that never ran in inference mode, to the last bit."""
    config = tiny()
    core = ExplicitCore(config)
    core.run_initialization()
    (record,) = core.run_generation_day(2, capture_interval=2)
    assert not any(t.is_inference() for t in record.values() if torch.is_tensor(t))
    assert core.u.is_inference()
    scale = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (record["t"] * scale).sum().backward()
    assert torch.equal(scale.grad, record["t"].sum())

    with forward_only():
        ran = developed(config)
    assert ran.t.is_inference()
    el0 = ran.el.detach().clone().requires_grad_(True)
    ran.el = el0
    ran.iend = 4
    ran.run_time_loop()
    ran.u.square().sum().backward()
    ordinary = developed(config)
    want = ordinary.el.clone().requires_grad_(True)
    ordinary.el = want
    ordinary.iend = 4
    ordinary.run_time_loop()
    ordinary.u.square().sum().backward()
    assert el0.grad.abs().max() > 0 and torch.equal(el0.grad, want.grad)


def test_run_generation_day_is_a_normal_run_bit_for_bit():
    """The seed's run_generation_day: the fast path's snapshots equal a
    normal (gradient-mode) run's state at the same steps, to the last bit;
    the flag is off afterwards, also when the run stops."""
    config = tiny()
    core = ExplicitCore(config)
    core.run_initialization()
    records = core.run_generation_day(6, capture_interval=2)
    assert [r["iint"] for r in records] == [2, 4, 6] and not core.generation_fast_path
    assert core.run_generation_day(2, capture_interval=2)[0]["iint"] == 8   # this call's only
    reference = ExplicitCore(config)
    reference.run_initialization()
    for record in records:
        reference.iend = record["iint"]
        reference.run_time_loop()
        for name in variables.names("snapshot"):
            if name in record:
                assert torch.equal(record[name], reference.state[name]), (record["iint"], name)
    broken = ExplicitCore(dataclasses.replace(config, vmaxl=1e-9))   # stops at step 1
    broken.run_initialization()
    with pytest.raises(CFLViolation):
        broken.run_generation_day()
    assert not broken.generation_fast_path
    assert broken.iend == round(86400 / config.dti)                  # a day by default


def test_switching_modes_needs_run_initialization():
    """The seed's pitfall 5: a core reused between generation and gradient
    runs without re-initialisation is refused; after it, it runs."""
    core = developed(tiny())                       # a gradient-mode run
    core.generation_fast_path = True
    core.iend = 4
    with pytest.raises(RuntimeError, match="run_initialization"):
        core.run_time_loop()
    core.run_initialization()
    core.run_time_loop()
    assert core.iint == 4


def test_at_most_two_values_leave_the_device_per_step(monkeypatch):
    """The seed's pitfall 3: no .item() or Python branch on a tensor value
    decides what a gradient-enabled step computes. The two reads per step
    are the documented safety checks (vamax; every field finite), counted
    here through every way a tensor value reaches Python."""
    core = developed(tiny())
    el0 = core.el.clone().requires_grad_(True)
    core.el = el0
    reads = []
    for method in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy"):
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _original=original, _name=method, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, method, counted)
    core.iend = 5
    core.run_time_loop()
    assert len(reads) == 2 * 3, reads               # 3 steps: vamax and finiteness each
    assert reads == ["__float__", "__bool__"] * 3
