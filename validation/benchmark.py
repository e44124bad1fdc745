"""Time per internal step: the torch core against the Fortran oracle.

    python3 validation/benchmark.py                       # 65x49x21 and 256x256x31
    python3 validation/benchmark.py --grids 65x49x21 --steps 10 --no-compile
    python3 validation/benchmark.py --device cuda

In one process and on the same seamount set-up (mode 3, nadv 1, dte 6 s,
isplit 30), each model first takes two steps (pom2k's first step skips the
internal mode; torch.compile compiles then), then the timed steps. The
oracle is the Fortran driver (run_steps) built -O3, single-threaded; torch
uses torch.get_num_threads() CPU threads (or the GPU). The table gives ms
per internal step and the ratio to the oracle; compile times are reported
apart. Results go to stdout as a Markdown table.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from pathlib import Path

import torch

from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.oracle.driver import new_state, run_steps

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
WARMUP = 2


def grid_config(spec: str):
    im, jm, kb = (int(x) for x in spec.split("x"))
    return dataclasses.replace(load_config(CONFIG), im=im, jm=jm, kb=kb, kl2=kb - 2, days=1.0)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_oracle(config, steps: int) -> float:
    state = new_state(config)
    run_steps(state, config, 1, WARMUP)
    start = time.perf_counter()
    run_steps(state, config, WARMUP + 1, WARMUP + steps)
    return (time.perf_counter() - start) / steps


def time_torch(config, steps: int, dtype, device: str, compile: bool) -> tuple[float, float]:
    """(seconds per step, seconds of warm-up including any compilation)."""
    core = ExplicitCore(config, device=device, dtype=dtype, compile=compile)
    core.run_initialization()
    start = time.perf_counter()
    with torch.no_grad():
        core.iend = WARMUP
        core.run_time_loop()
        sync(device)
        warm = time.perf_counter() - start
        core.iend = WARMUP + steps
        start = time.perf_counter()
        core.run_time_loop()
        sync(device)
    return (time.perf_counter() - start) / steps, warm


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default="65x49x21,256x256x31", help="IMxJMxKB, comma separated")
    parser.add_argument("--steps", type=int, default=5, help="timed internal steps per model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    args = parser.parse_args(argv)

    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch "
          f"threads, torch {torch.__version__}"
          + (f", {torch.cuda.get_device_name()}" if args.device.startswith("cuda") else ""))
    print()
    print("| grid | model | ms / internal step | torch / oracle | warm-up (s) |")
    print("|---|---|---|---|---|")
    for spec in args.grids.split(","):
        config = grid_config(spec)
        oracle = time_oracle(config, args.steps)
        print(f"| {spec} | oracle (Fortran -O3, 1 thread) | {oracle * 1e3:.1f} | 1 | |", flush=True)
        for dtype in (torch.float64, torch.float32):
            for compile in (False, True) if not args.no_compile else (False,):
                per_step, warm = time_torch(config, args.steps, dtype, args.device, compile)
                label = f"torch {str(dtype)[6:]} {args.device}" + (" compiled" if compile else "")
                print(f"| {spec} | {label} | {per_step * 1e3:.1f} | {per_step / oracle:.2f} | "
                      f"{warm:.1f} |", flush=True)


if __name__ == "__main__":
    main()
