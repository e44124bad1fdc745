"""Nothing lost, nothing silent: signals, periodic restarts,
refused overwrites, memory and device checks, output folders, exit codes,
progress lines in logs, --fortran-math. Each test makes the fault or feeds
the bad input, then checks the exit status, the message and that no
earlier file changed.

Signals go to a real `python -m pompy run` process (its own process
group, 127.0.0.1 nowhere involved); each run is a few seconds on the 8x7x5
seamount.
"""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from pompy import cli, variables
from pompy.config import load_config
from pompy.driver import latest_restart
from pompy.io import read_restart

CONFIGS = Path(__file__).parents[1] / "configs"
ROOT = Path(__file__).parents[1]


def tiny_config(path: Path, **changes) -> Path:
    """The 8x7x5 seamount (dti = 18 s) as a namelist file."""
    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                                 kl2=3, isplit=3, ispadv=3, **changes)
    config.to_namelist().write(path, force=True)
    return path


def pompy(*args, cwd: Path, **popen) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "pompy", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def signal_after_progress(process: subprocess.Popen, signum: int, lines: int = 1) -> str:
    """Send SIGNUM once the run has printed LINES progress lines; returns
    everything it wrote to stderr."""
    seen, err = 0, []
    while seen < lines:
        line = process.stderr.readline()
        assert line, "the run ended before it printed progress: " + "".join(err)
        err.append(line)
        seen += "% (" not in line and bool(re.search(r"step \d+ \(\d+%\)", line))
    process.send_signal(signum)
    out, rest = process.communicate(timeout=120)
    return "".join(err) + rest


def same_restart(a: Path, b: Path) -> None:
    sa, sb = read_restart(a), read_restart(b)
    assert sa.iint == sb.iint
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(sa.state[name], sb.state[name], err_msg=name)


# ----------------------------------------------------------------- signals

def test_sigint_writes_the_restart_and_the_run_continues_bit_for_bit(tmp_path):
    """Ctrl-C: the step in progress finishes, its restart is written, the
    message says where, exit 130; continuing from it gives the
    uninterrupted run's final state to the last bit."""
    nml = tiny_config(tmp_path / "tiny.nml")
    total = 60
    run = pompy("run", nml, "--steps", total, "--output", tmp_path / "cut", cwd=tmp_path)
    err = signal_after_progress(run, signal.SIGINT)
    assert run.returncode == 130, err
    found = re.search(r"pompy: SIGINT after step iint=(\d+); its restart is in (\S+);", err)
    assert found and "Traceback" not in err, err
    done, restart = int(found.group(1)), Path(found.group(2))
    assert restart == tmp_path / "cut" / "explicit_restart.nc" and 0 < done < total
    assert read_restart(restart).iint == done
    with netCDF4.Dataset(tmp_path / "cut" / "explicit_output.nc") as ds:   # closed cleanly
        assert all(i <= done for i in ds["iint"][:])
    assert cli.main(["run", str(nml), "--steps", str(total - done), "--restart", str(restart),
                     "--output", str(tmp_path / "cut")]) == 0
    assert cli.main(["run", str(nml), "--steps", str(total), "--output",
                     str(tmp_path / "whole")]) == 0
    same_restart(tmp_path / "cut" / f"explicit_restart_from_{done:06d}.nc",
                 tmp_path / "whole" / "explicit_restart.nc")


def test_sigterm_exits_143_with_the_restart(tmp_path):
    nml = tiny_config(tmp_path / "tiny.nml")
    run = pompy("run", nml, "--steps", 60, "--output", tmp_path / "out", cwd=tmp_path)
    err = signal_after_progress(run, signal.SIGTERM)
    assert run.returncode == 143 and "pompy: SIGTERM after step iint=" in err, err
    assert read_restart(tmp_path / "out" / "explicit_restart.nc").iint > 0


