import subprocess
from pathlib import Path

import pytest

from pompy import __version__, cli
from pompy.config import load_config

SEAMOUNT = str(Path(__file__).parents[1] / "configs" / "seamount.nml")


def test_config_prints_parameters_and_derived(capsys):
    assert cli.main(["config", SEAMOUNT, "--set", "dte=3", "--set", "lramp=.true."]) == 0
    out = capsys.readouterr().out
    assert "    dte           = 3.0 " in out and "!   iend          = 24 " in out
    assert "    kl2           = 19 " in out and "    lramp         = .true. " in out


def test_config_prints_a_namelist_that_reads_back(capsys, tmp_path):
    """`pompy config` prints namelist syntax (.false., quoted strings): saved
    to a file it is the same config, derived values as comments."""
    assert cli.main(["config", SEAMOUNT, "--set", "title=a/b", "--set", "horcon=0.15"]) == 0
    path = tmp_path / "printed.nml"
    path.write_text(capsys.readouterr().out)
    assert load_config(path) == load_config(SEAMOUNT, ["title=a/b", "horcon=0.15"])
    assert "False" not in path.read_text() and ".false." in path.read_text()


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"pompy {__version__}\n"


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
    flags = dict(overwrite=False, force=False, fortran_math=False, oracle=False, check_every=1,
                 compile=False, days=None)
    assert kw == dict(core="oracle", steps=3, restart=None, device="cpu", dtype="float64",
                      check_cfl=True, **flags)
    cli.main(["run", SEAMOUNT, "--dtype", "float32", "--overwrite", "--restart-every", "0.5"])
    assert calls[1][1] == Path("output/seamount")
    assert calls[1][2] == dict(core="explicit", steps=None, restart=None, device="cpu", dtype="float32",
                               check_cfl=True, **dict(flags, overwrite=True))
    assert (calls[0][0].restart_every, calls[1][0].restart_every) == (0.0, 0.5)


def test_cfl_violating_dte_needs_the_explicit_override(tmp_path, capsys):
    """The CFL limit is checked on the run's own set-up, before any step."""
    assert cli.main(["run", SEAMOUNT, "--set", "dte=10.5", "--output", str(tmp_path)]) == 2
    assert "breaks the external CFL limit" in capsys.readouterr().err
    assert not (tmp_path / "explicit_output.nc").exists()
    assert cli.main(["run", SEAMOUNT, "--set", "dte=10.5", "--no-cfl-check", "--steps", "1",
                     "--output", str(tmp_path)]) == 0


def test_nread_1_without_a_restart_file_is_an_error(tmp_path, capsys):
    assert cli.main(["run", SEAMOUNT, "--set", "nread=1", "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"pompy: nread=1: {tmp_path} holds no explicit_restart*.nc "
                                       "to continue from (give --restart FILE)\n")


def test_setup_without_gfortran_and_root_prints_the_command(monkeypatch, capsys):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    assert cli.main(["setup"]) == 2
    assert capsys.readouterr().out == "sudo apt-get install -y gfortran\n"


def test_setup_as_root_installs_gfortran_with_apt_get(monkeypatch, capsys):
    """gfortran missing, as root: apt-get installs it (an update first
    where the lists lack it); where that fails, one line and exit 1."""
    commands, results = [], iter([1, 0, 0, 1, 1, 1])   # install, update, install; then all fail
    monkeypatch.setattr(cli.shutil, "which", lambda name: None if name == "gfortran" else name)
    monkeypatch.setattr(cli.allocator, "tcmalloc_path", lambda: "/usr/lib/libtcmalloc_minimal.so.4")
    monkeypatch.setattr("pompy.oracle.build.build", lambda verbose: Path("/x/o.so"))
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli.subprocess, "run",
                        lambda command, env: commands.append(command)
                        or subprocess.CompletedProcess(command, next(results)))
    assert cli.main(["setup"]) == 0
    install = ["apt-get", "install", "-y", "gfortran"]
    assert commands == [install, ["apt-get", "update"], install]
    capsys.readouterr()
    assert cli.main(["setup"]) == 1
    assert capsys.readouterr().err == "pompy setup: apt-get install -y gfortran failed\n"


