"""The trainer's cores: built and set up, pooled (CorePool: captured clean
states restored as fresh detached tensors each batch), given a sample's
initial state (inject_core_state), and a batch of them stepped as one
ensemble where that equals their own runs (run_as_ensemble)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pompy.autodiff.policies import GradientPolicy, GradientPolicyConfig
from pompy.config import Config
from pompy.core.ensemble import Ensemble, mismatch
from pompy.dataset import member_params
from pompy.errors import ModelStop
from pompy.settings.train import parse_physics_checkpoint


def build_initialized_core(core_cls, config: Config, device, dtype, checkpoint: str = "none",
                           compile: bool = False):
    """A set-up core; ``checkpoint`` (--physics_checkpoint) "routines"
    recomputes its heavy routines in the backward pass, "steps" and
    "steps:K" its steps' saved tensors, each step's graph kept
    (Core.checkpoint_graph: gradients to the bit those of the unchecked
    physics, whatever the networks around it): pompy.core.recompute.
    ``compile`` (--compile): whole-step graphs (pompy.core.compiled), the
    gradient policies decided in the forward pass (compiled_policies), so
    that recorded steps run through them too."""
    kind, segment = parse_physics_checkpoint(checkpoint)
    core = core_cls(config, device=device, dtype=dtype, checkpoint=kind, compile=compile,
                    policies=compiled_policies(config) if compile else None)
    if kind == "steps":
        core.checkpoint_graph, core.checkpoint_segment = True, segment
    core.run_initialization()
    return core


def compiled_policies(config: Config) -> GradientPolicyConfig:
    """The config's gradient policies with an override in force, as a
    compiled step needs to record gradients (pompy.core.compiled): the
    config's, else PROJECT, the built-in default, which an eager step's
    backward pass picks too where no context chooses (the trainer's), so
    compiled and eager gradients are of the same policies."""
    return dataclasses.replace(config.policies,
                               override=config.policies.override or GradientPolicy.PROJECT)


def capture_core_state(core) -> dict:
    """The core's clean state: fresh detached tensors (Core.capture)."""
    return core.capture()


def restore_core_state(core, snapshot: Mapping) -> None:
    """Back to a captured state; every tensor a fresh detached clone, so no
    autograd history of an earlier batch reaches the next."""
    core.restore(snapshot)


class CorePool:
    """pool_size initialised cores and their clean-state snapshots;
    ``reset_batch(B)`` restores the first B and returns them."""

    def __init__(self, core_cls, config: Config, device, dtype, pool_size: int,
                 checkpoint: str = "none", compile: bool = False):
        self.cores = [build_initialized_core(core_cls, config, device, dtype, checkpoint, compile)
                      for _ in range(pool_size)]
        self.snapshots = [capture_core_state(core) for core in self.cores]
        self.params = [dict(core.params) for core in self.cores]

    def reset_batch(self, batch_size: int) -> list:
        if batch_size > len(self.cores):
            raise ValueError(f"a batch of {batch_size} from a pool of {len(self.cores)} cores")
        for core, snapshot, params in zip(self.cores, self.snapshots, self.params[:batch_size]):
            restore_core_state(core, snapshot)
            core.params = dict(params)          # learned parameters of a batch go too
        return self.cores[:batch_size]


def release_graphs(cores: list) -> None:
    """The cores' states without their graph once a batch's predictions are
    taken: the loss reads those alone, and the nodes of fields only a further
    step would read (the last step's turbulence, ...) would otherwise keep
    their saved tensors (with --physics_checkpoint steps, their recomputed
    ones) to the end of the backward pass. The gradients are the same: the
    backward never runs those nodes."""
    for core in cores:
        core.state = {name: value.detach() for name, value in core.state.items()}
        core.last_good = None


def inject_core_state(core, ics: Mapping, sample_index: int) -> None:
    """Sample ``sample_index`` of a batch's initial states into the core
    (Core.restore: a tensor that requires grad keeps its autograd path) at
    the snapshot's model time, and the member's parameters
    (pompy.dataset.member_params). The core's clock starts there at step
    0: the snapshot's own step counts the reference's steps, which may be
    shorter than this core's."""
    iint, time0 = int(ics["iint"][sample_index]), float(ics["time0"][sample_index])
    time = float(ics["time"][sample_index]) if "time" in ics else \
        core.config.dti * iint / 86400.0 + time0
    core.restore({**{name: value[sample_index] for name, value in ics["state"].items()},
                  "iint": 0, "time0": time})
    # the member's forcing (e.g. a --perturb wind factor), after reset_batch restored params
    core.params = dict(core.params, **member_params({name: value[sample_index]
                                                     for name, value in ics["params"].items()}))


def run_as_ensemble(poms: list, steps: int) -> bool:
    """``steps`` physics steps of ``poms`` as one ensemble
    (pompy.core.ensemble: every routine batched), each core then taking
    its member's state, equal to its own run to the last bit (values and
    gradients). Where that holds (pompy.core.ensemble.mismatch: not for
    checkpointed or compiled cores, nor learned parameters) it returns
    True; else, or when a member stops (the cores untouched), False: the
    cores step one by one, so a stop is a core's."""
    if mismatch(poms) is not None:
        return False
    ensemble = Ensemble.of(poms)
    try:
        ensemble.advance(ensemble.iint + steps)
    except ModelStop:
        return False
    for m, pom in enumerate(poms):     # each core goes on from its member's state
        pom.restore({**ensemble.member(m), "iint": ensemble.iint, "time0": pom.time0})
    return True
