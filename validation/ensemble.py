"""Time per member and step: an ensemble of B members (pompy.core.ensemble)
against B = 1 (a single core), without gradients (in inference mode, as
``pompy generate`` steps them).

    python3 validation/ensemble.py                          # 65x49x21, B = 1, 8
    python3 validation/ensemble.py --grid 33x25x21 --members 1 4 8 --steps 6
    python3 validation/ensemble.py --gradients --config configs/train_tiny.nml --members 4 --steps 2

Each case warms up two steps, then times --steps steps. B = 1 is the
single core itself (the implicit core with its PCG); B > 1 the ensemble
(the implicit core's members solve with the PCG all at once,
cg.pcg_members). Results go to
stdout as a Markdown table, with the load average of the machine.

With --gradients (the trainer's batches, pompy.train): B explicit cores
from B perturbed states take --steps recorded steps and a loss's backward
pass, one core after another against ``Ensemble.of(cores)`` (autograd
through the members), alternating for --rounds rounds: the forward and
backward seconds of a batch (medians), and whether the gradients agree to
the last bit.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path

import torch

from pompy.config import load_config
from pompy.core.ensemble import Ensemble
from pompy.core.explicit import ExplicitCore
from pompy.core.implicit import ImplicitCore
from pompy.core.model import forward_only

CONFIG = Path(__file__).parents[1] / "configs" / "seamount.nml"
WARMUP = 2


def per_member_step(kind, config, members: int, steps: int) -> float:
    core = kind(config)
    core.run_initialization()
    with forward_only(core):            # as pompy run and pompy generate step
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


def batch_gradients(config, members: int, steps: int, together: bool):
    """Forward and backward seconds of a batch of ``members`` explicit cores
    (their initial t perturbed, the gradient taken with respect to it) and
    the gradients."""
    start = ExplicitCore(config)
    start.run_initialization()
    with torch.no_grad():
        start.iend = WARMUP
        start.run_time_loop()
    cores, t0 = [], []
    for m in range(members):
        core = ExplicitCore(config)
        core.load_state(start.numpy_state(), iint=start.iint)
        t0.append((core.t + 1e-3 * m).detach().requires_grad_(True))
        core.t = t0[-1]
        core.iend = core.iint + steps
        cores.append(core)
    began = time.perf_counter()
    if together:
        ens = Ensemble.of(cores)
        ens.advance(ens.iint + steps)
        finals = [ens.member(m) for m in range(members)]
    else:
        for core in cores:
            core.run_time_loop()
        finals = [core.state for core in cores]
    loss = sum(s["u"].square().sum() + s["el"].sum() + 1e-3 * s["t"].sum() for s in finals)
    forward = time.perf_counter() - began
    began = time.perf_counter()
    loss.backward()
    return forward, time.perf_counter() - began, [t.grad for t in t0]


def gradients_table(config, members: int, steps: int, rounds: int) -> None:
    times = {False: ([], []), True: ([], [])}
    equal = True
    for _ in range(rounds):
        grads = {}
        for together in (False, True):
            forward, backward, grads[together] = batch_gradients(config, members, steps, together)
            times[together][0].append(forward)
            times[together][1].append(backward)
        equal = equal and all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))
    print(f"| batch of {members} explicit cores, {steps} recorded steps | forward (s) | backward (s) |")
    print("|---|---|---|")
    for together, label in ((False, "one by one"), (True, "Ensemble.of")):
        forward, backward = times[together]
        print(f"| {label} | {statistics.median(forward):.2f} ({min(forward):.2f}-{max(forward):.2f}) "
              f"| {statistics.median(backward):.2f} ({min(backward):.2f}-{max(backward):.2f}) |")
    print(f"\ngradients equal to the last bit in every round: {equal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="namelist (default the seamount's)")
    parser.add_argument("--grid", help="IMxJMxKB instead of the config's")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--gradients", action="store_true",
                        help="time a trainer batch's recorded steps and backward pass instead")
    parser.add_argument("--rounds", type=int, default=5, help="with --gradients: rounds")
    args = parser.parse_args()
    config = load_config(args.config)
    grid = args.grid or f"{config.im}x{config.jm}x{config.kb}"
    im, jm, kb = (int(x) for x in grid.split("x"))
    if (im, jm, kb) != (config.im, config.jm, config.kb):
        config = dataclasses.replace(config, im=im, jm=jm, kb=kb, kl2=kb - 2)
    config = dataclasses.replace(config, days=1.0)
    print(f"{args.config.name}, {grid}, {torch.get_num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.1f}\n")
    if args.gradients:
        for members in args.members:
            gradients_table(config, members, args.steps, args.rounds)
        return
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
