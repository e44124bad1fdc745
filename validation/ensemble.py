"""Time per member and step: an ensemble of B members (pompy.core.ensemble)
against B = 1 (a single core), without gradients.

    python3 validation/ensemble.py                          # 65x49x21, B = 1, 8
    python3 validation/ensemble.py --grid 33x25x21 --members 1 4 8 --steps 6

Each case warms up two steps, then times --steps steps. B = 1 is the
single core itself (the implicit core with its PCG); B > 1 the ensemble
(the implicit core's members solve with the reference CG there, the
PCG's early exit being a host read vmap cannot batch). Results go to
stdout as a Markdown table, with the load average of the machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import torch

from pompy.config import load_config
from pompy.core.ensemble import Ensemble
from pompy.core.explicit import ExplicitCore
from pompy.core.implicit import ImplicitCore

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
WARMUP = 2


def per_member_step(kind, config, members: int, steps: int) -> float:
    core = kind(config)
    core.run_initialization()
    with torch.no_grad():
        if members == 1:
            core.iend = WARMUP
            core.run_time_loop()
            start = time.perf_counter()
            core.iend = WARMUP + steps
            core.run_time_loop()
        else:
            ens = Ensemble(core, members)
            ens.advance(WARMUP)
            start = time.perf_counter()
            ens.advance(WARMUP + steps)
    return (time.perf_counter() - start) / steps / members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="65x49x21")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    im, jm, kb = (int(x) for x in args.grid.split("x"))
    config = dataclasses.replace(load_config(CONFIG), im=im, jm=jm, kb=kb, kl2=kb - 2, days=1.0)
    print(f"{args.grid}, {torch.get_num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.1f}\n")
    print("| core | members | ms per member and step | against B = 1 |")
    print("|---|---|---|---|")
    for kind in (ExplicitCore, ImplicitCore):
        one = None
        for members in args.members:
            t = per_member_step(kind, config, members, args.steps)
            one = t if members == 1 else one
            ratio = f"{t / one:.2f}" if one else "-"
            print(f"| {kind.__name__} | {members} | {t * 1e3:.0f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
