"""The corrector's gain on train_tiny, end to end, as a user runs it:

    python validation/corrector_gain.py --work /tmp/gain [--perturb wind] \
        [--generate "--spinup 0.0667"] [--train "--epochs 30 --correction_scale 0.05"]

runs, in --work, ``pompy generate configs/train_tiny.nml`` (its &generate
group, then the --generate flags), ``pompy verify`` of the implicit core,
``torchrun --nproc_per_node 2 -m pompy.train`` (gloo, the config's &train
group, then the --train flags) and ``pompy evaluate``, and prints the
wall time of each step, the baseline, the last epoch's test/baseline
ratio and ``ratio_to_baseline`` by lead time (evaluation.json): the
earlier tables of validation/corrector_experiments.md. The documentation
now quotes validation/corrector_generalisation.py (held-out flows, the
headline measure, three seeds). OMP_NUM_THREADS=1 per process.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "train_tiny.nml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step(label: str, argv: list[str], env: dict) -> float:
    began = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        sys.exit(f"{label} failed ({result.returncode}):\n{result.stdout[-2000:]}\n"
                 f"{result.stderr[-2000:]}")
    print(f"{label}: {wall:.0f} s", flush=True)
    return wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--generate", default="", help="flags added to pompy generate")
    p.add_argument("--train", default="", help="flags added to the trainer")
    p.add_argument("--perturb", default=None, help="ic or wind (default: the &generate group's)")
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    data, run = a.work / "data", a.work / "run"
    py = [sys.executable, "-m"]
    extra = shlex.split(a.generate) + (["--perturb", a.perturb] if a.perturb else [])
    step("pompy generate", py + ["pompy", "generate", str(CONFIG), "--output", str(data),
                                 "--overwrite", *extra], env)
    step("pompy verify", py + ["pompy", "verify", str(CONFIG), "--core", "implicit"], env)
    step("torchrun --nproc_per_node 2 -m pompy.train",
         py + ["torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={free_port()}", "-m", "pompy.train", "--config", str(CONFIG),
               "--data", str(data), "--output", str(run), "--overwrite", "--no-progress",
               *shlex.split(a.train)], env)
    step("pompy evaluate", py + ["pompy", "evaluate", str(run), "--data", str(data),
                                 "--overwrite"], env)
    with open(run / "epoch_log.csv") as f:
        last = list(csv.DictReader(f))[-1]
    result = json.loads((run / "evaluation.json").read_text())
    print(f"baseline (test split, the physics alone): {float(last['BaselineLoss']):.4g}; "
          f"epoch {last['Epoch']}: test loss {float(last['TestLoss']):.4g}, ratio "
          f"{float(last['RatioToBaseline']):.3g}")
    print("lead (s)  ratio_to_baseline  corrected  uncorrected")
    for lead, r, c, u in zip(result["lead_seconds"], result["ratio_to_baseline"],
                             result["corrected_loss"], result["uncorrected_loss"]):
        print(f"{lead:8g}  {r:17.3g}  {c:9.3g}  {u:11.3g}")
    print(f"worst ratio_to_baseline: {max(result['ratio_to_baseline']):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
