"""The seamount's case parameters (inflow, strat_amplitude,
seamount_height) and `pompy generate --perturb params`: the set-up they
make against pom2k's formulas, each member's recorded values and spin-up
offset reproducing it bit for bit with `pompy run`, the trainer's cores
set up as the member was, the oracle refusing them, and a correction on
both leapfrog levels. An 8x7x5 seamount, dti = 18 s, snapshots every 3 steps."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch

from pompy.cli import main
from pompy.config import CASE_PARAMS, SETUP_PARAMS, load_config
from pompy.core.explicit import ExplicitCore
from pompy.dataset import SnapshotDataset, state_fields
from pompy.settings import TrainSettings, read
from pompy.train.data import Normalizer, apply_correction_to_pom, channel_layout
from pompy.train.physics import PhysicsRunner
from pompy.train import collate_samples

ROOT = Path(__file__).parents[1]
EVERY_STEPS, RECORDS, MEMBERS = 3, 3, 3
EVERY = repr(EVERY_STEPS * 18 / 86400)
DAYS = repr(RECORDS * EVERY_STEPS * 18 / 86400)
SPREAD = repr(2 * EVERY_STEPS * 18 / 86400)      # offsets of 0, 3 or 6 steps


def tiny_config():
    return dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5,
                               kl1=2, kl2=3, isplit=3, ispadv=3)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("params")
    config = folder / "tiny.nml"
    tiny_config().to_namelist().write(config)
    assert main(["generate", str(config), "--days", DAYS, "--every", EVERY, "--output",
                 str(folder / "data"), "--members", str(MEMBERS), "--perturb", "params",
                 "--spinup_spread", SPREAD, "--seed", "3"]) == 0
    return config, folder / "data"


def cases(data: Path) -> list[dict]:
    with netCDF4.Dataset(data / "dataset.nc") as ds:
        return [{**{n: float(ds[n][m]) for n in CASE_PARAMS},
                 "spinup_offset": int(ds["spinup_offset"][m])} for m in range(MEMBERS)]


def test_the_set_up_follows_the_case_parameters():
    """pom2k's seamount formulas with other constants: the inflow uab = 0.3
    where dum = 1, T = 5 + 9 exp(zz h / 1000 m) at wet points, and the
    summit's depth hmax (1 - 0.5) at the centre (r = 0)."""
    config = dataclasses.replace(tiny_config(), im=9, jm=9, inflow=0.3, strat_amplitude=9.0,
                                 seamount_height=0.5)
    core = ExplicitCore(config)
    core.run_initialization()
    s = core.state
    assert torch.equal(s["uab"], 0.3 * s["dum"])
    wet = s["fsm"] == 1
    want = 5.0 + 9.0 * torch.exp(s["zz"][:-1].view(1, 1, -1) * s["h"].unsqueeze(-1) / 1000.0)
    assert torch.allclose(s["tb"][..., :-1][wet], want[wet], rtol=0, atol=1e-12)
    assert math.isclose(float(s["h"][4, 4]), config.hmax * 0.5, rel_tol=1e-12)


def test_params_members_differ_and_record_their_draws(made):
    """Member 0 has the config's values and no offset; the others their own
    draws inside the default ranges and offsets of whole snapshot
    intervals; the members' flows differ by more than a percent."""
    _, data = made
    got = cases(data)
    assert got[0] == {**{n: float(getattr(tiny_config(), n)) for n in CASE_PARAMS},
                      "spinup_offset": 0}
    for case in got[1:]:
        assert 0.1 <= case["inflow"] <= 0.3 and 10 <= case["strat_amplitude"] <= 20
        assert 0.6 <= case["seamount_height"] <= 0.95 and 0 <= case["wind_factor"] <= 2
        assert case["spinup_offset"] in (0, 3, 6)
    with netCDF4.Dataset(data / "dataset.nc") as ds:
        u = np.asarray(ds["u"][:, -1])
    assert all(np.abs(u[m] - u[0]).max() > 0.01 * np.abs(u[0]).max() for m in (1, 2))


