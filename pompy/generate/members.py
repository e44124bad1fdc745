"""Running a process's members: one after another on one core
(:func:`run_member`), or stepped together as one
:class:`pompy.core.ensemble.Ensemble` (:func:`run_ensemble`) where that
pays (:func:`batched`). Each member is its single run to the last bit
either way, and either way a member the writer holds snapshots of (an
interrupted file, ``--resume``) goes on from its last one that holds
the whole state (its last start snapshot: DatasetWriter.resumable).
After each snapshot written, a signal that came and was dropped on its
way stops the run (pompy.signals.raise_pending).

The core is driven through Core's interface (run_initialization,
capture, snapshot, restore, inject, run_generation_day; Ensemble's
load_member, set_member_params, advance, snapshot). Three things reach
past it, as Core has no call for them: a member's wind factor is set in
the core's ``params`` (what surface_forcing reads), the ic perturbation
recomputes rho with the core's ``params`` and ``routines``
(pompy.generate.perturbations.perturb_ic), and the snapshots
run_generation_day returns, once written, are dropped from the core's
``generation_records``, where it keeps them until the next restore.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import torch

from pompy import cores
from pompy.config import Config
from pompy.core.ensemble import Ensemble
from pompy.core.model import Core, forward_only
from pompy.core.stepping import LEAPFROG, leapfrog_b_levels
from pompy.errors import ConfigError, InputError, ModelStop
from pompy.generate.perturbations import perturb_start
from pompy.generate.writer import DatasetWriter
from pompy.signals import raise_pending

# On the CPU an Ensemble pays only while a member's fields are small:
# validation/ensemble.py, per member and step at B = 8 against B = 1, 1
# thread, in inference mode, the single core's external passes on host
# arrays (the ensemble's vmap keeps them on tensors): 0.50x at 21x17x11,
# 0.77-0.78x at 33x25x21, 0.82x at 39x29x21, 0.93-0.95x at 45x35x21
# (33,075 cells), 1.05-1.07x at 55x41x21, 1.19-1.25x at 65x49x21 (load
# 0.6-0.7); before the host passes 0.37-0.41x, 0.49x, -, 0.45-0.69x,
# 0.97-1.08x and 0.96-1.15x.
# Beyond this many cells a CPU process steps its members one after another.
BATCH_CELLS = 40_000


def batched(config: Config, core: str, perturb: str, members: int, dtype: str,
            compile: bool = False, device: str = "cpu") -> bool:
    """Whether a process runs its members as one Ensemble: the explicit
    core, more than one member, with ic perturbations (one set of
    parameters) or, in float64, wind members (a wind factor each:
    Ensemble.set_member_params), and on the CPU a grid of at most
    BATCH_CELLS cells, where it pays; each member is its single run to the
    last bit either way. On a GPU always (not measured: no GPU has been
    lent; a batch there fills a device a small grid leaves idle). Not a
    core whose registry entry says no ``ensembles`` (the implicit core: its
    members batched are their single runs' bits, its PCG run for all at
    once, but that has been timed in training alone), nor float32 wind
    members (their factor would round otherwise), nor with ``compile``:
    compiled graphs do not serve the ensemble's vmap, and one compiled
    core stepping the members in turn is faster still. Nor params members:
    each has its own set-up (grid) and spin-up."""
    small = torch.device(device).type != "cpu" or config.im * config.jm * config.kb <= BATCH_CELLS
    return not compile and cores.get(core).ensembles and members > 1 and small \
        and (perturb == "ic" or perturb == "wind" and dtype == "float64")


def member_start(core_name: str, config: Config, case: dict, device: str, dtype: str) -> dict:
    """The set-up (a capture: grid and state) of ``config`` with a member's
    case parameters ``case``, CFL-checked; InputError where the values do
    not make a valid config."""
    try:
        member = dataclasses.replace(config, **case)
    except ConfigError as err:
        raise InputError(f"--ranges: a member's draw {case} is not a valid case: {err}") from err
    return set_up(core_name, member, device, dtype).capture()


def set_up(core_name: str, config: Config, device: str, dtype: str, compile: bool = False) -> Core:
    """The reference core from the registry, set up and CFL-checked on its
    own set-up, as ``pompy run`` checks it."""
    spec = cores.get(core_name)
    options = {"compile": True} if compile else {}       # a registered core may not take it
    core = spec.make(config, device=device, dtype=getattr(torch, dtype), **options)
    core.run_initialization()
    spec.check_cfl(config, core.state)
    return core


class History:
    """The last three states of a member one physics step (``ratio``
    reference steps) apart, and from them the leapfrog b levels of the
    physics' step at the latest (stepping.leapfrog_b_levels); with fewer
    than three, the latest state's own b levels (a cold start's, or the
    reference's: too short a spin-up to know better)."""

    def __init__(self, ratio: int, core: Core):
        self.ratio, self.states = ratio, collections.deque(maxlen=3)
        self.dz, self.smoth, self.mode = core.state["dz"], core.params["smoth"], core.config.mode

    def add(self, record: dict) -> None:
        self.states.append(record)

    def levels(self) -> dict:
        now = self.states[-1]
        if len(self.states) < 3:
            return {fb: now[fb] for _, fb in LEAPFROG}
        return leapfrog_b_levels(*self.states, self.dz, self.smoth, self.mode)


def same(record: dict) -> dict:
    """A state as it is (what the writer is given of a state on the file's own grid)."""
    return record


