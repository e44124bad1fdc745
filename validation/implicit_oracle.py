"""The implicit core against its Fortran twin over whole runs,
too long for the test suite (the torch core takes minutes on the CPU).

    python3 validation/implicit_oracle.py                  # every case
    python3 validation/implicit_oracle.py --only seamount  # or box, pcg
    python3 validation/implicit_oracle.py --steps 24       # a shorter seamount

- seamount: configs/seamount.nml (65x49x21, dti = 180 s), 240 steps, the
  Fortran run_steps with the implicit scheme (OracleModel(config, core="implicit"))
  against the torch ImplicitCore with the reference CG (cg.solve), with and
  without pompy.compat.fortran_math: the largest difference of every
  output field (and of any variable) relative to its magnitude, the bar
  of `pompy compare --tolerance 1e-10`.
- pcg: the same with the torch core's own choice of solver in a plain run
  (cg.solve_auto: the Jacobi PCG without gradients), which stops on its
  own rounding, within cg_tol of the reference.
- box: configs/box.nml, a day (480 steps), both cores, with the box's
  inflow and without (vfluxf = 0): the volume change per day and the rise
  against the inflow, and the torch-Fortran difference.

Results go to stdout as Markdown. Measured (2 CPU cores, shared, torch
2.13): seamount, reference CG with fortran_math: every variable equal to
the last bit; with torch's elementary functions: 5.5e-10 of its magnitude
in l, the turbulence length scale, every other output field within
1.8e-11 (q2lb) (the explicit core against the explicit oracle does the
same: 2.3e-9 in l, 1.4e-11 in q2l); with the PCG (a plain run's solver):
6.6e-10 in l, the others within 2.1e-11 (with fortran_math: 3.9e-10 in
l: the PCG stops on other rounding, within cg_tol); box: the torch run
equal to the oracle's to the last bit, volume 6.7e-22 per day without
inflow, the rise 1.1e-16 from the inflow's.
"""
from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import numpy as np
import torch

from pompy import variables
from pompy.compat import fortran_math
from pompy.config import load_config
from pompy.core.external import cg
from pompy.core.external.implicit import SemiImplicit
from pompy.core.implicit import ImplicitCore
from pompy.oracle.driver import OracleModel

CONFIGS = Path(__file__).parents[1] / "configs"


def oracle_run(config, steps: int, vfluxf: float | None = None) -> tuple[dict, float]:
    model = OracleModel(config, core="implicit")
    if vfluxf is not None:
        model.state["vfluxf"][...] = vfluxf
    start = time.perf_counter()
    model.advance(steps)
    return model.state, time.perf_counter() - start


def torch_run(config, steps: int, solver=None, pom2k_math: bool = False,
              vfluxf: float | None = None) -> tuple[dict, float]:
    start = time.perf_counter()
    with fortran_math() if pom2k_math else contextlib.nullcontext():
        core = ImplicitCore(config)
        if solver is not None:
            core.external = SemiImplicit(solver)
        core.run_initialization()
        if vfluxf is not None:
            core.vfluxf = torch.full_like(core.vfluxf, vfluxf)
        core.iend = steps
        core.run_time_loop()
    return core.numpy_state(), time.perf_counter() - start


def differences(got: dict, want: dict) -> dict[str, float]:
    out = {}
    for name in variables.ALL:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        scale = float(np.abs(w).max())
        err = float(np.abs(g - w).max())
        out[name] = err / scale if scale > 0 else err
    return out


def report(label: str, got: dict, want: dict, seconds: float) -> None:
    diff = differences(got, want)
    output = [n for n in variables.names("output") if n in diff]
    worst_out = max(output, key=diff.get)
    worst_all = max(diff, key=diff.get)
    print(f"| {label} | {diff[worst_out]:.2g} ({worst_out}) | {diff[worst_all]:.2g} ({worst_all}) "
          f"| {seconds:.0f} |")


def seamount(steps: int, reference: bool, pcg: bool) -> None:
    config = load_config(CONFIGS / "seamount.nml")
    want, seconds = oracle_run(config, steps)
    print(f"\n### seamount, {steps} steps (oracle: {seconds:.1f} s)\n")
    print("| torch core | largest output-field difference | largest of any variable | torch s |")
    print("|---|---|---|---|")
    runs = []
    if reference:
        runs += [("reference CG, fortran_math", cg.solve, True),
                 ("reference CG, torch's functions", cg.solve, False)]
    if pcg:
        runs.append(("solve_auto (PCG), torch's functions", None, False))
    for label, solver, pom2k_math in runs:
        got, seconds = torch_run(config, steps, solver, pom2k_math)
        report(label, got, want, seconds)


def box() -> None:
    config = load_config(CONFIGS / "box.nml")
    steps = config.iend
    days = steps * config.dti / 86400
    print(f"\n### box, {steps} steps ({days:g} day)\n")
    print("| inflow | core | volume change per day / volume | rise / inflow - 1 | vs oracle |")
    print("|---|---|---|---|---|")
    for vfluxf in (0.0, None):
        start = OracleModel(config, core="implicit").state
        if vfluxf is not None:
            start["vfluxf"][...] = vfluxf
        inflow = -float(start["vfluxf"][start["fsm"] > 0].mean()) + 0.0   # no -0
        area = float((start["art"] * start["fsm"]).sum())
        volume = float(((start["h"] + start["el"]) * start["art"] * start["fsm"]).sum())
        want, _ = oracle_run(config, steps, vfluxf)
        got, _ = torch_run(config, steps, cg.solve, True, vfluxf)
        for label, state in (("oracle", want), ("torch", got)):
            change = float(((state["el"] - start["el"]) * start["art"] * start["fsm"]).sum())
            rise = (change / area) / (inflow * steps * config.dti) - 1 if inflow else float("nan")
            versus = max(differences(state, want).values())
            print(f"| {inflow:g} m/s | {label} | {abs(change) / volume / days:.2g} | {rise:.2g} "
                  f"| {versus:.2g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("seamount", "pcg", "box"))
    parser.add_argument("--steps", type=int, default=240)
    args = parser.parse_args()
    if args.only in (None, "seamount", "pcg"):
        seamount(args.steps, reference=args.only != "pcg", pcg=args.only != "seamount")
    if args.only in (None, "box"):
        box()


if __name__ == "__main__":
    main()
