"""pompy verify on a grid beyond its window (pompy.verify.states.WINDOW):
the routine and section checks draw their states on the window, the
set-ups and the whole run use the whole grid, and two whole steps'
gradients are checked there as directional derivatives (forward mode,
reverse mode and the central difference along random directions), which
still catch a wrong gradient. The window is shrunk to 8 x 7 here so that an
11 x 9 grid is "large" and the checks take seconds."""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
import torch
from core_checks import ten_percent_off, wrong_gradient

from pompy.config import load_config
from pompy.core import stepping
from pompy.verify import gradcheck, states
from pompy.verify import parity as verify_parity

CONFIGS = Path(__file__).parents[1] / "configs"
CPU = torch.device("cpu")


def large():
    """An 11 x 9 x 5 seamount: beyond the 8 x 7 window of these tests."""
    return dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=11, jm=9, kb=5, kl1=2,
                               kl2=3, isplit=3, ispadv=3)


@pytest.fixture
def small_window(monkeypatch):
    monkeypatch.setattr(states, "WINDOW", (8, 7))


def test_the_window_keeps_the_levels_and_parameters():
    config = load_config(CONFIGS / "train_360x240.nml")
    grid = states.window(config)
    assert (grid.im, grid.jm) == states.WINDOW and states.windowed(config)
    assert dataclasses.replace(grid, im=config.im, jm=config.jm) == config
    seamount = load_config(CONFIGS / "seamount.nml")        # pom2k's grid: checked whole
    assert states.window(seamount) is seamount and not states.windowed(seamount)


def test_routines_on_the_window_set_ups_on_the_whole_grid(oracle, small_window, monkeypatch):
    seen = {"routine": set(), "section": set()}

    def watch(kind, fn, at):
        @functools.wraps(fn)
        def watched(*args):
            if "h" in args[at]:                        # depth is given its levels alone
                seen[kind].add(args[at]["h"].shape)
            return fn(*args)
        return watched
    monkeypatch.setattr(verify_parity, "compare_routine",
                        watch("routine", verify_parity.compare_routine, 2))
    monkeypatch.setattr(verify_parity, "compare_section",
                        watch("section", verify_parity.compare_section, 3))
    from pompy.oracle import driver
    setups = []
    new_state = driver.new_state
    monkeypatch.setattr(driver, "new_state",
                        lambda c: setups.append((c.im, c.jm)) or new_state(c))
    checks = verify_parity.parity_suite(large(), "explicit", oracle, CPU, torch.float64, 1, 0,
                                        lambda check: None)
    assert all(c.passed for c in checks), [(c.name, c.detail) for c in checks if not c.passed]
    assert seen == {"routine": {(8, 7)}, "section": {(8, 7)}}
    assert set(setups) == {(11, 9)}


def test_whole_steps_beyond_the_window_as_directional_derivatives(small_window):
    (check,) = gradcheck.whole_steps_gradcheck(large(), "explicit", CPU, 0)
    assert check.passed, check.detail
    inputs = check.measured["inputs"]
    fields = gradcheck.CORE_WRT[gradcheck.SplitExplicit]
    assert set(inputs) == {"all fields 1", "all fields 2", *fields, "horcon"}
    for label, m in inputs.items():
        assert m["gradcheck_mode"] == "directional" and m["gradcheck"] is None, label
        assert m["forward_mode"] <= 1e-10 and m["directional"] <= 1.0, (label, m)
        assert m["numerical"] != 0.0, label          # every direction moves the objective
    assert check.figure == max(m["directional"] for m in inputs.values())


def test_the_directional_whole_steps_catch_a_wrong_gradient(small_window, monkeypatch):
    """advt1 (the new t of the centred scheme) with its forward unchanged and
    its gradient scaled by 1.1: the directions through t and tb fail."""
    wrong = wrong_gradient(stepping.ROUTINES["advt1"], "ff")
    monkeypatch.setitem(stepping.ROUTINES, "advt1", wrong)
    (check,) = gradcheck.whole_steps_gradcheck(large(), "explicit", CPU, 0)
    assert not check.passed and "inputs" in check.measured, check.detail
    failed = {label for label, m in check.measured["inputs"].items() if m["directional"] > 1.0}
    assert {"t", "tb"} <= failed, check.detail
    assert check.figure > 10.0, check.figure


def test_a_branch_within_the_step_is_measured_at_a_finer_one():
    """A kink 5e-7 along the direction: the central difference at 1e-6
    crosses it (off by 25), the one at 1e-7 does not, and agrees with the
    gradient; a gradient 10 % off fails at both steps."""
    from pompy.verify.gradients import GD, directional_checks

    x0 = (torch.tensor([1.0, 2.0], dtype=GD, requires_grad=True),)
    d = (torch.tensor([1.0, 0.5], dtype=GD),)

    def f(x):
        return (x ** 2).sum() + 100.0 * torch.relu(x[0] - 1.0 - 5e-7)
    (m,) = directional_checks(f, x0, {"d": (d, 1e-6)}).values()
    assert m["directional"] <= 1.0 and m["eps"] == 1e-7
    assert abs(m["numerical"] - 4.0) < 1e-6 and abs(m["analytical"] - 4.0) < 1e-12
    assert m["coarse"]["eps"] == 1e-6 and abs(m["coarse"]["numerical"] - 29.0) < 1e-3

    (wrong,) = directional_checks(lambda x: (ten_percent_off(x) ** 2).sum(), x0,
                                  {"d": (d, 1e-6)}).values()
    assert wrong["directional"] > 50 and "coarse" not in wrong and wrong["eps"] == 1e-6
