"""One prepared GPU check: parity, speed, a training batch and the
certificate run, on one GPU in under 8 minutes.

On a machine with one CUDA GPU, from the repository root (pompy's
dependencies installed, the Fortran oracle built or buildable: gfortran):

    python3 validation/gpu_check.py --json gpu_check.json

With this project's ``device`` tool (an H200; its image lacks f90nml,
netCDF4 and cftime: carry them as cp312 wheels in ``.whl``, as the tool's
README says) the command is

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
    python3 -m pompy setup; python3 validation/gpu_check.py --json $OUT/gpu_check.json

with ``carry: [".whl"]`` and ``timeout_s`` 600: the figures come back in
gpu_check.json (written again after each part) and as Markdown tables in
the output. The oracle is built first (``pompy setup``; the script builds
it too if it can), outside the budget; without it (no gfortran there)
the oracle rows of (b) are missing and (d) fails, and the other parts
run. Where the set-up took long, lower ``--budget`` to stay inside the
tool's limit.

Four parts, run in the order a, d, c, b, each in subprocesses of its own
and time-boxed so that the whole stays within ``--budget`` seconds
(default 480; a part's box is its share of what is left, SHARES, and
what a part leaves unused passes to the next; a unit that runs past its
box is killed with its children and reported as such, with what it had
measured by then); ``--parts`` runs some of them:

(a) parity: float64 CUDA against CPU for both cores over ``--steps``
    (240) internal steps of the seamount (configs/seamount.nml, 65x49x21;
    ``--parity-grid`` for another): for each prognostic field the largest
    difference relative to the field's largest magnitude (the CPU run's),
    and the worst against the goal 1e-9 (pass/fail).
(b) speed: ms per internal step at ``--grids`` (256x256x31,360x240x25),
    both cores (``--cores``), float64, stepping as ``pompy run`` does
    (validation/benchmark.py's helpers: its set-up, its ``run`` and its
    windows), each mode of ``--modes``:
      eager            the core's own steps; beside each window one of the
                       Fortran twin's (the oracle's run_steps, -O3, one
                       thread): the ratio is the median of the paired
                       windows' ratios
      cuda-graph       one internal step captured with torch.cuda.graph
                       (the core's pass from its public parts, nothing read
                       on the host: gpu_units.step_in_place; the new state
                       copied over the captured inputs inside the graph)
                       and replayed; the state after the replays compared
                       with the eager core's after the same steps
      compiled         pompy's whole-step graphs (``compile=True``,
                       ``pompy run --compile``); the first steps compile
                       (warm-up, reported)
      reduce-overhead  the same graphs with Inductor's CUDA graphs
                       (torch._inductor.config.triton.cudagraphs: what
                       torch.compile's mode="reduce-overhead" sets), the
                       state cloned and cudagraph_mark_step_begin() after
                       each step
    A mode that cannot run says why (on the CPU: the CUDA-graph modes need
    a CUDA device; the implicit core's PCG reads its residual on the host,
    which a CUDA-graph capture refuses) instead of stopping the check.
    Each non-eager mode's state is compared with an eager core's after
    the same steps ("against eager"; the cuda-graph mode reads its
    checks once, after its last replay). The compiled modes come last,
    after every eager row, pom2k's core first, as a cold compilation can
    take minutes: they get what the budget leaves (a unit killed after
    its compilation says how long that took).
(c) a training batch: ``--train-config`` (configs/train_360x240.nml), its
    data made with ``pompy generate`` (the config's own reference, its
    &generate group; one member, the snapshots of ``--train-batches``
    samples), then NPOMTrainerDDP (its &train settings read by
    pompy.settings) given a pompy.distributed.Distributed that joins a
    torch.distributed group of world size 1 (NCCL on CUDA, gloo on the
    CPU), whose networks the trainer then wraps in DDP, as each rank of a
    torchrun launch does (a plain Distributed makes no group at WORLD_SIZE
    1: ``torchrun --nproc_per_node 1`` runs the trainer as a plain
    process, which is also what this part measures if the group cannot be
    made, saying why); then ``--train-batches`` (2) calls of the trainer's
    train_batch: the seconds of each and its peak memory
    (torch.cuda.max_memory_allocated, and max_memory_reserved; on the CPU
    the process's peak RSS). The trainer is given a gate (its ``gate=``)
    that asks for the certificate first: (d) runs before (c) and verifies
    the same config on the same device, so with (d) passed the batches run
    under its certificate (``certified: true``); without one (d failed or
    ran out of its box) the gate answers with a stand-in, reported as
    ``certified: false`` with the refusal (``--train-gate strict``: the
    gate refuses, no batch then). From the batches' peak GPU memory: the
    samples (batch 1) that fit in an 80 GB GPU.
(d) the certificate run, as a user types it: ``pompy verify
    --verify-config (default the --train-config, configs/train_360x240.nml:
    its routine checks on a 65x49 window, the rest on the whole grid)
    --core implicit --device DEVICE``: its checks passed of all, its seconds (and the suites').

``--device cpu`` runs the same on the CPU (the test suite's path, on a
tiny grid: tests/test_gpu_check.py); there the "device" runs of (a) are
a second CPU run (differences exactly 0). ``--json PATH`` writes every
figure; stdout has one Markdown table per part.

This file is the driver (the parts, their boxes, the budget, the tables
and the report); the units its child processes run (``--unit KIND``)
are validation/gpu_units.py ((a), (b)) and validation/gpu_train.py ((c)).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # validation/benchmark.py: its set-up, windows and comparisons
import gpu_train  # the unit of (c)
import gpu_units  # the units of (a) and (b), and what every unit shares

PARTS = ("a", "b", "c", "d")
ORDER = ("a", "d", "c", "b")           # b last: its compiled rows take what is left
# each part's box: its share of the budget left when it starts, over the
# shares of the parts still to run
SHARES = {"a": 0.1, "d": 0.45, "c": 0.2, "b": 0.25}
PARITY_GOAL = 1e-9
MODES = ("eager", "cuda-graph", "compiled", "reduce-overhead")
COMPILED_MODES = ("compiled", "reduce-overhead")
MIN_UNIT_S = 20.0       # (b) a unit is not started with less time than this left
MIN_PART_S = 5.0        # nor a part


# ======================================================================
# a child: one unit (validation/gpu_units.py, gpu_train.py) in a process of
# its own, its results printed as they come (gpu_units.emit)

UNITS = {"parity": gpu_units.unit_parity, "speed": gpu_units.unit_speed,
         "train": gpu_train.unit_train}


def run_unit_here(kind: str, spec: dict) -> int:
    try:
        UNITS[kind](spec)
        return 0
    except Exception as exc:
        traceback.print_exc()
        gpu_units.emit(kind="error", error=gpu_units.error_text(exc))
        return 1


# ======================================================================
# the parent: the parts, their boxes, the tables


class Budget:
    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)


def run_process(command: list[str], timeout: float, env: dict | None = None
                ) -> tuple[int | None, str, str, float]:
    """``command`` in a session of its own, killed with its children past
    ``timeout`` s: (exit status or None when killed, stdout, stderr, seconds)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT, env=env,
                                start_new_session=True, text=True)
        try:
            code = proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            code = None
        try:                # its session: the child, or what it left (compile workers)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read(), time.perf_counter() - start


