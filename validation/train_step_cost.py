"""Time and memory of one training physics step: the implicit core's
internal step under autograd, forward and backward, on the seamount at
a given grid (dti 240 s as the training configs, cg_maxiter as
configs/train_360x240.nml), for the estimate at 360x240x25 (docs/performance).

    python3 validation/train_step_cost.py                 # 65x49x21 and 256x256x31
    python3 validation/train_step_cost.py --grids 65x49x21 --steps 2 --threads 2

Each grid runs in a fresh subprocess (its own peak resident memory,
ru_maxrss). After two warm-up steps the initial el, t and u become leaves;
``steps`` steps (default 2: one correction cycle) run under autograd, then
the backward of a scalar of the final state. Reported per physics step:
forward and backward seconds, wall and CPU (this process's user + system
time: on a machine shared with other work the wall time follows the load,
the CPU time much less), the bytes autograd saved for the backward
(torch.autograd.graph's saved_tensors_hooks, each storage counted once: what
a GPU would hold too) and the process's peak RSS. On a large grid set
MALLOC_MMAP_THRESHOLD_=65536 (as validation/gradient_memory.py does), so
that glibc hands freed tensors back and the peak follows the memory in use
(256x256x31, 2 steps: 9.3 GB with it; killed for memory without it on a
23 GB machine).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]


def one_case(spec: str, steps: int, threads: int) -> dict:
    import torch

    from pompy.config import load_config
    from pompy.core.implicit import ImplicitCore

    torch.set_num_threads(threads)
    im, jm, kb = (int(n) for n in spec.split("x"))
    maxiter = load_config(ROOT / "configs" / "train_360x240.nml").cg_maxiter
    config = dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=im, jm=jm,
                                 kb=kb, kl2=kb - 2, dte=8.0, isplit=30, cg_maxiter=maxiter)
    core = ImplicitCore(config)
    core.run_initialization()
    with torch.no_grad():
        core.iend = 2
        core.run_time_loop()
    core.restore(core.capture())
    leaves = {n: core.state[n].clone().requires_grad_(True) for n in ("el", "t", "u")}
    core.inject(leaves)
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t
    core.iend = 2 + steps
    start, cpu0 = time.perf_counter(), time.process_time()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        core.run_time_loop()
    forward, cpu1 = time.perf_counter() - start, time.process_time()
    (core.u.square().sum() + core.el.square().sum() + core.t.sum()).backward()
    backward, cpu2 = time.perf_counter() - start - forward, time.process_time()
    finite = all(bool(torch.isfinite(v.grad).all()) for v in leaves.values())
    return dict(grid=spec, cells=im * jm * kb, steps=steps, threads=threads,
                cg_maxiter=maxiter, forward_s_per_step=forward / steps,
                backward_s_per_step=backward / steps, forward_cpu_s_per_step=(cpu1 - cpu0) / steps,
                backward_cpu_s_per_step=(cpu2 - cpu1) / steps,
                saved_mb_per_step=sum(saved.values()) / steps / 1e6,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
                finite=finite)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grids", default="65x49x21,256x256x31")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(one_case(a.one, a.steps, a.threads)))
        return
    for spec in a.grids.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", spec, "--steps", str(a.steps),
                              "--threads", str(a.threads)], capture_output=True, text=True,
                             check=True)
        print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
