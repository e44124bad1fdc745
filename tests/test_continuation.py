"""Continued runs: the restart's core, dtype and state parameters checked
against the run continuing it, the stop message's command that continues
the very same run to its end, and what a continued run's length is.

The 8x7x5 seamount (dti 18 s) of test_faults; the oracle's restarts are
made in a fraction of a second.
"""
from __future__ import annotations

import re
import shlex
import signal

import netCDF4
import pytest

from pompy import cli
from pompy.config import RUN_CONTROL, load_config, pom2k_fields
from pompy.io import read_restart
from test_faults import pompy, same_restart, signal_after_progress, tiny_config


@pytest.fixture
def nml(tmp_path):
    return str(tiny_config(tmp_path / "tiny.nml"))


def refusal(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_the_stop_message_continues_the_same_run_to_its_end(tmp_path):
    """SIGTERM a float32 run with a --set and --check-every: the printed
    command, run as printed, continues on the same core, dtype and
    parameters, to the step the run was heading for (no --steps), and
    ends on the uninterrupted run's state to the last bit."""
    nml = tiny_config(tmp_path / "tiny.nml")
    flags = ["--dtype", "float32", "--set", "horcon=0.3", "--check-every", "2"]
    run = pompy("run", nml, "--steps", 200, *flags, "--output", tmp_path / "cut", cwd=tmp_path)
    err = signal_after_progress(run, signal.SIGTERM)
    assert run.returncode == 143, err
    found = re.search(r"pompy: SIGTERM after step iint=(\d+); its restart is in (\S+); "
                      r"continue with: (.*)$", err, re.MULTILINE)
    assert found, err
    done, words = int(found.group(1)), shlex.split(found.group(3))
    assert words[:2] == ["pompy", "run"] and "--steps" not in words
    assert cli.main(words[1:]) == 0
    continued = tmp_path / "cut" / f"explicit_restart_from_{done:06d}.nc"
    assert read_restart(continued).iint == 200
    assert cli.main(["run", str(nml), "--steps", "200", *flags, "--output",
                     str(tmp_path / "whole")]) == 0
    same_restart(continued, tmp_path / "whole" / "explicit_restart.nc")


def test_a_restart_of_another_core_or_dtype_is_refused(nml, tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--core", "oracle", "--steps", "4", "--output", str(out)]) == 0
    restart = out / "oracle_restart.nc"
    capsys.readouterr()
    assert cli.main(["run", nml, "--restart", str(restart), "--output", str(out)]) == 2
    assert refusal(capsys) == (
        f"pompy: restart {restart} was made with other settings than this run's: core: oracle "
        "(restart) -> explicit; continue with the restart's (its namelist is in its `namelist` "
        "attribute), or give --force\n")
    assert cli.main(["run", nml, "--dtype", "float32", "--steps", "2", "--output",
                     str(tmp_path / "f32")]) == 0
    capsys.readouterr()
    assert cli.main(["run", nml, "--restart", str(tmp_path / "f32" / "explicit_restart.nc"),
                     "--output", str(out)]) == 2
    assert "dtype: float32 (restart) -> float64" in refusal(capsys)


def test_a_restart_whose_namelist_is_broken_is_named(nml, tmp_path, capsys):
    """A restart whose `namelist` attribute sets a parameter of the wrong
    type: one line naming the restart, not only the parameter."""
    import netCDF4
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
    restart = out / "explicit_restart.nc"
    with netCDF4.Dataset(restart, "a") as ds:
        ds.namelist = ds.namelist.replace("im = ", "im = 'abc' ! ", 1)
    capsys.readouterr()
    assert cli.main(["run", nml, "--restart", str(restart), "--output", str(tmp_path / "b")]) == 2
    line = refusal(capsys)
    assert line.startswith(f"pompy: restart {restart}: its namelist attribute cannot be read ("), line
    assert "im" in line and line.count("\n") == 1, line


def test_a_restart_with_other_state_parameters_is_refused_unless_forced(nml, tmp_path, capsys):
    """dte (and with it dti: model time would go backwards) and a physics
    constant are named; --force runs, says so, and writes it in the output's
    history; what only governs the run's length, records and stop checks
    may change."""
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--core", "oracle", "--steps", "4", "--output", str(out)]) == 0
    restart = str(out / "oracle_restart.nc")
    capsys.readouterr()
    changed = ["--set", "dte=5", "--set", "horcon=0.3"]
    assert cli.main(["run", nml, "--core", "oracle", *changed, "--restart", restart,
                     "--output", str(out)]) == 2
    assert ": dte: 6.0 (restart) -> 5.0; horcon: 0.2 (restart) -> 0.3; continue" in refusal(capsys)
    assert cli.main(["run", nml, "--core", "oracle", "--set", "vmaxl=50", "--set", "days=1",
                     "--set", "title='again'", "--steps", "2", "--restart", restart,
                     "--output", str(out)]) == 0
    assert cli.main(["run", nml, "--core", "oracle", *changed, "--steps", "2", "--force",
                     "--restart", restart, "--output", str(tmp_path / "forced")]) == 0
    assert "pompy: continued from" in capsys.readouterr().err
    with netCDF4.Dataset(tmp_path / "forced" / "oracle_output_from_000004.nc") as ds:
        assert f"continued from {restart} with --force despite: dte: " in ds.history


def test_the_refusal_names_every_state_parameter(nml, tmp_path, capsys):
    """Each parameter outside RUN_CONTROL is one the restart is checked on."""
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--core", "oracle", "--steps", "2", "--output", str(out)]) == 0
    config = load_config(nml)
    checked = [f.name for f in pom2k_fields() if f.name not in RUN_CONTROL]
    assert {"dte", "isplit", "mode", "im", "grav", "horcon", "wind_factor", "theta"} <= set(checked)
    capsys.readouterr()
    assert cli.main(["run", nml, "--core", "oracle", "--set", "grav=9.81", "--set",
                     "wind_factor=2", "--restart", str(out / "oracle_restart.nc"), "--output",
                     str(out)]) == 2
    err = refusal(capsys)
    assert f"grav: {config.grav} (restart) -> 9.81; wind_factor: 1.0 (restart) -> 2.0" in err, err


def test_the_length_of_a_continued_run(nml, tmp_path, capsys):
    """A stopped run continues to its end; a finished one for the config's
    days more; --steps and --days say otherwise."""
    config = load_config(nml)
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--core", "oracle", "--steps", "3", "--output", str(out)]) == 0
    done = out / "oracle_restart.nc"
    assert read_restart(done).written["run_end_days"] == pytest.approx(3 * 18 / 86400)
    assert cli.main(["run", nml, "--core", "oracle", "--restart", str(done), "--output",
                     str(out)]) == 0
    assert read_restart(out / "oracle_restart_from_000003.nc").iint == 3 + config.iend
    assert cli.main(["run", nml, "--core", "oracle", "--days", repr(5 * 18 / 86400), "--restart",
                     str(done), "--output", str(tmp_path / "days")]) == 0
    assert read_restart(tmp_path / "days" / "oracle_restart_from_000003.nc").iint == 8
    err = capsys.readouterr().err
    assert "pompy: continuing from iint=3 (day 0.0006) to iint=8" in err


def test_a_forced_continuation_with_another_dti_keeps_model_time_going_on(nml, tmp_path,
                                                                          capsys):
    """--force with dte halved: the continued steps' model time goes on
    from the restart's (not back to dti_new * iint), and the output's
    history says time0 moved."""
    out = tmp_path / "o"
    assert cli.main(["run", nml, "--steps", "4", "--output", str(out)]) == 0
    restart = out / "explicit_restart.nc"
    saved = read_restart(restart)
    assert saved.time_days * 86400 == pytest.approx(4 * 18)
    assert cli.main(["run", nml, "--set", "dte=3", "--force", "--steps", "4", "--restart",
                     str(restart), "--output", str(out)]) == 0
    continued = out / "explicit_output_from_000004.nc"
    with netCDF4.Dataset(continued) as ds:
        assert list(ds["iint"][:]) == [8]
        assert ds["time"][-1] * 86400 == pytest.approx(4 * 18 + 4 * 9)
        assert "time0 moved from day 0 to " in ds.history
    assert read_restart(out / "explicit_restart_from_000004.nc").time_days * 86400 == \
        pytest.approx(108)
