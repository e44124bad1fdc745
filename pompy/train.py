"""The trainer (the seed "DDP Training Pipeline"): neural correctors trained
end to end through a verified pompy core, on one process or many.

    torchrun --nproc_per_node=N -m pompy.train --config configs/train_tiny.nml \\
        --data DATA_DIR --output RUN_DIR [--batch_size 1 --lr 1e-4 --epochs 1 ...]
    python -m pompy.train --config ... --data ... --output ...     (one process)

Every rank first asks pompy.provenance.require_certificate for a passed
``pompy verify`` certificate of exactly this core, device type, dtype,
torch version and source hash; without one it prints ``pompy: ...`` (what
did not match, the ``pompy verify`` command to run) and exits 2. There is
no bypass. Bad input of any other kind is refused the same way.

Distribution. LOCAL_RANK, RANK and WORLD_SIZE come from the environment
(torchrun sets them; default 0, 0, 1). With WORLD_SIZE > 1 the process
group is NCCL on CUDA and gloo on CPU; the networks and the learned
parameters are DDP-wrapped. WORLD_SIZE 1 is a plain process (no group).
``nn.SyncBatchNorm`` works on GPUs only (its forward and DDP refuse CPU
modules); on CPU its modules become :class:`SyncBatchNormCPU`, which
computes the global batch's statistics with differentiable all-reduces
(the same semantics).

Options (``&train`` group of the config, overridden by the command line;
the seed's names): see :data:`DEFAULTS`. Loss weights default to the seed's
table (:data:`LOSS_WEIGHTS`); ``--loss_weights u=10,el=20`` changes some.

One batch (``run_single_train_batch``), as the seed orders it: borrow
batch_size cores (CorePool with ``--reuse_core_pool``: captured clean
states restored as fresh detached tensors; else new cores), inject each
sample's initial state (``inject_core_state``), then for each of the
``horizon`` correction cycles: encoder correction, decoder forward,
``steps_per_correction`` physics steps of ``physics_step_seconds`` (= the
core's dti, checked), decoder correction, record. The per-field losses are
masked MSEs against the dataset's next snapshots (which must be
steps_per_correction steps apart, checked); Adam, CosineAnnealingLR
(T_max=epochs, eta_min=1e-7), gradient clipping; a non-finite gradient
(or a core stop in the batch) skips the step on every rank, logged and
counted.

Network channels (``pack_pom_batch``): u, v, t, s at k = 1..kb-1, then el,
ua, va, uab, vab (pompy.variables.names("packed")): 4*(kb-1)+5 channels,
each a (jm, im) image (rows j, columns i), normalised per channel by a
:class:`Normalizer` fitted on the training split (mean and standard
deviation over the wet points) and zero on land. A correction is in
normalised units: ``field += correction_scale * std_c * correction_c``
on the wet points of its channel.

Output folder: ``train_log.csv`` (rank 0; columns :data:`CSV_COLUMNS`,
per-field values times loss_display_scale), ``checkpoint_epoch<E>.pt``
each epoch and ``checkpoint_last.pt`` (atomic: networks, optimizer,
scheduler, normaliser, learned parameters, every rank's RNG states,
epoch, skipped steps, the certificate's id and key); ``--resume FILE``
continues from one and gives the losses an uninterrupted run gives (the
log's rows of an interrupted later epoch are dropped, as that epoch runs
again). A checkpoint trained under another certificate (an edited core,
another torch, device type or dtype) is refused, naming both ids. A fresh
run refuses a folder holding an earlier run's log or checkpoints unless
``--overwrite``.

``--amp bf16``: the networks alone run under bfloat16 autocast (their
weights float32); packing, corrections, losses, the learned parameters and
the physics stay in the core's dtype.

``--learn horcon,umol`` trains pom2k parameters too: each is exp of a
learned log (positive), initialised at the config's value, given to every
core as a 0-d tensor in core.params; printed each epoch.
"""
from __future__ import annotations

if __name__ == "__main__":      # torchrun's workers: tcmalloc before torch loads
    from pompy.utils.allocator import reexec     # (pompy.utils.allocator)
    reexec()

import argparse
import functools
import hashlib
import json
import math
import os
import pickle
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import f90nml
import netCDF4
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from pompy import variables
from pompy.autodiff.gradients import clip_gradients
from pompy.config import TRAIN_GROUP, Config, load_config
from pompy.dataset import MEMBER_PARAMS, SnapshotDataset, member_params
from pompy.errors import InputError, ModelStop
from pompy.provenance import require_certificate


# the seed's loss table, in CSV order
LOSS_WEIGHTS: dict[str, float] = {"u": 12.0, "ub": 18.0, "v": 10.0, "vb": 12.0, "t": 1.0,
                                  "s": 6.0, "el": 30.0, "ua": 60.0, "uab": 60.0, "va": 60.0,
                                  "vab": 60.0}
LOSS_FIELDS = tuple(LOSS_WEIGHTS)
CSV_COLUMNS = ("Epoch", "Step", "Phase", "TotalLoss",
               *(f"{name.upper()}_MSE" for name in LOSS_FIELDS))
PACKED = tuple(variables.names("packed"))
# where each field lives: its land mask
MASKS = {"T": "fsm", "U": "dum", "V": "dvm"}
# pom2k parameters --learn accepts (positive reals the routines take as tensors)
LEARNABLE = ("horcon", "tprni", "umol", "z0b", "cbcmin")
CORE_CHOICES = ("implicit", "explicit")

