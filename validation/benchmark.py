"""Time per internal step: the torch core against the Fortran oracle.

    python3 validation/benchmark.py                       # 65x49x21 and 256x256x31
    python3 validation/benchmark.py --grids 65x49x21 --steps 10 --no-compile
    python3 validation/benchmark.py --device cuda --grids 256x256x31,360x240x25

In one process and on the same seamount set-up (mode 3, nadv 1, dte 6 s,
isplit 30), each model first takes two steps (pom2k's first step skips the
internal mode; torch.compile compiles then), then a full garbage collection
(the oracle's too: else the one that follows a compilation, of some
700,000 new Python objects, fell in the next timed steps: 66 against
39-43 ms a compiled step at 65x49x21), then the timed steps: --rounds
windows of --steps steps, each right after a window of the oracle's run
(which steps on from window to window), so that both see the machine in
the same state; the oracle's step alone varied by 25% from one run to the
next (8.1 to 10.3 ms at 65x49x21). The
oracle is the Fortran driver (run_steps) built -O3, single-threaded; torch
uses torch.get_num_threads() CPU threads (--threads) or the GPU, stepping
as ``pompy run`` does (forward_only: inference mode, no_grad when
compiled), on the C allocator `pompy run` has (tcmalloc where the
machine has it; POMPY_ALLOCATOR=system for the system's: pompy.utils.allocator).
Stepped so on the CPU, the eager core runs its external passes on numpy
views of the 2-D fields (pompy.core.external.split.to_host); the row
"passes on tensors" times the eager float64 step with them on tensors, as
a gradient step runs them.
The machine's load average (1 min) is printed with each measurement.

Five Markdown tables go to stdout:

- ms per internal step (the median of the rounds; the oracle's over all its
  windows), the ratio to the oracle (the median of the rounds' ratios,
  each torch window against the oracle's beside it), the median of the
  oracle's windows beside the row's, the warm-up (compilation);
- the eager rows' step by phase (ms per step), timed over ``--steps`` more steps
  by wrapping the core's routine table and its external mode (the physics
  untouched): surface forcing; the 3-D terms of the 2-D mode (advct,
  baropg, smagorinsky, vertical_averages); the external passes (isplit
  external steps with their bcond and advave); vertvl with bcond(5);
  turbulence (advq, profq, bcond(6)); tracers (advt1/advt2, proft,
  bcond(4), dens); momentum (advu, advv, profu, profv, bcond(3)); the rest
  of internal_step (velocity adjustment, Asselin filters); the finiteness
  check (a host read); the rest of the step (end_of_step, loop glue). On a
  GPU every phase boundary synchronises, so phases add up to more than the
  unhooked step;
- I/O: one output record (numpy_state and OutputWriter.write, compressed)
  and what it costs per step at the config's record interval, written in
  the caller's thread and by `pompy run`'s background writer (the caller's
  share: its write() calls and the close, the core stepping the record
  interval, at most 10 steps, after each; with no core free for the
  writer's thread the stepping slows too, which this share leaves out);
- torch calls per step of the eager rows: every torch function, tensor
  method, operator and tensor property the step calls (a
  TorchFunctionMode), and the ATen operators the dispatcher runs for them
  (torch.profiler, nested operators included); the host passes' numpy
  operations are not torch calls and are not counted;
- the same counted step's calls by the data they touch, each call's own
  time summed (calls, ms, and ms as a multiple of the oracle's step
  beside the row): arithmetic on 3-D fields (whole-field passes, where
  the Fortran evaluates an expression in one loop), copies and selects of
  3-D fields, calls on 2-D fields or smaller, views and metadata (each
  call timed alone, the counting's own work outside it).

With ``--device cuda`` the float64 GPU state after the timed steps is also
compared with a CPU run of the same steps (largest difference of a
prognostic field relative to its largest magnitude).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":      # on the allocator of `pompy run`, chosen before torch loads
    from pompy.utils.allocator import reexec
    reexec()

import torch
from torch.overrides import TorchFunctionMode

from pompy import variables
from pompy.config import load_config
from pompy.core import stepping
from pompy.core.explicit import ExplicitCore
from pompy.core.model import forward_only
from pompy.driver import record_steps
from pompy.errors import ConfigError
from pompy.io import OutputWriter
from pompy.oracle.driver import new_state, run_steps
from pompy.utils import allocator

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
WARMUP = 2

# phases of a step: the routines of the time loop by pom2k name (bcond by its idx)
FORCING, TERMS, EXTERNAL, VERTVL = "forcing", "3-D terms", "external passes", "vertvl"
TURBULENCE, TRACERS, MOMENTUM = "turbulence", "tracers", "momentum"
INTERNAL, CHECK, REST = "internal rest", "finite check", "rest"
PHASES = (FORCING, TERMS, EXTERNAL, VERTVL, TURBULENCE, TRACERS, MOMENTUM, INTERNAL, CHECK, REST)
ROUTINE_PHASE = {
    "surface_forcing": FORCING,
    "advct": TERMS, "baropg": TERMS, "smagorinsky": TERMS, "vertical_averages": TERMS,
    "vertvl": VERTVL,
    "advq": TURBULENCE, "profq": TURBULENCE,
    "advt1": TRACERS, "advt2": TRACERS, "proft": TRACERS, "dens": TRACERS,
    "advu": MOMENTUM, "advv": MOMENTUM, "profu": MOMENTUM, "profv": MOMENTUM,
}
BCOND_PHASE = {1: EXTERNAL, 2: EXTERNAL, 3: MOMENTUM, 4: TRACERS, 5: VERTVL, 6: TURBULENCE}


def grid_config(spec: str):
    im, jm, kb = (int(x) for x in spec.split("x"))
    return dataclasses.replace(load_config(CONFIG), im=im, jm=jm, kb=kb, kl2=kb - 2, days=1.0)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def refuse(message: str) -> None:
    """A bad option: one line, exit 2."""
    print(f"pompy: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_device(device: str) -> None:
    """Refuse a device this torch cannot run on."""
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        refuse(f"--device {device}: {exc}")
    if kind not in ("cpu", "cuda"):
        refuse(f"--device {device}: cpu or cuda")
    if kind == "cuda" and not torch.cuda.is_available():
        why = ("this torch is built without CUDA" if torch.version.cuda is None
               else "no CUDA device is visible")
        refuse(f"--device {device}: {why} (torch {torch.__version__}); run with --device cpu")


class Oracle:
    """The oracle's run, stepped on from one timed window to the next (so
    that each torch window has an oracle window beside it)."""

    def __init__(self, config):
        self.config, self.state, self.iint = config, new_state(config), WARMUP
        run_steps(self.state, config, 1, WARMUP)

    def time(self, steps: int) -> float:
        """Seconds per step of ``steps`` more steps, after an untimed one
        (its arrays back in the caches a torch window used)."""
        run_steps(self.state, self.config, self.iint + 1, self.iint + 1)
        gc.collect()        # not the collection a compiled row left pending
        start = time.perf_counter()
        run_steps(self.state, self.config, self.iint + 2, self.iint + steps + 1)
        self.iint += steps + 1
        return (time.perf_counter() - start) / steps


def new_core(config, dtype, device: str, compile: bool):
    """A core after its warm-up steps, and the warm-up's seconds."""
    core = ExplicitCore(config, device=device, dtype=dtype, compile=compile)
    core.run_initialization()
    start = time.perf_counter()
    run(core, WARMUP, device)
    return core, time.perf_counter() - start


