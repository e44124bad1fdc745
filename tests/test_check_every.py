"""Deferred stop checks (Core.check_every, `pompy run --check-every N`).

With check_every = N a core reads its velocity, solver and finiteness
checks from the device once every N steps instead of twice a step; a
block that failed runs again from its start, checked step by step. The
blow-up's stop and last good state are checked against the Fortran
oracle (with pom2k's elementary functions); elsewhere the reference is
the same core checked every step (pom2k's way, itself checked against the
oracle in test_explicit_core.py): states, stops (step, place, vamax) and
last good states must be the same bits.
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from pompy import cli, variables
from pompy.compat import fortran_math
from pompy.config import load_config
from pompy.core.ensemble import Ensemble
from pompy.core.explicit import ExplicitCore
from pompy.core.implicit import ImplicitCore
from pompy.errors import CFLViolation, NonFiniteState
from pompy.core.model import to_numpy
from pompy.io import read_restart
from pompy.oracle.driver import new_state, run_steps

CONFIGS = Path(__file__).parents[1] / "configs"
# what reads a tensor's value into Python
READS = {"__bool__", "__float__", "__int__", "__index__", "item", "tolist", "numpy"}


def small_seamount(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=21, jm=17, kb=11, kl2=9), **changes})


def blowing_box():
    """dte = 20 s is past the box's external CFL limit: a stop at step 6."""
    return dataclasses.replace(load_config(CONFIGS / "box.nml"), dte=20.0, days=10.0)


class HostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in READS:
            self.count[func.__name__] += 1
        return func(*args, **(kwargs or {}))


def run(kind, config, steps: int, every: int, start: int = 0):
    core = kind(config, check_every=every)
    core.run_initialization()
    core.iend = start
    core.run_time_loop()
    core.iend = steps
    with HostReads() as reads:
        core.run_time_loop()
    return core, sum(reads.count.values())


@pytest.mark.parametrize("kind", [ExplicitCore, ImplicitCore])
def test_the_states_are_those_checked_every_step_with_one_read_a_block(kind):
    config = small_seamount()
    checked, per_step = run(kind, config, 11, 1, start=3)
    deferred, per_block = run(kind, config, 11, 4, start=3)
    for name in variables.ALL:
        assert torch.equal(deferred.state[name], checked.state[name]), name
    assert deferred.iint == checked.iint == 11 and deferred.vamax == checked.vamax
    assert deferred.time == checked.time
    # measured: checked every step, two reads a step (the explicit core's
    # vamax and finiteness; the implicit core also its PCG's early exits);
    # deferred, the explicit core reads once per block of 4 (steps 4..11: 2)
    assert per_step >= 2 * 8
    if kind is ExplicitCore:
        assert per_block == 2


def core_at(config, every: int, steps: int = 0) -> ExplicitCore:
    """An explicit core with check_every ``every``, set up and stepped ``steps``."""
    core = ExplicitCore(config, check_every=every)
    core.run_initialization()
    if steps:                   # else its first run may be on the generation fast path
        core.iend = steps
        core.run_time_loop()
    return core


@pytest.mark.parametrize("every", [2, 4, 7])
def test_a_deferred_stop_is_the_oracles_first_bad_step_with_its_last_good_state(oracle, every):
    """As test_explicit_core's blow-up, against the Fortran: from the
    oracle's set-up, with pom2k's elementary functions, the stop is the
    oracle's (step 6, place, vamax) and the last good state is the
    oracle's step 5 to the last bit, whichever block the stop falls in."""
    config = blowing_box()
    with pytest.raises(CFLViolation) as want:
        run_steps(new_state(config), config, 1, 50)
    core = core_at(config, every)
    with fortran_math():
        core.load_state(core.numpy_state() | new_state(config), iint=0)
        core.iend = 50
        with pytest.raises(CFLViolation) as info:
            core.run_time_loop()
    err = info.value
    assert (err.iint, err.imax, err.jmax, err.vamax) == \
        (want.value.iint, want.value.imax, want.value.jmax, want.value.vamax)
    assert err.iint == 6 and core.iint == 6
    straight = new_state(config)
    run_steps(straight, config, 1, 5)
    good = {n: np.asarray(v) for n, v in to_numpy(core.last_good).items()}
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(good[name], straight[name], err_msg=name)


