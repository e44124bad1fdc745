"""Where the compiled step's time goes (``ExplicitCore(..., compile=True)``),
sampled by py-spy and perf from outside a process that steps it.

    python3 validation/compiled_profile.py                  # 65x49x21 float64, 4 s a sampler
    python3 validation/compiled_profile.py --grid 33x25x21 --dtype float32 --seconds 2

A child process builds the compiled core (its graphs from Inductor's cache
when they are there, else compiled first: minutes), warms it up and then
steps on, as ``pompy run`` steps (forward_only). It is sampled twice, one
sampler after the other, and stopped before the samples are read:

- ``py-spy`` (pip's): each sample's innermost Python frame says whose time
  it is: the graphs' generated code (by the StepGraphs line that called
  it, printed with its source: the 3-D terms, the passes, the internal
  mode), Dynamo's entry wrapper (its guard checks included), AOT
  autograd's and Inductor's runtime wrappers, or pompy's Python around the
  calls (the host reads, and the torch config patches it enters, included).
- ``perf`` with binutils' ``addr2line``, where the machine has them: the
  samples by library (all of them), and in the busiest generated library by
  loop nest of its C++ (its points, whether Inductor vectorised it): which
  loops cost, not only which graph; and the share of the nests that only
  move data (copy_kind: copies, and reorderings such as transposes).

Markdown tables to stdout, with the load average. Time it on a quiet
machine: the shares move with the load, as the step does.
"""
from __future__ import annotations

import argparse
import collections
import linecache
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
from pompy.errors import ConfigError  # noqa: E402

GRAPHS, ENTRY, WRAPPERS, PYTHON = ("graphs' code", "Dynamo's entry wrapper (guards included)",
                                   "AOT autograd's and Inductor's wrappers",
                                   "pompy's Python and the host reads")
# innermost frames (py-spy's raw format: "function (file:line)"); torch's
# config patches are pompy's (StepGraphs._calling enters them each call)
_ENTRY_FRAME = re.compile(r"compile_wrapper \(.*torch/_dynamo/eval_frame\.py")
_WRAPPER_FRAME = re.compile(r"\(.*torch/(_functorch|_inductor|_dynamo|_ops)[/.]")
_STEP_GRAPHS = re.compile(r"StepGraphs\.(\w+) \((.*pompy/core/compiled\.py):(\d+)\)")
_LOOP = re.compile(r"for\(int64_t (x\d+)=static_cast<int64_t>\((-?\d+)L?\); \1<static_cast<int64_t>"
                   r"\((-?\d+)L?\);")
# perf script's map events and samples (-F ip,dso --show-mmap-events)
_MMAP = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) .*\]: r-xp (\S+\.so)$")
_SAMPLE = re.compile(r"^\s*([0-9a-f]+) \((\S+)\)$")
# a nest's values and the buffers it reads and where (Inductor's C++)
_TMP = re.compile(r"auto (tmp\d+) =")
_READ = re.compile(r"\b(in_ptr\d+|in_out_ptr\d+)\b")
_AT = re.compile(r"(?:loadu|store)\(\w+ \+ static_cast<int64_t>\(([^)]*)\)")
_INDEX = re.compile(r"ptr\d+\[static_cast<int64_t>\(([^\]]*)\)\]")


def child(grid: str, dtype: torch.dtype, seconds: int) -> None:
    """Step a compiled core: warm up, print READY, then step for ``seconds``
    with stdout on stderr (the parent reads no more of the pipe)."""
    core = ExplicitCore(grid_config(grid), dtype=dtype, compile=True)
    core.run_initialization()
    run(core, WARMUP, "cpu")
    per_step = run(core, 20, "cpu", untimed=1)
    print(f"READY {per_step * 1e3:.2f}", flush=True)
    os.dup2(2, 1)
    end = time.perf_counter() + seconds
    with forward_only(core):        # as run() steps, without its collection of Python's garbage
        while time.perf_counter() < end:
            core.iend = core.iint + 20
            core.run_time_loop()