def run(core, steps: int, device: str, untimed: int = 0) -> float:
    """Seconds per step of ``steps`` more steps as ``pompy run`` steps
    (forward_only), in the steady state: ``untimed`` steps first (the
    core's arrays back in the caches the oracle's window used), the
    compilation's Python objects collected."""
    with forward_only(core):
        if untimed:
            core.iend = core.iint + untimed
            core.run_time_loop()
        core.iend = core.iint + steps
        gc.collect()
        sync(device)
        start = time.perf_counter()
        core.run_time_loop()
        sync(device)
    return (time.perf_counter() - start) / steps


class PhaseClock:
    """Exclusive time by phase: a phase entered inside another pauses it,
    except inside a leaf phase (the external passes), which owns its calls."""

    def __init__(self, device: str):
        self.device = device
        self.seconds: collections.Counter = collections.Counter()
        self.stack: list[list] = []

    def _now(self) -> float:
        sync(self.device)
        return time.perf_counter()

    def timed(self, fn, phase, leaf: bool = True):
        """fn, its time counted in ``phase`` (a label, or a function of the
        call's keyword arguments giving one)."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if self.stack and self.stack[-1][2]:
                return fn(*args, **kwargs)
            label = phase(kwargs) if callable(phase) else phase
            now = self._now()
            if self.stack:
                self.seconds[self.stack[-1][0]] += now - self.stack[-1][1]
            self.stack.append([label, now, leaf])
            try:
                return fn(*args, **kwargs)
            finally:
                now = self._now()
                self.seconds[label] += now - self.stack.pop()[1]
                if self.stack:
                    self.stack[-1][1] = now
        return wrapper


def routine_phase(name: str):
    if name == "bcond":
        return lambda kwargs: BCOND_PHASE[kwargs["idx"]]
    return ROUTINE_PHASE.get(name, REST)


def phase_times(core, steps: int, device: str) -> dict[str, float]:
    """ms per step by phase over ``steps`` more steps, hooks removed after."""
    clock = PhaseClock(device)
    routines, external = core.routines, core.external.external_mode
    internal, finite = stepping.internal_step, stepping.finite
    core.routines = {name: clock.timed(fn, routine_phase(name)) for name, fn in routines.items()}
    core.external.external_mode = clock.timed(external, EXTERNAL)
    stepping.internal_step = clock.timed(internal, INTERNAL, leaf=False)
    stepping.finite = clock.timed(finite, CHECK)
    try:
        per_step = run(core, steps, device)
    finally:
        core.routines = routines
        del core.external.external_mode
        stepping.internal_step, stepping.finite = internal, finite
    missed = [p for p in (EXTERNAL, INTERNAL, CHECK) if p not in clock.seconds]
    if missed:      # the core no longer calls what the hooks wrap: its time went to "rest"
        print(f"benchmark: the phase hooks missed {', '.join(missed)}", file=sys.stderr)
    ms = {phase: clock.seconds[phase] / steps * 1e3 for phase in PHASES if phase != REST}
    ms[REST] = per_step * 1e3 - sum(ms.values())
    ms["step"] = per_step * 1e3
    return ms


# what the eager step's calls touch (CallCount): arithmetic on 3-D fields
# (whole-field passes, which the Fortran fuses into one loop an expression),
# copies and selects of 3-D fields, calls on 2-D fields or smaller (each
# mostly its own overhead), views and metadata
ARITHMETIC_3D, COPIES_3D, SMALL, VIEWS = ("3-D arithmetic", "3-D copies and selects",
                                          "2-D and smaller", "views and metadata")
DATA_CLASSES = (ARITHMETIC_3D, COPIES_3D, SMALL, VIEWS)
_VIEW_CALLS = frozenset({"__getitem__", "narrow", "unbind", "split", "permute", "t", "view",
                         "unsqueeze", "expand", "__get__", "select", "reshape", "size", "dim",
                         "is_contiguous", "detach", "__len__"})
_COPY_CALLS = frozenset({"clone", "cat", "stack", "contiguous", "__setitem__", "new_full",
                         "zeros_like", "copy_", "pad", "full_like", "new_empty", "where", "flip"})


class CallCount(TorchFunctionMode):
    """Every torch function, method, operator and property called, and each
    call's own time by the data it touches (DATA_CLASSES): a 3-D field is
    any tensor of more than ``plane`` (im*jm) elements among its operands
    and result."""

    def __init__(self, plane: int):
        super().__init__()
        self.calls, self.plane = 0, plane
        self.seconds: collections.Counter = collections.Counter()
        self.count: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        spent = time.perf_counter() - start
        name = getattr(func, "__name__", "")
        if name in _VIEW_CALLS:
            kind = VIEWS
        else:
            tensors = [a for a in (*args, out) if torch.is_tensor(a)]
            tensors += [t for a in args if isinstance(a, (list, tuple)) for t in a if torch.is_tensor(t)]
            large = any(t.numel() > self.plane for t in tensors)
            kind = SMALL if not large else COPIES_3D if name in _COPY_CALLS else ARITHMETIC_3D
        self.seconds[kind] += spent
        self.count[kind] += 1
        return out


def count_calls(core, device: str) -> tuple[int, int, CallCount]:
    """(torch calls, ATen operators) of one more step, and the counter
    (its calls' time by data class, that step's)."""
    counter = CallCount(core.config.im * core.config.jm)
    with counter:
        run(core, 1, device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(core, 1, device)
    aten = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    return counter.calls, aten, counter


def output_record_ms(core, device: str, steps_between: int, records: int = 3) -> tuple[float, float]:
    """ms to copy the state to the host and write one compressed output
    record: in the caller's thread, and the caller's share with `pompy
    run`'s background writer while the core steps ``steps_between`` steps
    after each record (the write() calls and the final close())."""
    with tempfile.TemporaryDirectory() as tmp:
        spent = [0.0, 0.0]
        for background in (False, True):
            writer = OutputWriter(Path(tmp) / f"{background}.nc", core.config, core.numpy_state(),
                                  background=background)
            try:
                for n in range(records):
                    start = time.perf_counter()
                    writer.write(core.numpy_state(), core.iint, float(n))
                    spent[background] += time.perf_counter() - start
                    if background:
                        run(core, steps_between, device)
            finally:
                start = time.perf_counter()
                writer.close()
                spent[background] += time.perf_counter() - start
        return spent[0] / records * 1e3, spent[1] / records * 1e3


def cuda_vs_cpu(core, config) -> float:
    """The largest difference between ``core``'s prognostic fields and a
    float64 CPU run of the same steps, relative to each field's largest
    magnitude."""
    cpu = ExplicitCore(config, dtype=torch.float64)
    cpu.run_initialization()
    run(cpu, core.iint, "cpu")
    return largest_difference(core.state, cpu.state, variables.names("prognostic"))[0]


def largest_difference(state, reference, names) -> tuple[float, str]:
    """The largest difference of ``state``'s fields ``names`` from
    ``reference``'s (on its device, in its dtype), relative to each
    reference field's largest magnitude, and the field."""
    worst, where = 0.0, names[0]
    for name in names:
        want = reference[name]
        got = state[name].to(want.device, want.dtype)
        scale = want.abs().max().item()
        diff = (got - want).abs().max().item() / (scale if scale > 0 else 1.0)
        if diff > worst:
            worst, where = diff, name
    return worst, where


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default="65x49x21,256x256x31", help="IMxJMxKB, comma separated")
    parser.add_argument("--steps", type=int, default=5, help="timed internal steps per window")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed windows per model, each beside one of the oracle's")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    args = parser.parse_args(argv)
    check_device(args.device)
    if min(args.steps, args.rounds, 1 if args.threads is None else args.threads) < 1:
        refuse(f"--steps {args.steps}, --rounds {args.rounds}, --threads {args.threads}: at least 1")
    configs = {}
    for spec in args.grids.split(","):
        try:
            configs[spec] = grid_config(spec)
        except (ValueError, ConfigError) as exc:
            refuse(f"--grids {spec}: {exc}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
          f"allocator {allocator.in_use()}"
          + (f", {torch.cuda.get_device_name(args.device)}" if args.device.startswith("cuda")
             else ""))
    print()
    print("| grid | model | ms / internal step | torch / oracle | oracle beside (ms) | warm-up (s) "
          "| load avg |")
    print("|---|---|---|---|---|---|---|")
    phases, calls, io, parity = [], [], [], []
    for spec, config in configs.items():
        oracle, oracle_times, rows = Oracle(config), [], []
        for dtype, compile, host in models(args):
            label = (f"torch {str(dtype)[6:]} {args.device}" + (" compiled" if compile else "")
                     + ("" if host else ", passes on tensors"))
            core, warm = new_core(config, dtype, args.device, compile)
            core.external.host_passes = host
            rounds = [(oracle.time(args.steps), run(core, args.steps, args.device, untimed=1))
                      for _ in range(args.rounds)]
            oracle_times += [o for o, _ in rounds]
            per_step = statistics.median(t for _, t in rounds)
            ratio = statistics.median(t / o for o, t in rounds)
            beside = statistics.median(o for o, _ in rounds)
            rows.append(f"| {spec} | {label} | {per_step * 1e3:.1f} | {ratio:.2f} | "
                        f"{beside * 1e3:.1f} | {warm:.1f} | {load()} |")
            if not compile:     # hooks inside whole-step graphs would break them
                phases.append((spec, label, phase_times(core, args.steps, args.device),
                               load()))
                calls.append((spec, label, *count_calls(core, args.device), beside))
            if dtype == torch.float64 and not compile and host:
                every = len(record_steps(config, 1, 1000)) / 1000
                between = min(round(1 / every), 10)
                io.append((spec, label, *output_record_ms(core, args.device, between), every))
                if args.device != "cpu":
                    parity.append((spec, label, core.iint, cuda_vs_cpu(core, config)))
        print(f"| {spec} | oracle (Fortran -O3, 1 thread) | "
              f"{statistics.median(oracle_times) * 1e3:.1f} | 1 | | | {load()} |")
        print("\n".join(rows), flush=True)

    print_tables(phases, io, calls, parity)


