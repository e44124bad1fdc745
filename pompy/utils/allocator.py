"""The C allocator under a pompy process: tcmalloc where the machine has it.

A torch step on the CPU allocates and frees thousands of tensors (16,464
calls a step eager at 65x49x21, each 3-D field 535 kB there); glibc's
malloc serves blocks that size from fresh pages more often than tcmalloc,
which keeps freed blocks for the next request. Measured at 65x49x21
float64, one thread, processes alternating (validation/benchmark.py's
step, README "Speed"): eager 51-56 ms a step against 57-64 with glibc,
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
one already (LD_PRELOAD) keeps it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "POMPY_ALLOCATOR"
CHOICES = ("tcmalloc", "system")
# Debian's libtcmalloc-minimal4 (the minimal build: no heap profiler), then
# gperftools' full library
_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
         "/usr/local/lib")
# set in the re-executed process: the LD_PRELOAD its parent had ("" for none),
# which it gives back to its own children (a browser or a compiler started by
# pompy gets the user's environment, not pompy's allocator)
_GIVEN = "_POMPY_LD_PRELOAD"
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


def reexec() -> None:
    """Execute this process's command again (same interpreter, arguments
    and environment) with tcmalloc preloaded, where POMPY_ALLOCATOR allows
    it, the machine has tcmalloc, and the process has no allocator of its
    own yet; else return. In the process executed again, give its
    children the parent's LD_PRELOAD back and return. Call it first thing
    in an entry point: what ran before runs twice."""
    allocator = choice()
    if _GIVEN in os.environ:
        given = os.environ.pop(_GIVEN)
        if given:
            os.environ["LD_PRELOAD"] = given
        else:
            os.environ.pop("LD_PRELOAD", None)
        return
    path = tcmalloc_path()
    if allocator == "system" or not sys.platform.startswith("linux") or path is None \
            or in_use() != "system" or not sys.executable or not getattr(sys, "orig_argv", None):
        return
    given = os.environ.get("LD_PRELOAD", "")
    env = {**_QUIET, **os.environ, _GIVEN: given,
           "LD_PRELOAD": f"{path}:{given}" if given else path}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:                     # cannot execute: run on with the system's
        return
