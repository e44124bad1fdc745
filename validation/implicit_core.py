"""The implicit core's long checks, too long for the test suite.

    python3 validation/implicit_core.py            # all four
    python3 validation/implicit_core.py --only long|limit|day|solvers

- long: the 65x49x21 seamount for 10 days without gradients (the
  accelerated PCG) at dti = 600 s (dte 20, isplit 30: 83 times the
  external CFL limit per pass of 7.2 s) with t and s held (mode 4), and
  in full 3-D (mode 3) at dti = 390 s, under the internal CFL limit of
  the stratification (407 s, pompy.core.setup.check_internal_cfl): both
  must run without a stop (and at 450 s, past the check's limit, to
  measure its margin); prints the largest vamax and the PCG iterations
  per step.
- limit: mode 3 past that limit, at dti = 540 and 600 s, with the implicit
  core and with pom2k's own split-explicit core (dte 6): the step each
  stops at. Both stop, within a step of each other: what limits dti is
  pom2k's internal mode (internal waves, c1 up to 3.2 m/s), which the
  two cores share, not the free surface.
- day: one day at pom2k's own time step (dti = 180 s) with the explicit
  and the implicit core: the relative L2 difference of u, v, ua, va (bar
  0.2) and t, s (bar 1e-3), since the physics is the same.
- solvers: on the seamount's elevation equation after a day, the reference
  CG (fixed budget, cg_maxiter iterations) and the PCG: iterations, time
  per solve and agreement.

Results go to stdout as Markdown.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.core.external import cg
from pompy.core.external import implicit as scheme
from pompy.core.implicit import ImplicitCore
from pompy.core.setup import check_internal_cfl
from pompy.errors import ConfigError, ModelStop

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"


def run(kind, config, days: float):
    core = kind(config)
    core.run_initialization()
    core.iend = round(days * 86400 / config.dti)
    largest = 0.0
    start = time.perf_counter()
    with torch.no_grad():
        for iint in range(1, core.iend + 1):
            core.iend = iint
            core.run_time_loop()
            largest = max(largest, core.vamax)
    return core, largest, time.perf_counter() - start


def long_run() -> None:
    print("| case | steps | stop | largest vamax | PCG iterations per step | ms per step |")
    print("|---|---|---|---|---|---|")
    for label, changes in (("mode 4, dti 600 s", dict(mode=4, dte=20.0)),
                           ("mode 3, dti 390 s", dict(mode=3, dte=13.0)),
                           ("mode 3, dti 450 s (past the check's 407 s: its margin)",
                            dict(mode=3, dte=15.0))):
        config = dataclasses.replace(load_config(CONFIG), isplit=30, days=10.0, **changes)
        if config.dte < 15.0:
            check_internal_cfl(config)
        iterations = []
        original = cg.pcg

        def counting(*args, **kwargs):
            x, res, n = original(*args, **kwargs)
            iterations.append(n)
            return x, res, n
        cg.pcg = counting
        try:
            core, vamax, seconds = run(ImplicitCore, config, 10.0)
        finally:
            cg.pcg = original
        print(f"| 10 days, {label} | {core.iint} | none | {vamax:.3g} m/s "
              f"| {min(iterations)}..{max(iterations)} | {seconds / core.iint * 1e3:.0f} |")


def limit() -> None:
    print("| core | dti | internal CFL check | stop |")
    print("|---|---|---|---|")
    for dti in (540.0, 600.0):
        for kind, changes in ((ImplicitCore, dict(dte=dti / 30, isplit=30)),
                              (ExplicitCore, dict(dte=6.0, isplit=round(dti / 6)))):
            config = dataclasses.replace(load_config(CONFIG), days=1.0, **changes)
            try:
                check_internal_cfl(config)
                refused = "passes"
            except ConfigError as err:
                refused = "refuses (limit " + str(err).split("< ")[1].split(",")[0] + ")"
            try:
                run(kind, config, 1.0)
                stop = "none in a day"
            except ModelStop as exc:
                stop = f"step {exc.iint}: {str(exc).split(': ', 1)[1]}"
            print(f"| {kind.__name__} | {dti:.0f} s | {refused} | {stop} |")


def one_day() -> None:
    config = load_config(CONFIG)
    explicit, _, t_explicit = run(ExplicitCore, config, 1.0)
    implicit, _, t_implicit = run(ImplicitCore, config, 1.0)
    print("| field | relative L2, implicit vs explicit after 1 day | bar |")
    print("|---|---|---|")
    for name, bar in (("u", 0.2), ("v", 0.2), ("ua", 0.2), ("va", 0.2), ("t", 1e-3), ("s", 1e-3),
                      ("el", None)):
        a, b = implicit.state[name], explicit.state[name]
        rel = float((a - b).norm() / b.norm())
        print(f"| {name} | {rel:.3g} | {bar if bar is not None else '-'} |")
    print(f"\nms per step: explicit {t_explicit / explicit.iint * 1e3:.0f}, implicit "
          f"{t_implicit / implicit.iint * 1e3:.0f}")


def solvers() -> None:
    config = load_config(CONFIG)
    core, _, _ = run(ImplicitCore, config, 1.0)
    seen = {}

    def spy(a, b, tol, maxiter):
        seen["a"], seen["b"] = a, b
        return cg.solve(a, b, tol, maxiter)
    scheme.implicit_step(dict(core.state), dict(core.params), core.routines, solver=spy)
    a, b = seen["a"], seen["b"]
    print("| solver | iterations | relative residual | ms per solve |")
    print("|---|---|---|---|")
    for maxiter in (50, 100, config.cg_maxiter):
        start = time.perf_counter()
        x_ref, res = cg.solve(a, b, config.cg_tol, maxiter)
        ms = (time.perf_counter() - start) * 1e3
        print(f"| reference CG (fixed budget) | {maxiter} | {float(res):.2e} | {ms:.1f} |")
    start = time.perf_counter()
    x, res, n = cg.pcg(a, b, config.cg_tol, config.cg_maxiter)
    ms = (time.perf_counter() - start) * 1e3
    print(f"| Jacobi PCG (early exit, checks every 8) | {n} | {float(res):.2e} | {ms:.1f} |")
    print(f"\nPCG vs reference: {float((x - x_ref).norm() / x_ref.norm()):.2e} relative "
          f"(cg_tol {config.cg_tol:g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("long", "limit", "day", "solvers"))
    args = parser.parse_args()
    for name, fn in (("solvers", solvers), ("day", one_day), ("limit", limit), ("long", long_run)):
        if args.only in (None, name):
            print(f"\n## {name}\n")
            fn()


if __name__ == "__main__":
    main()