def models(args) -> list[tuple]:
    """(dtype, compile, host passes) of each torch row: float64 and float32,
    eager and compiled; on the CPU the eager float64 step with its external
    passes on tensors too (as a gradient step runs them), beside the same
    step with them on host arrays (pompy.core.external.split.to_host)."""
    rows = []
    for dtype in (torch.float64, torch.float32):
        for compile in (False, True) if not args.no_compile else (False,):
            rows.append((dtype, compile, True))
            if dtype == torch.float64 and not compile and args.device == "cpu":
                rows.append((dtype, compile, False))
    return rows


def print_tables(phases: list, io: list, calls: list, parity: list) -> None:
    """The tables after the timings: phases, output records, calls, data
    classes, and the CUDA runs' difference from the CPU."""
    print()
    print("| grid | model | " + " | ".join(PHASES) + " | step | load avg |")
    print("|---|---|" + "---|" * (len(PHASES) + 2))
    for spec, label, ms, avg in phases:
        print(f"| {spec} | {label} | " + " | ".join(f"{ms[p]:.1f}" for p in PHASES)
              + f" | {ms['step']:.1f} | {avg} |")
    print()
    print("| grid | model | output record (ms) | records / step | I/O ms / step "
          "| in the background: ms / record | ms / step |")
    print("|---|---|---|---|---|---|---|")
    for spec, label, ms, background, every in io:
        print(f"| {spec} | {label} | {ms:.1f} | {every:.3f} | {ms * every:.1f} | "
              f"{background:.1f} | {background * every:.1f} |")
    print()
    print("| grid | model | torch calls / step | ATen operators / step |")
    print("|---|---|---|---|")
    for spec, label, torch_calls, aten, _, _ in calls:
        print(f"| {spec} | {label} | {torch_calls} | {aten} |")
    print()
    print("| grid | model | " + " | ".join(f"{kind}: calls, ms, x oracle" for kind in DATA_CLASSES)
          + " |")
    print("|---|---|" + "---|" * len(DATA_CLASSES))
    for spec, label, _, _, counter, beside in calls:
        step = beside * 1e3         # the oracle's step beside the row's windows
        print(f"| {spec} | {label} | " + " | ".join(
            f"{counter.count[kind]}, {counter.seconds[kind] * 1e3:.1f}, "
            f"{counter.seconds[kind] * 1e3 / step:.2f}" for kind in DATA_CLASSES) + " |")
    for spec, label, steps, worst in parity:
        print(f"\n{spec} {label}: after {steps} steps, the largest prognostic difference from "
              f"float64 CPU is {worst:.2e} of the field's largest magnitude")


if __name__ == "__main__":
    main()