def test_periodic_restarts_leave_something_after_sigkill(tmp_path):
    """--restart-every: a run killed outright (SIGKILL, nothing caught)
    leaves the restart of the last whole interval, readable and valid."""
    nml = tiny_config(tmp_path / "tiny.nml")
    every = 5 * 18 / 86400                               # 5 steps of 18 s
    run = pompy("run", nml, "--steps", 200, "--restart-every", repr(every), "--output",
                tmp_path / "out", cwd=tmp_path)
    signal_after_progress(run, signal.SIGKILL, lines=3)   # 15 % of 200: past step 10
    assert run.returncode == -signal.SIGKILL
    saved = read_restart(tmp_path / "out" / "explicit_restart.nc")
    assert saved.iint >= 10 and saved.iint % 5 == 0
    # a kill in the middle of a restart's write leaves its .tmp (nothing can
    # remove it), never in the restart's place: nread = 1 finds the restart
    assert latest_restart(tmp_path / "out", "explicit") == tmp_path / "out" / "explicit_restart.nc"


# ----------------------------------------------------------------- nothing overwritten

def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_second_run_into_a_folder_is_refused_without_overwrite(tmp_path, capsys):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    out = tmp_path / "out"
    assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert cli.main(["run", nml, "--steps", "3", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"pompy: {out} already holds explicit_output.nc, explicit_restart.nc (from an earlier "
        "run); give --overwrite to replace them, or another --output\n")
    assert snapshot(out) == before
    assert cli.main(["run", nml, "--steps", "3", "--output", str(out), "--overwrite"]) == 0
    assert read_restart(out / "explicit_restart.nc").iint == 3


def test_the_restart_continued_from_is_never_overwritten(tmp_path):
    """Not even with --overwrite: the continuation writes _from_<N> files."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    out = tmp_path / "out"
    assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
    before = snapshot(out)
    restart = str(out / "explicit_restart.nc")
    for _ in range(2):
        assert cli.main(["run", nml, "--steps", "2", "--output", str(out), "--restart", restart,
                         "--overwrite"]) == 0
    after = snapshot(out)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"explicit_output_from_000002.nc",
                                        "explicit_restart_from_000002.nc"}


def test_a_restart_that_is_the_runs_own_file_is_refused(tmp_path, capsys):
    """A run that stopped at its first step left explicit_restart.nc at
    iint 0; continuing from it into the same folder would write that very
    file: refused, even with --overwrite, and the file is unchanged."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    out = tmp_path / "out"
    assert cli.main(["run", nml, "--set", "vmaxl=1e-9", "--output", str(out)]) == 3
    restart = out / "explicit_restart.nc"
    before = restart.read_bytes()
    capsys.readouterr()
    assert cli.main(["run", nml, "--restart", str(restart), "--output", str(out),
                     "--overwrite"]) == 2
    assert capsys.readouterr().err == (
        f"pompy: the restart to continue from, {restart}, is a file this run would write (it "
        "continues from its own step); give another --output\n")
    assert restart.read_bytes() == before


# ----------------------------------------------------------------- memory, device, folders

def test_a_run_too_big_for_memory_is_refused_before_allocating(tmp_path, capsys):
    """A 5000x5000 box: the estimate is refused against what is available,
    with both numbers; the process never grew past a few hundred MB."""
    nml = tmp_path / "big.nml"
    config = dataclasses.replace(load_config(CONFIGS / "box.nml"), im=5000, jm=5000)
    config.to_namelist().write(nml)
    run = pompy("run", nml, "--output", tmp_path / "out", cwd=tmp_path)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 2, err
    found = re.fullmatch(r"pompy: a 5000x5000x11 run of the explicit core in float64 needs about "
                         r"([\d.]+) GB of memory and ([\d.]+) GB is available; give --force to run "
                         r"it anyway\n", err)
    assert found and float(found.group(1)) > float(found.group(2)), err
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 2_000_000   # kB
    assert not (tmp_path / "out" / "explicit_output.nc").exists()
    # `pompy config` reads the config only, allocating nothing
    shown = pompy("config", nml, cwd=tmp_path)
    out, _ = shown.communicate(timeout=120)
    assert shown.returncode == 0 and "im            = 5000" in out
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 2_000_000


def test_the_memory_check_uses_what_is_available(tmp_path, capsys, monkeypatch):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    monkeypatch.setenv("POMPY_MEMORY_AVAILABLE", "1e8")          # 100 MB
    assert cli.main(["run", nml, "--steps", "1", "--output", str(tmp_path / "a")]) == 2
    assert "GB is available; give --force" in capsys.readouterr().err
    assert cli.main(["run", nml, "--steps", "1", "--output", str(tmp_path / "a"), "--force"]) == 0


@pytest.mark.parametrize("args, message", [
    (["--device", "foo"], "pompy: --device foo: not a torch device (cpu, cuda, cuda:N)\n"),
    (["--device", "meta"], "pompy: --device meta: pompy runs on cpu or cuda\n"),
    (["--core", "oracle", "--dtype", "float32"],
     "pompy: the oracle runs on the CPU in float64 only (got --device cpu --dtype float32)\n"),
    (["--fortran-math", "--dtype", "float32"],
     "pompy: --fortran-math runs on the CPU in float64 only (got --device cpu --dtype float32)\n"),
])
def test_bad_device_or_dtype_is_one_line(tmp_path, capsys, args, message):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["run", nml, "--output", str(tmp_path / "o"), *args]) == 2
    assert capsys.readouterr().err == message
    assert not (tmp_path / "o").exists()


