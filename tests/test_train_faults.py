"""Faults in training, made for real, as ``pompy run`` meets them: a full
disk (a small tmpfs, filled) at a checkpoint or a log row, a certificate
missing on one of two nodes (two torchrun launches under one c10d
rendezvous on 127.0.0.1, one with an empty POMPY_HOME), SIGINT and SIGTERM
sent to the launcher. Each ends in its status (4, 2, 130, 143) and one
line, under torchrun on every rank alike and from ``python -m
pompy.launch`` too; no traceback, no ``.tmp``, the last checkpoint whole.

The tiny seamount dataset and its certificate are test_train's. Mounting
needs root (CI runs as root); elsewhere the full-disk tests skip.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from pompy import train
from pompy.train.log import TrainingLog
from pompy.train.losses import EPOCH_COLUMNS
from test_environment_faults import tmpfs
from test_train import ROOT, free_port, home, made, read_csv, train_config, verified  # noqa: F401

PAGE = 4096                              # tmpfs gives a file its pages as it grows
TIMEOUT = 240                            # seconds: any launch here ends well within it


def env(**extra) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


def the_line(err: str) -> str:
    """The one line of stderr, warnings aside; no traceback."""
    lines = [line for line in err.splitlines() if line.strip() and ": warning: " not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# launch()'s own options in the command a stopped run names (its port any)
LAUNCH_OPTIONS = r"--nproc_per_node=2 --master_addr=127\.0\.0\.1 --master_port=\d+"


def launch(*args: str, nodes: int = 1, procs: int = 2) -> list[str]:
    """``python -m pompy.launch`` on 127.0.0.1, ``procs`` ranks a node."""
    where = ([f"--nnodes={nodes}", "--rdzv_backend=c10d"] if nodes > 1 else
             ["--master_addr=127.0.0.1", f"--master_port={free_port()}"])
    return [sys.executable, "-m", "pompy.launch", f"--nproc_per_node={procs}", *where, *args]


def fill(disk: Path) -> None:
    """No byte left on ``disk``."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(1 << 16))
    except OSError:
        pass
    try:
        while True:
            os.write(fd, bytes(512))
    except OSError:
        pass
    finally:
        os.close(fd)


def whole(path: Path, epoch: int) -> None:
    """A checkpoint that loads (weights_only) and holds ``epoch``."""
    assert torch.load(path, weights_only=True)["epoch"] == epoch, path


@pytest.fixture(scope="module")
def checkpoint_bytes(made, verified, tmp_path_factory):
    """The size of a checkpoint of the tiny run (one process)."""
    where = tmp_path_factory.mktemp("size")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POMPY_HOME", str(verified("implicit")))
        assert train.main(["--config", str(train_config(made, where, batch_size=1)), "--data",
                           str(made[2]), "--output", str(where / "out"), "--epochs", "1"]) == 0
    return (where / "out" / "checkpoint_last.pt").stat().st_size


def disk_for_one_epoch(tmp_path: Path, checkpoint_bytes: int):
    """A tmpfs with room for epoch 0's two checkpoint files, not epoch 1's."""
    return tmpfs(tmp_path / "disk", f"{int(2.5 * checkpoint_bytes) // 1024}k")


