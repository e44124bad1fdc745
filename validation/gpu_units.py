"""validation/gpu_check.py's units of (a) parity and (b) speed, each run
in a process of its own (``gpu_check.py --unit KIND --spec JSON``), and
what every unit shares: a unit prints its results as they come (RESULT +
JSON on stdout, :func:`emit`), so that a unit killed at its time box
still reports what it measured by then. The training unit of (c) is
validation/gpu_train.py; the parent (the parts, their boxes, the
tables) is gpu_check.py.

The cuda-graph mode captures one internal step as a pure function of
the state (:func:`step_in_place`), composed from Core's public pass
methods as pompy.core.ensemble composes its batched step: the external
pass, the free-surface part's checks, the internal pass and the
finiteness flag, nothing read on the host.
"""
from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # validation/benchmark.py: its set-up, windows and comparisons

RESULT = "GPU_CHECK_RESULT "          # a child's result lines on stdout
SKIPPING = "skipping cudagraphs"     # Inductor's reason for a graph run without one


def emit(**result) -> None:
    print(RESULT + json.dumps(result, default=float), flush=True)


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def make_core(name: str, config, device: str, compile: bool = False):
    """The core ``name`` set up (iint 0), float64."""
    import torch

    from pompy import cores

    core = cores.get(name).make(config, device=device, dtype=torch.float64, compile=compile)
    core.run_initialization()
    return core


def grid_config(spec: str):
    """benchmark.grid_config, but for a grid too shallow for the seamount's
    kl1 (6): kl1 then kb-3, at least 2 (16x12x6: 3)."""
    import dataclasses

    from pompy.config import load_config

    im, jm, kb = (int(x) for x in spec.split("x"))
    seamount = load_config(benchmark.CONFIG)
    kl1 = max(2, min(seamount.kl1, kb - 3))
    if kl1 == seamount.kl1:
        return benchmark.grid_config(spec)
    return dataclasses.replace(seamount, im=im, jm=jm, kb=kb, kl1=kl1, kl2=kb - 2, days=1.0)


def parity_config(spec: str):
    from pompy.config import load_config

    if spec == "seamount":
        return load_config(benchmark.CONFIG)
    return grid_config(spec)


# ======================================================================
# (a) parity


def unit_parity(spec: dict) -> None:
    """(a): each core ``steps`` steps on the CPU and on the device, float64."""
    from pompy import variables

    config = parity_config(spec["grid"])
    names = variables.names("prognostic")
    emit(kind="device", name=device_name(spec["device"]),
         grid=f"{config.im}x{config.jm}x{config.kb}")
    for core in spec["cores"]:
        try:
            cpu = make_core(core, config, "cpu")
            cpu_s = benchmark.run(cpu, spec["steps"], "cpu") * spec["steps"]
            dev = make_core(core, config, spec["device"])
            dev_s = benchmark.run(dev, spec["steps"], spec["device"]) * spec["steps"]
            fields = {n: benchmark.largest_difference(dev.state, cpu.state, [n])[0]
                      for n in names if n in cpu.state}
            worst = max(fields, key=fields.get)
            emit(kind="parity", core=core, steps=spec["steps"], fields=fields,
                 worst=fields[worst], worst_field=worst, cpu_s=cpu_s, device_s=dev_s)
        except Exception as exc:            # a stop or a fault: reported, the next core runs
            emit(kind="parity", core=core, steps=spec["steps"], error=error_text(exc))


# ======================================================================
# (b) speed


class TwinOracle:
    """benchmark.Oracle for either core's Fortran twin: its run stepped on
    from one timed window to the next."""

    def __init__(self, config, core: str):
        from pompy.oracle.driver import new_state, run_steps

        self.run_steps = run_steps
        self.config, self.core, self.state = config, core, new_state(config)
        self.iint = benchmark.WARMUP
        run_steps(self.state, config, 1, benchmark.WARMUP, core=core)

    def time(self, steps: int) -> float:
        """Seconds per step of ``steps`` more steps, after an untimed one."""
        import gc

        self.run_steps(self.state, self.config, self.iint + 1, self.iint + 1, core=self.core)
        gc.collect()
        start = time.perf_counter()
        self.run_steps(self.state, self.config, self.iint + 2, self.iint + steps + 1,
                       core=self.core)
        self.iint += steps + 1
        return (time.perf_counter() - start) / steps


def warmed(core_name: str, config, device: str, compile: bool = False):
    """A core after benchmark.WARMUP steps, and their seconds."""
    core = make_core(core_name, config, device, compile)
    start = time.perf_counter()
    benchmark.run(core, benchmark.WARMUP, device)
    return core, time.perf_counter() - start


def versus_eager(core, core_name: str, config, device: str) -> float:
    """The largest prognostic difference of ``core`` from an eager core of
    the same steps on the same device."""
    from pompy import variables

    eager = make_core(core_name, config, device)
    benchmark.run(eager, core.iint, device)
    return benchmark.largest_difference(core.state, eager.state,
                                        variables.names("prognostic"))[0]


