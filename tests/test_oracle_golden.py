"""The oracle reproduces real pom2k output for the seamount case.

A cold start of configs/seamount.nml (65x49x21) compared with the golden
states at iint 0 (set-up: depth, seamount, dens, baropg, cbc), 1, 2, 3, 10
and 120, every array of each file. Measured: every model field is equal to
the last bit at every step; only the post-processing coordinates east_e,
north_e, east_u, east_v, north_v differ, by at most 2.2e-16 of their
magnitude (the order of additions in their extrapolated last row). The bar
is pom2k's own build-to-build spread, 1e-12 of each field's max magnitude.
"""
import pytest

from conftest import assert_fields_close, load_golden, require_golden
from pompy.config import load_config
from pompy.oracle.driver import new_state, run_steps

RTOL = 1e-12
STEPS = (0, 1, 2, 3, 10, 120)


@pytest.fixture(scope="module")
def seamount_run(oracle):
    """{iint: state copy} of one oracle run through 120 steps."""
    require_golden()
    from pathlib import Path

    config = load_config(Path(__file__).parents[1] / "configs" / "seamount.nml")
    state, done, states = new_state(config), 0, {}
    for step in STEPS:
        if step > done:
            run_steps(state, config, done + 1, step)
            done = step
        states[step] = {k: v.copy() for k, v in state.items()}
    return config, states


@pytest.mark.parametrize("step", STEPS)
def test_oracle_matches_golden_seamount(seamount_run, step):
    config, states = seamount_run
    golden = load_golden(f"seamount/iint_{step:06d}")
    assert golden.pop("time_days") == pytest.approx(config.dti * step / 86400, rel=1e-15)
    errors = assert_fields_close(states[step], golden, RTOL, label=f"iint={step}")
    coordinates = {"east_c", "north_c", "east_e", "north_e", "east_u", "north_u",
                   "east_v", "north_v"}
    model = {name: e for name, e in errors.items() if name not in coordinates}
    assert max(model.values()) == 0.0, f"model fields not bit-identical: {model}"
