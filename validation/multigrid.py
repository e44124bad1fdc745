"""CG iterations and time per elevation solve against the grid, Jacobi and
multigrid (issue 37, item 4), printed as Markdown.

    python3 validation/multigrid.py          # 65x49, 256x256, 360x240, 720x480 at dti 600 s
    python3 validation/multigrid.py --grids 65x49,256x256 --device cuda

Each grid is the seamount (pom2k's: spacing 8 km shrinking to 4 km mid-
basin, so a larger grid is a larger basin) at dti = 600 s (dte 20,
isplit 30) with t and s held (mode 4: the stratification's internal CFL
limit, 407 s, is the internal mode's, which a solve does not see), kb 5
(the elevation equation is 2-D: kb changes only its forcing). After two
steps the next step's elevation equation is taken (the operator and the
right-hand side implicit_step hands its solver) and solved to cg_tol 1e-12
by the PCG with each preconditioner, ``--repeat`` times: the iterations,
the fastest time per solve (the multigrid's includes building its levels,
as each step's solve does: the operator changes every step), the levels,
and the two solutions' relative difference. The goal: multigrid
iterations <= 25 on every grid, flat as the grid grows.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import torch

from pompy.config import Config, load_config
from pompy.core.external import cg, multigrid
from pompy.core.external import implicit as scheme
from pompy.core.implicit import ImplicitCore

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
GRIDS = "65x49,256x256,360x240,720x480"


def equation(im: int, jm: int, dti: float, kb: int, device: str):
    """The elevation equation (A, b) of step 3 of the seamount at im x jm."""
    config = dataclasses.replace(load_config(CONFIG), im=im, jm=jm, kb=kb, kl1=2, kl2=kb - 2,
                                 dte=dti / 30, isplit=30, mode=4, cg_maxiter=20000,
                                 preconditioner="multigrid")
    core = ImplicitCore(config, device=device)
    core.run_initialization()
    core.iend = 2
    seen = {}

    def spy(a, b, tol, maxiter):
        seen["a"], seen["b"] = a, b
        return cg.solve_auto(a, b, tol, maxiter, "multigrid")
    with torch.no_grad():
        core.run_time_loop()
        scheme.implicit_step(dict(core.state), dict(core.params), core.routines, solver=spy)
    return seen["a"], seen["b"]


def timed(a, b, preconditioner: str, repeat: int) -> tuple[torch.Tensor, int, float]:
    """(x, iterations, fastest seconds per solve)."""
    best = float("inf")
    for _ in range(repeat):
        if b.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        x, residual, n = cg.pcg(a, b, 1e-12, 20000, preconditioner=preconditioner)
        if b.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
        if not float(residual) <= 1e-12 * cg.SLACK:
            raise RuntimeError(f"{preconditioner}: residual {float(residual):.2e}")
    return x, n, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default=GRIDS, help="IMxJM, comma separated")
    parser.add_argument("--dti", type=float, default=600.0, help="internal time step (s)")
    parser.add_argument("--kb", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"dti {args.dti:g} s, cg_tol 1e-12, {args.device}, float64, {args.threads} thread(s), "
          f"load average {load:.2f} at the start\n")
    print("| grid | unknowns | Jacobi iterations | Jacobi ms/solve | multigrid iterations "
          "| multigrid ms/solve | levels | multigrid vs Jacobi |")
    print("|---|---|---|---|---|---|---|---|")
    beyond = []
    for grid in args.grids.split(","):
        im, jm = (int(n) for n in grid.split("x"))
        a, b = equation(im, jm, args.dti, args.kb, args.device)
        x_j, n_j, t_j = timed(a, b, "jacobi", args.repeat)
        x_m, n_m, t_m = timed(a, b, "multigrid", args.repeat)
        levels = len(multigrid.hierarchy(a))
        diff = float((x_m - x_j).norm() / x_j.norm())
        print(f"| {im}x{jm} | {int(a.active.sum())} | {n_j} | {t_j * 1e3:.1f} | {n_m} "
              f"| {t_m * 1e3:.1f} | {levels} | {diff:.1e} |", flush=True)
        if n_j > Config().cg_maxiter:
            beyond.append(grid)
    if beyond:
        print(f"\nJacobi needs more than the default cg_maxiter ({Config().cg_maxiter}) on "
              f"{', '.join(beyond)}: a run there stops (NotConverged) unless cg_maxiter is "
              "raised or preconditioner = 'multigrid'")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average {load:.2f} at the end")


if __name__ == "__main__":
    main()
