"""Does a corrector generalise? train_tiny's corrector trained on
``--perturb params`` members and measured on flows it never saw:

    python validation/corrector_generalisation.py --work /tmp/gen [--config CONFIG] \
        [--variant "name:TRAIN FLAGS" ...] [--seeds 0,1,2] [--cycles 32] \
        [--generate "GENERATE FLAGS"]

in --work: ``pompy generate CONFIG --perturb params`` on 2 processes (default
configs/train_tiny.nml) of
8 members whose spin-ups spread over 12 cycles (``data``: the last 2
members are the run's test split, other case parameters and windows;
--generate adds flags, e.g. ``--refine 2`` for the finer grid's reference),
and 4 members (1..4 of 5; member 0 has the config's values) drawn from ranges beyond the training ranges' tops by 20 %
of their widths (``beyond``), each long enough for --cycles cycles;
``pompy verify``; then per variant and seed a ``torchrun
--nproc_per_node 2 -m pompy.train`` run (the config's &train group, then
the variant's flags, ``--seed``) evaluated with ``pompy evaluate`` over
--cycles cycles on the held-out members and on every member of
``beyond``. Prints one row per run: the headline ratio (geometric mean of
corrected over uncorrected RMSE of u, v, t, s, el, ua, va) at cycles 1, 2,
4, 8, 16, 32, its worst to 4 x the horizon and to --cycles, the worst
field
to 4 x the horizon, and the worst headline beyond the ranges to 4 x the
horizon: the table of validation/corrector_experiments.md. Existing data
and runs in --work are reused (delete them to start over).
OMP_NUM_THREADS=1 per process.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "train_tiny.nml"
# the training ranges (pompy.settings.generate.DEFAULT_RANGES) continued
# beyond their tops by 20 % of their widths
BEYOND = "inflow=0.3:0.34,strat_amplitude=20:22,seamount_height=0.95:0.99,wind_factor=2:2.4"
HEADLINE = ("u", "v", "t", "s", "el", "ua", "va")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(label: str, argv: list[str], done: Path | None = None) -> None:
    if done is not None and done.exists():
        return
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{label} failed ({result.returncode}):\n{result.stdout[-2000:]}\n"
                 f"{result.stderr[-2000:]}")


def cycle_days(config: Path) -> float:
    """One correction cycle, in days: the config's &generate every."""
    from pompy.settings import GenerateSettings, read
    return read(GenerateSettings, {"config": config, "output": "unused"}).schedule.every


def generate(work: Path, config: Path, cycles: int, flags: str = "") -> tuple[Path, Path]:
    """Both datasets, each by 2 processes (one file each, members m % 2)."""
    cycle = cycle_days(config)
    py = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
          "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "pompy.generate",
          str(config), "--perturb", "params", "--days", repr(cycles * cycle),
          "--spinup_spread", repr(12 * cycle), *shlex.split(flags)]
    data, beyond = work / "data", work / "beyond"
    run("pompy generate", py + ["--members", "8", "--output", str(data)], made(data))
    run("pompy generate (beyond the ranges)", py + ["--members", "5", "--seed", "11",
                                                    "--ranges", BEYOND, "--output", str(beyond)],
        made(beyond))
    return data, beyond


def made(folder: Path) -> Path:
    """The file whose presence says a dataset is there (one process's, or two)."""
    one = folder / "dataset.nc"
    return one if one.exists() else folder / "dataset_rank1.nc"


def train(work: Path, config: Path, data: Path, name: str, flags: str, seed: int) -> Path:
    out = work / f"{name}_s{seed}"
    run(f"train {name} seed {seed}",
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "pompy.train",
         "--config", str(config), "--data", str(data), "--output", str(out), "--overwrite",
         "--no-progress", "--seed", str(seed), *shlex.split(flags)], out / "checkpoint_last.pt")
    return out


def evaluate(out: Path, data: Path, cycles: int, folder: str, members: str | None) -> dict:
    where = out / folder
    run(f"evaluate {out.name} {folder}",
        [sys.executable, "-m", "pompy", "evaluate", str(out), "--data", str(data), "--cycles",
         str(cycles), "--output", str(where), "--overwrite"]
        + (["--members", members] if members else []),
        where / "evaluation.json")
    return json.loads((where / "evaluation.json").read_text())


def row(name: str, seed: int, held: dict, beyond: dict) -> str:
    top, horizon = held["headline_ratio"], held["training_horizon"]
    near = 4 * horizon
    at = [f"{top[c - 1]:.3g}" if c <= len(top) else "-" for c in (1, 2, 4, 8, 16, 32)]
    worst_field = max(HEADLINE, key=lambda f: max(held["field_ratio"][f][:near]))
    return (f"| {name} | {seed} | {' | '.join(at)} | {max(top[:near]):.3g} | {max(top):.3g} | "
            f"{worst_field} {max(held['field_ratio'][worst_field][:near]):.3g} | "
            f"{max(beyond['headline_ratio'][:near]):.3g} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--config", type=Path, default=CONFIG,
                   help="the training config (default configs/train_tiny.nml)")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME:FLAGS, the trainer's flags of one row (repeatable; default: the "
                        "config's &train group alone, 'default:')")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--cycles", type=int, default=32)
    p.add_argument("--generate", default="", metavar="FLAGS",
                   help="pompy generate's flags for both datasets, e.g. '--refine 2' (the "
                        "reference on a finer grid)")
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    data, beyond_data = generate(a.work, a.config, a.cycles, a.generate)
    run("pompy verify", [sys.executable, "-m", "pompy", "verify", str(a.config), "--core",
                         "implicit"])
    print("| run | seed | 1 | 2 | 4 | 8 | 16 | 32 | worst to 4x horizon | worst to "
          f"{a.cycles} | worst field to 4x | beyond the ranges, worst to 4x |")
    print("|---" * 12 + "|")
    for variant in a.variant or ["default:"]:
        name, _, flags = variant.partition(":")
        for seed in map(int, a.seeds.split(",")):
            out = train(a.work, a.config, data, name, flags, seed)
            held = evaluate(out, data, a.cycles, "held_out", None)
            beyond = evaluate(out, beyond_data, a.cycles, "beyond", "1,2,3,4")
            print(row(name, seed, held, beyond), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