def run_unit(kind: str, spec: dict, timeout: float) -> tuple[list[dict], str | None, float]:
    """A unit in a child process: (its results, what went wrong or None, seconds)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--unit", kind,
               "--spec", json.dumps(spec)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    code, out, err, seconds = run_process(command, timeout, env)
    result = gpu_units.RESULT
    results = [json.loads(line[len(result):]) for line in out.splitlines()
               if line.startswith(result)]
    notes = sorted({line.strip()[:300] for line in err.splitlines()
                    if gpu_units.SKIPPING in line})
    if notes:
        results.append(dict(kind="notes", lines=notes[:5]))
    problem = None
    if code is None:
        problem = f"killed at its box of {timeout:.0f} s"
    elif code != 0:
        tail = [line for line in err.strip().splitlines() if line.strip()][-1:] or ["no output"]
        problem = f"exit {code}: {tail[0][:400]}"
    if problem is not None:
        sys.stderr.write(f"gpu_check: {kind} unit {spec}: {problem}\n{err[-3000:]}\n")
    return results, problem, seconds


def of_kind(results: list[dict], kind: str) -> list[dict]:
    """The results of ``kind``, without their kind."""
    return [{k: v for k, v in r.items() if k != "kind"} for r in results
            if r.get("kind") == kind]


def device_names(results: list[dict]) -> str | None:
    found = of_kind(results, "device")
    return found[0]["name"] if found else None


def part_a(args, box: float) -> dict:
    spec = dict(grid=args.parity_grid, steps=args.steps, cores=args.cores, device=args.device)
    results, problem, seconds = run_unit("parity", spec, box)
    rows = {r["core"]: r for r in of_kind(results, "parity")}
    for row in rows.values():
        if "worst" in row:
            row["passed"] = row["worst"] <= PARITY_GOAL
    grid = next((r["grid"] for r in of_kind(results, "device")), args.parity_grid)
    missing = [c for c in args.cores if c not in rows]
    status = "ok" if not problem and not missing and all("worst" in r for r in rows.values()) \
        else "incomplete"
    return dict(status=status, problem=problem, seconds=seconds, box_s=box, goal=PARITY_GOAL,
                grid=grid, steps=args.steps, device=args.device, cores=rows,
                device_name=device_names(results))


def part_b(args, box: float) -> dict:
    deadline = time.perf_counter() + box
    rows, oracle, problems = [], [], []
    devices = []

    def left() -> float:
        return deadline - time.perf_counter()

    base = dict(device=args.device, steps=args.bench_steps, rounds=args.rounds)
    graph = "cuda-graph" in args.modes
    cuda = args.device.startswith("cuda")
    plan = []
    if "eager" in args.modes or graph:
        plan += [dict(base, grid=g, cores=args.cores, mode="eager", graph=graph)
                  for g in args.grids]
    for g in args.grids:            # the first grid's first core first: pom2k's, compiled
        for c in args.cores:
            for m in (m for m in COMPILED_MODES if m in args.modes):
                if m == "reduce-overhead" and not cuda:    # no process for what cannot run
                    rows.append(dict(grid=g, core=c, mode=m, status="not run", reason=(
                        "Inductor's CUDA graphs need a CUDA device (--device cpu)")))
                else:
                    plan.append(dict(base, grid=g, core=c, mode=m))
    for spec in plan:
        names = spec["cores"] if spec["mode"] == "eager" else [spec["core"]]
        wanted = ["eager", "cuda-graph"] if spec["mode"] == "eager" else [spec["mode"]]
        wanted = [(c, m) for c in names for m in wanted if m in args.modes]
        if left() < MIN_UNIT_S:
            rows += [dict(grid=spec["grid"], core=c, mode=m, status="not run",
                          reason=f"budget: {max(left(), 0):.0f} s left of part b's box")
                     for c, m in wanted]
            continue
        beside = [o["ms"] for o in oracle if o["grid"] == spec["grid"]
                  and o["core"] == names[0]]
        if beside:
            spec["oracle_ms"] = beside[0]
        results, problem, _ = run_unit("speed", spec, left())
        devices += of_kind(results, "device")
        oracle += [o for o in of_kind(results, "oracle") if o.get("ms") is not None]
        problems += [f"{o['grid']} {o['core']} oracle: {o['error']}"
                     for o in of_kind(results, "oracle") if o.get("error")]
        got = {(r["core"], r["mode"]): r for r in of_kind(results, "speed")}
        progress = of_kind(results, "progress")
        notes = [line for n in of_kind(results, "notes") for line in n["lines"]]
        for core, mode in wanted:
            row = got.get((core, mode))
            if row is not None and notes and mode == "reduce-overhead":
                row["notes"] = notes
            if row is None:
                row = dict(grid=spec["grid"], core=core, mode=mode,
                           status="not run" if problem else "failed",
                           reason=problem or "no result")
                if progress:
                    row["warmup_s"] = progress[-1]["warmup_s"]
                    row["reason"] += f" (after a warm-up of {row['warmup_s']:.0f} s)"
            rows.append(row)
        if problem:
            problems.append(f"{spec['grid']} {','.join(names)} {spec['mode']}: {problem}")
    rows.sort(key=lambda r: (args.grids.index(r["grid"]), args.cores.index(r["core"]),
                             MODES.index(r["mode"])))
    done = all(r.get("status") in ("ok",) or r.get("reason", "").startswith(("CUDA graphs need",
                                                                              "Inductor's CUDA"))
               for r in rows)
    return dict(status="ok" if done and not problems else "incomplete", problems=problems,
                seconds=box - left(), box_s=box, rows=rows, oracle=oracle,
                grids=args.grids, modes=args.modes, steps=args.bench_steps, rounds=args.rounds,
                device=args.device, device_name=devices[0]["name"] if devices else None)


def shown(path: str) -> str:
    """A path as the repository's commands write it (relative to the root)."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


