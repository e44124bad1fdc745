"""Which reference gives the corrector a learnable signal: the relative L2
differences, every correction cycle, of candidate references and of the
training physics (the implicit core at the config's dti) from a finer run
(the explicit core at --truth_dti), all from the same set-up.

    python validation/reference_error.py configs/train_tiny.nml \
        --truth 30:2 --candidates 60:4 60:2 120:4 240:8 --cycles 12

prints, per model and field, the largest relative L2 difference over the
cycles (el, u, v, and t as anomalies from its horizontal mean profile)."""
from __future__ import annotations

import argparse
import sys

import torch

from pompy import cores
from pompy.config import load_config
from pompy.generate.reference import reference_config

FIELDS = ("el", "u", "v", "t")


def trajectory(core: str, config, cycles: int, cycle_seconds: float) -> list[dict]:
    spec = cores.get(core)
    model = spec.make(config)
    model.run_initialization()
    steps = round(cycle_seconds / config.dti)
    out = []
    with torch.no_grad():
        for _ in range(cycles):
            model.iend = model.iint + steps
            model.run_time_loop()
            out.append({n: model.state[n].clone() for n in FIELDS})
    return out, model.state["fsm"]


def rel(a, b, name, fsm):
    if name == "t":
        a = a - (a * fsm[..., None]).sum((0, 1)) / fsm.sum()
        b = b - (b * fsm[..., None]).sum((0, 1)) / fsm.sum()
    return float((a - b).norm() / b.norm().clamp(min=1e-300))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--truth", default="30:2", help="DTI:DTE of the explicit truth")
    p.add_argument("--candidates", nargs="+", default=["60:4", "60:2", "120:4", "240:8"])
    p.add_argument("--cycles", type=int, default=12)
    a = p.parse_args(argv)
    config = load_config(a.config)       # its pom2k parameters (&train, &generate aside)
    cycle = 2 * config.dti
    dti, dte = map(float, a.truth.split(":"))
    truth, fsm = trajectory("explicit", reference_config(config, dti, dte), a.cycles, cycle)
    rows = [("implicit", config.dti, config.dte, trajectory("implicit", config, a.cycles, cycle)[0])]
    for c in a.candidates:
        dti, dte = map(float, c.split(":"))
        rows.append(("explicit", dti, dte,
                     trajectory("explicit", reference_config(config, dti, dte), a.cycles, cycle)[0]))
    print(f"largest relative L2 difference from the explicit core at {a.truth} (dti:dte s) over "
          f"{a.cycles} cycles of {cycle:g} s")
    for core, dti, dte, traj in rows:
        worst = {n: max(rel(x[n], t[n], n, fsm) for x, t in zip(traj, truth)) for n in FIELDS}
        print(f"{core:9s} dti {dti:5g} dte {dte:3g}: " +
              "  ".join(f"{n} {v:.3g}" for n, v in worst.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