# ------------------------------------------------------------------ a full disk
def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_last(made, home, tmp_path,
                                                                    checkpoint_bytes):
    """`python -m pompy.train` on a disk with room for one epoch's
    checkpoints: exit 4 at epoch 1's, one line naming the file, the cause,
    the checkpoint kept and the command that continues; no .tmp; epoch 0's
    checkpoints whole."""
    config = train_config(made, tmp_path, batch_size=1)
    with disk_for_one_epoch(tmp_path, checkpoint_bytes) as disk:
        out = disk / "out"
        done = subprocess.run([sys.executable, "-m", "pompy.train", "--config", str(config),
                               "--data", str(made[2]), "--output", str(out), "--epochs", "3"],
                              env=env(), capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 4, done.stderr
        kept = out / "checkpoint_epoch0.pt"
        assert re.fullmatch(
            rf"pompy: {out}/checkpoint_epoch1\.pt: no space left on the device \(\S+ MB free, "
            rf"writing the checkpoint of epoch 1 needs about \S+ MB\); {kept} holds epoch 0: "
            rf"continue with python -m pompy\.train "
            + re.escape(shlex.join(["--config", str(config), "--data", str(made[2]), "--output",
                                    str(out), "--epochs", "3"]))
            + rf" --resume {kept}", the_line(done.stderr)), done.stderr
        assert not list(out.glob("*.tmp")) and not (out / "checkpoint_epoch1.pt").exists()
        whole(kept, 0)
        assert (out / "checkpoint_last.pt").read_bytes() == kept.read_bytes()


def fill_before_a_new_page(disk: Path, first_epoch: int):
    """TrainingLog._write, filling ``disk`` just before the first row from
    ``first_epoch`` on that needs a new page of its file (a row within the
    last page still fits on a full tmpfs)."""
    write = TrainingLog._write

    def filling(self, file, path, row, doing):
        epoch = int(re.search(r"at epoch (\d+)", doing).group(1))
        if file is not None and epoch >= first_epoch and not (disk / "filler").exists():
            size = path.stat().st_size
            if size // PAGE != (size + len(row.encode())) // PAGE:
                fill(disk)
        return write(self, file, path, row, doing)
    return filling


def test_a_full_disk_at_a_log_row_stops_there_and_resumes_to_the_same_log(made, home,
                                                                          tmp_path, capsys,
                                                                          monkeypatch):
    """The disk fills as a row of the training log needs room (from epoch
    1 on): one process stops there, exit 4, one line naming the log, the
    epoch and step, and the last checkpoint; resumed from it once there is
    room, the log is the uninterrupted run's, line for line."""
    config = train_config(made, tmp_path, batch_size=1)
    argv = ["--config", str(config), "--data", str(made[2]), "--epochs", "3"]
    assert train.main([*argv, "--output", str(tmp_path / "straight")]) == 0
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        capsys.readouterr()
        with monkeypatch.context() as filling:
            filling.setattr(TrainingLog, "_write", fill_before_a_new_page(disk, 1))
            assert train.main([*argv, "--output", str(out)]) == 4
        line = the_line(capsys.readouterr().err)
        found = re.fullmatch(
            rf"pompy: {out}/train_log\.csv: no space left on the device \(0 MB free\) \(writing "
            rf"the training log at epoch (\d), step \d\); (\S+) holds epoch (\d): continue with "
            r"python -m pompy\.train " + re.escape(shlex.join([*argv, "--output", str(out)]))
            + r" --resume (\S+)", line)
        assert found, line
        epoch, kept, kept_epoch, resume = found.groups()
        assert kept == resume == str(out / f"checkpoint_epoch{int(epoch) - 1}.pt")
        assert int(kept_epoch) == int(epoch) - 1
        whole(Path(kept), int(kept_epoch))
        assert not list(out.glob("*.tmp"))
        (disk / "filler").unlink()
        assert train.main([*argv, "--output", str(out), "--resume", kept]) == 0
        assert read_csv(out / "train_log.csv") == read_csv(tmp_path / "straight" / "train_log.csv")


def test_a_full_disk_at_a_checkpoint_under_torchrun(made, home, tmp_path, checkpoint_bytes):
    """`python -m pompy.launch`, 2 ranks: rank 0's disk full at epoch 1's
    checkpoint stops both ranks alike (exit 4 each), and the launcher
    exits 4 with their one line; no .tmp, epoch 0's checkpoints whole."""
    config = train_config(made, tmp_path, batch_size=1)
    with disk_for_one_epoch(tmp_path, checkpoint_bytes) as disk:
        out = disk / "out"
        done = subprocess.run(launch("-m", "pompy", "train", "--config", str(config), "--data",
                                     str(made[2]), "--output", str(out), "--epochs", "3"),
                              env=env(), capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 4, done.stderr
        kept = out / "checkpoint_epoch0.pt"
        assert re.fullmatch(
            rf"pompy: rank 0 of 2 \({re.escape(socket.gethostname())}\): {out}/checkpoint_epoch1"
            rf"\.pt: no space left on the device \(\S+ MB free, writing the checkpoint of epoch 1 "
            rf"needs about \S+ MB\); {kept} holds epoch 0: continue with python -m pompy\.launch "
            + LAUNCH_OPTIONS + r" -m pompy train "
            + re.escape(shlex.join(["--config", str(config), "--data", str(made[2]), "--output",
                                    str(out), "--epochs", "3"]))
            + rf" --resume {kept}", the_line(done.stderr)), done.stderr
        assert not list(out.glob("*.tmp"))
        whole(kept, 0)
        whole(out / "checkpoint_last.pt", 0)


FILLING_RANK = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pompy.train import cli
    from pompy.train.log import TrainingLog
    from test_train_faults import fill_before_a_new_page

    TrainingLog._write = fill_before_a_new_page(Path(sys.argv[1]), 1)   # rank 0 alone writes it
    cli.main(sys.argv[2:], leave=True)
""")


def test_a_full_disk_at_a_log_row_under_torchrun_stops_every_rank(made, home, tmp_path):
    """2 ranks: rank 0's log row finds the disk full; the others are in
    the batch's collectives, so the ranks stop together at that epoch's
    end, before its checkpoint: exit 4 from the launcher, one line naming
    the row and the checkpoint kept, no .tmp."""
    worker = tmp_path / "worker.py"
    worker.write_text(FILLING_RANK)
    config = train_config(made, tmp_path, batch_size=1)
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        done = subprocess.run(launch(str(worker), str(disk), "--config", str(config), "--data",
                                     str(made[2]), "--output", str(out), "--epochs", "6"),
                              env=env(PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}"),
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 4, done.stderr
        found = re.fullmatch(
            rf"pompy: rank 0 of 2 \(.+\): {out}/train_log\.csv: no space left on the device \(0 "
            rf"MB free\) \(writing the training log at epoch (\d), step \d\); epoch (\d)'s "
            rf"checkpoint was not written; (\S+) holds epoch (\d): continue with python -m "
            rf"pompy\.launch " + LAUNCH_OPTIONS + r" -m pompy\.train "
            + re.escape(shlex.join(["--config", str(config), "--data", str(made[2]), "--output",
                                    str(out), "--epochs", "6"]))
            + r" --resume (\S+)", the_line(done.stderr))
        assert found, done.stderr
        epoch, unwritten, kept, kept_epoch, resume = found.groups()
        assert epoch == unwritten and int(kept_epoch) == int(epoch) - 1
        assert kept == resume == str(out / f"checkpoint_epoch{kept_epoch}.pt")
        assert not (out / f"checkpoint_epoch{epoch}.pt").exists()
        assert not list(out.glob("*.tmp"))
        whole(out / "checkpoint_last.pt", int(kept_epoch))


# ------------------------------------------------------------------ two nodes
def finished(nodes: list[subprocess.Popen]) -> list[str]:
    """Each node's stderr once it ends (killed past TIMEOUT)."""
    errs = []
    for node in nodes:
        try:
            errs.append(node.communicate(timeout=TIMEOUT)[1])
        finally:
            node.kill()
    return errs


def test_a_certificate_missing_on_one_of_two_nodes_stops_both_with_its_line(made, home,
                                                                            tmp_path):
    """Two launches under one c10d rendezvous on 127.0.0.1 (two nodes), the
    first (the rendezvous' keeper) with an empty POMPY_HOME: both exit 2,
    each saying once the same line, the refusing rank's; nothing written;
    no traceback, no line of torchrun's."""
    config = train_config(made, tmp_path, batch_size=1)
    port, started = free_port(), time.monotonic()
    argv = launch(f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={tmp_path.name}", "-m",
                  "pompy", "train", "--config", str(config), "--data", str(made[2]),
                  "--output", str(tmp_path / "out"), nodes=2, procs=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    nodes = [subprocess.Popen(argv, env=env(POMPY_HOME=str(empty)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    time.sleep(1)                        # the first is the rendezvous' keeper
    nodes.append(subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True))
    errs = finished(nodes)
    assert [node.returncode for node in nodes] == [2, 2], errs
    lines = [the_line(err) for err in errs]
    assert lines[0] == lines[1], lines
    assert re.fullmatch(r"pompy: rank \d of 2 \(.+\): no verification certificate for the "
                        r"implicit core .*; run: pompy verify .*", lines[0]), lines
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - started < TIMEOUT


def test_two_nodes_log_what_one_node_of_two_ranks_logs(made, home, tmp_path):
    """docs/training.md's try-out on one machine: two launches of one rank
    each under one c10d rendezvous (two nodes) write the train_log.csv of
    one launch of two ranks, byte for byte, and the same epoch log but its
    wall times."""
    config = train_config(made, tmp_path, batch_size=1)
    train = ["-m", "pompy", "train", "--config", str(config), "--data", str(made[2])]
    one = subprocess.run(launch(*train, "--output", str(tmp_path / "one")), env=env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert one.returncode == 0, one.stderr[-3000:]
    argv = launch(f"--rdzv_endpoint=127.0.0.1:{free_port()}", f"--rdzv_id={tmp_path.name}",
                  *train, "--output", str(tmp_path / "two"), nodes=2, procs=1)
    nodes = [subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    errs = finished(nodes)
    assert [node.returncode for node in nodes] == [0, 0], [e[-2000:] for e in errs]
    logs = [tmp_path / run / "train_log.csv" for run in ("one", "two")]
    assert logs[0].read_bytes() == logs[1].read_bytes() and len(read_csv(logs[0])) > 2
    wall = EPOCH_COLUMNS.index("WallSeconds")
    epochs = [[row[:wall] + row[wall + 1:] for row in read_csv(log.with_name("epoch_log.csv"))]
              for log in logs]
    assert epochs[0] == epochs[1] and len(epochs[0]) > 1


# ------------------------------------------------------------------ signals
def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_stops_the_ranks_with_the_resume_command(made, home, tmp_path,
                                                                          signum):
    """SIGINT or SIGTERM to `python -m pompy.launch` once epoch 0's
    checkpoint is written: the ranks stop as `pompy train` alone does, and
    the launcher exits 130 or 143 with their one line: the checkpoint and
    the command that continues from it; no traceback."""
    config = train_config(made, tmp_path, batch_size=1)
    out = tmp_path / "out"
    proc = subprocess.Popen(launch("-m", "pompy", "train", "--config", str(config), "--data",
                                   str(made[2]), "--output", str(out), "--epochs", "1000"),
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(out / "checkpoint_epoch0.pt", proc)
        proc.send_signal(signum)
        err = proc.communicate(timeout=TIMEOUT)[1]
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    found = re.fullmatch(rf"pompy: interrupted \({signum.name}\); (\S+) holds epoch (\d+): "
                         rf"continue with python -m pompy\.launch " + LAUNCH_OPTIONS
                         + r" -m pompy train "
                         + re.escape(shlex.join(["--config", str(config), "--data",
                                                 str(made[2]), "--output", str(out), "--epochs",
                                                 "1000"]))
                         + r" --resume (\S+)", the_line(err))
    assert found and found[1] == found[3] == str(out / f"checkpoint_epoch{found[2]}.pt"), err
    whole(Path(found[1]), int(found[2]))
    assert not list(out.glob("*.tmp"))


def test_sigterm_stops_one_process_as_sigint_does(made, home, tmp_path):
    """`python -m pompy.train` alone: SIGTERM is exit 143 and the line
    naming the checkpoint and the command that continues from it."""
    config = train_config(made, tmp_path, batch_size=1)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pompy.train", "--config", str(config),
                             "--data", str(made[2]), "--output", str(out), "--epochs", "1000"],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(out / "checkpoint_epoch0.pt", proc)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=TIMEOUT)[1]
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    found = re.fullmatch(r"pompy: interrupted \(SIGTERM\); (\S+) holds epoch (\d+): continue "
                         r"with python -m pompy\.train "
                         + re.escape(shlex.join(["--config", str(config), "--data", str(made[2]),
                                                 "--output", str(out), "--epochs", "1000"]))
                         + r" --resume (\S+)", the_line(err))
    assert found and found[1] == found[3], err
    whole(Path(found[1]), int(found[2]))


def test_a_rendezvous_that_no_other_node_joins_is_one_line_and_exit_4(tmp_path):
    """One of two nodes, alone at its endpoint: torchrun's rendezvous times
    out (join_timeout 3 s here); the launcher says what to check."""
    port = free_port()
    result = subprocess.run(
        launch("--rdzv_id=alone", f"--rdzv_endpoint=127.0.0.1:{port}",
               "--rdzv_conf=join_timeout=3", "-m", "pompy", "train", "--config",
               str(ROOT / "configs" / "train_tiny.nml"), "--data", str(tmp_path / "none"),
               "--output", str(tmp_path / "out"), nodes=2, procs=1),
        env=env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 4, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("pompy: ")]
    assert lines == [
        "pompy: torchrun's rendezvous failed: RendezvousTimeoutError: the nodes did not all join "
        "in time (torchrun's --rdzv_conf join_timeout, 600 s by default); every node must run "
        "the same command with the same --rdzv_id and --rdzv_endpoint (host:port of the first "
        "node, reachable from each), within the join timeout"], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


LIMITED = textwrap.dedent("""
    import resource, sys
    from pompy.train.cli import main

    def size():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize"):
                return int(line.split()[1]) * 1024
    limit = size() + 400 * 2 ** 20        # 400 MB more than the imports took
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.exit(main(sys.argv[1:]))
""")


def test_out_of_memory_is_one_line_and_exit_4(made, home, tmp_path):
    """The process's address space capped 400 MB above its imports, and
    networks of 512 hidden channels (float64: more than that): the
    allocation fails for real."""
    script = tmp_path / "limited.py"
    script.write_text(LIMITED)
    config = train_config(made, tmp_path, hidden_channels=512)
    result = subprocess.run(
        [sys.executable, str(script), "--config", str(config), "--data", str(made[2]),
         "--output", str(tmp_path / "out")],
        env=env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 4, result.stderr
    line = the_line(result.stderr)
    assert line.startswith("pompy: out of memory (can't allocate memory: you tried to allocate ")
    assert line.endswith(
        "lower batch_size or horizon, give --physics_checkpoint steps (the physics' steps "
        "recomputed in the backward pass), or run on a device with more memory; this run wrote "
        "no checkpoint; nothing to resume"), line