def test_each_member_is_a_pompy_run_of_its_recorded_values_bit_for_bit(made, tmp_path):
    """`pompy run --set NAME=VALUE` for each recorded case parameter, for the
    member's last snapshot step (iint + spinup_offset): its restart file
    equals the member's last snapshot, every state field."""
    config, data = made
    with netCDF4.Dataset(data / "dataset.nc") as ds:
        ds.set_auto_mask(False)
        last = int(ds["iint"][-1])
        snaps = {n: np.asarray(ds[n][:, -1]) for n in state_fields()}
    for m, case in enumerate(cases(data)):
        sets = [w for n in CASE_PARAMS for w in ("--set", f"{n}={case[n]!r}")]
        out = tmp_path / str(m)
        assert main(["run", str(config), *sets, "--steps", str(last + case["spinup_offset"]),
                     "--output", str(out)]) == 0
        with netCDF4.Dataset(out / "explicit_restart.nc") as r:
            r.set_auto_mask(False)
            for name in ("u", "ub", "v", "t", "tb", "s", "el", "elb", "ua", "uab", "va",
                         "q2", "km", "uabe", "ele", "tbe"):
                assert np.array_equal(np.asarray(r[name][...]), snaps[name][m]), (m, name)


def test_the_trainers_cores_take_the_members_set_up(made):
    """A PhysicsRunner of the explicit core at the data's own step (the
    reference itself): from each member's first snapshot, one cycle gives
    its next snapshot bit for bit, so its cores run the member's grid and
    forcing, whatever member the core ran before."""
    config, data = made
    ds = SnapshotDataset(data, horizon=1)
    settings = read(TrainSettings, {"config": config, "data": data, "output": "unused",
                                    "core": "explicit"})
    runner = PhysicsRunner(settings.physics, load_config(config), torch.device("cpu"),
                           torch.float64, EVERY_STEPS, pool_size=1)
    per = len(ds) // MEMBERS
    for m in (2, 1, 0, 2):                  # each after another member's grid
        sample = ds[m * per]
        ics, refs = collate_samples(ds, [sample])
        (pom,) = runner.borrow(1)
        runner.start([pom], ics)
        if any(sample[n] != getattr(tiny_config(), n) for n in SETUP_PARAMS):
            assert not torch.equal(pom.state["h"], runner.pool.snapshots[0]["h"])
        runner.cycle([pom])
        for name in refs:
            assert torch.equal(pom.state[name], refs[name][0, 0]), (m, name)
    ds.close()