def classify(frames: list[str]) -> tuple[str, str]:
    """(share, graph) of a py-spy sample from its frames, outermost first:
    the graph is "file:line" of the StepGraphs method that made the call
    (not _call's or _graph's, which every call passes)."""
    callers = [m for m in map(_STEP_GRAPHS.search, frames)
               if m and m.group(1) not in ("_call", "_graph")]
    graph = f"{callers[-1].group(2)}:{callers[-1].group(3)}" if callers else ""
    leaf = frames[-1]
    if "_wrap_func.<locals>.g" in leaf or "inductor_entry" in leaf:
        return GRAPHS, graph
    if _ENTRY_FRAME.search(leaf):
        return ENTRY, ""
    if _WRAPPER_FRAME.search(leaf):
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


def loop_nests(cpp: str) -> list[tuple[int, int, int, int, bool]]:
    """(for line, first line, last line, points, vectorised) of each
    outermost loop nest (a loop in no other) of Inductor's generated C++
    kernels: 1-based lines, a nest's from the end of the one before it (its
    accumulators) to its closing brace, the last to the kernel's, so every
    line of a kernel is one nest's and none of the C++ wrapper's."""
    lines = cpp.split("\n")
    nests = []
    for begin in (i for i, line in enumerate(lines) if line.startswith('extern "C"')):
        if not _defines(lines, begin):
            continue
        end = next((i for i in range(begin + 1, len(lines)) if lines[i] == "}"), len(lines) - 1)
        spans, depth, top, first = [], 0, None, begin
        for i in range(begin, end):
            if top is None and "for(int64_t" in lines[i]:
                top, outer = i, depth
            depth += lines[i].count("{") - lines[i].count("}")
            if top is not None and i > top and depth == outer and "}" in lines[i]:
                spans.append([top, first, i])
                top, first = None, i + 1
        if spans:
            spans[-1][2] = end
        nests += [(top + 1, first + 1, last + 1, *_points(lines[top:last + 1]))
                  for top, first, last in spans]
    return nests


def _defines(lines: list[str], begin: int) -> bool:
    """Whether the signature at ``begin`` opens a body ("{" on a line of
    its own) rather than ending a declaration (";")."""
    for line in lines[begin:]:
        if line == "{" or line.rstrip().endswith(";"):
            return line == "{"
    return False


def _points(body: list[str]) -> tuple[int, bool]:
    """(points, vectorised) of a loop nest's lines: the product of the
    extents of its distinct loop variables, and whether it uses vectors."""
    points, seen = 1, set()
    for line in body:
        m = _LOOP.search(line)
        if m and m.group(1) not in seen:
            seen.add(m.group(1))
            points *= max(int(m.group(3)) - int(m.group(2)), 0)
    return points, any("at::vec::" in line for line in body)


def copy_kind(lines: list[str], nest: tuple) -> str | None:
    """Whether a nest only moves data (one value read from one buffer and
    stored): "copy" where its innermost loop walks both buffers at stride
    1 (a piece of a cat, say), "reordered" where not (a transpose, a level
    gathered at stride kb), None where it computes."""
    top, _, last, _, _ = nest
    body = "\n".join(line for line in lines[top - 1:last] if not line.lstrip().startswith("//"))
    if len(set(_TMP.findall(body))) != 1 or len(set(_READ.findall(body))) != 1:
        return None
    inner = _LOOP.findall(body)[-1][0]
    places = _AT.findall(body) or _INDEX.findall(body)
    unit = re.compile(rf"(^|\+ ){inner}( \+|$)")
    return "copy" if places and all(unit.search(at) for at in places) else "reordered"


def nest_samples(nests: list, line_counts: collections.Counter) -> list:
    """(samples, for line, points, vectorised) of each nest, busiest first."""
    return sorted(((sum(line_counts[n] for n in range(first, last + 1)), top, points, vectorised)
                   for top, first, last, points, vectorised in nests), reverse=True)