def part_c(args, box: float, work: Path) -> dict:
    from pompy.config import load_config

    data, output = work / "train_data", work / "train_run"
    # the &train settings the unit trains with: the snapshots' spacing (a
    # correction cycle, steps_per_correction steps of the config's dti)
    # and the horizon
    settings = gpu_train.read_train_settings(args.train_config, str(data), str(output),
                                             args.device)
    config = load_config(settings.config)
    every = settings.data.steps_per_correction * config.dti / 86400.0
    snapshots = settings.data.horizon + args.train_batches      # samples: snapshots - horizon
    # the config's own reference (its &generate group, else generate's defaults),
    # one member, the snapshots the batches need
    generate = ["generate", args.train_config, "--device", args.device, "--members", "1",
                "--days", repr((snapshots - 1) * every), "--every", repr(every),
                "--output", str(data), "--overwrite"]
    spec = dict(config=args.train_config, data=str(data), output=str(output),
                device=args.device, batches=args.train_batches, gate=args.train_gate,
                generate=generate)
    results, problem, seconds = run_unit("train", spec, box)
    result = dict(config=shown(args.train_config), grid=f"{config.im}x{config.jm}x{config.kb}",
                  box_s=box, device=args.device, seconds=seconds,
                  device_name=device_names(results),
                  generate_command=shlex.join(["pompy", generate[0], shown(generate[1]),
                                               *generate[2:]]))
    for r in of_kind(results, "generate"):
        result.update(generate_s=r["seconds"], generate_exit=r["exit_code"])
    result["batches"] = [{k: v for k, v in b.items() if k != "batch"}
                         for b in of_kind(results, "progress")]
    trained = of_kind(results, "train")
    if trained:
        result.update({k: v for k, v in trained[0].items() if k != "batches"})
    result["samples_per_80gb"] = samples_in(80.0, result["batches"])
    status = "ok" if trained and trained[0]["status"] == "ok" and not problem else "incomplete"
    return dict(result, status=status, problem=problem or (trained[0].get("reason")
                                                            if trained else "no result"))