def forcing_ramp(core, step):
    """The forcing ramp of ``core``'s step ``step`` (a step number, or a
    float64 tensor of one: the ramp a tensor too), as the core fixes it for
    that step: the step's time over the inertial period, at most 1 (1
    without lramp); the same operations in the same order, so the same bits."""
    config = core.config
    if not config.lramp:
        return 1.0
    ramp = (step * config.dti / 86400.0 + core.time0) / core.period
    return ramp.clamp_max(1.0) if hasattr(ramp, "clamp_max") else min(ramp, 1.0)


def step_in_place(core):
    """(step, state): ``step()`` advances ``state``, a copy of ``core``'s, by
    one internal step (iint+1 of ``core`` at the first call, one more at
    each call after it) in place and returns the step's may-go-on flag, a
    tensor: the core's pass from its public parts (external_pass, the
    part's checks, internal_pass, stepping.finite), under the core's
    gradient policies, with nothing read on the host; the step's number a
    tensor on the device (its forcing ramp computed there), the new state
    copied over ``state`` (a new value that is an input, a time level
    passed on, copied before any input is written). What cuda-graph mode
    captures: each replay the next step."""
    import torch

    from pompy.autodiff.policies import layer_policies
    from pompy.core import stepping

    iint = core.iint + 1
    routines, time0, part = dict(core.routines), core.time0, core.external
    if core.runs_internal_mode(iint, time0) != core.runs_internal_mode(iint + 1, time0):
        raise ValueError(f"step {iint} skips the internal mode, the steps after it do not (a "
                         "cold start's first step): a graph of it is no other step's")
    number = torch.tensor(float(iint), dtype=torch.float64, device=core.device)
    state = {k: v.clone() for k, v in core.state.items()}
    inputs = {v.untyped_storage().data_ptr() for v in state.values()}

    def step():
        p = dict(core.params, ramp=forcing_ramp(core, number))
        with core.policies.activate(), layer_policies(core.policies.layers):
            new = core.external_pass(state, p, routines)
            checks = {n: new.pop(n) for n in part.checks}
            new = core.internal_pass(new, iint, p, routines, time0)
            going = part.within(core.config, checks) & stepping.finite(new)
        staged = {k: (v.clone() if v.untyped_storage().data_ptr() in inputs else v)
                  for k, v in new.items() if k in state and v is not state[k]}
        for k, v in staged.items():
            state[k].copy_(v)
        if core.config.lramp:               # the next step's ramp (none to compute without)
            number.add_(1.0)
        return going
    return step, state


def capture_step(core):
    """step_in_place(core) captured as a CUDA graph, after one step run
    eagerly on a side stream (lazy initialisations outside the capture):
    (graph, the state each replay steps, the flag)."""
    import torch

    step, state = step_in_place(core)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        going = step()
    return graph, state, going


def cuda_graph_row(core, spec: dict) -> dict:
    """The cuda-graph mode on the eager ``core`` (left ``steps`` steps on)."""
    import torch

    from pompy import variables
    from pompy.core.model import forward_only

    device, steps = spec["device"], spec["steps"]
    if not device.startswith("cuda"):
        return dict(status="not run", reason="CUDA graphs need a CUDA device (--device cpu)")
    try:
        with forward_only(core):
            start = time.perf_counter()
            graph, state, going = capture_step(core)
            graph.replay()                   # the first replay: uploads the graph
            torch.cuda.synchronize()
            capture_s = time.perf_counter() - start
            times = []
            for _ in range(spec["rounds"]):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(steps):
                    graph.replay()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / steps)
            replays = 2 + steps * spec["rounds"]      # the side stream's step, the first replay
            finite = bool(going)
        benchmark.run(core, replays, device)      # the eager core, the same steps
        diff = benchmark.largest_difference(state, core.state, variables.names("prognostic"))[0]
        del graph
        return dict(status="ok", times=times, warmup_s=capture_s, versus_eager=diff,
                    finite=finite)
    except Exception as exc:
        return dict(status="failed", reason=error_text(exc))


def unit_speed(spec: dict) -> None:
    """(b), one grid: for each core the oracle beside the eager windows,
    then each core's cuda-graph row; or one core's compiled mode."""
    config = grid_config(spec["grid"])
    emit(kind="device", name=device_name(spec["device"]))
    if spec["mode"] == "eager":
        speed_eager(spec, config)
    else:
        speed_compiled(spec, config)


def speed_eager(spec: dict, config) -> None:
    """Each core's eager row (the oracle's windows beside its own), then,
    with ``graph``, each core's cuda-graph row."""
    eager = {}
    for core_name in spec["cores"]:
        found = eager_row(spec, config, core_name)
        if found is not None:
            eager[core_name] = found
    for core_name, (core, oracle_ms) in eager.items() if spec.get("graph") else ():
        row = cuda_graph_row(core, spec)
        if row.get("times"):
            row["ms"] = statistics.median(row["times"]) * 1e3
            row["ratio"] = row["ms"] / oracle_ms if oracle_ms else None
        emit(kind="speed", grid=spec["grid"], core=core_name, mode="cuda-graph", **row)


