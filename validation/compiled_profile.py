"""Where the compiled step's time goes (``ExplicitCore(..., compile=True)``),
sampled from outside the process that steps:

    python3 validation/compiled_profile.py                  # 65x49x21 float64, 4 s a sampler
    python3 validation/compiled_profile.py --grid 33x25x21 --dtype float32 --seconds 2

A child process builds the compiled core (its graphs from Inductor's cache
when they are there), warms it up and then steps on, as ``pompy run`` steps
(forward_only). It is sampled twice, one sampler after the other:

- ``py-spy`` (pip's): each sample's innermost Python frame says whose time
  it is: the graphs' generated code (by the StepGraphs line that called
  it: the 3-D terms, the passes, the internal mode), Dynamo's guards
  (its frame-evaluation wrapper), AOT autograd's and Inductor's runtime
  wrappers, or pompy's Python around the calls.
- ``perf`` with binutils' ``addr2line``, where the machine has them: the
  samples in each generated library, and in the busiest one by loop nest of
  its C++ (its points, and whether Inductor vectorised it): which loops
  cost, not only which graph.

Markdown tables to stdout, with the load average. Time it on a quiet
machine: the shares move with the load, as the step does.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":      # on the allocator of `pompy run`, chosen before torch loads
    from pompy.utils.allocator import reexec
    reexec()

import torch

sys.path.insert(0, str(Path(__file__).parent))
from benchmark import WARMUP, grid_config, load, refuse, run  # noqa: E402

from pompy.core.explicit import ExplicitCore  # noqa: E402
from pompy.core.model import forward_only  # noqa: E402

GRAPHS, GUARDS, WRAPPERS, PYTHON = ("graphs' code", "Dynamo's guards",
                                   "AOT autograd's and Inductor's wrappers",
                                   "pompy's Python and the host reads")
# the innermost frame of a sample in each (py-spy's raw format: "function (file:line)")
_GUARD_FRAME = re.compile(r"compile_wrapper \(.*torch/_dynamo/eval_frame\.py")
_TORCH_FRAME = re.compile(r"\(.*torch/(_functorch|_inductor|_dynamo|_ops|utils)/")
_STEP_GRAPHS = re.compile(r"StepGraphs\.(\w+) \(.*pompy/core/compiled\.py:(\d+)\)")
_LOOP = re.compile(r"for\(int64_t (x\d+)=static_cast<int64_t>\((-?\d+)L?\); \1<static_cast<int64_t>"
                   r"\((-?\d+)L?\);")


def child(grid: str, dtype: torch.dtype, seconds: int) -> None:
    """Step a compiled core: warm up, print READY, step for ``seconds``."""
    core = ExplicitCore(grid_config(grid), dtype=dtype, compile=True)
    core.run_initialization()
    run(core, WARMUP, "cpu")
    per_step = run(core, 20, "cpu", untimed=1)
    print(f"READY {per_step * 1e3:.2f}", flush=True)
    end = time.perf_counter() + seconds
    with forward_only(core):        # as run() steps, without its collection of Python's garbage
        while time.perf_counter() < end:
            core.iend = core.iint + 20
            core.run_time_loop()


def classify(frames: list[str]) -> tuple[str, str]:
    """(share, graph) of a py-spy sample from its frames, outermost first:
    the graph is the line of the StepGraphs method that made the call
    (not _call's or _graph's, which every call passes)."""
    callers = [m for m in map(_STEP_GRAPHS.search, frames)
               if m and m.group(1) not in ("_call", "_graph")]
    graph = f"{callers[-1].group(1)}:{callers[-1].group(2)}" if callers else ""
    leaf = frames[-1]
    if "_wrap_func.<locals>.g" in leaf or "inductor_entry" in leaf:
        return GRAPHS, graph
    if _GUARD_FRAME.search(leaf):
        return GUARDS, ""
    if _TORCH_FRAME.search(leaf):
        return WRAPPERS, ""
    return PYTHON, ""


def python_shares(raw: str) -> tuple[collections.Counter, collections.Counter, int]:
    """Samples by share and the graphs' by calling line, from py-spy's raw output."""
    shares, graphs, total = collections.Counter(), collections.Counter(), 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        share, graph = classify(stack.split(";"))
        shares[share] += int(count)
        total += int(count)
        if graph:
            graphs[graph] += int(count)
    return shares, graphs, total


def loop_nests(cpp: str) -> list[tuple[int, int, int, bool]]:
    """(first line, last line, points, vectorised) of each outermost loop nest
    of Inductor's generated C++ (1-based lines): points is the product of
    the extents of the distinct loop variables in it."""
    lines = cpp.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith('extern "C"')] + [len(lines)]
    nests = []
    for begin, end in zip(starts, starts[1:]):
        fors = [(len(lines[i]) - len(lines[i].lstrip()), i) for i in range(begin, end)
                if "for(int64_t" in lines[i]]
        if not fors:
            continue
        depth = min(d for d, _ in fors)
        tops = [i for d, i in fors if d == depth] + [end]
        for first, after in zip(tops, tops[1:]):
            points, seen = 1, set()
            for line in lines[first:after]:
                m = _LOOP.search(line)
                if m and m.group(1) not in seen:
                    seen.add(m.group(1))
                    points *= max(int(m.group(3)) - int(m.group(2)), 0)
            vectorised = any("loadu(" in line for line in lines[first:after])
            nests.append((first + 1, after, points, vectorised))
    return nests


def nest_samples(nests: list, line_counts: collections.Counter, before: int = 8) -> list:
    """(samples, first line, points, vectorised) of each nest, the samples of
    its lines and of the ``before`` lines that open it (its accumulators)."""
    return sorted(((sum(line_counts[n] for n in range(first - before, last + 1)), first, points,
                    vectorised) for first, last, points, vectorised in nests), reverse=True)


_MMAP = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+) .*\]: r-xp (\S+\.so)$")
_SAMPLE = re.compile(r"^\s*([0-9a-f]+) \((\S+)\)$")


def perf_samples(pid: int, seconds: int, out: Path) -> tuple[collections.Counter, dict, dict]:
    """perf's samples of ``pid`` for ``seconds``: (samples by library,
    the generated libraries' addresses (file offsets) with their samples,
    their load addresses)."""
    data = out / "perf.data"
    subprocess.run(["perf", "record", "-q", "-F", "4000", "-p", str(pid), "-o", str(data),
                    "--", "sleep", str(seconds)], check=True, capture_output=True)
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,dso",
                             "--show-mmap-events"], check=True, capture_output=True,
                            text=True).stdout
    maps, by_library, addresses = {}, collections.Counter(), collections.defaultdict(collections.Counter)
    for line in script.splitlines():
        m = _MMAP.search(line)
        if m and m.group(4).endswith(".main.so"):
            maps[m.group(4)] = (int(m.group(1), 16), int(m.group(3), 16))
            continue
        m = _SAMPLE.match(line)
        if m:
            library = m.group(2)
            by_library[library] += 1
            if library in maps:
                base, offset = maps[library]
                addresses[library][int(m.group(1), 16) - base + offset] += 1
    return by_library, addresses, maps


def line_samples(library: str, addresses: collections.Counter) -> collections.Counter:
    """Samples by line of the library's generated C++ (the outermost
    inlined frame in it, as binutils' addr2line gives it)."""
    listed = sorted(addresses)
    text = subprocess.run(["addr2line", "-a", "-i", "-e", library, *map(hex, listed)],
                          check=True, capture_output=True, text=True).stdout
    where, address = {}, None
    for line in text.splitlines():
        if line.startswith("0x"):
            address = int(line, 16)
            continue
        m = re.search(r"\.main\.cpp:(\d+)", line)
        if m and address is not None:
            where[address] = int(m.group(1))     # the last one: the outermost frame
    counts = collections.Counter()
    for address, n in addresses.items():
        counts[where.get(address, 0)] += n
    return counts