def test_setup_installs_tcmalloc_as_root_or_says_how(monkeypatch, capsys):
    """gfortran present, tcmalloc missing: as root, apt-get installs it
    (an update first where the lists lack it); otherwise one line says how,
    and the oracle is built either way."""
    built, commands = [], []
    monkeypatch.setattr(cli.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(cli.allocator, "tcmalloc_path", lambda: None)
    monkeypatch.setattr("pompy.oracle.build.build", lambda verbose: built.append(1) or Path("/x/o.so"))
    results = iter([1, 0, 0])         # install fails, update, install again

    def run(command, env):
        commands.append(command)
        return subprocess.CompletedProcess(command, next(results))
    monkeypatch.setattr(cli.subprocess, "run", run)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    assert cli.main(["setup"]) == 0
    assert commands == [["apt-get", "install", "-y", "libtcmalloc-minimal4"], ["apt-get", "update"],
                        ["apt-get", "install", "-y", "libtcmalloc-minimal4"]]
    assert "installed libtcmalloc-minimal4" in capsys.readouterr().out
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    assert cli.main(["setup"]) == 0 and len(built) == 2 and len(commands) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("sudo apt-get install -y libtcmalloc-minimal4\n")


def test_steps_must_be_positive_and_one_length_given(capsys, tmp_path):
    """Out of range, or --steps with --days: one line, exit 2, nothing run."""
    for extra, told in ((["--steps", "0"], "pompy: --steps 0: must be >= 1\n"),
                        (["--days", "-1"], "pompy: --days -1.0: a number of days > 0\n"),
                        (["--steps", "2", "--days", "1"],
                         "pompy: --steps 2 and --days 1.0: give one\n")):
        assert cli.main(["run", SEAMOUNT, *extra, "--output", str(tmp_path)]) == 2
        assert capsys.readouterr().err == told
    assert not any(tmp_path.iterdir())


def test_compile_is_refused_where_it_cannot_serve(tmp_path, capsys):
    """--compile with the Fortran oracle, or with --fortran-math (whose host
    callbacks run eagerly): one line, exit 2, nothing written."""
    for extra, told in ((["--core", "oracle"], "--compile is for the torch cores"),
                        (["--fortran-math"], "--compile and --fortran-math do not go together")):
        assert cli.main(["run", SEAMOUNT, "--compile", "--steps", "1", "--output", str(tmp_path),
                         *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"pompy: {told}") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def verify_args(monkeypatch, argv: list[str]):
    """The namespace `pompy verify` hands its suites for ``argv``."""
    import pompy.verify

    seen = []
    monkeypatch.setattr(pompy.verify, "run_command", lambda args: seen.append(args) or 0)
    assert cli.main(["verify", *argv]) == 0
    return seen[0]


def test_verify_takes_its_config_as_the_other_subcommands_do(monkeypatch, capsys):
    """`pompy verify CONFIG` as run, generate and report take it; --config,
    the older spelling, still works; two different ones, or none, are one
    line each."""
    assert verify_args(monkeypatch, [SEAMOUNT, "--core", "implicit"]).config == Path(SEAMOUNT)
    assert verify_args(monkeypatch, ["--config", SEAMOUNT]).config == Path(SEAMOUNT)
    assert verify_args(monkeypatch, [SEAMOUNT, "--config", SEAMOUNT]).config == Path(SEAMOUNT)
    assert cli.main(["verify", SEAMOUNT, "--config", "other.nml"]) == 2
    assert capsys.readouterr().err == (f"pompy: pompy verify: two configs, {SEAMOUNT} and --config "
                                       "other.nml; give one\n")
    assert cli.main(["verify"]) == 2
    assert capsys.readouterr().err == ("pompy: pompy verify: give the config to verify on: pompy "
                                       "verify CONFIG.nml\n")


@pytest.mark.parametrize("flag, value, why", [
    ("--seed", "-1", "a seed: an integer 0 .. 2**32-1"),
    ("--seed", "4294967296", "a seed: an integer 0 .. 2**32-1"),
    ("--samples", "0", "must be >= 1"),
    ("--steps", "-3", "must be >= 1")])
def test_verify_checks_every_number_it_takes(capsys, flag, value, why):
    """Out of range: one line from the settings' check, exit 2; not a number
    at all: argparse's usage error, exit 2."""
    assert cli.main(["verify", SEAMOUNT, flag, value]) == 2
    assert capsys.readouterr().err == f"pompy: {flag} {value}: {why}\n"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["verify", SEAMOUNT, flag, "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"pompy verify: error: argument {flag}: invalid int value: 'x'\n" in err and \
        "Traceback" not in err, err


def _shell(command: str, cwd) -> subprocess.CompletedProcess:
    """``command`` in bash, the first process's exit code last on stdout."""
    return subprocess.run(["bash", "-c", command + '; echo "rc ${PIPESTATUS[0]}"'], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})


def test_a_reader_that_leaves_or_a_full_device_costs_messages_not_work(tmp_path):
    """`pompy run ... 2>&1 | head -2`: the run goes on without its progress
    lines, to its output and restart (exit 0); `pompy compare ... | head
    -1` keeps its verdict (exit 1: a difference beyond the tolerance);
    `pompy config > /dev/full`, whose product is what it prints, says in
    one line that it is lost and exits 4."""
    import netCDF4
    pompy = "python3 -m pompy"
    done = _shell(f"{pompy} run {SEAMOUNT} --steps 12 --output out 2>&1 | head -2", tmp_path)
    assert done.stdout.splitlines()[-1] == "rc 0", done
    assert len(done.stdout.splitlines()) == 3
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["explicit_output.nc", "explicit_restart.nc"]
    with netCDF4.Dataset(out / "explicit_restart.nc") as ds:
        assert int(ds.iint) == 12
    other = tmp_path / "other.nc"
    other.write_bytes((out / "explicit_output.nc").read_bytes())
    with netCDF4.Dataset(other, "a") as ds:
        ds["t"][-1] = ds["t"][-1] * 1.001
    done = _shell(f"{pompy} compare out/explicit_output.nc other.nc | head -1", tmp_path)
    assert done.stdout.splitlines()[-1] == "rc 1", done
    done = _shell(f"{pompy} config {SEAMOUNT} > /dev/full", tmp_path)
    assert done.stdout.splitlines()[-1] == "rc 4", done
    assert done.stderr == ("pompy: standard output: no space left on the device; what the "
                           "command printed there is lost\n"), done.stderr


def test_tolerant_streams_drop_what_a_closed_pipe_refuses():
    import os

    from pompy.utils.streams import Tolerant
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as raw:
        stream = Tolerant(raw)
        assert stream.write("x" * 100_000) == 100_000     # buffered, or refused: dropped
        stream.flush()
        assert stream.write("more") == 4
        assert stream.lost == __import__("errno").EPIPE
        stream.flush()
    with pytest.raises(OSError):        # another error is not the reader leaving
        Tolerant(open(os.devnull)).write("read-only")


def test_an_unknown_option_gets_its_commands_usage(capsys):
    """A mistyped option of `pompy run`: exit 2 with run's usage and the
    option named (not pompy's list of commands)."""
    with pytest.raises(SystemExit) as done:
        cli.main(["run", SEAMOUNT, "--stpes", "3"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pompy run ") and err.endswith(
        "pompy run: error: unrecognized arguments: --stpes 3\n"), err
