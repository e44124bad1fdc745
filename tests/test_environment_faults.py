"""Faults of the machine, made for real: a full disk (a small tmpfs), a file
held by another process, a read-only file system, POMPY_HOME that is a
file, meson off PATH. Each ends in exit 4 and one `pompy:` line naming the
file and the cause, and loses nothing written before: earlier outputs and
restarts stay byte for byte, the records written so far stay readable
(equal to an uninterrupted run's to the bit) and marked incomplete, and no
temporary file is left.

Mounting needs root (CI runs as root); elsewhere those tests skip.
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from pompy import cli, files
from pompy.io import output_fields
from pompy.oracle import build
from test_faults import ROOT, same_restart, snapshot, tiny_config

EVERY = 2 * 18 / 86400                  # a record every 2 steps of the 8x7x5 seamount


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` for the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def one_line(err: str) -> str:
    """The one message line of stderr (progress lines aside)."""
    lines = [line for line in err.splitlines() if not re.search(r"step \d+ \(\d+%\)", line)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def records(path: Path) -> tuple[list[int], dict]:
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        return list(ds["iint"][:]), {n: np.array(ds[n][:]) for n in output_fields()}


def test_a_full_disk_stops_the_run_at_once_and_loses_nothing(tmp_path, capsys):
    """An earlier run's files in a 3 MB tmpfs, then a run with --overwrite
    that fills it: exit 4 at the record that has no room (before HDF5
    fails), the earlier files byte for byte, the new records readable and
    equal to an uninterrupted run's, the file marked incomplete."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["run", nml, "--steps", "300", "--output-every", repr(EVERY), "--output",
                     str(tmp_path / "whole")]) == 0
    with tmpfs(tmp_path / "disk", "3m") as disk:
        out = disk / "out"
        assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
        before = snapshot(out)
        capsys.readouterr()
        assert cli.main(["run", nml, "--steps", "300", "--output-every", repr(EVERY), "--output",
                         str(out), "--overwrite"]) == 4
        line = one_line(capsys.readouterr().err)
        part = out / "explicit_output.incomplete.nc"
        assert line.startswith(f"pompy: {part}: no space left on the device ("), line
        assert f"are readable in {part} (status: incomplete)" in line
        # the earlier output whole; the restart now the state where the run
        # stopped (the records leave the restart its room)
        assert snapshot(out)["explicit_output.nc"] == before["explicit_output.nc"]
        assert not list(out.glob("*.tmp"))
        steps, got = records(part)
        with netCDF4.Dataset(part) as ds:
            assert ds.status.startswith("incomplete")
        assert 10 <= len(steps) < 150 and steps == list(range(2, 2 * len(steps) + 1, 2))
        assert f"the records up to iint={steps[-1]} are readable" in line
        _, want = records(tmp_path / "whole" / "explicit_output.nc")
        for name in output_fields():
            np.testing.assert_array_equal(got[name], want[name][:len(steps)], err_msg=name)
        stopped = int(re.search(r"the restart of iint=(\d+) is in ", line).group(1))
        assert stopped >= steps[-1]
        assert cli.main(["run", nml, "--steps", str(stopped), "--output",
                         str(tmp_path / "upto")]) == 0
        same_restart(out / "explicit_restart.nc", tmp_path / "upto" / "explicit_restart.nc")


def test_a_write_that_fails_in_hdf5_is_said_and_keeps_the_earlier_files(tmp_path, capsys,
                                                                        monkeypatch):
    """Without the room check (another process filled the disk after it),
    HDF5 itself fails: still exit 4 naming the file and the full disk, the
    earlier output and restart byte for byte, no temporary file."""
    monkeypatch.setattr(files, "check_room", lambda path, need, doing: None)
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    with tmpfs(tmp_path / "disk", "1500k") as disk:
        out = disk / "out"
        assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
        before = snapshot(out)
        capsys.readouterr()
        assert cli.main(["run", nml, "--steps", "300", "--output-every", repr(EVERY), "--output",
                         str(out), "--overwrite"]) == 4
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"pompy: {out / 'explicit_output.incomplete.nc'}: no space left "
                               "on the device"), line
        assert {n: b for n, b in snapshot(out).items()
                if n != "explicit_output.incomplete.nc"} == before
        assert not list(out.glob("*.tmp"))


