"""Peak memory and time of a backward pass through N internal steps of the
seamount (65x49x21), with and without checkpointing.

    python3 validation/gradient_memory.py                  # 24, 96, 240, 960 steps
    python3 validation/gradient_memory.py --steps 24 --checkpoint steps,steps:1
    python3 validation/gradient_memory.py --compile --checkpoint steps

checkpoint "steps" is two-level (segments of ~sqrt(steps), the core's
default), "steps:K" segments of K steps (steps:1: one level).

Each case runs in a fresh subprocess, so its peak resident memory
(ru_maxrss) is its own, on the C allocator a user's `pompy` command runs
on (tcmalloc where the machine has it; POMPY_ALLOCATOR=system for glibc's:
pompy.utils.allocator): freed blocks it keeps count, so the peak is an
upper bound of the memory in use (with glibc, MALLOC_MMAP_THRESHOLD_=65536, which hands
every freed tensor back to the system, measured 0.98 against 1.27 GB at
240 steps, but made every step 2.4-2.7 times slower with its page faults,
the backward more than the forward). The gradient is of a scalar of the final state
(sum of u**2 and el) with respect to the initial el and t, taken after two
warm-up steps (the cold start's first step has no internal mode). A case
whose estimated memory exceeds --limit-gb (from the per-step cost measured
on a short run) is reported as such instead of run. Times are wall clock
and CPU (user + system) seconds: on a shared machine the CPU time is the
steadier figure; the load average (1 min) at the start of each case is
printed with it.

--compile runs the whole-step graphs (compile=True) under a PROJECT
override, so that recorded steps run through them too (AOT autograd;
pompy.core.compiled); a two-step gradient before the timing compiles the
graphs or loads them from Inductor's on-disk cache (its seconds: the
warm-up column).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":      # each case on the allocator of `pompy train` (pompy.utils.allocator)
    from pompy.utils.allocator import reexec
    reexec()

ROOT = Path(__file__).parents[1]


def one_case(steps: int, checkpoint: str | None, compile: bool = False) -> dict:
    import torch

    from pompy.autodiff.policies import GradientPolicy, GradientPolicyConfig
    from pompy.config import load_config
    from pompy.core.explicit import ExplicitCore
    from pompy.utils import allocator

    mode, _, segment = (checkpoint or "").partition(":")
    # compiled recorded steps need every gradient policy decided in the
    # forward pass (pompy.core.compiled): PROJECT, the built-in default
    policies = GradientPolicyConfig(override=GradientPolicy.PROJECT) if compile else None
    core = ExplicitCore(load_config(ROOT / "configs" / "seamount.nml"), checkpoint=mode or None,
                        compile=compile, policies=policies)
    core.checkpoint_segment = int(segment) if segment else None
    core.run_initialization()
    core.iend = 2
    core.run_time_loop()
    warm_up = 0.0
    if compile:     # the graphs compiled (or loaded from Inductor's cache) before the timing
        start, clock = core.capture(), time.perf_counter()
        _gradient(core, 2)
        warm_up = time.perf_counter() - clock
        core.restore(start)
        del start
    load = os.getloadavg()[0]
    el0, t0, (forward, forward_cpu), (total, total_cpu) = _gradient(core, steps)
    finite = bool(torch.isfinite(el0.grad).all() and torch.isfinite(t0.grad).all())
    return dict(steps=steps, checkpoint=checkpoint, compile=compile, forward_s=forward,
                backward_s=total - forward, forward_cpu_s=forward_cpu,
                backward_cpu_s=total_cpu - forward_cpu, warm_up_s=warm_up, load=load,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, finite=finite,
                allocator=allocator.in_use())


def _gradient(core, steps: int):
    """The gradient of the loss after ``steps`` more steps with respect to
    the core's el and t now: (el0, t0) holding it, and the wall and CPU
    seconds of the forward pass and of forward and backward together."""
    el0 = core.el.detach().clone().requires_grad_(True)
    t0 = core.t.detach().clone().requires_grad_(True)
    core.el, core.t = el0, t0
    core.iend = core.iint + steps
    start, cpu = time.perf_counter(), time.process_time()
    core.run_time_loop()
    forward = time.perf_counter() - start, time.process_time() - cpu
    (core.u.square().sum() + core.el.sum()).backward()
    return el0, t0, forward, (time.perf_counter() - start, time.process_time() - cpu)


def run_case(steps: int, checkpoint: str | None, compile: bool = False) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", str(steps), str(checkpoint),
                          str(int(compile))], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="24,96,240,960")
    parser.add_argument("--checkpoint", default="none,routines,steps")
    parser.add_argument("--limit-gb", type=float, default=20.0)
    parser.add_argument("--compile", action="store_true",
                        help="whole-step graphs (compile=True) under a PROJECT override")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        steps, mode = int(args.one[0]), (None if args.one[1] == "None" else args.one[1])
        print(json.dumps(one_case(steps, mode, bool(int(args.one[2])))))
        return
    modes = [None if m == "none" else m for m in args.checkpoint.split(",")]
    warm = " warm-up (s) |" if args.compile else ""
    print("| steps | checkpoint | forward (s) | backward (s) | backward / forward "
          f"| peak memory (GB) | load |{warm}")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.compile else ""))
    label = ", compiled" if args.compile else ""
    for mode in modes:
        probe = [run_case(n, mode, args.compile) for n in (4, 12)]
        allocator = probe[0]["allocator"]
        per_step = (probe[1]["peak_gb"] - probe[0]["peak_gb"]) / 8
        base = probe[0]["peak_gb"] - 4 * per_step
        for steps in (int(s) for s in args.steps.split(",")):
            estimate = base + per_step * steps
            if estimate > args.limit_gb:
                print(f"| {steps} | {mode or 'none'}{label} | - | - | - | not run: ~{estimate:.0f} GB "
                      f"estimated ({per_step * 1e3:.0f} MB per step) | |{' |' if warm else ''}",
                      flush=True)
                continue
            r = run_case(steps, mode, args.compile)
            print(f"| {steps} | {mode or 'none'}{label} | {r['forward_s']:.1f} ({r['forward_cpu_s']:.1f} CPU) "
                  f"| {r['backward_s']:.1f} ({r['backward_cpu_s']:.1f} CPU) "
                  f"| {r['backward_s'] / r['forward_s']:.1f} "
                  f"({r['backward_cpu_s'] / r['forward_cpu_s']:.1f} CPU) "
                  f"| {r['peak_gb']:.2f}{'' if r['finite'] else ' (NOT FINITE)'} "
                  f"| {r['load']:.1f} |" + (f" {r['warm_up_s']:.0f} |" if warm else ""), flush=True)
    print(f"\nEach case on the {allocator} allocator.")

if __name__ == "__main__":
    main()