def print_python(shares, graphs, total) -> None:
    print("| share of the step (py-spy) | samples | % |\n|---|---|---|")
    for share in (GRAPHS, GUARDS, WRAPPERS, PYTHON):
        print(f"| {share} | {shares[share]} | {100 * shares[share] / total:.1f} |")
    print("\n| graph (StepGraphs caller) | samples | % of the step |\n|---|---|---|")
    for graph, n in graphs.most_common():
        print(f"| {graph} | {n} | {100 * n / total:.1f} |")


def print_loops(library: str, counts: collections.Counter, top: int) -> None:
    cpp = Path(library[:-len(".so")] + ".cpp")        # NAME.main.so beside NAME.main.cpp
    if not cpp.exists():
        print(f"\n(no generated C++ beside {library})")
        return
    nests = nest_samples(loop_nests(cpp.read_text()), counts)
    total = sum(counts.values())
    scalar = sum(n for n, _, _, vectorised in nests if not vectorised)
    by_points = collections.Counter()
    for n, _, points, vectorised in nests:
        if not vectorised:
            by_points[points] += n
    print(f"\n{cpp.name}: {len(nests)} loop nests, {total} samples; scalar nests "
          f"{100 * scalar / total:.1f} % of them, by their points: "
          + ", ".join(f"{points} {100 * n / total:.1f} %" for points, n in by_points.most_common(4))
          + "\n")
    print("| line | points | vectorised | % of the library's samples |\n|---|---|---|---|")
    for n, first, points, vectorised in nests[:top]:
        print(f"| {first} | {points} | {'yes' if vectorised else 'no'} | {100 * n / total:.1f} |")