def test_cuda_without_a_device_is_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["run", nml, "--device", "cuda"]) == 2
    assert capsys.readouterr().err == "pompy: --device cuda: this torch has no CUDA device\n"


def test_output_folder_that_cannot_be_used(tmp_path, capsys):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the folder should be")
    assert cli.main(["run", nml, "--output", str(blocker)]) == 2
    assert capsys.readouterr().err == (f"pompy: output folder {blocker} is a file; give another "
                                       "--output\n")
    assert cli.main(["run", nml, "--output", str(blocker / "sub")]) == 2
    assert capsys.readouterr().err == (f"pompy: output folder {blocker / 'sub'} ({blocker} is a "
                                       "file); give another --output\n")
    assert blocker.read_text() == "a file where the folder should be"
    assert cli.main(["run", nml, "--output", "/proc/pompy-output"]) == 4      # the machine's
    assert capsys.readouterr().err.startswith("pompy: /proc/pompy-output: ")


def test_a_bad_restart_file_is_one_line(tmp_path, capsys):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    junk = tmp_path / "junk.nc"
    junk.write_text("not a netcdf file")
    assert cli.main(["run", nml, "--restart", str(junk), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pompy: restart file {junk}") and err.count("\n") == 1, err


# ----------------------------------------------------------------- exit codes

def test_a_bug_prints_its_traceback_and_asks_for_a_report(tmp_path, capsys, monkeypatch):
    import pompy.driver

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(pompy.driver, "run_case", broken)
    assert cli.main(["run", str(tiny_config(tmp_path / "tiny.nml"))]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err
    assert err.endswith(cli.BUG_REPORT + "\n")


def test_compare_exit_codes(tmp_path, capsys):
    """0 within tolerance, 1 beyond it, 2 for bad input (one line)."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    for name, dte in (("a", "6.0"), ("b", "6.0"), ("c", "5.0")):
        assert cli.main(["run", nml, "--steps", "2", "--set", f"dte={dte}", "--output",
                         str(tmp_path / name)]) == 0
    a, b, c = (str(tmp_path / n / "explicit_output.nc") for n in "abc")
    capsys.readouterr()
    assert cli.main(["compare", a, b]) == 0
    assert cli.main(["compare", a, c]) == 1
    capsys.readouterr()
    assert cli.main(["compare", a, b, "--tolerance", "nan"]) == 2
    assert capsys.readouterr().err.startswith("pompy: --tolerance nan")
    assert cli.main(["compare", a, nml]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: ") and nml in err and err.count("\n") == 1


# ----------------------------------------------------------------- output

def test_progress_in_a_log_is_a_few_plain_lines(tmp_path):
    nml = tiny_config(tmp_path / "tiny.nml")
    run = pompy("run", nml, "--steps", 100, "--output", tmp_path / "o", cwd=tmp_path)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 20 and lines[-1].startswith("explicit Run 1: step 100 (100%), day "), err
    assert lines[0].startswith("explicit Run 1: step 5 (5%), day ")


def test_the_oracles_lines_show_the_vamax_of_their_step(tmp_path, oracle):
    """The Fortran runs its steps in chunks and keeps the last one's vamax
    only: its log has a line at each chunk's end, with that step's vamax,
    the explicit core's at the same step (within the printed 3 digits)."""
    nml = tiny_config(tmp_path / "tiny.nml")
    vamax = {}
    for core in ("oracle", "explicit"):
        run = pompy("run", nml, "--steps", 12, "--core", core, "--output", tmp_path / core,
                    cwd=tmp_path)
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        vamax[core] = dict(re.findall(r"step (\d+) \(\d+%\), day \S+, vamax (\S+),", err))
    assert len(vamax["explicit"]) == 12 and 0 < len(vamax["oracle"]) < 12, vamax
    for step, value in vamax["oracle"].items():
        assert value == vamax["explicit"][step], (step, vamax)


@pytest.mark.parametrize("steps", [40, 30, 7])
def test_a_log_gets_one_line_at_each_5_percent_with_elapsed_time_and_eta(tmp_path, steps):
    """Every 5 % mark once, at the first step at or past it (40 steps: 2,
    4, ..., 40; fewer than 20 steps: one line a step), each with the share
    of the steps done (as a terminal's bar shows it: step 1 of 7 is 14 %),
    the time elapsed and the time left as h:mm:ss."""
    nml = tiny_config(tmp_path / "tiny.nml")
    run = pompy("run", nml, "--steps", steps, "--output", tmp_path / "o", cwd=tmp_path)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    pattern = (r"explicit Run 1: step (\d+) \((\d+)%\), day \d\.\d{4}, vamax \S+, "
               r"elapsed \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d")
    found = [re.fullmatch(pattern, line) for line in err.splitlines()]
    assert all(found), err
    marks = [(int(m.group(1)), int(m.group(2))) for m in found]
    lines = sorted({-(-n * steps // 20) for n in range(1, 21)})   # mark 5n %: step ceil(n steps / 20)
    assert marks == [(step, 100 * step // steps) for step in lines], err


def test_a_terminal_without_a_size_shows_the_bar(tmp_path):
    """A pty that reports 0 x 0 (made by a program, a container's console):
    tqdm would draw no bar there; the run shows one as on 80 x 24."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    nml = tiny_config(tmp_path / "tiny.nml")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.Popen([sys.executable, "-m", "pompy", "run", str(nml), "--steps", "30",
                            "--output", str(tmp_path / "o")], stdin=follower, stdout=follower,
                           stderr=follower, env=env, cwd=tmp_path)
    os.close(follower)
    seen = b""
    while select.select([leader], [], [], 120)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:                  # the run closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert run.wait(timeout=60) == 0
    text = seen.decode(errors="replace")
    assert "explicit Run 1: 100%" in text and "30/30" in text, text


def test_output_every_sets_the_records(tmp_path):
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    every = 4 * 18 / 86400
    assert cli.main(["run", nml, "--steps", "10", "--output-every", repr(every), "--output",
                     str(tmp_path / "o")]) == 0
    with netCDF4.Dataset(tmp_path / "o" / "explicit_output.nc") as ds:
        assert list(ds["iint"][:]) == [4, 8, 10]


def test_a_large_output_is_announced(tmp_path, capsys, monkeypatch):
    import pompy.driver

    monkeypatch.setattr(pompy.driver, "estimate_output_bytes", lambda config, records: 3.2e9)
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["run", nml, "--steps", "1", "--output", str(tmp_path / "o")]) == 0
    assert ("pompy: the output will take about 3.20 GB (1 records); --output-every DAYS writes "
            "fewer") in capsys.readouterr().err


def test_fortran_math_run_is_the_oracle_bit_for_bit(oracle, tmp_path):
    nml = str(CONFIGS / "seamount.nml")
    assert cli.main(["run", nml, "--steps", "3", "--fortran-math", "--output",
                     str(tmp_path / "t")]) == 0
    assert cli.main(["run", nml, "--steps", "3", "--core", "oracle", "--output",
                     str(tmp_path / "o")]) == 0
    same_restart(tmp_path / "t" / "explicit_restart.nc", tmp_path / "o" / "oracle_restart.nc")
    with netCDF4.Dataset(tmp_path / "t" / "explicit_output.nc") as ds:
        assert "pompy.compat.fortran_math" in ds.elementary_functions


def test_the_implicit_core_and_its_fortran_twin_from_the_command_line(oracle, tmp_path, capsys):
    """`pompy run --core implicit --oracle` runs the Fortran twin (files
    oracle_implicit_*); the torch implicit core with --fortran-math (pom2k's
    elementary functions, and the reference CG, the twin's algorithm)
    equals it to the last bit over 4 steps of the seamount; --oracle alone
    is refused."""
    nml = str(CONFIGS / "seamount.nml")
    assert cli.main(["run", nml, "--steps", "4", "--core", "implicit", "--fortran-math",
                     "--output", str(tmp_path)]) == 0
    assert cli.main(["run", nml, "--steps", "4", "--core", "implicit", "--oracle", "--output",
                     str(tmp_path)]) == 0
    assert read_restart(tmp_path / "implicit_restart.nc").iint == 4
    same_restart(tmp_path / "implicit_restart.nc", tmp_path / "oracle_implicit_restart.nc")
    with netCDF4.Dataset(tmp_path / "oracle_implicit_output.nc") as ds:
        assert ds.core == "oracle_implicit"
    capsys.readouterr()
    assert cli.main(["run", nml, "--oracle", "--output", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("pompy: --oracle goes with --core implicit")



def failing_records(monkeypatch):
    """Output records that fail in the writer's thread, as a full disk would."""
    from pompy.io import OutputWriter

    def failing(self, fields, iint, time_days):
        raise OSError(f"no space left writing the record of iint={iint}")
    monkeypatch.setattr(OutputWriter, "_write", failing)


def test_a_failed_record_never_hides_a_blow_up_nor_loses_its_restart(tmp_path, monkeypatch, capsys):
    """A record fails in the background, then the model blows up before the
    next write: `pompy run` still reports the blow-up (exit 3, the restart
    of the last good state written), the record's error noted with it."""
    from pompy.core.model import Core
    from pompy.errors import CFLViolation

    failing_records(monkeypatch)
    advance = Core.advance

    def blowing_up(self, last, on_step=None):
        if self.iint >= 2:
            self.last_good = dict(self.numpy_state())
            stop = CFLViolation(self.iint + 1, 9.9, 3, 4, 1.0)
            stop.last_good = self.last_good
            raise stop
        return advance(self, last, on_step)
    monkeypatch.setattr(Core, "advance", blowing_up)
    config = tiny_config(tmp_path / "tiny.nml")
    every = 2 * 18 / 86400
    assert cli.main(["run", str(config), "--steps", "6", "--output-every", repr(every),
                     "--output", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "velocity vamax=9.9" in err and "Traceback" not in err
    assert read_restart(tmp_path / "out" / "explicit_restart.nc", load_config(config)).iint == 2


def test_a_failed_record_is_raised_after_the_final_restart(tmp_path, monkeypatch):
    """A run whose last record failed writes its final restart, then raises
    the record's error."""
    from pompy.driver import run_case

    failing_records(monkeypatch)
    config = load_config(tiny_config(tmp_path / "tiny.nml"))
    with pytest.raises(OSError, match="no space left writing the record of iint=3"):
        run_case(config, tmp_path / "out", steps=3, progress=False)
    assert read_restart(tmp_path / "out" / "explicit_restart.nc", config).iint == 3


def test_a_restart_waits_for_the_record_in_flight(tmp_path, monkeypatch):
    """HDF5 is not thread-safe: a restart written at a record's step starts
    only once that record, slow in the writer's thread, is written."""
    import threading
    import time

    import pompy.driver
    from pompy.io import OutputWriter

    in_flight, restarts = threading.Event(), []
    write = OutputWriter._write

    def slow(self, fields, iint, time_days):
        in_flight.set()
        time.sleep(0.2)
        write(self, fields, iint, time_days)
        in_flight.clear()
    restart = pompy.driver.write_restart

    def checked(*args, **kwargs):
        restarts.append(in_flight.is_set())
        return restart(*args, **kwargs)
    monkeypatch.setattr(OutputWriter, "_write", slow)
    monkeypatch.setattr(pompy.driver, "write_restart", checked)
    every = 2 * 18 / 86400
    config = dataclasses.replace(load_config(tiny_config(tmp_path / "tiny.nml")),
                                 output_every=every, restart_every=every)
    pompy.driver.run_case(config, tmp_path / "out", steps=4, progress=False)
    assert restarts == [False, False, False]          # at iint 2, 4 and the final one
    with netCDF4.Dataset(tmp_path / "out" / "explicit_output.nc") as ds:
        assert list(ds["iint"][:]) == [2, 4]