DEFAULTS: dict[str, object] = {
    "batch_size": 1,              # per process
    "lr": 1e-4,
    "epochs": 1,
    "correction_scale": 1e-3,
    "grad_clip_norm": 1.0,        # <= 0: no clipping (non-finite steps still skipped)
    "loss_weights": "",           # "u=12,el=30": changes to LOSS_WEIGHTS
    "loss_display_scale": 1.0,
    "horizon": 2,                 # correction cycles per sample (target snapshots)
    "steps_per_correction": 2,
    "physics_step_seconds": 600.0,
    "target_time_per_step": 1200.0,
    "reuse_core_pool": False,
    "encoder": True,
    "decoder": True,
    "hidden_channels": 32,
    "test_fraction": 0.25,        # of the members (the last ones), for the test phase
    "normalizer_samples": 64,     # training samples the normaliser is fitted on (evenly spread)
    "learn": "",
    "amp": "none",                # "bf16": the networks under bfloat16 autocast
    "core": "implicit",
    "dtype": "float64",
    "seed": 0,
    "device": "cpu",
    "data": None,
    "output": None,
    "progress": True,
    "overwrite": False,           # a fresh run into a folder holding a log or checkpoints
}


# ------------------------------------------------------------------ options
def read_train_group(path: str | Path) -> dict[str, object]:
    """The ``&train`` group of a config file (names lower-case; {} if none);
    an unknown name is an InputError."""
    try:
        nml = f90nml.read(str(path))
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read {path}: {err}") from err
    group = nml.get(TRAIN_GROUP, {})
    values = {str(k).lower(): v for k, v in dict(group).items()}
    for name in values:
        if name not in DEFAULTS or name in ("data", "output"):
            known = ", ".join(n for n in DEFAULTS if n not in ("data", "output"))
            raise InputError(f"{path}: &{TRAIN_GROUP} has unknown option {name!r}; known: {known}")
    return values


def load_model_config(path: str | Path) -> Config:
    """The pom2k config of a training config (load_config leaves the
    ``&train`` group to this module)."""
    return load_config(path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pompy.train",
                                description="Train CorrectorNets through a verified pompy core "
                                            "(one process, or torchrun --nproc_per_node=N).")
    p.add_argument("--config", type=Path, required=True,
                   help="namelist: the pom2k parameters and a &train group of these options")
    p.add_argument("--data", type=Path, help="a pompy generate dataset (folder or files)")
    p.add_argument("--output", type=Path, help="folder for train_log.csv and checkpoints")
    p.add_argument("--resume", type=Path, help="continue from this checkpoint file")
    for name, default in DEFAULTS.items():
        if name in ("data", "output"):
            continue
        flag = f"--{name}"
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            p.add_argument(flag, type=type(default) if default is not None else str, default=None)
    return p


def resolve_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Options: DEFAULTS, then the config's &train group, then the command line."""
    ns = build_parser().parse_args(argv)
    merged = dict(DEFAULTS) | read_train_group(ns.config)
    for name, value in vars(ns).items():
        if value is not None:
            merged[name] = value
    merged.setdefault("resume", None)
    args = argparse.Namespace(**merged)
    _check_options(args)
    return args


