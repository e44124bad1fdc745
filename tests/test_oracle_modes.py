"""Oracle modes and options beyond the golden run, checked against what
pom2k's algorithm implies: mode 2 (external only) leaves every 3-D field
as it was; mode 4 (prognostic momentum, diagnostic T and S) never changes
T and S; nadv=2 (Smolarkiewicz) runs and keeps T within its initial range;
slpmax limits the slope parameter to slmax."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pompy.config import load_config
from pompy.oracle.driver import new_state, run_steps

SEAMOUNT = Path(__file__).parents[1] / "configs" / "seamount.nml"


@pytest.fixture(scope="module")
def small_seamount():
    config = load_config(SEAMOUNT)
    return dataclasses.replace(config, im=24, jm=18, kb=11, kl2=9)


def _run(config, steps):
    state = new_state(config)
    before = {k: v.copy() for k, v in state.items()}
    run_steps(state, config, 1, steps)
    return before, state


def test_mode2_moves_only_the_external_mode(oracle, small_seamount):
    before, after = _run(dataclasses.replace(small_seamount, mode=2), 24)
    for name in ("u", "v", "t", "s", "q2", "km", "w"):
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert not np.array_equal(after["ua"], before["ua"])
    assert np.abs(after["wubot"]).max() > 0, "mode 2 computes bottom stress in advave"
    assert np.isfinite(after["el"]).all()


def test_mode4_keeps_temperature_and_salinity(oracle, small_seamount):
    before, after = _run(dataclasses.replace(small_seamount, mode=4), 24)
    for name in ("t", "s", "tb", "sb", "rho"):
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert not np.array_equal(after["u"], before["u"])


def test_smolarkiewicz_run_stays_within_initial_range(oracle, small_seamount):
    before, after = _run(dataclasses.replace(small_seamount, nadv=2), 48)
    wet = np.broadcast_to(before["fsm"][:, :, None] > 0, before["t"].shape).copy()
    wet[:, :, -1] = False
    t0, t1 = before["t"][wet], after["t"][wet]
    assert np.isfinite(t1).all()
    assert t1.min() > t0.min() - 1e-3 and t1.max() < t0.max() + 1e-3
    assert not np.array_equal(t1, t0)


def test_slpmax_limits_the_slope_parameter(oracle):
    im, jm = 8, 6
    rng = np.random.default_rng(3)
    h = rng.uniform(10.0, 4000.0, (im, jm))
    fsm = np.ones((im, jm))
    out = oracle.call("slpmax", {"h": h, "fsm": fsm}, {"slmax": 0.2})["h"]
    inner = out[1:-1, 1:-1]
    sx = np.abs(np.diff(inner, axis=0)) / (inner[1:] + inner[:-1])
    sy = np.abs(np.diff(inner, axis=1)) / (inner[:, 1:] + inner[:, :-1])
    assert max(sx.max(), sy.max()) <= 0.2 + 1e-12
    assert max(sx.max(), sy.max()) > 0.19        # limited, not flattened
    np.testing.assert_array_equal(out[0], h[0])  # edge rows i=1 untouched

