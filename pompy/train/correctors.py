"""The correctors: the networks (an encoder before each cycle's physics, a
decoder after it), the learned pom2k parameters, and how their output
enters a core's state.

A correction is in normalised units: ``field += correction_scale * std_c
* correction_c`` on the wet points of its channel (pompy.train.data:
``apply_correction_to_pom``). With several processes the modules are
DDP-wrapped for training; the test phase runs the plain modules, whose
ranks may run different numbers of batches (a DDP forward after a
training one broadcasts rank 0's buffers, a collective each rank would
wait in for ever).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from pompy.config import Config
from pompy.distributed import Distributed
from pompy.errors import InputError
from pompy.settings.train import Model
from pompy.train.checkpoint import load_networks
from pompy.train.data import Normalizer, apply_correction_to_pom
from pompy.train.networks import CorrectorNet, PhysicsParameters, convert_sync_batchnorm

NAMES = ("encoder", "decoder", "physics")


def channels(kb: int) -> int:
    """The networks' channels: u, v, t, s at kb-1 levels, then el, ua, va, uab, vab."""
    return 4 * (kb - 1) + 5


class Correctors:
    """The encoder, the decoder and the learned parameters of ``model``
    (each None where not trained), built on ``dist``'s device; the
    networks' weights are ``dtype``, float32 under --amp bf16."""

    def __init__(self, model: Model, config: Config, normalizer: Normalizer, dtype: torch.dtype,
                 dist: Distributed, seed: int):
        self.model, self.normalizer, self.dist = model, normalizer, dist
        self.dtype = dtype
        self.device = dist.device
        # the networks' weights: float32 under --amp bf16 (autocast's master copy)
        self.net_dtype = torch.float32 if model.amp == "bf16" else dtype
        torch.manual_seed(seed)                 # the same initial weights on every rank
        kb = config.kb
        self.wrapped = {"encoder": self._corrector(kb) if model.encoder else None,
                        "decoder": self._corrector(kb) if model.decoder else None,
                        "physics": self._physics(config)}
        self.training = True

    def _wrap(self, module: nn.Module) -> nn.Module:
        if not self.dist.many:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def _corrector(self, kb: int) -> nn.Module:
        """A CorrectorNet, SyncBatchNorm, DDP-wrapped (one process: plain)."""
        net = CorrectorNet(channels(kb), self.model.hidden_channels, self.normalizer.mask,
                           norm=self.model.norm, zero_head=self.model.zero_head)
        net = convert_sync_batchnorm(net, self.device).to(device=self.device, dtype=self.net_dtype)
        return self._wrap(net)

    def _physics(self, config: Config) -> nn.Module | None:
        if not self.model.learn_names:
            return None
        initial = {name: getattr(config, name) for name in self.model.learn_names}
        for name, value in initial.items():
            if not value > 0:
                raise InputError(f"--learn {name}: its config value {value} is not > 0 (a "
                                 f"learned parameter is exp of a learned log)")
        return self._wrap(PhysicsParameters(initial, self.dtype).to(self.device))

    # -------------------------------------------------------------- views
    def plain(self) -> dict[str, nn.Module | None]:
        """The modules without their DDP wrappers."""
        return {name: _plain(net) for name, net in self.wrapped.items()}

    def for_phase(self) -> dict[str, nn.Module | None]:
        """What this phase runs: DDP's wrappers in training, the plain
        modules in the test phase (the module docstring says why)."""
        return self.wrapped if self.training else self.plain()

    def named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(f"{label}.{n}", p) for label, net in self.plain().items() if net is not None
                for n, p in net.named_parameters()]

    def set_mode(self, training: bool) -> None:
        self.training = training
        for net in self.wrapped.values():
            if net is not None:
                net.train(training)

    def learned_values(self) -> dict[str, float]:
        physics = self.plain()["physics"]
        return {} if physics is None else {n: float(v.detach()) for n, v in physics().items()}

    # -------------------------------------------------------------- into the state
    def correction(self, net: nn.Module, packed: torch.Tensor) -> torch.Tensor:
        """A network's corrections in the core's dtype. With --amp bf16 the
        network alone runs under bfloat16 autocast, from its float32
        weights (autocast leaves float64 tensors alone: a float64 network
        would run in float64); packing, corrections and physics stay out."""
        if self.model.amp == "bf16":
            with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
                out = net(packed.to(self.net_dtype))
            return out.to(self.dtype)
        return net(packed)

    def apply(self, poms: list, corrections: torch.Tensor, share: float = 1.0) -> None:
        """Each core's correction (times ``share``) into its state (autograd kept)."""
        for i, pom in enumerate(poms):
            apply_correction_to_pom(pom, corrections[i], self.normalizer,
                                    scale_factor=self.model.correction_scale * share,
                                    form=self.model.correction_form,
                                    fields=self.model.corrected_fields)

    # -------------------------------------------------------------- on disk
    def state_dict(self) -> dict:
        return {n: (m.state_dict() if m is not None else None) for n, m in self.plain().items()}

    def load(self, saved: Mapping, path: Path) -> None:
        load_networks(saved, self.plain(), path)


def _plain(module: nn.Module | None) -> nn.Module | None:
    return module.module if isinstance(module, DDP) else module
