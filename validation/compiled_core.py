"""Whole-step compilation with Inductor (``ExplicitCore(..., compile=True)``):
cold and warm compile times, the time per step, and the state against an
eager core's.

    python3 validation/compiled_core.py                       # 65x49x21, 8 steps
    python3 validation/compiled_core.py --grid 33x25x21 --steps 4 --dtype float32
    python3 validation/compiled_core.py --gradients --grid 21x17x11 --steps 3

Runs itself twice in fresh processes sharing one new Inductor cache
directory (TORCHINDUCTOR_CACHE_DIR): the first compiles cold, the second
finds the graphs on disk. Each process warms up two steps (the cold start's
first step, then one with the internal mode: where the graphs are made),
times --steps more without gradients, and compares every field with an
eager core's after the same steps (largest difference, relative to the
field's largest magnitude). One Markdown table to stdout, with the load
average. The tests (tests/test_compiled_core.py) check the graphs with
Dynamo alone; this is where Inductor's code is checked.

With --gradients, one cold process instead: the gradient of a window of
--steps recorded steps from the set-up (the initial t's), through the
compiled graphs (AOT autograd, Inductor; the policies decided in the
forward pass by an override, PROJECT) and eagerly: the first compiled
window (compiling), a second one, the eager one, and the largest
difference of the gradients relative to the largest eager one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from benchmark import (WARMUP, Oracle, grid_config, largest_difference, load, refuse,  # noqa: E402
                       run)

from pompy.autodiff.policies import GradientPolicy, GradientPolicyConfig  # noqa: E402
from pompy.core.explicit import ExplicitCore  # noqa: E402
from pompy.errors import ConfigError  # noqa: E402


def child(grid: str, steps: int, dtype: torch.dtype) -> dict:
    config = grid_config(grid)
    compiled = ExplicitCore(config, dtype=dtype, compile=True)
    compiled.run_initialization()
    warmup = run(compiled, WARMUP, "cpu") * WARMUP
    per_step = run(compiled, steps, "cpu")
    eager = ExplicitCore(config, dtype=dtype)
    eager.run_initialization()
    run(eager, WARMUP, "cpu")
    eager_step = run(eager, steps, "cpu")
    worst, where = largest_difference(compiled.state, eager.state, tuple(eager.state))
    return dict(warmup=warmup, ms=per_step * 1e3, eager_ms=eager_step * 1e3,
                oracle_ms=Oracle(config).time(steps) * 1e3, worst=worst, field=where,
                graphs=len(compiled.graphs._graphs), load=load())


def gradient_window(core, start: dict, steps: int) -> tuple:
    """Seconds for the forward and backward pass of a window of ``steps``
    recorded steps of ``core`` from the state ``start`` (the loss: u's
    squares, el and t summed) and the gradient with respect to the initial t."""
    core.load_state(start, iint=0)
    t0 = core.t.detach().clone().requires_grad_(True)
    core.t = t0
    core.iend = steps
    begin = time.perf_counter()
    core.run_time_loop()
    (core.u.square().sum() + core.el.sum() + core.t.sum()).backward()
    return time.perf_counter() - begin, t0.grad


def gradient_child(grid: str, steps: int, dtype: torch.dtype) -> dict:
    """The gradient through compiled recorded steps (AOT autograd with
    Inductor) against eager's: the compiled core's first window compiles,
    its second is timed; the eager core's second window is timed."""
    config = grid_config(grid)
    policies = GradientPolicyConfig(override=GradientPolicy.PROJECT)
    times, grads = {}, {}
    for compile in (True, False):
        core = ExplicitCore(config, dtype=dtype, compile=compile, policies=policies)
        core.run_initialization()
        start = core.numpy_state()
        first, _ = gradient_window(core, start, steps)
        times[compile], grads[compile] = gradient_window(core, start, steps)
        times["first", compile] = first
    worst = ((grads[True] - grads[False]).abs().max() / grads[False].abs().max()).item()
    return dict(warmup=times["first", True], compiled_s=times[True], eager_s=times[False],
                worst=worst, load=load())


def gradients(args) -> None:
    """One cold process: the gradient table."""
    print(f"| {args.grid} {args.dtype}, {args.steps} recorded steps, {args.threads} thread(s) "
          "| first window (s, compiling) | compiled window (s) | eager window (s) "
          "| compiled / eager | largest difference from eager (relative) | load avg |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, __file__, "--child", "--gradients", "--grid",
                              args.grid, "--steps", str(args.steps), "--dtype", args.dtype,
                              "--threads", str(args.threads)],
                             env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache),
                             capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compiled_core: the gradient run failed:\n{out.stderr[-4000:]}")
    r = json.loads(out.stdout.splitlines()[-1])
    print(f"| forward + backward | {r['warmup']:.1f} | {r['compiled_s']:.2f} | "
          f"{r['eager_s']:.2f} | {r['compiled_s'] / r['eager_s']:.2f} | {r['worst']:.1e} | "
          f"{r['load']} |", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="65x49x21", help="IMxJMxKB")
    parser.add_argument("--steps", type=int, default=8, help="timed internal steps")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--gradients", action="store_true",
                        help="time and check the gradient through --steps recorded steps instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.threads < 1:
        refuse(f"--steps {args.steps}, --threads {args.threads}: at least 1")
    try:
        grid_config(args.grid)
    except (ValueError, ConfigError) as exc:
        refuse(f"--grid {args.grid}: {exc}")
    torch.set_num_threads(args.threads)
    if args.child:
        work = gradient_child if args.gradients else child
        print(json.dumps(work(args.grid, args.steps, getattr(torch, args.dtype))))
        return
    if args.gradients:
        gradients(args)
        return
    print(f"| {args.grid} {args.dtype}, {args.threads} thread(s) | Inductor cache | warm-up (s) "
          "| graphs | ms / step | eager ms / step | oracle ms / step | compiled / oracle "
          "| largest difference from eager | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        for run in ("cold", "warm"):
            out = subprocess.run([sys.executable, __file__, "--child", "--grid", args.grid,
                                  "--steps", str(args.steps), "--dtype", args.dtype,
                                  "--threads", str(args.threads)],
                                 env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"compiled_core: the {run} run failed:\n{out.stderr[-4000:]}")
            r = json.loads(out.stdout.splitlines()[-1])
            print(f"| {run} | {'empty' if run == 'cold' else 'filled'} | {r['warmup']:.1f} | "
                  f"{r['graphs']} | {r['ms']:.1f} | {r['eager_ms']:.1f} | {r['oracle_ms']:.1f} | "
                  f"{r['ms'] / r['oracle_ms']:.2f} | {r['worst']:.1e} ({r['field']}) | "
                  f"{r['load']} |", flush=True)


if __name__ == "__main__":
    main()
