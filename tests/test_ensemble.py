"""An ensemble of members (pompy.core.ensemble): each member
equals its own single run to the last bit, on both cores and in every
mode; gradients flow; a stop names its member and keeps the last good
state."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from pompy import variables
from pompy.config import load_config
from pompy.core.ensemble import Ensemble
from pompy.core.explicit import ExplicitCore
from pompy.core.external import cg
from pompy.core.external.implicit import SemiImplicit
from pompy.core.implicit import ImplicitCore
from pompy.errors import CFLViolation, NonFiniteState

CONFIGS = Path(__file__).parents[1] / "configs"
MEMBERS = 3


def small(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=12, jm=10, kb=6, kl1=2, kl2=4), **changes})


def perturbation(core, m: int) -> dict:
    """Member m's initial t, tb: m * 0.01 degC warmer at wet points."""
    t = core.state["t"] + 0.01 * m * core.state["fsm"][:, :, None]
    return {"t": t, "tb": t.clone()}


def single(kind, config, m: int, steps: int, solver=None) -> dict:
    core = kind(config)
    if solver is not None:
        core.external = SemiImplicit(solver)
    core.run_initialization()
    core.inject(perturbation(core, m))
    core.iend = steps
    with torch.no_grad():
        core.run_time_loop()
    return core.state


@pytest.mark.parametrize("kind,changes,solver", [
    (ExplicitCore, {}, None), (ExplicitCore, dict(mode=2), None),
    (ExplicitCore, dict(mode=4), None), (ExplicitCore, dict(nadv=2), None),
    (ImplicitCore, {}, None), (ImplicitCore, dict(mode=4), None),
    (ImplicitCore, dict(preconditioner="multigrid"), None), (ImplicitCore, {}, cg.solve),
    (ExplicitCore, dict(iproblem=2, im=11, jm=9), None),
])
def test_each_member_equals_its_single_run_bit_for_bit(kind, changes, solver):
    """The implicit core's members solve with its PCG (Jacobi or multigrid)
    all at once, or with the reference CG where the core has it."""
    config, steps = small(**changes), 4
    core = kind(config)
    if solver is not None:
        core.external = SemiImplicit(solver)
    core.run_initialization()
    ens = Ensemble(core, MEMBERS)
    for m in range(MEMBERS):
        ens.load_member(m, perturbation(core, m))
    with torch.no_grad():
        ens.advance(steps)
    assert ens.iint == steps and ens.vamax.shape == (MEMBERS,)
    for m in range(MEMBERS):
        want = single(kind, config, m, steps, solver)
        got = ens.member(m)
        for name in variables.names("loop_input"):
            assert torch.equal(got[name], want[name]), (m, name)
    # the members do differ
    assert not torch.equal(ens.member(0)["t"], ens.member(2)["t"])


@pytest.mark.parametrize("kind,changes", [
    (ExplicitCore, {}), (ImplicitCore, {}), (ImplicitCore, dict(preconditioner="multigrid"))])
def test_gradients_through_an_ensemble_equal_the_single_runs(kind, changes):
    """d(sum of u**2 + el of member m after 3 steps)/d(member m's initial t):
    equal to the single run's gradient to the last bit, for each member (the
    implicit core's: the members' adjoint solves, too, all at once)."""
    config = small(**changes)
    core = kind(config)
    core.run_initialization()
    ens = Ensemble(core, 2)
    t0 = torch.stack([perturbation(core, m)["t"] for m in range(2)]).requires_grad_(True)
    ens.state["t"], ens.state["tb"] = t0, t0.clone()
    ens.advance(3)
    (ens.state["u"].square().sum() + ens.state["el"].sum()).backward()
    for m in range(2):
        single_core = kind(config)
        single_core.run_initialization()
        t = perturbation(single_core, m)["t"].requires_grad_(True)
        single_core.inject({"t": t, "tb": t.clone()})
        single_core.iend = 3
        single_core.run_time_loop()
        (single_core.u.square().sum() + single_core.el.sum()).backward()
        assert torch.equal(t0.grad[m], t.grad), m


