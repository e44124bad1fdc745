"""The elevation solve's two reported cases, run as they were reported,
with the default solver settings (Jacobi PCG, cg_tol 1e-12; cg_maxiter was
500 when they were reported, 1000 now):

    python3 validation/solver_stagnation.py                 # both
    python3 validation/solver_stagnation.py --only mode4    # a day, about 2 min on a CPU
    python3 validation/solver_stagnation.py --only mode3    # 10 days, 2215 steps

- mode4: ``pompy run configs/seamount.nml --core implicit --set mode=4
  --set dte=20 --set isplit=30 --days 1`` (dti 600 s, t and s held). It
  stopped at step 10 ("relative residual 1.01e-12 > cg_tol=1e-12 after
  cg_maxiter=500"): the PCG's recurrence met cg_tol after 296 iterations
  where the true residual was 1.005e-12.
- mode3: the same seamount in full 3-D at dti 390 s (dte 13, isplit 30),
  under the stratification's internal CFL limit of 407 s, for 10 days.
  Once in its first day the recurrence met cg_tol where the true residual
  was 1.0006e-12.

Each runs through ``pompy.cli.main`` in this process (the command line
itself, output in a temporary folder, one record a day: ``--output-every
1``, which the solver does not see), every PCG solve watched: it passes
when the command exits 0 after every step. Printed as Markdown: the exit
code, the steps, the wall time and the machine's load, the iterations per
solve (least, median, most), the largest true relative residual, how many
solves went on past their recurrence's stop (the true residual above
cg_tol there) and how many of those ended at their floating-point floor
above cg_tol (passed within cg.FLOOR_FACTOR x cg_tol); a failed case's
last line (its stop) under the table. Exit status 1 if a case fails.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pompy import cli
from pompy.core.external import cg

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
BASE = ["run", str(CONFIG), "--core", "implicit"]
CASES = {
    "mode4": ("a day at dti 600 s, mode 4",
              [*BASE, "--set", "mode=4", "--set", "dte=20", "--set", "isplit=30", "--days", "1"]),
    "mode3": ("10 days at dti 390 s, mode 3",
              [*BASE, "--set", "dte=13", "--set", "isplit=30", "--days", "10"]),
}


class Watch:
    """Every PCG solve's (true relative residual, iterations), and the
    solves that went on past their recurrence's stop (cg._to_floor)."""

    def __init__(self):
        self.solves, self.went_on = [], []

    def __enter__(self):
        self.pcg, self.to_floor = cg.pcg, cg._to_floor

        def pcg(*args, **kwargs):
            x, residual, done = self.pcg(*args, **kwargs)
            self.solves.append((float(residual), done))
            return x, residual, done

        def to_floor(*args, **kwargs):
            x, residual, done = self.to_floor(*args, **kwargs)
            self.went_on.append((float(residual), done))
            return x, residual, done
        cg.pcg, cg._to_floor = pcg, to_floor
        return self

    def __exit__(self, *exc):
        cg.pcg, cg._to_floor = self.pcg, self.to_floor


def case(name: str, folder: Path) -> bool:
    label, argv = CASES[name]
    argv = [*argv, "--output", str(folder / name), "--output-every", "1", "--overwrite"]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    said = io.StringIO()          # the command's progress and its last line
    with Watch() as watch, contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = cli.main(argv)
    seconds = time.perf_counter() - start
    tol = 1e-12
    iterations = [n for _, n in watch.solves]
    at_floor = [r for r, _ in watch.went_on if r > tol * cg.SLACK]
    passed = code == 0
    print(f"| {label} | {'pass' if passed else 'FAIL'} (exit {code}) | {len(watch.solves)} "
          f"| {seconds:.0f} s ({seconds / max(len(watch.solves), 1) * 1e3:.0f} ms/step) "
          f"| {load:.1f} | {min(iterations)} / {statistics.median(iterations):g} / "
          f"{max(iterations)} | {max(r for r, _ in watch.solves):.3g} | {len(watch.went_on)} "
          f"| {len(at_floor)}{f' (largest {max(at_floor):.3g})' if at_floor else ''} |",
          flush=True)
    if not passed:
        print(f"\n    {said.getvalue().strip().splitlines()[-1]}\n", flush=True)
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(CASES), action="append",
                        help="run only this case (repeatable)")
    parser.add_argument("--keep", type=Path, help="keep the outputs in this folder")
    args = parser.parse_args()
    names = args.only or ["mode4", "mode3"]
    print("| case | result | steps | wall time | load at start | iterations least / median / "
          "most | largest true residual | went on past the recurrence | ended at the floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        ok = [case(name, folder) for name in names]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