def perf_script_samples(script: str) -> tuple[collections.Counter, dict]:
    """From ``perf script -F ip,dso --show-mmap-events``: samples by
    library, and the generated libraries' (NAME.main.so) by address in the
    file. That is the code's address for addr2line where the text segment
    lies at its file offset, as GNU ld lays out a shared object."""
    maps, by_library = {}, collections.Counter()
    addresses = collections.defaultdict(collections.Counter)
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
    return by_library, dict(addresses)


def cpp_lines(addr2line: str) -> dict[int, int]:
    """Address -> line of the generated C++, from ``addr2line -a -i``'s
    output (an address, then its inlined frames innermost first: the last
    .main.cpp line is the kernel's own)."""
    where, address = {}, None
    for line in addr2line.splitlines():
        if line.startswith("0x"):
            address = int(line, 16)
            continue
        m = re.search(r"\.main\.cpp:(\d+)", line)
        if m and address is not None:
            where[address] = int(m.group(1))
    return where


def record(pid: int, seconds: int, out: Path) -> tuple[str | None, str | None]:
    """py-spy's raw samples and perf's script of ``pid``, one sampler after
    the other (None where the machine lacks the tool)."""
    raw = script = None
    if shutil.which("py-spy"):
        path = out / "py-spy.txt"
        subprocess.run(["py-spy", "record", "-p", str(pid), "-d", str(seconds), "-r", "500",
                        "-f", "raw", "-o", str(path)], check=True, capture_output=True)
        raw = path.read_text()
    if shutil.which("perf") and shutil.which("addr2line"):
        data = out / "perf.data"
        subprocess.run(["perf", "record", "-q", "-F", "4000", "-p", str(pid), "-o", str(data),
                        "--", "sleep", str(seconds)], check=True, capture_output=True)
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,dso",
                                 "--show-mmap-events"], check=True, capture_output=True,
                                text=True).stdout
    return raw, script


def print_python(raw: str) -> None:
    shares, graphs, total = python_shares(raw)
    if not total:
        print("(py-spy took no samples)")
        return
    print("| share of the step (py-spy) | samples | % |\n|---|---|---|")
    for share in (GRAPHS, ENTRY, WRAPPERS, PYTHON):
        print(f"| {share} | {shares[share]} | {100 * shares[share] / total:.1f} |")
    print("\n| graph (the StepGraphs line that calls it) | samples | % of the step |\n|---|---|---|")
    for graph, n in graphs.most_common():
        path, _, line = graph.rpartition(":")
        source = linecache.getline(path, int(line)).strip()[:60]
        print(f"| {Path(path).name}:{line} `{source}` | {n} | {100 * n / total:.1f} |")


def print_perf(script: str, plane: int, top: int) -> None:
    by_library, addresses = perf_script_samples(script)
    total = sum(by_library.values())
    if not total:
        print("\n(perf took no samples)")
        return
    print("\n| library (perf) | % of the samples |\n|---|---|")
    for library, n in by_library.most_common(top):
        print(f"| {Path(library).name} | {100 * n / total:.1f} |")
    if addresses:
        busiest = max(addresses, key=lambda lib: sum(addresses[lib].values()))
        print_loops(busiest, addresses[busiest], plane, top)