def test_a_nan_mid_block_stops_at_its_step():
    """A NaN put into t after step 4: the stop at step 5 with the field and
    point of a core checked every step, and its last good state."""
    stops = []
    for every in (1, 3):
        core = core_at(small_seamount(), every, 4)
        t = core.t.clone()
        t[9, 7, 3] = float("nan")
        core.t = t
        core.iend = 12
        with pytest.raises(NonFiniteState) as info:
            core.run_time_loop()
        stops.append((info.value, core))
    (want, checked), (err, core) = stops
    assert (err.iint, err.field, err.where) == (want.iint, want.field, want.where)
    assert err.iint == 5
    for name in variables.ALL:      # t holds the NaN: equal, NaN where NaN
        torch.testing.assert_close(core.last_good[name], checked.last_good[name], rtol=0, atol=0,
                                   equal_nan=True, msg=name)


def test_generation_keeps_one_snapshot_per_capture_step():
    config = small_seamount()
    runs = [core_at(config, every).run_generation_day(steps_per_day=8, capture_interval=2)
            for every in (1, 3)]
    (want, got) = runs
    assert [r["iint"] for r in got] == [r["iint"] for r in want] == [2, 4, 6, 8]
    for a, b in zip(got, want):
        assert all(torch.equal(a[n], b[n]) for n in a if torch.is_tensor(a[n]))


def test_a_failed_block_leaves_no_snapshot_twice():
    core = core_at(blowing_box(), 4)
    with pytest.raises(CFLViolation):
        core.run_generation_day(steps_per_day=50, capture_interval=1)
    assert [r["iint"] for r in core.generation_records] == [1, 2, 3, 4, 5]


def test_an_ensemble_checks_every_n_steps_and_stops_as_step_by_step():
    config = blowing_box()
    results = []
    for every in (1, 4):
        core = ExplicitCore(config, check_every=every)
        core.run_initialization()
        ens = Ensemble(core, 2)
        ens.load_member(1, {"el": core.state["el"] + 0.01 * core.state["fsm"],
                            "elb": core.state["elb"] + 0.01 * core.state["fsm"]})
        seen = []
        with torch.no_grad(), pytest.raises(CFLViolation) as info:
            ens.advance(12, lambda iint, vamax: seen.append(iint))
        results.append((info.value, ens, seen))
    (want, checked, seen1), (err, ens, seen4) = results
    assert (err.member, err.iint, err.imax, err.jmax, err.vamax) == \
        (want.member, want.iint, want.imax, want.jmax, want.vamax)
    assert err.iint > 4                 # in the second block: the first passed
    assert ens.iint == checked.iint == err.iint - 1
    assert seen1 == list(range(1, err.iint)) and seen4 == [4]
    for name in ens.state:
        assert torch.equal(ens.state[name], checked.state[name]), name
        assert torch.equal(ens.last_good[name], checked.last_good[name]), name


@pytest.mark.parametrize("every", [0, 1.5, True, "2"])
def test_check_every_is_a_whole_number_from_one(every):
    with pytest.raises(ValueError, match="check_every"):
        ExplicitCore(small_seamount(), check_every=every)


def test_pompy_run_check_every(tmp_path, capsys):
    nml = str(CONFIGS / "box.nml")
    for name, every in (("a", "1"), ("b", "4")):
        code = cli.main(["run", nml, "--set", "dte=20.0", "--steps", "50", "--check-every", every,
                         "--no-cfl-check", "--output", str(tmp_path / name)])
        assert code == 3
        assert "iint=6" in capsys.readouterr().err
    a, iint_a, _, _ = read_restart(tmp_path / "a" / "explicit_restart.nc")
    b, iint_b, _, _ = read_restart(tmp_path / "b" / "explicit_restart.nc")
    assert iint_a == iint_b == 5
    assert all((a[n] == b[n]).all() for n in a)
    assert cli.main(["run", nml, "--check-every", "0", "--output", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err == "pompy: --check-every 0: must be >= 1\n"
    assert cli.main(["run", nml, "--core", "oracle", "--check-every", "2",
                     "--output", str(tmp_path / "d")]) == 2
    assert "pompy: --check-every is for the torch cores" in capsys.readouterr().err
