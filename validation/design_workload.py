"""The design's workload on this machine: configs/train_360x240.nml's own
recipe (its header's three commands) on the CPU, smaller in members and
snapshots, timed and measured:

    python3 validation/design_workload.py --work /tmp/design [--members 3] [--snapshots N] \
        [--config configs/train_360x240.nml] [--json FILE]

1. ``pompy verify CONFIG --core implicit --device cpu``: its minutes, checks
   passed, the suites' seconds (the routine checks on a 65x49 window, the
   rest on the whole grid: docs/oracle.md);
2. ``torchrun --nproc_per_node 2 -m pompy.generate CONFIG --device cpu
   --members M --days (S-1) x every``: the config's &generate reference,
   ``--snapshots`` S snapshots a member (default the horizon + 1); seconds a reference step a process,
   bytes on disk a member and snapshot (and the uncompressed full state's,
   the dataset's own estimate);
3. ``torchrun --nproc_per_node 2 -m pompy.train --config CONFIG --data ...
   --epochs 1 --device cpu --physics_checkpoint steps``: the epoch's wall seconds (epoch_log.csv), its
   samples, seconds a sample a process (train and test passes), and the
   peak resident memory of the largest process.

Each step's peak resident memory is the largest of its processes' (the
largest ru_maxrss of the process tree, measured by a wrapper process of
its own). Prints a Markdown table (docs/performance.md's) and
the load average before each step; --json writes every figure. The
folders in --work are replaced. OMP_NUM_THREADS=1 a process under torchrun (2 processes on the
2 cores), the torch default (all cores) for verify.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "train_360x240.nml"
VERIFIED = re.compile(r"(\d+) of (\d+) checks passed in (\d+) s; certificate: (.+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(module: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", module]


def step(label: str, argv: list[str], threads: int | None = None) -> dict:
    """Run ``argv``: its wall seconds, the largest peak RSS of its process
    tree (GB), the load average before it, its output; exits on failure."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    load = os.getloadavg()[0]
    print(f"design_workload: {label} (load {load:.2f}): {' '.join(argv)}", flush=True)
    peak_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"design_workload_{os.getpid()}.rss"
    start = time.perf_counter()
    # a wrapper process of its own: its reaped children's largest peak is this step's alone
    result = subprocess.run([sys.executable, "-c", WRAPPER, str(peak_file), *argv], env=env,
                            capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"design_workload: {label} failed ({result.returncode}):\n"
                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    peak_kb = int(peak_file.read_text())
    peak_file.unlink()
    return {"seconds": seconds, "load": load, "out": result.stdout + result.stderr,
            "peak_rss_gb": peak_kb * 1024 / 1e9}


# runs argv[2:], writes the largest peak RSS (kB) of its process tree to argv[1]
WRAPPER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def every_days(config: Path) -> float:
    from pompy.settings import GenerateSettings, read
    return read(GenerateSettings, {"config": config, "output": "unused"}).schedule.every


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--members", type=int, default=3, help="members generated (default 3)")
    p.add_argument("--snapshots", type=int, default=None,
                   help="snapshots a member (default the &train horizon + 1: a sample a member)")
    p.add_argument("--physics_checkpoint", default="steps",
                   help="the trainer's (default steps: a 360x240x25 sample's physics needs "
                        "17-19 GB without, so two processes do not fit 24 GB)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    from pompy.config import load_config
    from pompy.settings import GenerateSettings, TrainSettings, read

    config = load_config(a.config)
    gen = read(GenerateSettings, {"config": a.config, "output": "unused"})
    data, run = a.work / "data", a.work / "run"
    settings = read(TrainSettings, {"config": a.config, "data": data, "output": run})
    a.snapshots = a.snapshots or settings.data.horizon + 1
    figures: dict = {"config": str(a.config.relative_to(ROOT) if a.config.is_relative_to(ROOT)
                                   else a.config),
                     "grid": f"{config.im}x{config.jm}x{config.kb}", "members": a.members,
                     "snapshots": a.snapshots, "cpus": os.cpu_count(),
                     "physics_checkpoint": a.physics_checkpoint}
    figures["verify"] = verify_step(a.config)
    figures["generate"] = generate_step(a, config, gen, data)
    figures["train"] = train_step(a, settings, data, run)
    print(table(figures))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def verify_step(config: Path) -> dict:
    verified = step("verify", [sys.executable, "-m", "pompy", "verify", str(config), "--core",
                               "implicit", "--device", "cpu"])
    found = VERIFIED.search(verified["out"])
    body = json.loads(Path(found.group(4).strip()).read_text()) if found else {}
    return {"seconds": verified["seconds"], "load": verified["load"],
            "peak_rss_gb": verified["peak_rss_gb"],
            "passed": f"{found.group(1)} of {found.group(2)}" if found else None,
            "suites_s": body.get("seconds")}


def generate_step(a, config, gen, data: Path) -> dict:
    from pompy.dataset import dataset_files

    every = gen.schedule.every
    generated = step("generate", torchrun("pompy.generate") + [
        str(a.config), "--device", "cpu", "--members", str(a.members),
        "--days", repr((a.snapshots - 1) * every), "--output", str(data), "--overwrite"],
        threads=1)
    on_disk = sum(f.stat().st_size for f in dataset_files(data))
    reference_dti = gen.reference.reference_dti or config.dti
    steps = round(every * 86400 / reference_dti) * (a.snapshots - 1)
    per_process = -(-a.members // 2)                 # the busier process's members
    estimate = re.search(r"at most ([\d.]+) MB", generated["out"])
    return {"seconds": generated["seconds"], "load": generated["load"],
            "peak_rss_gb": generated["peak_rss_gb"], "reference_steps_a_member": steps,
            "s_per_reference_step": generated["seconds"] / (steps * per_process),
            "bytes": on_disk, "mb_per_member_snapshot": on_disk / 1e6 / (a.members * a.snapshots),
            "estimate_mb": float(estimate.group(1)) if estimate else None}


def train_step(a, settings, data: Path, run: Path) -> dict:
    from pompy.dataset import SnapshotDataset
    from pompy.train.data import split_members

    # fewer members than the config's test split needs: one member held out
    fraction = settings.data.test_fraction
    held = [] if int(a.members * fraction) >= 1 else ["--test_fraction",
                                                      repr((1 + 1e-9) / a.members)]
    trained = step("train", torchrun("pompy.train") + [
        "--config", str(a.config), "--data", str(data), "--output", str(run), "--epochs", "1",
        "--device", "cpu", "--overwrite", "--no-progress", "--physics_checkpoint",
        a.physics_checkpoint, *held], threads=1)
    with open(run / "epoch_log.csv") as f:
        epoch = list(csv.DictReader(f))[-1]
    ds = SnapshotDataset(data, horizon=settings.data.horizon)
    train_members, test_members = split_members(ds, float(held[1]) if held else fraction)
    per_member = len(ds) // len(ds.members)
    samples = {"train": per_member * len(train_members), "test": per_member * len(test_members)}
    ds.close()
    wall = float(epoch["WallSeconds"])
    return {"seconds": trained["seconds"], "load": trained["load"],
            "peak_rss_gb": trained["peak_rss_gb"], "epoch_wall_s": wall, "samples": samples,
            "s_per_sample_a_process": wall / (-(-samples["train"] // 2) + -(-samples["test"] // 2)),
            "test_loss": float(epoch["TestLoss"]),
            "ratio_to_baseline": float(epoch["RatioToBaseline"])}


def gb(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(f: dict) -> str:
    v, g, t = f["verify"], f["generate"], f["train"]
    suites = v.get("suites_s") or {}
    return "\n".join([
        f"{f['config']} ({f['grid']}), {f['members']} members x {f['snapshots']} snapshots, "
        f"{f['cpus']} CPUs", "",
        "| step | wall | figure | peak RSS, largest process (GB) | load before |",
        "|---|---|---|---|---|",
        f"| pompy verify --core implicit --device cpu | {v['seconds'] / 60:.1f} min | "
        f"{v['passed']} checks passed; parity {suites.get('parity', 0):.0f} s, run "
        f"{suites.get('run', 0):.0f} s, gradcheck {suites.get('gradcheck', 0):.0f} s, policies "
        f"{suites.get('policies', 0):.0f} s | {gb(v['peak_rss_gb'])} | {v['load']:.2f} |",
        f"| pompy generate, 2 processes | {g['seconds']:.0f} s | {g['s_per_reference_step']:.1f} s "
        f"a reference step a process; {g['mb_per_member_snapshot']:.3g} MB a member and snapshot "
        f"on disk (uncompressed estimate {g['estimate_mb'] or 0:.0f} MB in all) | "
        f"{gb(g['peak_rss_gb'])} | {g['load']:.2f} |",
        f"| pompy train, 1 epoch, 2 processes, --physics_checkpoint {f['physics_checkpoint']} | "
        f"{t['seconds']:.0f} s | {t['samples']['train']} "
        f"training + {t['samples']['test']} test samples, epoch {t['epoch_wall_s']:.0f} s: "
        f"{t['s_per_sample_a_process']:.0f} s a sample a process; test loss "
        f"{t['test_loss']:.3g}, {t['ratio_to_baseline']:.3g} of the baseline | "
        f"{gb(t['peak_rss_gb'])} | {t['load']:.2f} |"])


if __name__ == "__main__":
    sys.exit(main())