def print_loops(library: str, addresses: collections.Counter, plane: int, top: int) -> None:
    """The library's samples by loop nest of its C++ (beside it: NAME.main.cpp)."""
    cpp = Path(library[:-len(".so")] + ".cpp")
    if not cpp.exists():
        print(f"\n(no generated C++ beside {library})")
        return
    listed = "\n".join(map(hex, sorted(addresses)))        # on stdin: no limit on their number
    where = cpp_lines(subprocess.run(["addr2line", "-a", "-i", "-e", library], input=listed,
                                     check=True, capture_output=True, text=True).stdout)
    counts = collections.Counter()
    for address, n in addresses.items():
        counts[where.get(address, 0)] += n
    nests = loop_nests(cpp.read_text())
    rows, total = nest_samples(nests, counts), sum(counts.values())
    ranges = [n for n in nests if n[3] > plane]
    nested = sum(n for n, _, _, _ in rows)
    print(f"\n{cpp.name}: {len(nests)} loop nests, {total} samples, {100 * nested / total:.1f} % "
          f"of them in the nests; {len(ranges)} nests over 3-D ranges (more points than a "
          f"plane, {plane}), {sum(n[3] for n in ranges):,} points, "
          f"{sum(1 for n in ranges if n[4])} of them vectorised")
    scalar = collections.Counter()
    for n, _, points, vectorised in rows:
        if not vectorised:
            scalar[points] += n
    kinds = collections.Counter(points for _, _, _, points, vectorised in nests if not vectorised)
    print("scalar nests by their points: " + ", ".join(
        f"{kinds[points]} of {points} points {100 * n / total:.1f} %" for points, n in scalar.most_common(4)))
    print_copies(cpp.read_text(), nests, counts, plane, total)
    print("| line | points | vectorised | % of the library's samples |\n|---|---|---|---|")
    for n, line, points, vectorised in rows[:top]:
        print(f"| {line} | {points} | {'yes' if vectorised else 'no'} | {100 * n / total:.1f} |")


def print_copies(cpp: str, nests: list, counts: collections.Counter, plane: int,
                 total: int) -> None:
    """The nests that only move data (copy_kind), over 3-D ranges and planes."""
    moved, lines = collections.defaultdict(lambda: [0, 0, 0]), cpp.split("\n")
    for nest in nests:
        kind = copy_kind(lines, nest)
        if kind:
            row = moved[(kind, "3-D" if nest[3] > plane else "planes")]
            row[0] += 1
            row[1] += nest[3]
            row[2] += sum(counts[n] for n in range(nest[1], nest[2] + 1))
    print("nests that only move data: " + (", ".join(
        f"{n} {kind} {where} ({points:,} points) {100 * samples / total:.1f} %"
        for (kind, where), (n, points, samples) in sorted(moved.items())) or "none") + "\n")


def start_child(args) -> tuple[subprocess.Popen, str]:
    """The stepping process, once ready: (it, its ms a step before sampling)."""
    print("building and warming up the compiled core (minutes where Inductor's cache lacks "
          "its graphs)", file=sys.stderr, flush=True)
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--grid", args.grid,
                             "--dtype", args.dtype, "--seconds", str(args.seconds)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in proc.stdout:
        if line.startswith("READY "):
            return proc, line.split()[1]
    proc.wait()
    refuse(f"the stepping process stopped before it was ready (exit {proc.returncode}; "
           "its error above)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", default="65x49x21", help="IMxJMxKB")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--seconds", type=int, default=4, help="seconds of each sampler")
    parser.add_argument("--top", type=int, default=15, help="rows of the libraries' and loops' tables")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.grid, getattr(torch, args.dtype), 2 * args.seconds + 10)
        return
    if min(args.seconds, args.top) < 1:
        refuse(f"--seconds {args.seconds}, --top {args.top}: at least 1")
    try:
        config = grid_config(args.grid)
    except (ValueError, ConfigError) as exc:
        refuse(f"--grid {args.grid}: {exc}")
    proc, ms = start_child(args)
    try:
        print(f"{args.grid} {args.dtype} compiled, one thread: {ms} ms a step before "
              f"sampling; load {load()}\n")
        with tempfile.TemporaryDirectory() as out:
            raw, script = record(proc.pid, args.seconds, Path(out))
        if proc.poll() is not None:
            refuse(f"the stepping process ended while it was sampled (exit {proc.returncode})")
    except subprocess.CalledProcessError as exc:       # a sampler refused (permissions, ...)
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        last = [line for line in (said or "").splitlines() if line.strip()][-1:]
        refuse(f"{exc.cmd[0]} failed: {last[0].strip() if last else f'exit {exc.returncode}'}")
    finally:
        proc.kill()
        proc.wait()
    if raw is not None:
        print_python(raw)
    else:
        print("(no py-spy: pip install py-spy)")
    if script is not None:
        print_perf(script, config.im * config.jm, args.top)
    else:
        print("\n(no perf or addr2line: the libraries' and loops' tables need both)")


if __name__ == "__main__":
    main()
