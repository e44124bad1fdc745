"""The implicit core's 50-step directional derivative against central
differences of its Fortran twin: the h sweeps behind
tests/test_implicit_gradient.py (its cases, set-up and figures; read its
docstring).

    python3 validation/implicit_gradient.py                 # t, el, horcon
    python3 validation/implicit_gradient.py --only el --seed 3
    python3 validation/implicit_gradient.py --forward       # forward mode too (26 s a case)
    python3 validation/implicit_gradient.py --set cg_tol=1e-14 --set cg_maxiter=300

For each case: torch's g = <dJ/dx, d> by autograd (reverse), optionally by
forward mode, J of both models, then a Markdown table of
(J(x + h d) - J(x - h d)) / 2h of the twin against g over h. The test's
bar is 1e-6 on the plateau. About 10 s a case on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pompy.config import parse_overrides  # noqa: E402
from test_implicit_gradient import implicit_seamount, make_case  # noqa: E402

SEEDS = {"t": 0, "el": 2, "horcon": 3}       # the test's
STEPS_H = {"t": [1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 1e-7],
           "horcon": [1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 1e-7],
           "el": [10.0, 3.0, 1.0, 0.3, 0.1, 3e-2, 1e-2, 3e-3, 1e-3, 1e-4, 1e-5, 1e-6]}


def sweep(kind: str, seed: int, forward: bool, changes: dict) -> None:
    case = make_case(kind, seed, implicit_seamount(**changes))
    began = time.perf_counter()
    J, g, _ = case.reverse()
    reverse_s = time.perf_counter() - began
    J_twin = case.loss.numpy(case.oracle_run(0.0))
    print(f"\n## {kind}, seed {seed}{' ' + str(changes) if changes else ''}\n")
    print(f"g = {g:.10g} (reverse, {reverse_s:.1f} s); J = {J:.15g}, the twin's {J_twin:.15g} "
          f"(difference {J - J_twin:+.2e})")
    if forward:
        began = time.perf_counter()
        g_forward = case.forward()
        print(f"forward mode: {g_forward:.10g}, (forward - reverse) / |g| = "
              f"{(g_forward - g) / abs(g):+.2e} ({time.perf_counter() - began:.1f} s)")
    print("\n| h | (fd - g) / abs(g) |\n|---|---|")
    for h in STEPS_H[kind]:
        try:
            print(f"| {h:g} | {(case.central(h) - g) / abs(g):+.2e} |", flush=True)
        except Exception as exc:      # a perturbation large enough to blow the run up
            print(f"| {h:g} | {type(exc).__name__}: {exc} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=tuple(SEEDS), action="append",
                        help="a case (repeatable; default all)")
    parser.add_argument("--seed", type=int, help="the direction's and weights' seed "
                                                 "(default: the test's)")
    parser.add_argument("--forward", action="store_true", help="forward mode too")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="change a parameter of the test's config (e.g. dte=20)")
    args = parser.parse_args(argv)
    changes = parse_overrides(args.set)
    print("# The implicit core's directional derivative vs the Fortran twin's central differences")
    for kind in args.only or SEEDS:
        sweep(kind, SEEDS[kind] if args.seed is None else args.seed, args.forward, changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