def test_the_oracle_refuses_a_case_parameter(made, tmp_path, capsys):
    config, _ = made
    assert main(["run", str(config), "--core", "oracle", "--set", "inflow=0.25",
                 "--output", str(tmp_path), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: inflow=0.25: the Fortran oracle has pom2k's seamount "
                          "constant (0.2)") and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--perturb", "params", "--ranges", "inflow=0.3:0.1"], "--ranges inflow=0.3:0.1: "),
    (["--perturb", "params", "--ranges", "hmax=1:2"], "NAME=LOW:HIGH"),
    (["--spinup_spread", "0.01"], "--spinup_spread: only params members"),
    (["--perturb", "params", "--ranges", "seamount_height=1:1.5"], "not a valid case"),
])
def test_bad_ranges_are_one_line(made, tmp_path, capsys, argv, message):
    config, _ = made
    assert main(["generate", str(config), "--days", DAYS, "--every", EVERY, "--output",
                 str(tmp_path / "x"), "--members", "2", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("pompy: ") and message in err[-1], err
    assert not (tmp_path / "x" / "dataset.nc").exists()


def test_a_correction_on_both_levels_keeps_the_leapfrog_pairs_difference(made):
    """correction_form both_levels: each corrected field and its previous
    level move by the same increment (u - ub, t - tb, el - elb, ua - uab
    unchanged to round-off), the state form moves the current level alone."""
    core = ExplicitCore(tiny_config())
    core.run_initialization()
    core.iend = 6
    core.run_time_loop()
    kb = core.config.kb
    layout = channel_layout(kb)
    mask = torch.ones(len(layout), core.config.jm, core.config.im, dtype=torch.float64)
    normalizer = Normalizer(torch.zeros(len(layout), dtype=torch.float64),
                            torch.ones(len(layout), dtype=torch.float64), mask)
    correction = torch.randn(len(layout), core.config.jm, core.config.im, dtype=torch.float64,
                             generator=torch.Generator().manual_seed(0))
    before = {n: core.state[n].clone() for n in core.state}
    pairs = {"u": "ub", "v": "vb", "t": "tb", "s": "sb", "el": "elb", "ua": "uab", "va": "vab"}
    apply_correction_to_pom(core, correction, normalizer, scale_factor=0.01, form="both_levels")
    for now, previous in pairs.items():
        assert not torch.equal(core.state[now], before[now])
        assert torch.allclose(core.state[now] - core.state[previous],
                              before[now] - before[previous], rtol=0, atol=1e-12), now
    core.state = {n: v.clone() for n, v in before.items()}
    apply_correction_to_pom(core, correction, normalizer, scale_factor=0.01, form="state")
    assert torch.equal(core.state["ub"], before["ub"]) and torch.equal(core.state["tb"], before["tb"])
    assert not torch.equal(core.state["u"], before["u"])


@pytest.mark.parametrize("core_name", ["explicit", "implicit"])
def test_the_physics_b_levels_are_the_internal_steps_own(core_name):
    """leapfrog_b_levels from a core's own states at T - 2d, T - d and T
    gives the b levels its internal step kept at T: t, s, q2, q2l, u and v
    to within a small part of the step's change (the unfiltered state at
    T - 2d stands for its filtered one, a difference of smoth/2 of the
    filter's own increment): measured 7e-7 (u) to 1e-2 (s, whose change is
    round-off-sized) of the largest change |X - Xb|; 2e-2 allowed."""
    from pompy import cores
    from pompy.core.stepping import LEAPFROG, leapfrog_b_levels

    config = dataclasses.replace(tiny_config(), lramp=False)
    core = cores.get(core_name).make(config)
    core.run_initialization()
    core.advance(12)
    states = []
    for _ in range(3):
        states.append({n: v.detach().clone() for n, v in core.state.items()})
        core.advance(core.iint + 1)
    states = states[1:] + [{n: v.detach().clone() for n, v in core.state.items()}]
    got = leapfrog_b_levels(*states, core.state["dz"], config.smoth, config.mode)
    now = states[-1]
    for f, fb in LEAPFROG:
        step = (now[f] - now[fb])[..., :-1].abs().max()
        assert step > 0, f
        assert (got[fb] - now[fb])[..., :-1].abs().max() <= 2e-2 * step, fb


def test_corrected_fields_alone_change():
    """--corrected u,t: the correction moves u and t (and, on both levels,
    ub and tb) and nothing else; a name not packed is one line."""
    from pompy.errors import InputError
    from pompy.settings.train import parse_corrected

    core = ExplicitCore(tiny_config())
    core.run_initialization()
    layout = channel_layout(core.config.kb)
    ones = torch.ones(len(layout), dtype=torch.float64)
    normalizer = Normalizer(0 * ones, ones, torch.ones(len(layout), core.config.jm,
                                                       core.config.im, dtype=torch.float64))
    correction = torch.ones(len(layout), core.config.jm, core.config.im, dtype=torch.float64)
    for form, moved in (("state", {"u", "t"}), ("both_levels", {"u", "ub", "t", "tb"})):
        before = {n: v.clone() for n, v in core.state.items()}
        apply_correction_to_pom(core, correction, normalizer, scale_factor=0.01, form=form,
                                fields=parse_corrected("u,t"))
        changed = {n for n in before if not torch.equal(before[n], core.state[n])}
        assert changed == moved, (form, changed)
    assert parse_corrected("") == ("u", "v", "t", "s", "el", "ua", "va", "uab", "vab")
    with pytest.raises(InputError, match=r"^--corrected u,w: NAME,\.\.\. of u, v"):
        parse_corrected("u,w")


def test_pushforward_cycles_are_run_and_left_out(made):
    """run_hybrid with pushforward K: the cycles after the first K of the
    same rollout, to the bit (the physics alone, from a params member)."""
    from pompy.train.physics import run_hybrid

    config, data = made
    ds = SnapshotDataset(data, horizon=3)
    settings = read(TrainSettings, {"config": config, "data": data, "output": "unused"})
    runner = PhysicsRunner(settings.physics, load_config(config), torch.device("cpu"),
                           torch.float64, EVERY_STEPS, pool_size=1)
    ics, _ = collate_samples(ds, [ds[len(ds) - 1]])
    whole = run_hybrid(runner, None, None, runner.borrow(1), ics, 3)
    later = run_hybrid(runner, None, None, runner.borrow(1), ics, 3, pushforward=2)
    for name, value in later.items():
        assert value.shape[1] == 1 and torch.equal(value[:, 0], whole[name][:, 2]), name
    ds.close()
