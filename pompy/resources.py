"""How much memory a run will need, and how much there is, before anything
is allocated (a 5000x5000 grid must be refused, not discovered by the
kernel's OOM killer).

The estimate is ``BASE + factor * state`` where ``state`` is the size of
every declared variable (work arrays included) in float64 on the config's
grid, and the factor was measured as the peak resident memory of
``pompy.driver.run_case`` (set-up, 3 steps, one output record, the
restart) less the interpreter with torch imported (~300 MB), on 2-core
CPU runs of the box at 65x49x21 and 200x200x21 (state 20 and 249 MB):

    core       dtype     measured peak / state   factor used
    explicit   float64   2.3 (65x49), 4.8 (200x200)     5.0
    explicit   float32   3.8 (200x200)                   4.0
    oracle     float64   2.9 (200x200)                   3.0

(the set-up runs in float64 on the CPU and is then copied to the core's
dtype, so float32 saves less than half). With gradients each step keeps
its graph: measured at 65x49x21 (validation/gradient_memory.py) 307 MB per step
without checkpointing (15.4 states), 229 MB with checkpoint="routines"
(11.5); checkpoint="steps" (two levels) peaks at 1.06 GB for 240 steps
(0.13 states per step over the base and the run's own 5; 0.05 at 960
steps, so the figure is an upper bound past 240).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from pompy import variables
from pompy.config import Config

BASE = 350e6                     # Python, torch and pompy imported, with margin
# the state's multiples a run keeps: a torch core's (either scheme) in each
# precision, the Fortran oracle's (float64 only)
FACTORS = {("torch", "float64"): 5.0, ("torch", "float32"): 4.0, ("fortran", "float64"): 3.0}
PER_STEP = {None: 15.4, "routines": 11.5, "steps": 0.13}   # gradients: states kept per step


def state_bytes(config: Config, itemsize: int = 8) -> int:
    """Every declared variable (work arrays too) on the config's grid."""
    return itemsize * sum(math.prod(variables.shape(name, config.im, config.jm, config.kb))
                          for name in variables.ALL)


def estimate_run_bytes(config: Config, fortran: bool = False, dtype: str = "float64",
                       gradient_steps: int = 0, checkpoint: str | None = None,
                       members: int = 1) -> int:
    """Peak host memory of a run (see the module docstring) of a torch core
    or, with ``fortran``, of the Fortran oracle; with
    ``gradient_steps`` > 0, of a forward pass through that many steps whose
    graph is kept for a backward; of ``members`` run as one Ensemble (each
    member's share as a core's: measured 680 MB peak for 8 members of the
    65x49x21 seamount, 1150 MB estimated)."""
    state = state_bytes(config) * members
    factor = FACTORS[("fortran" if fortran else "torch", dtype)]
    scale = 0.5 if dtype == "float32" else 1.0
    return int(BASE + state * (factor + gradient_steps * PER_STEP[checkpoint] * scale))


def available_bytes() -> int | None:
    """Memory this process may still take: MemAvailable, bounded by a
    cgroup limit when there is one; None where neither can be read."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:
            found.append(max(int(limit) - usage, 0))
    override = os.environ.get("POMPY_MEMORY_AVAILABLE")   # tests, and schedulers that know better
    if override:
        found.append(int(float(override)))
    return min(found) if found else None


def gigabytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB"
