"""The C allocator under a pompy process: tcmalloc where the machine has it.

A torch step on the CPU allocates and frees thousands of tensors (16,464
calls a step eager at 65x49x21, each 3-D field 535 kB there); glibc's
malloc serves blocks that size from fresh pages more often than tcmalloc,
which keeps freed blocks for the next request. Measured at 65x49x21
float64, one thread, processes alternating (validation/benchmark.py's
step; docs/performance): eager 51-56 ms a step against 57-64 with glibc,
compiled 21-24 against 23-27. The bits do not change (an allocator
places tensors, it computes nothing; tests/test_allocator.py runs
``pompy run`` on each and compares the restarts).

The allocator is fixed before a process's first allocation, so a command
that wants tcmalloc executes itself again with it preloaded (as torch's
CPU launcher, torch.backends.xeon.run_cpu, does): :func:`reexec`, called
by the ``pompy`` command, ``-m pompy.generate``, ``-m pompy.train``,
validation/benchmark.py and validation/gradient_memory.py before their
work, never on import.
``POMPY_ALLOCATOR=system`` keeps the system's allocator; a process given
any LD_PRELOAD keeps it as it is (an allocator, a sanitizer: the user's
choice), as does one that cannot be started again as it was (a
multiprocessing child, a script read from stdin).
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ENV = "POMPY_ALLOCATOR"
CHOICES = ("tcmalloc", "system")
# Debian's libtcmalloc-minimal4 (the minimal build: no heap profiler), then
# gperftools' full library
_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
_DIRS = (f"/usr/lib/{platform.machine()}-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
# set in the re-executed process, which then gives its own children the
# environment its parent had (a browser or a compiler started by pompy gets
# the user's, not pompy's allocator): the names pompy added, to remove
_ADDED = "_POMPY_ALLOCATOR_ADDED"
# tcmalloc reports each allocation above 1 GB on stderr; a large grid's
# fields are that large by design
_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 62)}


def tcmalloc_path() -> str | None:
    """The tcmalloc library on this machine, or None."""
    for name in _NAMES:
        for folder in _DIRS:
            path = Path(folder) / name
            if path.is_file():
                return str(path)
    return None


def in_use() -> str:
    """The allocator mapped into this process: "tcmalloc", "jemalloc" or
    "system" (read from /proc/self/maps; "system" where there is none)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    for name in ("tcmalloc", "jemalloc"):
        if f"lib{name}" in maps:
            return name
    return "system"


def choice() -> str:
    """POMPY_ALLOCATOR: "tcmalloc" (the default) or "system"; another value
    stops the process with one line (exit 2)."""
    value = os.environ.get(ENV, "").strip() or "tcmalloc"
    if value not in CHOICES:
        print(f"pompy: {ENV}={value!r} is not an allocator pompy knows: use "
              f"{' or '.join(CHOICES)}", file=sys.stderr)
        raise SystemExit(2)
    return value


def _replayable() -> bool:
    """Whether this process's command line starts it again as it is: not
    a multiprocessing child (its job came through a pipe that an exec
    closes) nor a script read from stdin."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return False
    argv = getattr(sys, "orig_argv", None)
    return bool(argv and sys.executable and "--multiprocessing-fork" not in argv
                and sys.argv and sys.argv[0] not in ("", "-"))


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):       # closed: nothing to lose
                pass


def reexec() -> None:
    """Execute this process's command again (same interpreter, arguments
    and environment) with tcmalloc preloaded, where POMPY_ALLOCATOR allows
    it, the machine has tcmalloc, no LD_PRELOAD is set and the command can
    be started again as it was; else return. In the process executed
    again, take pompy's additions out of the environment its children get,
    and return. Call it first thing in an entry point: what ran before
    runs twice."""
    allocator = choice()
    if _ADDED in os.environ:
        for name in os.environ.pop(_ADDED).split(","):
            os.environ.pop(name, None)
        return
    path = tcmalloc_path()
    if allocator == "system" or not sys.platform.startswith("linux") or path is None \
            or os.environ.get("LD_PRELOAD") or in_use() != "system" or not _replayable():
        return
    added = {"LD_PRELOAD": path, **{k: v for k, v in _QUIET.items() if k not in os.environ}}
    env = {**os.environ, **added, _ADDED: ",".join(added)}
    _flush()
    try:
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:                     # cannot execute: run on with the system's
        return