def samples_in(gigabytes: float, batches: list[dict]) -> int | None:
    """Samples (batch 1) that fit in a GPU of ``gigabytes``: what is held
    before a batch (networks, optimiser, data) once, and each sample's own
    peak above it (the largest batch's); None without GPU figures."""
    rows = [b for b in batches if b.get("peak_gb") is not None and b.get("before_gb") is not None]
    if not rows:
        return None
    before = max(b["before_gb"] for b in rows)
    per_sample = max(b["peak_gb"] - b["before_gb"] for b in rows)
    return int((gigabytes - before) // per_sample) if per_sample > 0 else None


VERIFIED = re.compile(r"(\d+) of (\d+) checks passed in (\d+) s; certificate: (.+)")


def part_d(args, box: float) -> dict:
    command = [sys.executable, "-m", "pompy", "verify", args.verify_config, "--core", "implicit",
               "--device", args.device, *shlex.split(args.verify_options)]
    shown_command = shlex.join(["pompy", "verify", shown(args.verify_config), *command[5:]])
    code, out, err, seconds = run_process(command, box)
    result = dict(command=shown_command, exit_code=code, seconds=seconds, box_s=box,
                  device=args.device)
    found = VERIFIED.search(out)
    if found:
        passed, total, _, path = found.groups()
        result.update(passed=int(passed), checks=int(total), certificate=path.strip())
        try:
            body = json.loads(Path(path.strip()).read_text())
            result.update(suites_s=body.get("seconds"), device_name=body.get("device_name"),
                          grid=body.get("key", {}).get("grid"), all_passed=body.get("passed"))
        except (OSError, ValueError):
            pass
    if code is None:
        problem = f"killed at its box of {box:.0f} s"
    elif not found:
        problem = f"exit {code}: " + ((err or out).strip().splitlines() or ["no output"])[-1][:400]
    else:
        problem = None if code == 0 else f"exit {code}: " + out.strip().splitlines()[-1][:400]
    if problem:
        sys.stderr.write(f"gpu_check: {shown_command}: {problem}\n{out[-2000:]}\n{err[-2000:]}\n")
    return dict(result, status="ok" if problem is None else "incomplete", problem=problem)


# ---- tables


def fmt(x, spec: str = ".3g") -> str:
    if x is None:
        return ""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return format(x, spec)


def table_a(part: dict) -> list[str]:
    lines = [f"(a) float64 {part['device']} against CPU, {part['steps']} steps of the seamount "
             f"({part['grid']}); goal {PARITY_GOAL:g} of each field's largest magnitude"
             + (f"; {part['problem']}" if part.get("problem") else ""), "",
             "| core | worst field | largest difference | goal | result | CPU s | device s "
             "| u | v | t | s | el | q2 |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for core, row in part["cores"].items():
        if "error" in row:
            lines.append(f"| {core} | | | {PARITY_GOAL:g} | not measured: {row['error']} |"
                         + " |" * 8)
            continue
        f = row["fields"]
        lines.append(f"| {core} | {row['worst_field']} | {row['worst']:.2e} | {PARITY_GOAL:g} | "
                     f"{'pass' if row['passed'] else 'FAIL'} | {row['cpu_s']:.1f} | "
                     f"{row['device_s']:.1f} | "
                     + " | ".join(f"{f.get(n, math.nan):.1e}" for n in ("u", "v", "t", "s",
                                                                       "el", "q2")) + " |")
    return lines


def table_b(part: dict) -> list[str]:
    lines = [f"(b) ms per internal step, float64, {part['device']}"
             + (f" ({part['device_name']})" if part.get("device_name") else "")
             + f": median of {part['rounds']} windows of {part['steps']} steps; against the "
             "Fortran twin (-O3, one thread)", "",
             "| grid | core | mode | ms / step | torch / oracle | warm-up (s) "
             "| against eager | result |", "|---|---|---|---|---|---|---|---|"]
    oracle = {(o["grid"], o["core"]): o for o in part["oracle"]}
    for r in part["rows"]:
        o = oracle.pop((r["grid"], r["core"]), None)
        if o is not None:
            lines.append(f"| {o['grid']} | {o['core']} | oracle | {o['ms']:.2f} | 1 | | | ok |")
        result = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('reason', '')}"
        if r.get("cudagraph_skips"):
            result += (f" ({r['cudagraph_skips']} graphs without a CUDA graph"
                       + (f": {r['notes'][0]}" if r.get("notes") else "") + ")")
        lines.append(f"| {r['grid']} | {r['core']} | {r['mode']} | {fmt(r.get('ms'), '.2f')} | "
                     f"{fmt(r.get('ratio'), '.3f')} | {fmt(r.get('warmup_s'), '.1f')} | "
                     f"{fmt(r.get('versus_eager'), '.1e')} | {result} |")
    return lines


def table_c(part: dict) -> list[str]:
    gate = ("" if "certified" not in part else "under its certificate" if part["certified"]
            else "no certificate for this set-up: the gate answered by a stand-in")
    lines = [f"(c) one training batch: {part['config']} ({part['grid']}), {part['device']}, "
             + (f"{part.get('backend', '?')} group of world size {part.get('world_size')}, "
                f"DDP {part.get('ddp')}" if not part.get("group_error") else
                f"no {part.get('backend')} group ({part['group_error']}): a plain process")
             + f"; {gate}"
             + (f"; {part['problem']}" if part.get("problem") else ""), "",
             "| batch | seconds | peak memory (GB) | memory before (GB) | peak reserved (GB) "
             "| loss |", "|---|---|---|---|---|---|"]
    for n, b in enumerate(part.get("batches", [])):
        peak = b.get("peak_gb", b.get("peak_rss_gb"))
        kind = "" if "peak_gb" in b else " (the process's peak RSS)"
        lines.append(f"| {n} | {b['seconds']:.2f} | {fmt(peak, '.2f')}{kind} | "
                     f"{fmt(b.get('before_gb'), '.2f')} | {fmt(b.get('reserved_gb'), '.2f')} | "
                     f"{b['loss']:.4g} |")
    lines.append(f"\n`{part['generate_command']}`: {fmt(part.get('generate_s'), '.1f')} s; "
                 f"the trainer built in {fmt(part.get('build_s'), '.1f')} s"
                 + ("" if part.get("samples_per_80gb") is None else
                    f"; samples (batch 1) that fit in an 80 GB GPU: {part['samples_per_80gb']}"))
    return lines


def table_d(part: dict) -> list[str]:
    passed = (f"{part['passed']} of {part['checks']}" if "passed" in part else "")
    suites = part.get("suites_s") or {}
    return [f"(d) the certificate run: `{part['command']}`"
            + (f"; {part['problem']}" if part.get("problem") else ""), "",
            "| checks passed | seconds | parity s | run s | gradcheck s | policies s | exit |",
            "|---|---|---|---|---|---|---|",
            f"| {passed} | {part['seconds']:.1f} | {fmt(suites.get('parity'), '.1f')} | "
            f"{fmt(suites.get('run'), '.1f')} | {fmt(suites.get('gradcheck'), '.1f')} | "
            f"{fmt(suites.get('policies'), '.1f')} | {part['exit_code']} |"]


TABLES = {"a": table_a, "b": table_b, "c": table_c, "d": table_d}
RUN_PARTS = {"a": lambda args, box, work: part_a(args, box),
             "b": lambda args, box, work: part_b(args, box),
             "c": part_c,
             "d": lambda args, box, work: part_d(args, box)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (cuda:N) or cpu (default cuda)")
    p.add_argument("--parts", default="a,b,c,d", help="of a,b,c,d, comma separated")
    p.add_argument("--budget", type=float, default=480.0,
                   help="seconds for all the parts (default 480)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    p.add_argument("--steps", type=int, default=240, help="(a) steps (default 240)")
    p.add_argument("--parity-grid", default="seamount",
                   help="(a) IMxJMxKB of the seamount, or 'seamount': configs/seamount.nml")
    p.add_argument("--cores", default="explicit,implicit", help="(a), (b) cores")
    p.add_argument("--grids", default="256x256x31,360x240x25", help="(b) IMxJMxKB, ...")
    p.add_argument("--modes", default=",".join(MODES), help=f"(b) of {','.join(MODES)}")
    p.add_argument("--bench-steps", type=int, default=5, help="(b) steps per window")
    p.add_argument("--rounds", type=int, default=3, help="(b) windows per row")
    p.add_argument("--train-config", default=str(ROOT / "configs" / "train_360x240.nml"),
                   help="(c) a training config (default configs/train_360x240.nml)")
    p.add_argument("--train-batches", type=int, default=2, help="(c) batches timed")
    p.add_argument("--train-gate", choices=("stand-in", "strict"), default="stand-in",
                   help="(c) without a certificate for the grid: measure under a stand-in, "
                        "or not at all")
    p.add_argument("--verify-config", default=None,
                   help="(d) the config verified (default --train-config: (c) trains "
                        "under (d)'s certificate)")
    p.add_argument("--verify-options", default="",
                   help="(d) more options for pompy verify, e.g. '--samples 1 --steps 1'")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for (c)'s data and run (default: a temporary one)")
    p.add_argument("--unit", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.unit:
        return args
    benchmark.check_device(args.device)
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    args.cores = [x.strip() for x in args.cores.split(",") if x.strip()]
    args.grids = [x.strip() for x in args.grids.split(",") if x.strip()]
    args.modes = [x.strip() for x in args.modes.split(",") if x.strip()]
    from pompy import cores

    for name, given, allowed in (("--parts", args.parts, PARTS), ("--cores", args.cores,
                                 cores.NAMES), ("--modes", args.modes, MODES)):
        bad = [x for x in given if x not in allowed]
        if bad or not given:
            benchmark.refuse(f"{name} {','.join(given)}: of {','.join(allowed)}")
    for spec in args.grids + ([] if args.parity_grid == "seamount" else [args.parity_grid]):
        try:
            gpu_units.grid_config(spec)
        except Exception as exc:
            benchmark.refuse(f"grid {spec}: {exc}")
    if min(args.steps, args.bench_steps, args.rounds, args.train_batches) < 1 or args.budget <= 0:
        benchmark.refuse("--steps, --bench-steps, --rounds, --train-batches and --budget: "
                         "at least 1")
    args.verify_config = args.verify_config or args.train_config
    for name in ("train_config", "verify_config"):      # the children run in the root
        path = Path(getattr(args, name)).resolve()
        if not path.is_file():
            benchmark.refuse(f"--{name.replace('_', '-')} {getattr(args, name)}: no such file")
        setattr(args, name, str(path))
    if args.work is not None:
        args.work = args.work.resolve()
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.unit:
        return run_unit_here(args.unit, json.loads(args.spec))
    import torch

    from pompy.oracle import Oracle

    start = time.perf_counter()
    try:
        Oracle()                # built (if not yet) before the budget starts: not a part's time
        oracle_error = None
    except Exception as exc:    # no oracle (no gfortran): the parts say what that costs them
        oracle_error = gpu_units.error_text(exc)
        print(f"gpu_check: no Fortran oracle ({oracle_error}): (b) has no oracle rows, (d) "
              "fails", file=sys.stderr, flush=True)
    setup_s = time.perf_counter() - start
    budget = Budget(args.budget)
    report = dict(command=shlex.join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
                  device=args.device, budget_s=args.budget, oracle_setup_s=setup_s,
                  oracle_error=oracle_error,
                  machine=dict(cpu=platform.processor() or platform.machine(),
                               cpus=os.cpu_count(), torch=torch.__version__,
                               cuda=torch.version.cuda, python=platform.python_version()),
                  parts={})
    print(f"gpu_check: parts {','.join(args.parts)} on {args.device}, budget {args.budget:.0f} s; "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        todo = [p for p in ORDER if p in args.parts]
        for i, name in enumerate(todo):
            left = budget.left()
            box = left * SHARES[name] / sum(SHARES[p] for p in todo[i:])
            if left < MIN_PART_S:
                part = dict(status="not run", problem=f"budget: {max(left, 0):.0f} s left")
                print(f"\n({name}) not run: {part['problem']}", flush=True)
            else:
                part = RUN_PARTS[name](args, box, work)
                print("\n" + "\n".join(TABLES[name](part)), flush=True)
            report["parts"][name] = part
            write_report(args.json, report, budget)     # each part's figures kept at once
    write_report(args.json, report, budget)
    print(f"\ngpu_check: {report['elapsed_s']:.0f} s; "
          + ", ".join(f"({p}) {report['parts'][p]['status']}" for p in todo), flush=True)
    return 0


def write_report(path: Path | None, report: dict, budget: Budget) -> None:
    report["elapsed_s"] = budget.seconds - budget.left()
    if path is not None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=float) + "\n")
        tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