def sample(args, proc, out: Path) -> None:
    """Both samplers on the child ``proc``, one after the other."""
    pid = proc.pid
    if shutil.which("py-spy"):
        raw = out / "py-spy.txt"
        subprocess.run(["py-spy", "record", "-p", str(pid), "-d", str(args.seconds), "-r", "500",
                        "-f", "raw", "-o", str(raw)], check=True, capture_output=True)
        print_python(*python_shares(raw.read_text()))
    else:
        print("(no py-spy: pip install py-spy)")
    if shutil.which("perf") and shutil.which("addr2line"):
        by_library, addresses, _ = perf_samples(pid, args.seconds, out)
        total = sum(by_library.values())
        print("\n| library (perf) | % of the samples |\n|---|---|")
        for library, n in by_library.most_common(args.top):
            print(f"| {Path(library).name} | {100 * n / total:.1f} |")
        if addresses:
            busiest = max(addresses, key=lambda lib: sum(addresses[lib].values()))
            print_loops(busiest, line_samples(busiest, addresses[busiest]), args.top)
    else:
        print("\n(no perf or addr2line: the libraries' and loops' tables need both)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="65x49x21", help="IMxJMxKB")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--seconds", type=int, default=4, help="seconds of each sampler")
    parser.add_argument("--top", type=int, default=15, help="rows of the libraries' and loops' tables")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    if args.child:
        child(args.grid, dtype, 2 * args.seconds + 10)
        return
    if args.seconds <= 0:
        refuse(f"--seconds {args.seconds}: a positive number")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--grid", args.grid,
                             "--dtype", args.dtype, "--seconds", str(args.seconds)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready = proc.stdout.readline().split()
        if not ready or ready[0] != "READY":
            refuse("the stepping process stopped before it was ready")
        print(f"{args.grid} {args.dtype} compiled, one thread: {ready[1]} ms a step before "
              f"sampling; load {load()}\n")
        with tempfile.TemporaryDirectory() as out:
            sample(args, proc, Path(out))
    except subprocess.CalledProcessError as exc:       # a sampler refused (permissions, ...)
        refuse(f"{exc.cmd[0]} failed: {(exc.stderr or b'').decode(errors='replace').strip()[-300:]}")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