def _run_to(core: Core, steps: int, history: History | None, view: Callable = same) -> dict:
    """``steps`` more steps on the generation fast path; the last state,
    and every physics step's state into ``history``, each as ``view``
    makes it (a finer grid's coarse-grained)."""
    if history is None:
        (record,) = core.run_generation_day(steps, capture_interval=steps)
        record = view(record)
    else:
        captured = [view(state) for state in
                    core.run_generation_day(steps, capture_interval=history.ratio)]
        for state in captured:
            history.add(state)
        record = captured[-1]
    core.generation_records.clear()     # written: the core need not keep it
    return record


def run_member(core: Core, start: dict, writer: DatasetWriter, local: int, perturb: str,
               seed: int, amplitude: float, case: dict, steps: int, records: int,
               view: Callable = same) -> None:
    """The file's member ``local`` from its set-up ``start``, of
    perturbation seed ``seed`` and case parameters ``case`` (its wind
    factor among them): perturbed, the spin-up run unrecorded (its own
    offset included), its time-0 snapshot, then ``records`` snapshots
    every ``steps`` steps; a member the writer holds snapshots of goes on
    from its last start snapshot. ``view``: what the writer is given of a
    state (a finer grid's states coarse-grained onto the file's: the
    writer then holds no state to go on from, so it is given the fine
    state of each start snapshot too, which an interrupted generation
    keeps)."""
    done, fine, kept = writer.resumable(local), view is not same, None
    if done and fine:                   # the fine state kept, else the member starts again
        kept = writer.read_fine(local, done - 1, core.device, core.dtype)
        done = kept[0] + 1 if kept else 0
    if kept:
        core.restore({**start, **kept[1]})
    elif done:
        core.restore({**start, **writer.read(local, done - 1, core.device, core.dtype)})
    else:
        core.restore(start)
    core.params = dict(core.params, **case)     # wind_factor: what surface_forcing reads
    history = History(writer.ratio, core) if writer.ratio else None
    if not done:
        perturb_start(core, perturb, seed, amplitude)
        spin = writer.iints[0] + writer.offsets[local]
        early = spin - 2 * writer.ratio if history is not None and spin >= 2 * writer.ratio \
            else spin
        if early:                            # the spin-up, unrecorded
            core.run_generation_day(early, capture_interval=0)
        record = view(core.snapshot())
        if history is not None:              # its last two physics steps for the b levels
            history.add(record)
            if spin > early:
                record = _run_to(core, spin - early, history, view)
        writer.write(local, 0, record, history.levels() if history else None)
        if fine:
            writer.hold_fine(local, 0, core.snapshot)
        raise_pending()                      # a signal something dropped: stop here
    elif history is not None:
        history.add(writer.read(local, done - 1, core.device, core.dtype))
    for n in range(max(done, 1), records + 1):
        record = _run_to(core, steps, history, view)
        writer.write(local, n, record, history.levels() if history else None)
        if fine:
            writer.hold_fine(local, n, core.snapshot)
        raise_pending()


def run_ensemble(model: Core, start: dict, writer: DatasetWriter, members: list[int],
                 perturb: str, seeds: list[int], amplitude: float, cases: list[dict],
                 steps: int, records: int) -> None:
    """The process's members as one Ensemble: each perturbed from ``start``
    and given its wind factor as run_member does, then stepped together;
    with snapshots already written (--resume), from the last start
    snapshot every member has. A member that blows up is named in the
    ModelStop by its ensemble number."""
    done = writer.resumable_together()
    initial = []
    for local, m_seed in enumerate(seeds):
        if done:
            model.restore({**start, **writer.read(local, done - 1, model.device, model.dtype)})
        else:
            model.restore(start)
            perturb_start(model, perturb, m_seed, amplitude)
        initial.append(model.snapshot())
    ens = Ensemble(model, len(members))
    histories = [History(writer.ratio, model) if writer.ratio else None for _ in members]
    for local, (record, case) in enumerate(zip(initial, cases)):
        ens.load_member(local, {n: record[n] for n in ens.state if n in record})
        if case["wind_factor"] != model.params["wind_factor"]:
            ens.set_member_params(local, wind_factor=case["wind_factor"])
    spin, ratio = writer.iints[0], writer.ratio

    def advance(last: int, first: int) -> None:
        """To step ``last``, each physics step's state from ``first`` on
        into the members' histories."""
        for stop in ([last] if not ratio else range(max(first, last % ratio), last + 1, ratio)):
            ens.advance(stop)
            for local, history in enumerate(histories):
                if history is not None:
                    history.add(ens.snapshot(local) if stop else initial[local])

    def levels(local: int) -> dict | None:
        return histories[local].levels() if histories[local] is not None else None

    try:
        with forward_only(model):
            if not done:
                advance(spin, max(spin - 2 * ratio, 0))   # the spin-up, unrecorded
                for local, record in enumerate(initial):
                    writer.write(local, 0, ens.snapshot(local) if spin else record, levels(local))
                raise_pending()              # a signal something dropped: stop here
            else:
                for local, history in enumerate(histories):
                    if history is not None:
                        history.add(writer.read(local, done - 1, model.device, model.dtype))
            for n in range(max(done, 1), records + 1):
                advance(spin + n * steps, spin + (n - 1) * steps + ratio)
                for local in range(len(members)):
                    writer.write(local, n, ens.snapshot(local), levels(local))
                raise_pending()
    except ModelStop as exc:
        exc.member = members[exc.member]
        raise