def test_an_ensemble_after_a_forward_only_run_gives_ordinary_snapshots_and_gradients():
    """Stepped in forward_only() (inference mode, as pompy generate steps
    it), an ensemble's snapshots are ordinary tensors, and a gradient run
    from there gives each member's gradient as an ensemble that never ran
    in inference mode does, to the last bit."""
    from pompy.core.model import forward_only

    config = small()

    def ensemble(forward) -> Ensemble:
        core = ExplicitCore(config)
        core.run_initialization()
        ens = Ensemble(core, 2)
        ens.load_member(1, perturbation(core, 1))
        with forward():
            ens.advance(2)
        return ens

    ran, plain = ensemble(forward_only), ensemble(torch.no_grad)
    assert ran.state["t"].is_inference()
    assert not any(v.is_inference() for v in ran.snapshot(1).values() if torch.is_tensor(v))
    grads = []
    for ens in (ran, plain):
        t0 = ens.state["t"].detach().clone().requires_grad_(True)
        ens.state["t"] = t0
        ens.advance(4)
        (ens.state["u"].square().sum() + ens.state["el"].sum()).backward()
        grads.append(t0.grad)
    assert grads[0].abs().max() > 0 and torch.equal(grads[0], grads[1])


def test_a_stop_names_its_member_and_keeps_the_last_good_state():
    config = small(vmaxl=0.5)
    core = ExplicitCore(config)
    core.run_initialization()
    ens = Ensemble(core, MEMBERS)
    # pom2k checks |vaf|: member 1 starts with va = 0.6 m/s
    ens.load_member(1, {"va": core.state["va"] + 0.6 * core.state["dvm"],
                        "vab": core.state["vab"] + 0.6 * core.state["dvm"]})
    start = {n: v.clone() for n, v in ens.state.items()}
    with torch.no_grad(), pytest.raises(CFLViolation) as info:
        ens.advance(3)
    assert info.value.member == 1 and info.value.iint == 1
    assert ens.iint == 0 and all(torch.equal(ens.state[n], start[n]) for n in start)
    assert all(torch.equal(ens.last_good[n], start[n]) for n in start)


def single_stop(config, arrays: dict, steps: int) -> Exception:
    core = ExplicitCore(config)
    core.run_initialization()
    core.inject(arrays)
    core.iend = steps
    with torch.no_grad(), pytest.raises(Exception) as info:
        core.run_time_loop()
    return info.value


def test_a_member_stops_as_its_single_run_does():
    """A NaN in a member's ua: the single run's NonFiniteState (field and
    point), not a velocity stop at a meaningless place (review finding)."""
    config = small()
    core = ExplicitCore(config)
    core.run_initialization()
    ua = core.state["ua"].clone()
    ua[5, 5] = float("nan")
    want = single_stop(config, {"ua": ua}, 3)
    assert isinstance(want, NonFiniteState)
    ens = Ensemble(core, 2)
    ens.load_member(1, {"ua": ua})
    with torch.no_grad(), pytest.raises(NonFiniteState) as info:
        ens.advance(3)
    assert str(info.value) == str(want) and info.value.member == 1


def test_a_member_runs_on_where_its_single_run_does():
    """An inf at the corner (1, 1) of a forcing field, which no step reads:
    the single run goes on (it checks the prognostic fields), so does the
    member, bit for bit."""
    config = small()
    core = ExplicitCore(config)
    core.run_initialization()
    wusurf = core.state["wusurf"].clone()
    wusurf[0, 0] = float("inf")
    ens = Ensemble(core, 2)
    ens.load_member(0, {"wusurf": wusurf})
    with torch.no_grad():
        ens.advance(3)
    single_core = ExplicitCore(config)
    single_core.run_initialization()
    single_core.inject({"wusurf": wusurf})
    single_core.iend = 3
    with torch.no_grad():
        single_core.run_time_loop()
    assert torch.equal(ens.member(0)["u"], single_core.state["u"])


def test_the_core_is_left_as_it_was_and_a_checkpointed_core_is_refused():
    core = ImplicitCore(small())
    core.run_initialization()
    external = core.external
    Ensemble(core, 2).advance(2)
    assert core.external is external and core.external.solver is cg.solve_auto
    checkpointed = ExplicitCore(small(), checkpoint="routines")
    checkpointed.run_initialization()
    with pytest.raises(ValueError, match="checkpoint='routines' cannot run under torch.vmap"):
        Ensemble(checkpointed, 2)