def parse_loss_weights(text: str) -> dict[str, float]:
    weights = dict(LOSS_WEIGHTS)
    for item in filter(None, (s.strip() for s in str(text or "").split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in weights:
            raise InputError(f"--loss_weights {text}: expected NAME=WEIGHT,... with NAME one of "
                             f"{', '.join(LOSS_FIELDS)}")
        try:
            weights[name] = float(value)
        except ValueError as err:
            raise InputError(f"--loss_weights {item}: {value!r} is not a number") from err
        if not math.isfinite(weights[name]) or weights[name] < 0:
            raise InputError(f"--loss_weights {item}: a weight is finite and >= 0")
    return weights


def parse_learn(text: str) -> list[str]:
    names = [s.strip().lower() for s in str(text or "").split(",") if s.strip()]
    for name in names:
        if name not in LEARNABLE:
            raise InputError(f"--learn {text}: {name!r} cannot be learned; one of "
                             f"{', '.join(LEARNABLE)}")
    if len(set(names)) != len(names):
        raise InputError(f"--learn {text}: a name given twice")
    return names


def _check_options(a: argparse.Namespace) -> None:
    if a.data is None or a.output is None:
        raise InputError("--data and --output are required (or set them in &train)")
    a.data, a.output = Path(a.data), Path(a.output)
    for name in ("batch_size", "epochs", "horizon", "steps_per_correction", "hidden_channels",
                 "normalizer_samples"):
        if int(getattr(a, name)) < 1:
            raise InputError(f"--{name} {getattr(a, name)}: must be >= 1")
    for name in ("lr", "correction_scale", "loss_display_scale", "physics_step_seconds"):
        value = float(getattr(a, name))
        if not math.isfinite(value) or value < 0 or (value == 0 and name != "correction_scale"):
            raise InputError(f"--{name} {value}: must be finite and > 0")
    if not 0 <= float(a.test_fraction) < 1:
        raise InputError(f"--test_fraction {a.test_fraction}: in [0, 1)")
    if a.core not in CORE_CHOICES:
        raise InputError(f"--core {a.core}: one of {', '.join(CORE_CHOICES)}")
    if a.dtype not in ("float64", "float32"):
        raise InputError(f"--dtype {a.dtype}: float64 or float32")
    if a.amp not in ("none", "bf16"):
        raise InputError(f"--amp {a.amp}: none or bf16")
    if not math.isclose(a.steps_per_correction * a.physics_step_seconds, a.target_time_per_step,
                        rel_tol=1e-12):
        raise InputError(f"target_time_per_step={a.target_time_per_step} s is not "
                         f"steps_per_correction x physics_step_seconds = "
                         f"{a.steps_per_correction} x {a.physics_step_seconds} s")
    if not (a.encoder or a.decoder or a.learn):
        raise InputError("nothing to train: no encoder, no decoder and no --learn")
    a.loss_weights_table = parse_loss_weights(a.loss_weights)
    a.learn_names = parse_learn(a.learn)


def check_output(folder: Path, overwrite: bool) -> None:
    """A fresh run refuses a folder holding an earlier run's log or
    checkpoints, unless ``overwrite``."""
    earlier = sorted(p.name for p in [folder / "train_log.csv", *folder.glob("checkpoint_*.pt")]
                     if p.exists()) if folder.is_dir() else []
    if earlier and not overwrite:
        raise InputError(f"--output {folder} holds an earlier run ({', '.join(earlier[:3])}"
                         f"{' ...' if len(earlier) > 3 else ''}); --resume FILE continues it, "
                         f"--overwrite replaces it, or choose another folder")


# ------------------------------------------------------------------ cores
def core_class(name: str):
    if name == "implicit":
        from pompy.core.implicit import ImplicitCore
        return ImplicitCore
    from pompy.core.explicit import ExplicitCore
    return ExplicitCore


def build_initialized_core(core_cls, config: Config, device, dtype):
    core = core_cls(config, device=device, dtype=dtype)
    core.run_initialization()
    return core


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

    def __init__(self, core_cls, config: Config, device, dtype, pool_size: int):
        self.cores = [build_initialized_core(core_cls, config, device, dtype)
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


def inject_core_state(core, ics: Mapping, sample_index: int) -> None:
    """Sample ``sample_index`` of a batch's initial states into the core
    (Core.inject: autograd kept), with its step counter, time and the
    member's parameters (pompy.dataset.member_params)."""
    core.inject({name: value[sample_index] for name, value in ics["state"].items()})
    # the member's forcing (e.g. a --perturb wind factor), after reset_batch restored params
    core.params = dict(core.params, **member_params({name: value[sample_index]
                                                     for name, value in ics["params"].items()}))
    iint, time0 = int(ics["iint"][sample_index]), float(ics["time0"][sample_index])
    core.iint, core.time0 = iint, time0
    core.time = core.config.dti * iint / 86400.0 + time0
    core.last_good = None


# ------------------------------------------------------------------ batches
def collate_samples(dataset: SnapshotDataset, samples: list[dict]) -> tuple[dict, dict]:
    """(ics, refs) of a list of SnapshotDataset samples: ics = {"state":
    {name: (B, ...)}, "iint": (B,), "time0": (B,), "params": {name: (B,)}},
    refs = {name: (B, T, ...)}."""
    ics = {"state": {name: torch.stack([s["state"][name] for s in samples])
                     for name in samples[0]["state"]},
           "iint": torch.tensor([int(s["iint"]) for s in samples]),
           "time0": torch.tensor([float(dataset.restore_record(s)["time0"]) for s in samples],
                                 dtype=torch.float64),
           "params": {name: torch.tensor([member_params(s)[name] for s in samples],
                                         dtype=torch.float64) for name in MEMBER_PARAMS}}
    refs = {name: torch.stack([s["target"][name] for s in samples]) for name in samples[0]["target"]}
    return ics, refs


def channel_layout(kb: int) -> list[tuple[str, int | None]]:
    """(field, level index or None for 2-D) of each packed channel, in order."""
    layout = []
    for name in PACKED:
        if len(variables.ALL[name].dims) == 3:
            layout += [(name, k) for k in range(kb - 1)]
        else:
            layout.append((name, None))
    return layout


def channel_masks(grid: Mapping, kb: int) -> torch.Tensor:
    """(C, jm, im) land masks of the packed channels (fsm, dum or dvm)."""
    masks = [grid[MASKS[variables.ALL[name].location]].T for name, _ in channel_layout(kb)]
    return torch.stack(masks)


class Normalizer(nn.Module):
    """Per-channel mean and standard deviation of the packed fields over
    the wet points, and the channels' land masks (all buffers: saved with
    checkpoints, moved with .to())."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, mask: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.register_buffer("mask", mask)

    @classmethod
    def fit(cls, states: list[Mapping], grid: Mapping, kb: int) -> Normalizer:
        """From initial states (pom2k arrays by name): float64 statistics."""
        mask = channel_masks(grid, kb).to(torch.float64)
        packed = torch.stack([pack_state(s, kb).to(torch.float64) for s in states])   # (N, C, H, W)
        count = mask.sum((1, 2)) * len(states)
        mean = (packed * mask).sum((0, 2, 3)) / count.clamp(min=1)
        var = (((packed - mean[:, None, None]) * mask) ** 2).sum((0, 2, 3)) / count.clamp(min=1)
        std = var.sqrt()
        tiny = 1e-12 * mean.abs().clamp(min=1e-30)
        std = torch.where(std > tiny, std, torch.ones_like(std))
        return cls(mean, std, mask)

    def normalize(self, packed: torch.Tensor) -> torch.Tensor:
        return (packed - self.mean[:, None, None].to(packed)) / self.std[:, None, None].to(packed) \
            * self.mask.to(packed)


def pack_state(state: Mapping, kb: int) -> torch.Tensor:
    """(C, jm, im): the packed fields of one state, unnormalised."""
    parts = []
    for name in PACKED:
        a = state[name]
        parts.append(a[:, :, :kb - 1].permute(2, 1, 0) if a.dim() == 3 else a.T[None])
    return torch.cat(parts)


def pack_pom_batch(poms: Sequence, normalizer: Normalizer) -> torch.Tensor:
    """(B, 4*(kb-1)+5, jm, im): the cores' packed fields, normalised."""
    kb = poms[0].config.kb
    return normalizer.normalize(torch.stack([pack_state(pom.state, kb) for pom in poms]))


def apply_correction_to_pom(pom, correction: torch.Tensor, normalizer: Normalizer,
                            scale_factor: float = 1e-3) -> None:
    """field += scale_factor * std_c * correction_c on the wet points, for
    each packed channel c (correction: (C, jm, im), normalised units)."""
    kb = pom.config.kb
    delta = correction * (scale_factor * normalizer.std[:, None, None].to(correction)) \
        * normalizer.mask.to(correction)
    changes, c = {}, 0
    for name in PACKED:
        field = pom.state[name]
        if field.dim() == 3:
            d = delta[c:c + kb - 1].permute(2, 1, 0).to(field.dtype)
            changes[name] = field + F.pad(d, (0, 1))
            c += kb - 1
        else:
            changes[name] = field + delta[c].T.to(field.dtype)
            c += 1
    pom.inject(changes)


# ------------------------------------------------------------------ networks
class _AllReduceSum(torch.autograd.Function):
    """all_reduce(SUM) with its gradient: the all-reduced sum of the
    gradients (every rank's loss depends on the sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def all_reduce_sum(x: torch.Tensor, group=None) -> torch.Tensor:
    return _AllReduceSum.apply(x, group)


class SyncBatchNormCPU(nn.modules.batchnorm._BatchNorm):
    """nn.SyncBatchNorm's semantics on CPU (gloo), where torch's own
    forward refuses CPU tensors and DDP refuses SyncBatchNorm modules: in
    training under a process group of more than one rank, the global
    batch's mean and (biased) variance from two differentiable
    all-reduces, running statistics updated as nn.BatchNorm does with the
    unbiased global variance; otherwise nn.BatchNorm's forward."""

    process_group = None

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2-D input (got {x.dim()}-D)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = self.process_group or (dist.group.WORLD if dist.is_available()
                                       and dist.is_initialized() else None)
        if not (self.training and group is not None and dist.get_world_size(group) > 1):
            return super().forward(x)
        self._check_input_dim(x)
        # statistics at least in the running statistics' precision (a bf16
        # input under autocast: float32, as torch's own SyncBatchNorm)
        like = next((t for t in (self.running_mean, self.weight) if t is not None), x)
        dtype_in, x = x.dtype, x.to(torch.promote_types(x.dtype, like.dtype))
        dims = [0] + list(range(2, x.dim()))
        n = torch.tensor([x.numel() // x.shape[1]], dtype=x.dtype, device=x.device)
        total = all_reduce_sum(torch.cat([x.sum(dims), n]), group=group)
        count = total[-1].detach()
        mean = total[:-1] / count
        shape = [1, -1] + [1] * (x.dim() - 2)
        centred = x - mean.view(shape)
        var = all_reduce_sum((centred * centred).sum(dims), group=group) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = self.momentum if self.momentum is not None else \
                    1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                self.running_var.mul_(1 - m).add_(var.detach() * (count / (count - 1)) * m)
        y = centred / torch.sqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(dtype_in)


def convert_sync_batchnorm(module: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """nn.SyncBatchNorm.convert_sync_batchnorm; on CPU each SyncBatchNorm
    then becomes a SyncBatchNormCPU (same state, a forward that works)."""
    module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
    if torch.device(device).type == "cpu":
        for m in module.modules():
            if type(m) is nn.SyncBatchNorm:
                m.__class__ = SyncBatchNormCPU
    return module


def _block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout),
                         nn.ReLU())


class CorrectorNet(nn.Module):
    """A conv encoder-decoder (two 3x3 conv blocks, a stride-2 block, an
    upsampled block joined with the skip, a 3x3 head) from packed
    channels to corrections of the same channels, zero on land."""

    def __init__(self, channels: int, hidden: int, mask: torch.Tensor):
        super().__init__()
        self.enc = nn.Sequential(_block(channels, hidden), _block(hidden, hidden))
        self.down = _block(hidden, 2 * hidden, stride=2)
        self.up = _block(2 * hidden, hidden)
        self.head = nn.Conv2d(2 * hidden, channels, 3, padding=1)
        self.register_buffer("mask", mask.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.enc(x)
        low = self.down(skip)
        up = self.up(F.interpolate(low, size=skip.shape[-2:], mode="nearest"))
        return self.head(torch.cat([skip, up], dim=1)) * self.mask.to(x.dtype)


class PhysicsParameters(nn.Module):
    """Learned pom2k parameters, positive: value = exp(log_value)."""

    def __init__(self, initial: Mapping[str, float], dtype: torch.dtype):
        super().__init__()
        self.log_values = nn.ParameterDict({
            name: nn.Parameter(torch.tensor(math.log(float(v)), dtype=dtype))
            for name, v in initial.items()})

    def forward(self) -> dict[str, torch.Tensor]:
        return {name: p.exp() for name, p in self.log_values.items()}


# ------------------------------------------------------------------ the trainer
def _distribution(environ: Mapping[str, str]) -> tuple[int, int, int]:
    return (int(environ.get("LOCAL_RANK", 0)), int(environ.get("RANK", 0)),
            int(environ.get("WORLD_SIZE", 1)))


def certificate_id(body: Mapping) -> str:
    """A short id of a certificate: sha256 of its key's canonical JSON (what
    was verified: core, device type, dtype, torch, source hash), so that
    verifying the same core again keeps the id and an edited one changes it."""
    return hashlib.sha256(json.dumps(body["key"], sort_keys=True).encode()).hexdigest()[:16]


def load_resume(path: Path, certificate: Mapping) -> dict:
    """The checkpoint ``--resume`` names, trained under ``certificate``'s
    core; else InputError (unreadable, or trained under another certificate:
    its networks learned another core's physics)."""
    try:
        body = torch.load(path, map_location="cpu", weights_only=False)
        saved = body["certificate"]
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError,
            pickle.UnpicklingError) as err:
        raise InputError(f"--resume {path}: not a pompy.train checkpoint ({err})") from err
    mine = certificate_id(certificate)
    if saved.get("id") != mine:
        key, old = certificate["key"], saved.get("key") or {}
        differ = ", ".join(f"{k} {old.get(k)} -> {v}" for k, v in key.items() if old.get(k) != v)
        raise InputError(f"--resume {path}: trained under certificate {saved.get('id')}, this core "
                         f"has certificate {mine} ({differ or 'another key'}); resume with the "
                         f"core it was trained on, or start a new run without --resume")
    return body


class NPOMTrainerDDP:
    """The seed's trainer (see the module docstring)."""

    # a cycle's physics as one ensemble where that equals the cores' own runs
    # (_ensemble_cycle); False: one core at a time (the tests' reference)
    batch_physics = True

    def __init__(self, args: argparse.Namespace, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.args = args
        self.local_rank, self.global_rank, self.world_size = _distribution(environ)
        self.is_main = self.global_rank == 0
        if str(args.device).startswith("cuda"):
            self.device = torch.device(f"cuda:{self.local_rank}")
        else:
            self.device = torch.device(args.device)
        self.dtype = getattr(torch, args.dtype)
        # the networks' weights: float32 under --amp bf16 (autocast's master copy)
        self.net_dtype = torch.float32 if args.amp == "bf16" else self.dtype
        self.log_file = None
        self.skipped_steps = 0
        # the gate: every rank, before anything is built or joined
        self.certificate = require_certificate(args.core, self.device, args.dtype,
                                               config=str(args.config))
        self.certificate_id = certificate_id(self.certificate)
        # also before the group is joined, so that every rank refuses alike
        resume = load_resume(args.resume, self.certificate) if args.resume is not None else None
        if resume is None:
            check_output(args.output, bool(args.overwrite))
        self.config = load_model_config(args.config)
        if not math.isclose(self.config.dti, args.physics_step_seconds, rel_tol=1e-12):
            raise InputError(f"physics_step_seconds={args.physics_step_seconds} s but the "
                             f"config's dti = dte*isplit = {self.config.dti} s (the core steps "
                             f"dti): make them equal")
        self.distributed = self.world_size > 1
        if self.distributed and not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")
        self.core_cls = core_class(args.core)
        self.steps_per_correction = int(args.steps_per_correction)
        self.loss_weights = args.loss_weights_table
        self._build_data()
        self.pool = CorePool(self.core_cls, self.config, self.device, self.dtype,
                             args.batch_size) if args.reuse_core_pool else None
        self.start_epoch = 0
        if resume is not None:
            self.normalizer = Normalizer(**{k: resume["normalizer"][k]
                                            for k in ("mean", "std", "mask")})
        else:
            self.normalizer = self._fit_normalizer()
        self.normalizer = self.normalizer.to(self.device)
        torch.manual_seed(int(args.seed))          # same initial weights on every rank
        self.encoder = self._build_corrector() if args.encoder else None
        self.decoder = self._build_corrector() if args.decoder else None
        self.physics = self._build_physics_parameters()
        self.trainable_params = [(f"{label}.{n}", p) for label, net in
                                 (("encoder", self.encoder), ("decoder", self.decoder),
                                  ("physics", self.physics)) if net is not None
                                 for n, p in self._plain(net).named_parameters()]
        self.optimizer = torch.optim.Adam([p for _, p in self.trainable_params], lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=args.epochs, eta_min=1e-7)
        if resume is not None:
            self._load_checkpoint(resume)
        if self.is_main:
            args.output.mkdir(parents=True, exist_ok=True)
            self.log_path = args.output / "train_log.csv"
            kept = self._kept_log_rows() if resume is not None else []
            self.log_file = open(self.log_path, "w")
            self.log_file.write("".join([",".join(CSV_COLUMNS) + "\n", *kept]))
            self.log_file.flush()

    def _kept_log_rows(self) -> list[str]:
        """The log's rows up to the resumed checkpoint's epoch: the rows of
        an interrupted later epoch go, as the run does that epoch again."""
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text().splitlines(keepends=True)[1:]
        epoch = [line.split(",", 1)[0] for line in lines]
        kept = [line for line, e in zip(lines, epoch)           # a cut last line goes too
                if line.endswith("\n") and e.isdigit() and int(e) < self.start_epoch]
        if len(kept) < len(lines):
            print(f"pompy train: {len(lines) - len(kept)} rows of epochs from {self.start_epoch} on "
                  f"dropped from {self.log_path} (done again)", file=sys.stderr)
        return kept

    # -------------------------------------------------------------- set-up
    def _build_data(self) -> None:
        a = self.args
        try:
            ds = SnapshotDataset(a.data, horizon=a.horizon, fields=LOSS_FIELDS)
        except (OSError, ValueError) as err:
            raise InputError(f"--data {a.data}: {err}") from err
        self.dataset = ds
        if len(ds) == 0:
            raise InputError(f"--data {a.data}: no sample of horizon {a.horizon} (each member "
                             f"needs more than {a.horizon} snapshots)")
        first = ds[0]
        record = ds.restore_record(first)
        c = self.config
        for name in ("h", "fsm"):
            want = variables.shape(name, c.im, c.jm, c.kb)
            if tuple(record[name].shape) != want:
                raise InputError(f"--data {a.data}: its grid is {tuple(record[name].shape)}, the "
                                 f"config's {want}: generate it from this config")
        spacing = int(first["target_iint"][0]) - int(first["iint"])
        if spacing != self.steps_per_correction:
            raise InputError(f"--data {a.data}: snapshots are {spacing} steps apart, but a "
                             f"correction cycle is steps_per_correction="
                             f"{self.steps_per_correction} steps; generate with --every "
                             f"{self.steps_per_correction * c.dti / 86400!r} days")
        with netCDF4.Dataset(ds.paths[0]) as nc:
            data_dti = float(nc.dti)
        if not math.isclose(data_dti, c.dti, rel_tol=1e-12):
            raise InputError(f"--data {a.data}: generated with dti = {data_dti} s, the config's "
                             f"dti is {c.dti} s")
        self.grid = {n: record[n] for n in ("fsm", "dum", "dvm")}
        per_member = len(ds) // len(ds.members)
        members = len(ds.members)
        n_test = int(members * float(a.test_fraction))
        n_train = members - n_test
        self.train_indices = list(range(n_train * per_member))
        self.test_indices = list(range(n_train * per_member, members * per_member))
        self.train_ds = Subset(ds, self.train_indices)
        self.test_ds = Subset(ds, self.test_indices)
        if len(self.train_ds) < a.batch_size * self.world_size:
            raise InputError(f"{len(self.train_ds)} training samples are fewer than one global "
                             f"batch ({a.batch_size} x {self.world_size} processes)")
        collate = functools.partial(collate_samples, ds)
        kw = dict(batch_size=a.batch_size, num_workers=0, pin_memory=False, drop_last=True,
                  collate_fn=collate)
        # drop_last here too: with len % world_size != 0 the sampler would
        # otherwise repeat samples to even the ranks out
        self.sampler = DistributedSampler(self.train_ds, num_replicas=self.world_size,
                                          rank=self.global_rank, shuffle=True, seed=int(a.seed),
                                          drop_last=True)
        self.train_loader = DataLoader(self.train_ds, sampler=self.sampler, **kw)
        self.test_sampler = DistributedSampler(self.test_ds, num_replicas=self.world_size,
                                               rank=self.global_rank, shuffle=False,
                                               drop_last=True) \
            if len(self.test_ds) >= a.batch_size * self.world_size else None
        self.test_loader = DataLoader(self.test_ds, sampler=self.test_sampler, **kw) \
            if self.test_sampler is not None else None

    def _fit_normalizer(self) -> Normalizer:
        n = len(self.train_ds)
        chosen = sorted({int(i) for i in np.linspace(0, n - 1, min(n, self.args.normalizer_samples))})
        states = [self.train_ds[i]["state"] for i in chosen]
        return Normalizer.fit(states, self.grid, self.config.kb)

    def _wrap(self, module: nn.Module) -> nn.Module:
        if not self.distributed:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def _build_corrector(self) -> nn.Module:
        """A CorrectorNet, SyncBatchNorm, DDP-wrapped (one process: plain)."""
        channels = 4 * (self.config.kb - 1) + 5
        net = CorrectorNet(channels, int(self.args.hidden_channels), self.normalizer.mask)
        net = convert_sync_batchnorm(net, self.device).to(device=self.device, dtype=self.net_dtype)
        return self._wrap(net)

    def _build_physics_parameters(self) -> nn.Module | None:
        if not self.args.learn_names:
            return None
        initial = {name: getattr(self.config, name) for name in self.args.learn_names}
        for name, value in initial.items():
            if not value > 0:
                raise InputError(f"--learn {name}: its config value {value} is not > 0 (a "
                                 f"learned parameter is exp of a learned log)")
        return self._wrap(PhysicsParameters(initial, self.dtype).to(self.device))

    @staticmethod
    def _plain(module: nn.Module | None) -> nn.Module | None:
        return module.module if isinstance(module, DDP) else module

    # -------------------------------------------------------------- the batch
    def _borrow_poms(self, batch_size: int | None = None) -> list:
        batch_size = batch_size or self.args.batch_size
        if self.pool is not None:
            return self.pool.reset_batch(batch_size)
        return [build_initialized_core(self.core_cls, self.config, self.device, self.dtype)
                for _ in range(batch_size)]

    def _network(self, net: nn.Module, packed: torch.Tensor) -> torch.Tensor:
        """A network's corrections in the core's dtype. With --amp bf16 the
        network alone runs under bfloat16 autocast, from its float32
        weights (autocast leaves float64 tensors alone: a float64 network
        would run in float64); packing, corrections and physics stay out."""
        if self.args.amp == "bf16":
            with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
                out = net(packed.to(self.net_dtype))
            return out.to(self.dtype)
        return net(packed)

    def run_physics_multistep(self, poms: list, ics: Mapping, n_steps: int) -> dict:
        """The seed's forward: inject, then per cycle encoder, decoder
        forward, physics, decoder correction, record. (B, T, ...) per field.
        A core that stops keeps its last good state for the rest of the
        batch (the networks still run on every rank) and is marked in
        ``self.failed``."""
        for index, pom in enumerate(poms):
            inject_core_state(pom, ics, sample_index=index)
        if self.physics is not None:
            values = self.physics()
            for pom in poms:
                pom.params = dict(pom.params, **values)
        self.failed = [False] * len(poms)
        seq = {key: [] for key in LOSS_FIELDS}
        scale = float(self.args.correction_scale)
        for _ in range(n_steps):
            if self.encoder is not None:
                corrections = self._network(self.encoder, pack_pom_batch(poms, self.normalizer))
                for i, pom in enumerate(poms):
                    apply_correction_to_pom(pom, corrections[i], self.normalizer, scale_factor=scale)
            if self.decoder is not None:
                corrections_dec = self._network(self.decoder, pack_pom_batch(poms, self.normalizer))
            live = [i for i in range(len(poms)) if not self.failed[i]]
            for i in live:
                poms[i].time0, poms[i].iint = poms[i].time, 0
                poms[i].iend = self.steps_per_correction
            if not self._ensemble_cycle([poms[i] for i in live]):
                for i in live:
                    try:
                        poms[i].run_time_loop()
                    except ModelStop as stop:
                        print(f"pompy train [rank {self.global_rank}]: sample {i}: {stop}",
                              file=sys.stderr)
                        poms[i].state = dict(poms[i].last_good)
                        self.failed[i] = True
            if self.decoder is not None:
                for i, pom in enumerate(poms):
                    apply_correction_to_pom(pom, corrections_dec[i], self.normalizer,
                                            scale_factor=scale)
            for key in seq:
                seq[key].append(torch.stack([getattr(pom, key) for pom in poms]))
        return {key: torch.stack(values, dim=1) for key, values in seq.items()}

    def _ensemble_cycle(self, poms: list) -> bool:
        """A cycle's physics steps of ``poms`` as one ensemble
        (pompy.core.ensemble: every routine batched), each core then taking
        its member's state, equal to its own run to the last bit (values
        and gradients). Where that holds (pompy.core.ensemble.mismatch: for
        one, not the implicit core, whose single runs may take the PCG) and
        pays (``batch_physics``, two or more cores) it returns True; else,
        or when a member stops (the cores untouched), False: the cores step
        one by one, so a stop is a core's."""
        from pompy.core.ensemble import Ensemble, mismatch

        if not (self.batch_physics and len(poms) > 1 and mismatch(poms) is None):
            return False
        ensemble = Ensemble.of(poms)
        try:
            ensemble.advance(self.steps_per_correction)
        except ModelStop:
            return False
        vamax = ensemble.vamax.tolist()
        for m, pom in enumerate(poms):
            pom.state = ensemble.member(m)
            pom.iint, pom.time = ensemble.iint, pom._time(ensemble.iint)
            pom.vamax, pom._loop_mode = vamax[m], "gradient"    # as run_time_loop leaves them
        return True

    def _compute_component_losses(self, preds: Mapping, refs: Mapping) -> dict:
        """Per field: the MSE over the wet points (its mask) and levels
        k = 1..kb-1 of 3-D fields, over the batch and the T snapshots."""
        kb, losses = self.config.kb, {}
        for name in LOSS_FIELDS:
            p, r = preds[name], refs[name].to(device=self.device, dtype=preds[name].dtype)
            mask = self.grid[MASKS[variables.ALL[name].location]].to(p)
            if p.dim() == 5:
                p, r = p[..., :kb - 1], r[..., :kb - 1]
                mask = mask[..., None].expand(*mask.shape, kb - 1)
            count = mask.sum() * p.shape[0] * p.shape[1]
            losses[name] = ((p - r) ** 2 * mask).sum() / count
        return losses

    def combine_loss_components(self, losses: Mapping) -> torch.Tensor:
        """loss_display_scale * sum_f w_f L_f."""
        total = sum(self.loss_weights[name] * losses[name] for name in LOSS_FIELDS)
        return float(self.args.loss_display_scale) * total

    def _reduce_losses(self, total: torch.Tensor, losses: Mapping) -> list[float]:
        scale = float(self.args.loss_display_scale)
        stacked = torch.stack([total.detach().double()] +
                              [losses[n].detach().double() * scale for n in LOSS_FIELDS])
        if self.distributed:
            stacked = stacked.to(self.device)
            dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
            stacked = stacked / self.world_size
        return stacked.cpu().tolist()

    def _set_mode(self, training: bool) -> None:
        for net in (self.encoder, self.decoder, self.physics):
            if net is not None:
                net.train(training)

    def run_single_train_batch(self, ics: Mapping, refs: Mapping) -> list[float]:
        self._set_mode(True)
        poms = self._borrow_poms(len(ics["iint"]))
        preds = self.run_physics_multistep(poms, ics, n_steps=refs["u"].shape[1])
        losses = self._compute_component_losses(preds, refs)
        total_loss = self.combine_loss_components(losses)
        if any(self.failed):       # every gradient NaN, so every rank skips the step
            total_loss = total_loss * float("nan")
        self.optimizer.zero_grad(set_to_none=True)
        total_loss.backward()
        clip = float(self.args.grad_clip_norm)
        norm = clip_gradients(self.trainable_params, clip if clip > 0 else math.inf)
        if norm is not None and not math.isfinite(norm):
            self.skipped_steps += 1
            if self.is_main:
                print(f"pompy train: non-finite gradient (norm {norm}); step skipped "
                      f"({self.skipped_steps} so far)", file=sys.stderr)
        else:
            self.optimizer.step()
        return self._reduce_losses(total_loss, losses)

    def run_single_test_batch(self, ics: Mapping, refs: Mapping) -> list[float]:
        self._set_mode(False)
        with torch.no_grad():
            poms = self._borrow_poms(len(ics["iint"]))
            preds = self.run_physics_multistep(poms, ics, n_steps=refs["u"].shape[1])
            losses = self._compute_component_losses(preds, refs)
            total_loss = self.combine_loss_components(losses)
        return self._reduce_losses(total_loss, losses)

    # -------------------------------------------------------------- epochs
    def log_step(self, epoch: int, step: int, phase: str, values: Sequence[float]) -> None:
        if self.log_file is None:
            return
        self.log_file.write(",".join([str(epoch), str(step), phase] + [repr(float(v)) for v in values])
                            + "\n")
        self.log_file.flush()

    def _progress(self, loader, desc: str):
        if not (self.is_main and self.args.progress):
            return loader
        from tqdm import tqdm
        return tqdm(loader, desc=desc, leave=False, file=sys.stderr, disable=None)

    def train_epoch(self, epoch: int) -> float:
        self.sampler.set_epoch(epoch)
        totals = []
        for step, (ics, refs) in enumerate(self._progress(self.train_loader, f"epoch {epoch} train")):
            values = self.run_single_train_batch(ics, refs)
            self.log_step(epoch, step, "Train", values)
            totals.append(values[0])
        average = float(np.mean(totals)) if totals else float("nan")
        if self.is_main:
            print(f"epoch {epoch}: train loss {average:.6e} ({len(totals)} batches, "
                  f"{self.skipped_steps} skipped steps so far)", flush=True)
        return average

    def test_epoch(self, epoch: int) -> float | None:
        if self.test_loader is None:
            return None
        totals = []
        for step, (ics, refs) in enumerate(self._progress(self.test_loader, f"epoch {epoch} test")):
            values = self.run_single_test_batch(ics, refs)
            self.log_step(epoch, step, "Test", values)
            totals.append(values[0])
        average = float(np.mean(totals)) if totals else float("nan")
        if self.is_main:
            print(f"epoch {epoch}: test loss {average:.6e} ({len(totals)} batches)", flush=True)
        return average

    def learned_values(self) -> dict[str, float]:
        physics = self._plain(self.physics)
        return {} if physics is None else {n: float(v) for n, v in physics().items()}

    def train(self, stop_after: int | None = None) -> None:
        """Epochs start_epoch .. epochs-1 (``stop_after``: only that many,
        as an interrupted run would)."""
        last = self.args.epochs if stop_after is None else \
            min(self.args.epochs, self.start_epoch + stop_after)
        for epoch in range(self.start_epoch, last):
            started = time.perf_counter()
            self.train_epoch(epoch)
            self.test_epoch(epoch)
            self.scheduler.step()
            if self.is_main and self.physics is not None:
                print(f"epoch {epoch}: learned " + ", ".join(
                    f"{n}={v:.6g}" for n, v in self.learned_values().items()), flush=True)
            self.save_checkpoint(epoch)
            if self.is_main:
                print(f"epoch {epoch}: {time.perf_counter() - started:.1f} s", flush=True)

    # -------------------------------------------------------------- checkpoints
    def _rng_state(self) -> dict:
        state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                 "python": random.getstate()}
        if torch.cuda.is_available() and self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def save_checkpoint(self, epoch: int) -> Path | None:
        """Rank 0 writes checkpoint_epoch<E>.pt and checkpoint_last.pt
        (each atomically); every rank's RNG state is in it."""
        rng = [None] * self.world_size
        if self.distributed:
            dist.all_gather_object(rng, self._rng_state())
        else:
            rng = [self._rng_state()]
        path = None
        if self.is_main:
            plain = {name: self._plain(net) for name, net in
                     (("encoder", self.encoder), ("decoder", self.decoder),
                      ("physics", self.physics))}
            body = {"epoch": epoch,
                    "networks": {n: (m.state_dict() if m is not None else None)
                                 for n, m in plain.items()},
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "normalizer": {k: v.cpu() for k, v in self.normalizer.state_dict().items()},
                    "learned": self.learned_values(),
                    "rng": rng, "world_size": self.world_size,
                    "skipped_steps": self.skipped_steps,
                    "certificate": {"id": self.certificate_id, "key": self.certificate.get("key")},
                    "options": {k: (str(v) if isinstance(v, Path) else v)
                                for k, v in vars(self.args).items()}}
            path = self.args.output / f"checkpoint_epoch{epoch}.pt"
            for target in (path, self.args.output / "checkpoint_last.pt"):
                tmp = target.with_name(target.name + ".tmp")
                with open(tmp, "wb") as f:
                    torch.save(body, f)
                    f.flush()
                    os.fsync(f.fileno())       # on disk before it replaces the old one
                os.replace(tmp, target)
        if self.distributed:
            dist.barrier()
        return path

    def _load_checkpoint(self, body: Mapping) -> None:
        for name, net in (("encoder", self.encoder), ("decoder", self.decoder),
                          ("physics", self.physics)):
            saved = body["networks"].get(name)
            if (net is None) != (saved is None):
                raise InputError(f"--resume {self.args.resume}: the checkpoint "
                                 f"{'has' if saved is not None else 'lacks'} a {name}; "
                                 "resume with the options it was trained with")
            if net is not None:
                self._plain(net).load_state_dict(saved)
        self.optimizer.load_state_dict(body["optimizer"])
        self.scheduler.load_state_dict(body["scheduler"])
        self.start_epoch = int(body["epoch"]) + 1
        self.skipped_steps = int(body.get("skipped_steps", 0))
        rng = body.get("rng") or []
        if len(rng) == self.world_size and rng[self.global_rank] is not None:
            state = rng[self.global_rank]
            torch.set_rng_state(state["torch"])
            np.random.set_state(state["numpy"])
            random.setstate(state["python"])
            if "cuda" in state and self.device.type == "cuda":
                torch.cuda.set_rng_state(state["cuda"], self.device)

    def cleanup(self) -> None:
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None
        if hasattr(self, "dataset"):
            self.dataset.close()
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def main(argv: Sequence[str] | None = None, *, leave: bool = False) -> int:
    """The command: 0 trained, 2 bad input or no certificate ("pompy: ..."),
    3 a model stop outside a batch. ``leave`` (``python -m pompy.train``):
    end the process with that status once the trainer is cleaned up,
    before Python tears its objects down (_leave)."""
    trainer = None
    try:
        args = resolve_options(argv)
        trainer = NPOMTrainerDDP(args)
        trainer.train()
        code = 0
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        code = 2
    except ModelStop as stop:
        print(f"pompy: {stop}", file=sys.stderr)
        code = 3
    finally:
        if trainer is not None:
            trainer.cleanup()
        elif dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if leave:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """Exit now, output flushed, without Python's teardown: a rank under
    torchrun (gloo) hung in 1 of 114 runs after its work was done and
    its process group destroyed, its main thread at main()'s return, where
    the trainer's objects are freed, and one native thread idle (py-spy),
    so torchrun waited on it for ever. Every file the trainer writes is
    closed and on disk by then (cleanup, the checkpoints' fsync)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(leave=True)
