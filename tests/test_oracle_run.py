"""Whole runs through the oracle: command line, NetCDF output, restarts and
the velocity check."""
from pathlib import Path

import numpy as np
import pytest

from pompy import variables
from pompy.cli import main
from pompy.config import load_config
from pompy.io import read_restart, write_restart
from pompy.oracle.driver import new_state, run_steps
from pompy.errors import CFLViolation

CONFIGS = Path(__file__).parents[1] / "configs"


def test_pompy_run_writes_cf_netcdf_readable_by_xarray(oracle, tmp_path):
    xr = pytest.importorskip("xarray")
    assert main(["run", str(CONFIGS / "seamount.nml"), "--core", "oracle",
                 "--output", str(tmp_path)]) == 0
    ds = xr.open_dataset(tmp_path / "oracle_output.nc")
    assert list(ds["iint"].values) == [6, 12]           # iprint=6 and the last step
    assert ds["t"].dims == ("time", "sigma", "y", "x") and ds["t"].shape == (2, 21, 49, 65)
    assert ds["q2"].dims == ("time", "sigma_w", "y", "x")
    assert ds["el"].dims == ("time", "y", "x") and ds["el"].attrs["units"] == "m"
    assert ds["u"].attrs["units"] == "m s-1" and "x velocity" in ds["u"].attrs["long_name"]
    assert set(variables.names(kind="prognostic", output=True)) <= set(ds.data_vars)
    restart, iint, _, _ = read_restart(tmp_path / "oracle_restart.nc")
    assert iint == 12             # the output's last record is the restart state
    np.testing.assert_array_equal(ds["t"].values[-1].T, restart["t"])


def test_restart_continues_bit_for_bit(oracle, tmp_path):
    config = load_config(CONFIGS / "seamount.nml")
    whole = new_state(config)
    run_steps(whole, config, 1, 6)
    part = new_state(config)
    run_steps(part, config, 1, 3)
    path = write_restart(tmp_path / "r.nc", config, part, 3, config.dti * 3 / 86400)
    saved, iint, _, _ = read_restart(path)
    resumed = new_state(config)       # fresh set-up, work arrays from scratch
    resumed.update(saved)
    run_steps(resumed, config, iint + 1, 6)
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)


def test_cli_restart_continues_the_run(oracle, tmp_path):
    first, second, whole = tmp_path / "a", tmp_path / "b", tmp_path / "w"
    nml = str(CONFIGS / "seamount.nml")
    assert main(["run", nml, "--core", "oracle", "--steps", "4", "--output", str(whole)]) == 0
    assert main(["run", nml, "--core", "oracle", "--steps", "2", "--output", str(first)]) == 0
    assert main(["run", nml, "--core", "oracle", "--steps", "2", "--output", str(second),
                 "--restart", str(first / "oracle_restart.nc")]) == 0
    a, ia, _, _ = read_restart(second / "oracle_restart_from_000002.nc")
    b, ib, _, _ = read_restart(whole / "oracle_restart.nc")
    assert ia == ib == 4
    for name in ("el", "u", "t", "q2l", "km"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


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
    assert "iint=1" in str(err) and "vaf" in str(err) and f"({i + 1}, {j + 1})" in str(err)


def test_blow_up_stops_and_keeps_the_last_good_state(oracle, tmp_path, monkeypatch):
    """A dte past the CFL limit, let through by an explicit override of the
    check, blows up; the run stops naming step, field and place and leaves a
    restart of the last good step."""
    import dataclasses

    from pompy.oracle.driver import OracleModel
    from pompy.driver import run_case

    monkeypatch.setattr(OracleModel, "chunk", 5)
    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), dte=10.5, days=1.0)
    with pytest.raises(CFLViolation) as info:
        run_case(config, tmp_path, core="oracle", steps=200, progress=False)
    err = info.value
    assert err.iint == 7          # measured: dte=10.5 s (limit 7.23 s) fails at step 7,
    #                               inside the second chunk, so the last good step is recomputed
    assert err.restart == tmp_path / "oracle_restart.nc" and "last good state" in str(err)
    saved, iint, _, _ = read_restart(err.restart)
    assert iint == err.iint - 1
    assert np.isfinite(saved["el"]).all() and np.abs(saved["vab"]).max() <= config.vmaxl
    straight = new_state(config)              # the same steps in one go
    run_steps(straight, config, 1, iint)
    for name in ("el", "ua", "u", "t", "q2"):
        np.testing.assert_array_equal(saved[name], straight[name], err_msg=name)
