"""Time and memory of training physics steps: the implicit core's
internal steps under autograd, forward and backward, on the seamount at
a given grid (dti 240 s as the training configs, cg_maxiter as
configs/train_360x240.nml), with each of the trainer's
--physics_checkpoint kinds, for the estimate at 360x240x25 (docs/performance).

    python3 validation/train_step_cost.py                 # 65x49x21 and 256x256x31
    python3 validation/train_step_cost.py --grids 65x49x21 --steps 4 \
        --checkpoint none,routines,steps,steps:2 --threads 1

Each grid runs in a fresh subprocess (its own peak resident memory,
ru_maxrss). After two warm-up steps the initial el, t and u become leaves;
``steps`` steps (default 2: one correction cycle) run under autograd, then
the backward of a scalar of the final state. Reported per physics step:
forward and backward seconds, wall and CPU (this process's user + system
time: on a machine shared with other work the wall time follows the load,
the CPU time much less), the bytes autograd saved for the backward
(torch.autograd.graph's saved_tensors_hooks, each storage counted once: what
a GPU would hold too; without checkpoints only), and
the memory in use as glibc's allocator counts it (mallinfo2, whatever the
heap's fragmentation leaves resident; the resident set's peak, which
follows it only loosely, is printed as peak_rss_mb): ``kept`` is what the
forward pass leaves for the backward (in use after it less before it;
per cell and step too), ``peak`` the highest in use during forward and
backward less before them: the memory of one sample's physics
(``forward_peak_mb``: the forward pass's alone). Between the two, as the
trainer, the core's state lets go of its graph (pool.release_graphs).
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import functools
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]


class MallocInUse:
    """glibc's bytes in use (mallinfo2: heap in use plus mmapped blocks),
    now (``now()``, MB) and its highest since ``start`` (a thread reading
    it every 0.2 ms): the memory the process's tensors and the rest hold,
    whatever the heap's fragmentation leaves resident."""

    def __init__(self):
        class Info(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]
        self._info, self._libc = Info, ctypes.CDLL(None)
        self._libc.mallinfo2.restype = Info
        self.peak, self._going = 0.0, False

    def now(self) -> float:
        info = self._libc.mallinfo2()
        return (info.uordblks + info.hblkhd) / 1e6

    def start(self) -> None:
        self.peak, self._going = self.now(), True
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._going = False
        self._thread.join()
        return max(self.peak, self.now())

    def _watch(self) -> None:
        while self._going:
            self.peak = max(self.peak, self.now())
            time.sleep(2e-4)


def routine_names(stepping) -> list[str]:
    """pompy.core.stepping's routines wrapped so that ``names[-1]`` is the
    one running ("other" outside them): set before a core is built."""
    names = ["other"]

    def wrap(name, fn):
        @functools.wraps(fn)
        def named(**kwargs):
            names.append(name)
            try:
                return fn(**kwargs)
            finally:
                names.pop()
        return named
    for name, fn in list(stepping.ROUTINES.items()):
        stepping.ROUTINES[name] = wrap(name, fn)
    return names


def one_case(spec: str, steps: int, threads: int, checkpoint: str,
             by_routine: bool = False) -> dict:
    import torch

    from pompy.config import load_config
    from pompy.core import stepping
    from pompy.core.implicit import ImplicitCore
    from pompy.train.pool import build_initialized_core, release_graphs

    torch.set_num_threads(threads)
    running = routine_names(stepping) if by_routine else ["other"]
    im, jm, kb = (int(n) for n in spec.split("x"))
    maxiter = load_config(ROOT / "configs" / "train_360x240.nml").cg_maxiter
    config = dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=im, jm=jm,
                                 kb=kb, kl2=kb - 2, dte=8.0, isplit=30, cg_maxiter=maxiter)
    core = build_initialized_core(ImplicitCore, config, "cpu", torch.float64, checkpoint)
    with torch.no_grad():
        core.advance(2)
    core.restore(core.capture())
    leaves = {n: core.state[n].clone().requires_grad_(True) for n in ("el", "t", "u")}
    core.inject(leaves)
    saved: dict[int, int] = {}
    routine: dict[int, str] = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        routine.setdefault(storage.data_ptr(), running[-1])
        return t
    memory = MallocInUse()
    before = memory.now()
    memory.start()
    start, cpu0 = time.perf_counter(), time.process_time()
    # counted without checkpoints alone: a hook that keeps what it packs
    # would keep a recomputed checkpoint's forward run (its graph dropped
    # without a backward) through the output a node saves, a cycle
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) \
            if checkpoint == "none" else contextlib.nullcontext():
        core.advance(2 + steps)
    forward, cpu1 = time.perf_counter() - start, time.process_time()
    kept, forward_peak = memory.now() - before, memory.peak - before
    total = core.u.square().sum() + core.el.square().sum() + core.t.sum()
    release_graphs([core])       # as the trainer, once its loss has what it reads
    total.backward()
    backward, cpu2 = time.perf_counter() - start - forward, time.process_time()
    peak = memory.stop()
    finite = all(bool(torch.isfinite(v.grad).all()) for v in leaves.values())
    cells = im * jm * kb
    return dict(grid=spec, cells=cells, steps=steps, threads=threads, checkpoint=checkpoint,
                cg_maxiter=maxiter, forward_s_per_step=forward / steps,
                backward_s_per_step=backward / steps, forward_cpu_s_per_step=(cpu1 - cpu0) / steps,
                backward_cpu_s_per_step=(cpu2 - cpu1) / steps,
                saved_mb_per_step=sum(saved.values()) / steps / 1e6 if saved else None,
                kept_mb=kept, kept_bytes_per_cell_step=kept * 1e6 / cells / steps,
                peak_mb=peak - before, forward_peak_mb=forward_peak,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
                finite=finite, saved_mb_by_routine=_by_routine(saved, routine, steps)
                if by_routine else None)


def _by_routine(saved: dict[int, int], routine: dict[int, str], steps: int) -> dict[str, float]:
    """MB saved per step by each routine, largest first."""
    totals: dict[str, float] = {}
    for ptr, nbytes in saved.items():
        totals[routine[ptr]] = totals.get(routine[ptr], 0.0) + nbytes / steps / 1e6
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grids", default="65x49x21,256x256x31")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint", default="none",
                   help="the trainer's --physics_checkpoint kinds, comma-separated")
    p.add_argument("--by_routine", action="store_true",
                   help="without checkpoints: the bytes saved per step by each routine")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(one_case(a.one, a.steps, a.threads, a.checkpoint, a.by_routine)))
        return
    for spec in a.grids.split(","):
        for kind in a.checkpoint.split(","):
            out = subprocess.run([sys.executable, __file__, "--one", spec, "--steps",
                                  str(a.steps), "--threads", str(a.threads), "--checkpoint", kind,
                                  *(["--by_routine"] if a.by_routine else [])],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
