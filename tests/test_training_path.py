"""README's training path, run as a user would from a fresh checkout: the
three commands of its "Training" section (``pompy verify`` on
configs/train_tiny.nml, ``pompy generate``, ``python -m pompy.launch
--nproc_per_node=2 -m pompy train``: torchrun's arguments), taken from README.md itself, for
each core; the trainer runs on the certificate verify wrote and the
dataset generate wrote (the config's &generate group: the explicit core
as the reference, params members). Only the sizes are cut: 4 members of 8
cycles (``--members 4 --days``), one epoch of a horizon of 2 cycles
(``--epochs 1 --horizon 2``), and the launch is given a free port on
127.0.0.1. Then ``pompy evaluate`` of the run, as the config's comment
gives it (4 x the horizon, 8 cycles).
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pompy import cores

ROOT = Path(__file__).parents[1]


def readme_training_commands() -> list[str]:
    """The indented commands of README's "Training" section that start with
    ``pompy verify``, ``pompy generate`` and ``python -m pompy.launch``, continuation
    lines joined, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Training", 1)[1].split("\n## ", 1)[0]
    joined = re.sub(r"\\\n\s*", "", section)
    commands = [line.split("#")[0].strip() for line in joined.splitlines()
                if re.match(r"    (pompy (verify|generate)|python -m pompy.launch) ", line)]
    assert [c.split()[:4] for c in commands] == [
        ["pompy", "verify", "configs/train_tiny.nml", "--core"],
        ["pompy", "generate", "configs/train_tiny.nml", "--output"],
        ["python", "-m", "pompy.launch", "--nproc_per_node=2"]], commands
    return commands


# the cuts of the README commands' sizes: 4 members of 8 cycles, one epoch of 2
SHORTER = {"generate": ["--members", "4", "--days", repr(8 * 480 / 86400)],
           "train": ["--epochs", "1", "--horizon", "2"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_run(command: str, core: str) -> list[str]:
    """``command`` with this interpreter for ``pompy`` and ``python``, the
    core named, the sizes cut (SHORTER), and a free port for the launch."""
    words = shlex.split(command.replace("--core implicit", f"--core {core}"))
    if words[0] == "python":
        words = [sys.executable, "-m", "pompy.launch", "--master_addr=127.0.0.1",
                 f"--master_port={free_port()}", *words[3:], *SHORTER["train"]]
        if "--core" not in words:
            words += ["--core", core]
    else:
        words = [sys.executable, "-m", *words, *SHORTER.get(words[1], [])]
    return words


@pytest.mark.parametrize("core", cores.NAMES)
def test_the_readme_training_path_runs_end_to_end(core, oracle, tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = dict(os.environ, POMPY_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    results = []
    for command in readme_training_commands():
        result = subprocess.run(as_run(command, core), cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-3000:])
        results.append(result)
    verified, generated, trained = results
    assert re.search(r"(\d+) of \1 checks passed", verified.stdout), verified.stdout[-500:]
    certificate, = (tmp_path / "home" / "certificates").glob(f"{core}-*.json")
    body = json.loads(certificate.read_text())
    assert body["passed"] is True and body["key"]["grid"] == "16x12x6"
    assert any((tmp_path / "data" / "train_tiny").iterdir())
    run = tmp_path / "runs" / "train_tiny"
    with open(run / "train_log.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["Phase"] for r in rows} == {"Train", "Test"}, rows
    assert all(math.isfinite(float(r["TotalLoss"])) for r in rows)
    # the closing line: the last test loss and its baseline as logged, where it wrote, what next
    with open(run / "epoch_log.csv") as f:
        last = list(csv.DictReader(f))[-1]
    closing = trained.stdout.strip().splitlines()[-1]
    assert closing.startswith(f"pompy train: done, {int(last['Epoch']) + 1} epochs; test loss "
                              f"{float(last['TestLoss']):.6e} = "
                              f"{float(last['RatioToBaseline']):.4g} x the baseline "), closing
    # the config's loss_weights, the fields weighed 0 left out
    assert "the loss is (1 u + 10 v + 2 t + 300 s + 3 el + 5 ua + 12 va), each" in closing
    assert closing.endswith("evaluate with: pompy evaluate runs/train_tiny --data data/train_tiny")
    import torch

    saved = sorted(run.glob("checkpoint_*.pt"))
    assert saved
    for path in saved:
        assert torch.load(path, weights_only=True)["certificate"]["key"] == body["key"]
    # the run evaluated on its held-out member, as the training config's comment says
    result = subprocess.run([sys.executable, "-m", "pompy", "evaluate", "runs/train_tiny",
                             "--data", "data/train_tiny"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "worst ratio_to_baseline" in result.stdout.splitlines()[-1]
    evaluation = json.loads((run / "evaluation.json").read_text())
    assert len(evaluation["ratio_to_baseline"]) == 4 * 2 == evaluation["cycles"]
    assert all(math.isfinite(r) and r > 0 for r in evaluation["ratio_to_baseline"])
    assert evaluation["members"] == [3] and "explicit core" in evaluation["data_model"]
