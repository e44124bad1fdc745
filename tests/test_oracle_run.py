"""Whole runs through the oracle: the command line and the velocity check."""
from pathlib import Path

import numpy as np
import pytest

from conftest import load_golden
from pompy.cli import main
from pompy.config import load_config
from pompy.oracle.run import CFLViolation, new_state, run_steps

CONFIGS = Path(__file__).parents[1] / "configs"


def test_pompy_run_oracle_writes_the_golden_state(oracle, tmp_path):
    assert main(["run", str(CONFIGS / "seamount.nml"), "--core", "oracle",
                 "--steps", "2", "--output", str(tmp_path)]) == 0
    written = np.load(tmp_path / "oracle_iint_000002.npz")
    golden = load_golden("seamount/iint_000002")
    for name in ("el", "ua", "u", "t", "q2", "km"):
        np.testing.assert_array_equal(written[name], golden[name], err_msg=name)


def test_velocity_check_names_step_field_and_location(oracle):
    config = load_config(CONFIGS / "seamount.nml")
    state = new_state(config)
    state["va"][30, 20] = 400.0      # far beyond vmaxl=100
    with pytest.raises(CFLViolation) as info:
        run_steps(state, config, 1, 5)
    err = info.value
    assert err.iint == 1 and err.vamax > config.vmaxl
    i, j = np.unravel_index(np.abs(state["vaf"]).argmax(), state["vaf"].shape)
    assert (err.imax, err.jmax) == (i + 1, j + 1)
    assert f"iint=1" in str(err) and "vaf" in str(err) and f"({i + 1}, {j + 1})" in str(err)