def test_the_grid_is_shared_and_bad_input_is_refused():
    core = ExplicitCore(small())
    with pytest.raises(RuntimeError, match="run_initialization"):
        Ensemble(core, 2)
    core.run_initialization()
    ens = Ensemble(core, 2)
    assert ens.member(1)["h"] is core.state["h"] and ens.state["t"].shape[0] == 2
    with pytest.raises(KeyError, match="grid field"):
        ens.load_member(0, {"h": core.state["h"]})
    with pytest.raises(ValueError, match="members=0"):
        Ensemble(core, 0)


def test_cores_join_as_members_and_each_steps_as_its_own_run():
    """Ensemble.of stacks the cores' states (the trainer's batches): after
    three steps member m is core m's single run to the last bit; cores that
    would not step alike are refused, naming why."""
    from pompy.core.ensemble import mismatch

    config = small()
    cores = []
    for m in range(MEMBERS):
        core = ExplicitCore(config)
        core.run_initialization()
        core.inject(perturbation(core, m))
        cores.append(core)
    ens = Ensemble.of(cores)
    with torch.no_grad():
        ens.advance(3)
    for m in range(MEMBERS):
        want = single(ExplicitCore, config, m, 3)
        for name, value in want.items():
            assert torch.equal(ens.member(m)[name], value), (m, name)
    # start times may differ where no step reads them (no ramp, none cold)
    late = [ExplicitCore(config), ExplicitCore(config)]
    for core, time0 in zip(late, (1.0, 2.5)):
        core.run_initialization()
        core.time0 = time0
    assert mismatch(late) is None
    late[1].time0 = 0.0
    assert "start times" in mismatch(late)
    ramped = [ExplicitCore(small(lramp=True)) for _ in range(2)]
    for core, time0 in zip(ramped, (1.0, 2.5)):
        core.run_initialization()
        core.time0 = time0
    assert "start times" in mismatch(ramped)
    late[1].time0 = 1.0
    late[1].h = late[1].h.clone().requires_grad_(True)     # its own, learned: not shared
    assert "grids differ" in mismatch(late)
    late[0].h = late[1].h                              # one learned h, shared
    assert "learned h" in mismatch(late)
    late[0].h = late[1].h = late[1].h.detach()
    assert mismatch(late) is None
    learned = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    for core in late:                                  # one learned horcon, shared
        core.params = dict(core.params, horcon=learned)
    assert "learned horcon" in mismatch(late)
    implicit = [ImplicitCore(config), ImplicitCore(config)]
    for core in implicit:
        core.run_initialization()
    assert mismatch(implicit) is None
    implicit[1].external = SemiImplicit(lambda a, b, tol, maxiter: cg.solve(a, b, tol, maxiter))
    assert "solver" in mismatch(implicit)           # a solver of its own: not known to batch
    # a wind factor each (float64): each member as its single run with it
    for core, wind in zip(cores, (1.0, 1.3, 0.8)):
        core.run_initialization()
        core.params = dict(core.params, wind_factor=wind)
    windy = Ensemble.of(cores)
    with torch.no_grad():
        windy.advance(3)
    for m, core in enumerate(cores):
        core.iend = 3
        with torch.no_grad():
            core.run_time_loop()
        for name, value in core.state.items():
            assert torch.equal(windy.member(m)[name], value), (m, name)
    cores[1].params = dict(cores[1].params, horcon=0.3)
    with pytest.raises(ValueError, match="parameters differ"):
        Ensemble.of(cores)
    single32 = [ExplicitCore(config, dtype=torch.float32) for _ in range(2)]
    for core, wind in zip(single32, (1.0, 1.3)):
        core.run_initialization()
        core.params = dict(core.params, wind_factor=wind)
    assert "parameters differ" in mismatch(single32)
    assert "checkpointed" in mismatch([ExplicitCore(config, checkpoint="steps")])
    assert mismatch([]) == "no cores"