def eager_row(spec: dict, config, core_name: str):
    """One core's eager windows, each paired with one of its Fortran twin's
    (none where there is no oracle): (the core, the oracle's ms), or None
    where the core failed (reported)."""
    device, steps, grid = spec["device"], spec["steps"], spec["grid"]
    try:
        oracle = TwinOracle(config, core_name)
    except Exception as exc:        # no oracle here: the torch rows without a ratio
        oracle = None
        emit(kind="oracle", grid=grid, core=core_name, ms=None, error=error_text(exc))
    try:
        core, warm = warmed(core_name, config, device)
        pairs = [(oracle.time(steps) if oracle else math.nan,
                  benchmark.run(core, steps, device, untimed=1)) for _ in range(spec["rounds"])]
    except Exception as exc:        # a stop or a fault: reported, the next core runs
        emit(kind="speed", grid=grid, core=core_name, mode="eager", status="failed",
             reason=error_text(exc))
        return None
    oracle_ms = statistics.median(o for o, _ in pairs) * 1e3 if oracle else None
    if oracle:
        emit(kind="oracle", grid=grid, core=core_name, ms=oracle_ms, times=[o for o, _ in pairs])
    emit(kind="speed", grid=grid, core=core_name, mode="eager", status="ok",
         ms=statistics.median(t for _, t in pairs) * 1e3,
         ratio=statistics.median(t / o for o, t in pairs) if oracle else None,
         warmup_s=warm, times=[t for _, t in pairs], oracle_ms=oracle_ms)
    return core, oracle_ms


def reduce_overhead_set_up() -> None:
    """Inductor's CUDA graphs on (what mode="reduce-overhead" sets), and
    why it runs a graph without one on stderr (SKIPPING)."""
    import torch
    import torch._inductor.config as inductor_config

    inductor_config.triton.cudagraphs = True
    try:
        torch._logging.set_logs(perf_hints=True)
    except Exception:
        pass


def speed_compiled(spec: dict, config) -> None:
    """One core's compiled or reduce-overhead row: its warm-up (the
    compilation, reported as it ends), its windows, its state against an
    eager core's."""
    device, mode, core_name, grid = spec["device"], spec["mode"], spec["core"], spec["grid"]
    callback = None
    if mode == "reduce-overhead":
        if not device.startswith("cuda"):
            emit(kind="speed", grid=grid, core=core_name, mode=mode, status="not run",
                 reason="Inductor's CUDA graphs need a CUDA device (--device cpu)")
            return
        reduce_overhead_set_up()
        callback = next_cudagraph_step
    try:
        start = time.perf_counter()
        core = make_core(core_name, config, device, compile=True)
        run = benchmark.run if callback is None else with_callback(callback)
        run(core, benchmark.WARMUP, device)
        if callback is not None:            # Inductor records its CUDA graphs on later calls
            run(core, spec["steps"], device)
        warm = time.perf_counter() - start
        emit(kind="progress", grid=grid, core=core_name, mode=mode, warmup_s=warm)
        times = [run(core, spec["steps"], device, untimed=1) for _ in range(spec["rounds"])]
        ms = statistics.median(times) * 1e3
        row = dict(status="ok", ms=ms, warmup_s=warm, times=times)
        if spec.get("oracle_ms"):
            row["ratio"] = ms / spec["oracle_ms"]
        row["versus_eager"] = versus_eager(core, core_name, config, device)
        if callback is not None:            # graphs Inductor ran without a CUDA graph
            from torch._dynamo.utils import counters

            row["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"]
    except Exception as exc:
        row = dict(status="failed", reason=error_text(exc))
    emit(kind="speed", grid=grid, core=core_name, mode=mode, **row)


def next_cudagraph_step(core) -> None:
    """After each step of reduce-overhead mode: the state cloned (a state
    read across steps is then no output of Inductor's CUDA graphs, which
    their next replay overwrites) and a new step begun for them."""
    import torch

    core.state = {k: v.clone() for k, v in core.state.items()}
    torch.compiler.cudagraph_mark_step_begin()


def with_callback(callback):
    """benchmark.run with ``callback(core)`` after each step."""
    import gc

    from pompy.core.model import forward_only

    def run(core, steps: int, device: str, untimed: int = 0) -> float:
        with forward_only(core):
            if untimed:
                core.iend = core.iint + untimed
                core.run_time_loop(callback)
            core.iend = core.iint + steps
            gc.collect()
            benchmark.sync(device)
            start = time.perf_counter()
            core.run_time_loop(callback)
            benchmark.sync(device)
        return (time.perf_counter() - start) / steps
    return run