@contextlib.contextmanager
def held_open(path: Path, mode: str = "r"):
    """``path`` held open by netCDF4 in another process (``mode`` "r": a
    reader's shared lock, "a": a writer's exclusive one) within the block."""
    other = subprocess.Popen([sys.executable, "-c", "import netCDF4, sys; "
                              f"ds = netCDF4.Dataset({str(path)!r}, {mode!r}); "
                              "print('open', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline() == "open\n"
        yield
    finally:
        other.communicate("", timeout=60)


def test_an_output_held_by_another_process_is_not_replaced(tmp_path, capsys):
    """--overwrite of an output that a reader (netCDF4, as xarray) holds
    open: exit 4 naming the file, the file byte for byte (netCDF4 would
    have truncated it before failing); once the reader is gone, the run
    replaces it."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    out = tmp_path / "out"
    assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
    before = snapshot(out)
    held = out / "explicit_output.nc"
    with held_open(held):
        capsys.readouterr()
        assert cli.main(["run", nml, "--steps", "3", "--output", str(out), "--overwrite"]) == 4
        line = one_line(capsys.readouterr().err)
        assert line == (f"pompy: {held}: locked by another process (a NetCDF/HDF5 reader has it "
                        "open); close it there, or give another --output")
        assert snapshot(out) == before
    assert cli.main(["run", nml, "--steps", "3", "--output", str(out), "--overwrite"]) == 0
    assert records(held)[0][-1] == 3


def test_a_restart_another_process_writes_is_busy_not_broken(tmp_path, capsys):
    """--restart of a file a writer holds open (netCDF4 in append mode:
    HDF5's exclusive lock): exit 4 naming it as locked, not exit 2 calling
    it unreadable; once the writer is gone, the run continues from it."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["run", nml, "--steps", "2", "--output", str(tmp_path / "a")]) == 0
    held = tmp_path / "a" / "explicit_restart.nc"
    with held_open(held, "a"):
        capsys.readouterr()
        assert cli.main(["run", nml, "--restart", str(held), "--steps", "1", "--output",
                         str(tmp_path / "b")]) == 4
        assert one_line(capsys.readouterr().err) == (
            f"pompy: restart file {held}: locked by another process writing it; read it once "
            "that is done")
    assert cli.main(["run", nml, "--restart", str(held), "--steps", "1", "--output",
                     str(tmp_path / "b")]) == 0


def test_a_read_only_output_folder(tmp_path, capsys):
    """A folder on a file system remounted read-only: exit 4, the folder
    and why; the run before it is still there, byte for byte."""
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
        before = snapshot(out)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        capsys.readouterr()
        assert cli.main(["run", nml, "--steps", "3", "--output", str(out), "--overwrite"]) == 4
        assert one_line(capsys.readouterr().err) == (
            f"pompy: output folder {out} is not writable (a read-only file system)")
        assert cli.main(["run", nml, "--steps", "3", "--output", str(disk / "new")]) == 4
        assert one_line(capsys.readouterr().err) == (
            f"pompy: {disk / 'new'}: the file system is read-only (making the output folder)")
        assert snapshot(out) == before


def test_pompy_home_that_is_a_file(tmp_path):
    """`pompy setup` with POMPY_HOME a file: exit 4, one line naming it,
    the file untouched."""
    home = tmp_path / "home"
    home.write_text("not a folder")
    env = dict(os.environ, POMPY_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pompy", "setup"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"pompy setup: POMPY_HOME {home} is not a folder (pompy keeps the oracle's build and the "
        "certificates there); remove it, or set POMPY_HOME to a folder")
    assert "Traceback" not in done.stderr and home.read_text() == "not a folder"


def test_meson_is_found_beside_the_python_that_runs(tmp_path, monkeypatch):
    """A venv's python called by its path (PATH without the venv's bin):
    the build finds meson beside that python; with meson nowhere, one line
    that says how to install it."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(build.BuildEnvironmentError) as missing:
        build.build_env("gfortran")
    assert str(missing.value) == (f"meson is not installed (numpy.f2py builds the oracle with "
                                  f"it): {bin_dir / 'python'} -m pip install meson ninja")
    meson = bin_dir / "meson"
    meson.write_text("#!/bin/sh\n")
    meson.chmod(0o755)
    env = build.build_env("gfortran")
    assert env["PATH"].split(os.pathsep)[0] == str(bin_dir)


def test_the_command_line_gives_build_faults_exit_4(monkeypatch, capsys):
    def missing():
        raise build.BuildEnvironmentError("meson is not installed")
    monkeypatch.setattr(build, "pompy_home", missing)
    assert cli.main(["setup"]) == 4
    assert capsys.readouterr().err.splitlines()[-1] == "pompy setup: meson is not installed"


def test_verify_says_a_pompy_home_it_cannot_use_before_it_starts(tmp_path, capsys, monkeypatch):
    """The certificate's folder is checked before minutes of checks."""
    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.setenv("POMPY_HOME", str(home))
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    assert cli.main(["verify", nml]) == 4
    err = capsys.readouterr().err
    assert err == (f"pompy: POMPY_HOME {home} is not a folder (pompy keeps the oracle's build "
                   "and the certificates there); remove it, or set POMPY_HOME to a folder\n")


def test_a_restart_that_does_not_fit_leaves_the_last_one(tmp_path, capsys, monkeypatch):
    """A restart written with --restart-every on a disk too full for it
    (the records' check stubbed, so the restart meets the full disk):
    exit 4 naming the restart, the last restart whole, no .tmp left."""
    monkeypatch.setattr(files, "check_room", lambda path, need, doing: None)
    nml = str(tiny_config(tmp_path / "tiny.nml"))
    with tmpfs(tmp_path / "disk", "1200k") as disk:
        out = disk / "out"
        assert cli.main(["run", nml, "--steps", "2", "--output", str(out)]) == 0
        before = snapshot(out)["explicit_restart.nc"]
        (disk / "filler").write_bytes(b"x" * (files.free_bytes(disk) - 200_000))
        capsys.readouterr()
        assert cli.main(["run", nml, "--steps", "20", "--restart-every", repr(4 * 18 / 86400),
                         "--output-every", "1", "--output", str(out), "--overwrite"]) == 4
        line = one_line(capsys.readouterr().err)
        assert re.match(rf"pompy: {re.escape(str(out))}/explicit_restart.nc: no space left on "
                        r"the device \(\S+ MB free\) \(writing the restart of iint=4\)", line), line
        assert snapshot(out)["explicit_restart.nc"] == before
        assert not list(out.glob("*.tmp"))


def test_folders_a_user_may_not_enter_or_write(tmp_path, capsys):
    """As a user who is not root (the effective uid of `nobody`): a folder
    above the output that may not be entered, and one that may not be
    written, are exit 4 with one line naming them."""
    if os.geteuid() != 0:
        pytest.skip("switching to another user needs root")
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="pompy-users-"))
    try:
        top.chmod(0o755)
        nml = str(tiny_config(top / "tiny.nml"))
        (top / "tiny.nml").chmod(0o644)
        assert cli.main(["run", nml, "--steps", "2", "--output", str(top / "warm")]) == 0
        (top / "closed").mkdir(mode=0o000)
        (top / "readonly").mkdir(mode=0o555)
        capsys.readouterr()
        os.seteuid(65534)
        try:
            closed = cli.main(["run", nml, "--steps", "2", "--output", str(top / "closed" / "o")])
            closed_err = capsys.readouterr().err
            readonly = cli.main(["run", nml, "--steps", "2", "--output", str(top / "readonly")])
            readonly_err = capsys.readouterr().err
        finally:
            os.seteuid(0)
        assert closed == 4 and one_line(closed_err) == (
            f"pompy: {top / 'closed' / 'o'}: permission denied (looking for the output folder)")
        assert readonly == 4 and one_line(readonly_err) == (
            f"pompy: output folder {top / 'readonly'} is not writable")
        assert list((top / "readonly").iterdir()) == []
    finally:
        (top / "closed").chmod(0o755)
        shutil.rmtree(top)


def test_a_missing_compiler_in_pompy_run_is_one_line(tmp_path):
    """`pompy run --core oracle` that must build the oracle first, with no
    Fortran compiler: exit 4, one line saying how to install it, no
    temporary build folder left."""
    nml = tiny_config(tmp_path / "tiny.nml")
    env = dict(os.environ, POMPY_HOME=str(tmp_path / "home"), FC="no-such-fortran",
               PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pompy", "run", str(nml), "--core", "oracle",
                           "--steps", "2", "--output", str(tmp_path / "o")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 4, done.stderr
    assert one_line(done.stderr) == f"pompy: {build.GFORTRAN_HINT}"
    assert not list((tmp_path / "home").rglob("*.tmp"))


def test_the_trainer_says_a_pompy_home_it_cannot_use(tmp_path):
    """`python -m pompy.train` (as torchrun starts it) with POMPY_HOME a
    file: exit 4, one line, as `pompy` itself."""
    home = tmp_path / "home"
    home.write_text("not a folder")
    env = dict(os.environ, POMPY_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pompy.train", "--config",
                           str(ROOT / "configs" / "train_tiny.nml"), "--data", str(tmp_path / "d"),
                           "--output", str(tmp_path / "r")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 4, done.stderr
    assert done.stderr == (f"pompy: POMPY_HOME {home} is not a folder (pompy keeps the oracle's "
                           "build and the certificates there); remove it, or set POMPY_HOME to "
                           "a folder\n")
