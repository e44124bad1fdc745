from pathlib import Path

import pytest

from pompy import cli

SEAMOUNT = str(Path(__file__).parents[1] / "configs" / "seamount.nml")


def test_config_prints_parameters_and_derived(capsys):
    assert cli.main(["config", SEAMOUNT, "--set", "dte=3"]) == 0
    out = capsys.readouterr().out
    assert "dte       = 3.0" in out and "iend      = 24" in out and "kl2       = 19" in out


def test_bad_config_exits_2_with_the_message(capsys):
    assert cli.main(["run", SEAMOUNT, "--set", "dtee=3"]) == 2
    assert capsys.readouterr().err == "pompy: unknown parameter 'dtee'; did you mean 'dte'?\n"


def test_run_passes_config_output_steps_core_device_dtype(monkeypatch, tmp_path):
    import pompy.driver

    calls = []
    monkeypatch.setattr(pompy.driver, "run_case", lambda config, output, **kw: calls.append((config, output, kw)))
    assert cli.main(["run", SEAMOUNT, "--steps", "3", "--output", str(tmp_path), "--core", "oracle"]) == 0
    (config, output, kw), = calls
    assert (config.im, output) == (65, tmp_path)
    assert kw == dict(core="oracle", steps=3, restart=None, device="cpu", dtype="float64",
                      check_cfl=True)
    cli.main(["run", SEAMOUNT, "--dtype", "float32"])
    assert calls[1][1] == Path("output/seamount")
    assert calls[1][2] == dict(core="explicit", steps=None, restart=None, device="cpu", dtype="float32",
                               check_cfl=True)


def test_cfl_violating_dte_needs_the_explicit_override(tmp_path, capsys):
    """The CFL limit is checked on the run's own set-up, before any step."""
    assert cli.main(["run", SEAMOUNT, "--set", "dte=10.5", "--output", str(tmp_path)]) == 2
    assert "breaks the external CFL limit" in capsys.readouterr().err
    assert not (tmp_path / "explicit_output.nc").exists()
    assert cli.main(["run", SEAMOUNT, "--set", "dte=10.5", "--no-cfl-check", "--steps", "1",
                     "--output", str(tmp_path)]) == 0


def test_nread_1_without_a_restart_file_is_an_error(tmp_path, capsys):
    assert cli.main(["run", SEAMOUNT, "--set", "nread=1", "--output", str(tmp_path)]) == 2
    assert "explicit_restart.nc does not exist" in capsys.readouterr().err


def test_setup_without_gfortran_and_root_prints_the_command(monkeypatch, capsys):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    assert cli.main(["setup"]) == 2
    assert capsys.readouterr().out == "sudo apt-get install -y gfortran\n"


def test_steps_must_be_positive():
    with pytest.raises(SystemExit):
        cli.main(["run", SEAMOUNT, "--steps", "0"])
