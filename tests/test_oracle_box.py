"""The box problem conserves heat and salt and rises at the inflow rate.

configs/box.nml: a flat 4500 m basin with walls, uniform T=20, S=35, a
surface inflow vfluxf=-1e-5 m/s (pom2k's sign: negative is into the ocean)
carrying the basin's T and S, and a tilted atmospheric pressure balanced
by the surface. After one day (480 internal steps), measured: mean T and S
change by 9.2e-12 relative (bar 1e-10); the area-mean internal-mode
elevation et has risen by -vfluxf*86400 s to 9.1e-8 relative (bar 1e-6).
The external-mode el leads it by the leapfrog phase (3.7e-5 relative).
"""
from pathlib import Path

import numpy as np
import pytest

from pompy.config import load_config
from pompy.oracle.driver import new_state, run_steps


def volume_mean(state, name):
    fsm, art, dz = state["fsm"], state["art"], state["dz"][:-1]
    volume = dz[None, None, :] * (state["dt"] * art * fsm)[:, :, None]
    return float((state[name][:, :, :-1] * volume).sum() / volume.sum())


def area_mean(state, name):
    weight = state["art"] * state["fsm"]
    return float((state[name] * weight).sum() / weight.sum())


@pytest.fixture(scope="module")
def box_day(oracle):
    config = load_config(Path(__file__).parents[1] / "configs" / "box.nml")
    state = new_state(config)
    before = {k: v.copy() for k, v in state.items()}
    run_steps(state, config, 1, config.iend)
    return config, before, state


def test_box_conserves_temperature_and_salinity(box_day):
    _, before, after = box_day
    for name in ("t", "s"):
        t0, t1 = volume_mean(before, name), volume_mean(after, name)
        assert abs(t1 - t0) / abs(t0) < 1e-10, f"{name}: {t0} -> {t1}"


def test_box_surface_rises_at_inflow_rate(box_day):
    config, before, after = box_day
    wet = before["fsm"] > 0
    vfluxf = np.unique(after["vfluxf"][wet])
    assert vfluxf.size == 1 and vfluxf[0] < 0, "box inflow must be uniform and inflowing"
    elapsed = config.iend * config.dti
    expected = -vfluxf[0] * elapsed
    rise = area_mean(after, "et") - area_mean(before, "et")
    assert rise == pytest.approx(expected, rel=1e-6)


def test_box_stays_at_rest(box_day):
    """The pressure tilt is balanced, so nothing but rounding moves."""
    _, _, after = box_day
    assert np.abs(after["u"]).max() < 1e-10 and np.abs(after["v"]).max() < 1e-10
