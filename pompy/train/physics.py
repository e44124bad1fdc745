"""The physics in the training loop: cores borrowed for a batch (from a
pool of set-up cores, or new), given each sample's initial state, and
stepped a correction cycle at a time through Core's public interface
(restore, inject, advance), as one ensemble where that equals the cores'
own runs. Then the hybrid forward: per cycle the encoder's correction,
the physics, the decoder's correction.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping

import torch

from pompy import cores
from pompy.config import SETUP_PARAMS, Config, case_of
from pompy.errors import ModelStop
from pompy.settings.train import Physics
from pompy.train.correctors import Correctors
from pompy.train.data import Normalizer, pack_pom_batch
from pompy.train.losses import LOSS_FIELDS
from pompy.train.pool import (CorePool, build_initialized_core, inject_core_state,
                              release_graphs, run_as_ensemble)


class PhysicsRunner:
    """The cores of one process: ``borrow`` a batch of them, ``start``
    them at the batch's initial states, ``cycle`` them a correction cycle
    (``steps`` physics steps) on. A core that stops is marked in
    ``failed`` and keeps its last good state."""

    # a cycle as one ensemble where that equals the cores' own runs
    # (run_as_ensemble); False: one core at a time (the tests' reference)
    batch_physics = True

    def __init__(self, physics: Physics, config: Config, device: torch.device,
                 dtype: torch.dtype, steps: int, pool_size: int | None = None, rank: int = 0):
        self.physics, self.config, self.device, self.dtype = physics, config, device, dtype
        self.steps, self.rank = steps, rank
        self.core_cls = cores.get(physics.core).core
        self.pool = CorePool(self.core_cls, config, device, dtype, pool_size,
                             physics.physics_checkpoint, physics.compile) \
            if pool_size is not None else None
        self.failed: list[bool] = []
        self.setups: dict[tuple[float, ...], dict] = {}

    def borrow(self, count: int) -> list:
        """``count`` set-up cores (the pool's, restored to their clean state)."""
        if self.pool is not None:
            return self.pool.reset_batch(count)
        return [build_initialized_core(self.core_cls, self.config, self.device, self.dtype,
                                       self.physics.physics_checkpoint, self.physics.compile)
                for _ in range(count)]

    def set_up(self, case: tuple[float, ...]) -> dict:
        """The set-up (a capture: grid and state) of the config with the
        case parameters ``case`` (values of SETUP_PARAMS), made once."""
        if case not in self.setups:
            config = dataclasses.replace(self.config, **dict(zip(SETUP_PARAMS, case)))
            core = build_initialized_core(self.core_cls, config, self.device, self.dtype)
            self.setups[case] = core.capture()
        return self.setups[case]

    def start(self, poms: list, ics: Mapping, learned: Mapping | None = None) -> None:
        """Each sample's initial state into its core (set up first with
        its member's case parameters where they shape the set-up: its
        grid), and the learned parameters' values into every core."""
        own = tuple(case_of(self.config, SETUP_PARAMS).values())
        for index, pom in enumerate(poms):     # borrowed: each at the config's set-up
            case = tuple(float(ics["params"][n][index]) for n in SETUP_PARAMS)
            if case != own:
                pom.restore(self.set_up(case))
            inject_core_state(pom, ics, sample_index=index)
        if learned:
            for pom in poms:
                pom.params = dict(pom.params, **learned)
        self.failed = [False] * len(poms)

    def cycle(self, poms: list, steps: int | None = None) -> None:
        """``steps`` (default the cycle's) physics steps of every core not
        failed: as one ensemble where it may, else one by one, a core that
        stops marked failed and back at its last good state."""
        steps = self.steps if steps is None else steps
        live = [poms[i] for i in range(len(poms)) if not self.failed[i]]
        if self.batch_physics and len(live) > 1 and run_as_ensemble(live, steps):
            return
        for i, pom in enumerate(poms):
            if self.failed[i]:
                continue
            try:
                pom.advance(pom.iint + steps)
            except ModelStop as stop:
                print(f"pompy train [rank {self.rank}]: sample {i}: {stop}", file=sys.stderr)
                pom.state = dict(pom.last_good)
                self.failed[i] = True


def run_hybrid(runner: PhysicsRunner, correctors: Correctors | None, normalizer: Normalizer,
               poms: list, ics: Mapping, cycles: int, pushforward: int = 0,
               on_cycle: Callable[[int], None] | None = None) -> dict:
    """The hybrid forward of a batch: start the cores, then per cycle the
    encoder's correction, the decoder's forward, the physics, the
    decoder's correction (correction_form tendency: a share of it after
    each physics step), the state recorded. ``correctors`` None: the
    physics alone (no network, no learned parameter), the baseline.
    (B, cycles - pushforward, ...) per loss field: the first ``pushforward``
    cycles run without gradients and are not recorded. A core that stops
    keeps its last good state for the rest of the batch (the networks
    still run on every rank). ``on_cycle(n)`` is told of each recorded
    cycle n (1-based) as it ends."""
    nets = correctors.for_phase() if correctors is not None else {}
    physics = nets.get("physics")
    runner.start(poms, ics, physics() if physics is not None else None)
    if pushforward:
        with torch.no_grad():
            for _ in range(pushforward):
                _cycle(runner, correctors, nets, normalizer, poms)
        release_graphs(poms)               # the samples start here, without history
    seq = {key: [] for key in LOSS_FIELDS}
    for n in range(1, cycles - pushforward + 1):
        _cycle(runner, correctors, nets, normalizer, poms)
        for key in seq:
            seq[key].append(torch.stack([getattr(pom, key) for pom in poms]))
        if on_cycle is not None:
            on_cycle(n)
    return {key: torch.stack(values, dim=1) for key, values in seq.items()}


def _cycle(runner: PhysicsRunner, correctors: Correctors | None, nets: Mapping,
           normalizer: Normalizer, poms: list) -> None:
    """One correction cycle of the hybrid."""
    encoder, decoder = nets.get("encoder"), nets.get("decoder")
    if encoder is not None:
        correctors.apply(poms, correctors.correction(encoder, pack_pom_batch(poms, normalizer)))
    if decoder is not None:
        after = correctors.correction(decoder, pack_pom_batch(poms, normalizer))
    if decoder is not None and correctors.model.correction_form == "tendency":
        for _ in range(runner.steps):       # a share of the increment after each step
            runner.cycle(poms, 1)
            correctors.apply(poms, after, share=1.0 / runner.steps)
    else:
        runner.cycle(poms)
        if decoder is not None:
            correctors.apply(poms, after)
