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


def test_run_passes_config_output_and_steps(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setitem(cli.CORES, "oracle", lambda *args: calls.append(args))
    assert cli.main(["run", SEAMOUNT, "--steps", "3", "--output", str(tmp_path)]) == 0
    (config, output, steps, restart), = calls
    assert (config.im, output, steps, restart) == (65, tmp_path, 3, None)
    cli.main(["run", SEAMOUNT])
    assert calls[1][1:] == (Path("output/seamount"), None, None)


def test_setup_without_gfortran_and_root_prints_the_command(monkeypatch, capsys):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    assert cli.main(["setup"]) == 2
    assert capsys.readouterr().out == "sudo apt-get install -y gfortran\n"


def test_steps_must_be_positive():
    with pytest.raises(SystemExit):
        cli.main(["run", SEAMOUNT, "--steps", "0"])
