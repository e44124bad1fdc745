"""CG iterations and time per elevation solve against the grid, Jacobi and
multigrid, printed as Markdown.

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

The seamount has no land inside it (its channel walls are the boundary
ring): ``--land 0.3`` adds rows with 30 % of the interior made land in
blobs and coastlines (a smoothed random field above its quantile; the
faces to land removed and each cell's diagonal its own term plus its
remaining faces, as implicit_step builds it for land, fsm = 0).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

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


def with_land(a: cg.FivePoint, b: torch.Tensor, fraction: float, seed: int = 0):
    """(A, b) with ``fraction`` of the interior made land (the module
    docstring): blobs some im/40 cells across."""
    im, jm = a.diag.shape
    width = max(2, im // 40)
    g = torch.Generator().manual_seed(seed)
    field = torch.randn(1, 1, im, jm, generator=g, dtype=torch.float64)
    box = torch.ones(1, 1, 2 * width + 1, 2 * width + 1, dtype=torch.float64)
    for _ in range(2):
        field = F.conv2d(F.pad(field, (width,) * 4, mode="reflect"), box)
    field = field[0, 0].to(a.diag.device)
    active = a.active & ~(field > torch.quantile(field.flatten(), 1 - fraction))
    zero_x, zero_y = torch.zeros_like(a.cx[:1]), torch.zeros_like(a.cy[:, :1])

    def faces(cx, cy):
        return cx + torch.cat([cx[1:], zero_x]) + cy + torch.cat([cy[:, 1:], zero_y], 1)
    own = a.diag - faces(a.cx, a.cy)
    cx = torch.where(active & torch.cat([active[:1], active[:-1]]), a.cx, 0.0)
    cy = torch.where(active & torch.cat([active[:, :1], active[:, :-1]], 1), a.cy, 0.0)
    diag = torch.where(active, own + faces(cx, cy), 1.0)
    return cg.FivePoint(diag, cx, cy, active), torch.where(active, b, 0.0)


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
    parser.add_argument("--land", default="0", help="fractions of land, comma separated")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"dti {args.dti:g} s, cg_tol 1e-12, {args.device}, float64, {args.threads} thread(s), "
          f"load average {load:.2f} at the start\n")
    print("| grid | land | unknowns | Jacobi iterations | Jacobi ms/solve | multigrid iterations "
          "| multigrid ms/solve | levels | multigrid vs Jacobi |")
    print("|---|---|---|---|---|---|---|---|---|")
    beyond = []
    for grid in args.grids.split(","):
        im, jm = (int(n) for n in grid.split("x"))
        sea, rhs = equation(im, jm, args.dti, args.kb, args.device)
        for fraction in (float(f) for f in args.land.split(",")):
            a, b = with_land(sea, rhs, fraction) if fraction > 0 else (sea, rhs)
            x_j, n_j, t_j = timed(a, b, "jacobi", args.repeat)
            x_m, n_m, t_m = timed(a, b, "multigrid", args.repeat)
            levels = len(multigrid.hierarchy(a))
            diff = float((x_m - x_j).norm() / x_j.norm())
            print(f"| {im}x{jm} | {fraction:.0%} | {int(a.active.sum())} | {n_j} "
                  f"| {t_j * 1e3:.1f} | {n_m} | {t_m * 1e3:.1f} | {levels} | {diff:.1e} |",
                  flush=True)
            if n_j > Config().cg_maxiter and fraction == 0:
                beyond.append(grid)
    if beyond:
        print(f"\nJacobi needs more than the default cg_maxiter ({Config().cg_maxiter}) on "
              f"{', '.join(beyond)}: a run there stops (NotConverged) unless cg_maxiter is "
              "raised or preconditioner = 'multigrid'")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average {load:.2f} at the end")


if __name__ == "__main__":
    main()
