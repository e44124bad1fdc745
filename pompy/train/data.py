"""The trainer's data: the dataset opened and checked against the config,
its split by members, batches of samples (collate_samples), and the
networks' view of a core's state (the packed channels, their normaliser,
corrections back into the state).

Channels (``pack_pom_batch``): u, v, t, s at k = 1..kb-1, then el, ua,
va, uab, vab (pompy.variables.names("packed")): 4*(kb-1)+5 channels, each
a (jm, im) image (rows j, columns i), normalised per channel by a
:class:`Normalizer` fitted on the training split (mean and standard
deviation over the wet points) and zero on land.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, Subset

from pompy import cores, variables
from pompy.config import CASE_PARAMS, Config, namelist_case, state_differences
from pompy.core.setup import setup_grid
from pompy.dataset import SnapshotDataset, member_params
from pompy.distributed import Distributed
from pompy.errors import InputError
from pompy.provenance import GRID_HASHED

if TYPE_CHECKING:
    from pompy.settings.train import Data

PACKED = tuple(variables.names("packed"))
# where each field lives: its land mask
MASKS = {"T": "fsm", "U": "dum", "V": "dvm"}


# ------------------------------------------------------------------ the dataset
def open_dataset(path: Path, horizon: int, fields: Sequence[str], config: Config,
                 steps_per_correction: int) -> tuple[SnapshotDataset, dict]:
    """The dataset at ``path`` and its land masks (fsm, dum, dvm); an
    InputError where it cannot serve ``config``'s training."""
    try:
        ds = SnapshotDataset(path, horizon=horizon, fields=fields, physics_levels=True)
    except (OSError, ValueError) as err:
        raise InputError(f"--data {path}: {err}") from err
    try:
        return ds, _check_dataset(ds, path, horizon, config, steps_per_correction)
    except InputError:
        ds.close()
        raise


def _check_dataset(ds: SnapshotDataset, path: Path, horizon: int, c: Config,
                   steps_per_correction: int) -> dict:
    """Its samples, grid and snapshot spacing against the config's (a
    correction cycle, steps_per_correction physics steps of the config's
    dti, in seconds: the reference that made the snapshots may step
    another dti); its land masks."""
    if len(ds) == 0:
        raise InputError(f"--data {path}: no sample of horizon {horizon} (each member "
                         f"needs more than {horizon} snapshots)")
    first = ds[0]
    record = ds.restore_record(first)
    for name in ("h", "fsm"):
        want = variables.shape(name, c.im, c.jm, c.kb)
        if tuple(record[name].shape) != want:
            raise InputError(f"--data {path}: its grid is {tuple(record[name].shape)}, the "
                             f"config's {want}: generate it from this config")
    try:
        ds.grid_hash                         # the grid as written, or a damaged file
    except ValueError as err:
        raise InputError(f"--data {path}: {err}") from None
    changed = dataset_differences(ds, record, c)
    if changed:
        raise InputError(f"--data {path} was made for other settings than the config's: "
                         f"{'; '.join(changed)}; use the config it was made for (its "
                         "namelist is the dataset's `namelist` attribute) or generate data "
                         "for this one")
    spacing = (float(first["target_time"][0]) - float(first["time"])) * 86400.0
    cycle = steps_per_correction * c.dti
    if not math.isclose(spacing, cycle, rel_tol=1e-9):
        raise InputError(f"--data {path}: snapshots are {spacing:g} s apart, but a correction "
                         f"cycle is steps_per_correction x dti = {steps_per_correction} x "
                         f"{c.dti:g} s = {cycle:g} s; generate with --every "
                         f"{cycle / 86400!r} days")
    return {n: record[n] for n in ("fsm", "dum", "dvm")}


# what a dataset may differ in from the config that trains on it: the
# reference's own steps and the physics' dte (the physics' dti must be its
# config_dti: the b levels and the snapshots' spacing are made for it),
# the case parameters (each member records its own, and the trainer sets
# each member's core up with them), and where the reference solves no
# elevation, the physics' solver settings
REFERENCE_STEPS = ("dte", "isplit")
SOLVER_SETTINGS = ("theta", "cg_tol", "preconditioner")
# a grid field's largest relative difference still the same grid: a set-up
# on another device may differ in its last bits (pompy.provenance.grid_hash
# is exact, so the arrays are compared instead)
GRID_RTOL = 1e-12


def dataset_differences(ds: SnapshotDataset, record: Mapping, config: Config) -> list[str]:
    """What differs between ``config`` and the config ``ds`` was made for,
    as a restart is checked (pompy.config.state_differences): each state
    parameter, the physics' dti, and the set-up's h, dx, dy and fsm
    (``record``: a restore record of ``ds``, holding its grid)."""
    made = ds.made_for
    skip = REFERENCE_STEPS + CASE_PARAMS + (() if cores.get(ds.model["core"]).solver
                                            else SOLVER_SETTINGS)
    changed = state_differences(config, made["namelist"], "dataset", skip)
    then = made["config_dti"]         # its b levels are one physics step back
    if then is not None and not math.isclose(then, config.dti, rel_tol=1e-12):
        changed.append(f"dti: {then:g} s (dataset's physics) -> {config.dti:g} s")
    if not changed:            # the grid of other parameters differs anyway: said by them
        own = dataclasses.replace(config, **namelist_case(made["namelist"]))   # the file's grid
        changed += grid_differences(record, setup_grid(own))
    return changed


def grid_differences(stored: Mapping, grid: Mapping) -> list[str]:
    """'h: up to 3e+03 m apart (i, j) = (5, 6)' for each field of
    pompy.provenance.GRID_HASHED where the two grids differ."""
    changed = []
    for name in GRID_HASHED:
        a = np.asarray(torch.as_tensor(stored[name]), dtype=np.float64)
        b = np.asarray(grid[name], dtype=np.float64)
        apart = np.abs(a - b)
        if (apart > GRID_RTOL * np.maximum(np.abs(a), np.abs(b))).any():
            i, j = np.unravel_index(np.argmax(apart), apart.shape)
            changed.append(f"{name}: up to {apart[i, j]:.3g} {variables.ALL[name].units} apart, "
                           f"at (i, j) = ({i + 1}, {j + 1}) (dataset {a[i, j]:.6g}, config "
                           f"{b[i, j]:.6g})")
    return changed


def same_model_warning(ds: SnapshotDataset, core: str, config: Config) -> str | None:
    """A warning when the dataset's targets come from the physics that will
    train on them (the same core at the same dti): the physics alone then
    reproduces them and a corrector has nothing to learn."""
    made = ds.model
    if made["core"] == core and math.isclose(made["dti"], config.dti, rel_tol=1e-12):
        return (f"pompy train: warning: the targets were made by the physics in the loop "
                f"itself ({core} core at dti = {config.dti:g} s): the physics alone reproduces "
                f"them and the correctors have nothing to learn; generate the data with a "
                f"reference (the config's &generate core and reference_dti, e.g. the explicit "
                f"core at a shorter dti)")
    return None


def check_split(ds: SnapshotDataset, test_fraction: float) -> str | None:
    """InputError where ``test_fraction`` of the members keeps no whole
    member for the test split, or none for training; the warning for
    test_fraction 0 (no test loss, no baseline); else None."""
    members = len(ds.members)
    held = int(members * float(test_fraction))
    if test_fraction == 0:
        return ("pompy train: warning: test_fraction = 0: no test split, so no test loss and "
                "no baseline are measured")
    if held == 0:
        raise InputError(f"test_fraction = {test_fraction:g} of {members} members keeps no "
                         f"whole member for the test split; give data of at least "
                         f"{math.ceil(1 / float(test_fraction))} members, a larger "
                         f"test_fraction, or test_fraction = 0 (no test loss)")
    if held == members:
        raise InputError(f"test_fraction = {test_fraction:g} of {members} members leaves none "
                         "to train on; give a smaller test_fraction or more members")
    return None


def split_members(ds: SnapshotDataset, test_fraction: float) -> tuple[list[int], list[int]]:
    """(training, test) sample indices: the last ``test_fraction`` of the
    members test, whole."""
    per_member = len(ds) // len(ds.members)
    members = len(ds.members)
    n_train = members - int(members * float(test_fraction))
    return (list(range(n_train * per_member)),
            list(range(n_train * per_member, members * per_member)))


def collate_samples(dataset: SnapshotDataset, samples: list[dict]) -> tuple[dict, dict]:
    """(ics, refs) of a list of SnapshotDataset samples: ics = {"state":
    {name: (B, ...)}, "iint": (B,), "time": (B,) days, "time0": (B,), "params":
    {name: (B,)}},
    refs = {name: (B, T, ...)}."""
    ics = {"state": {name: torch.stack([s["state"][name] for s in samples])
                     for name in samples[0]["state"]},
           "iint": torch.tensor([int(s["iint"]) for s in samples]),
           "time": torch.tensor([float(s["time"]) for s in samples], dtype=torch.float64),
           "time0": torch.tensor([float(dataset.restore_record(s)["time0"]) for s in samples],
                                 dtype=torch.float64),
           "params": {name: torch.tensor([member_params(s)[name] for s in samples],
                                         dtype=torch.float64) for name in CASE_PARAMS}}
    refs = {name: torch.stack([s["target"][name] for s in samples]) for name in samples[0]["target"]}
    return ics, refs


class TrainingData:
    """A run's data on one process: the dataset and its land masks, the
    split by members, the training split's sampler and loader (this rank's
    share, shuffled per epoch, last uneven batch dropped) and the test
    split's loader (every test sample once over the ranks)."""

    def __init__(self, settings: Data, config: Config, fields: Sequence[str], dist: Distributed):
        self.settings = settings
        self.dataset, self.grid = open_dataset(settings.data,
                                               settings.pushforward + settings.horizon, fields, config,
                                               settings.steps_per_correction)
        try:
            self.warning = check_split(self.dataset, settings.test_fraction)
            self.train_indices, self.test_indices = split_members(self.dataset,
                                                                  settings.test_fraction)
            self.train = Subset(self.dataset, self.train_indices)
            if len(self.train) < settings.batch_size * dist.world_size:
                raise InputError(f"{len(self.train)} training samples are fewer than one "
                                 f"global batch ({settings.batch_size} x {dist.world_size} "
                                 "processes)")
            # every value read once before training: each rank its share of the members
            self.dataset.check_finite(self.dataset.members[dist.rank::dist.world_size])
        except InputError:
            self.dataset.close()
            raise

    def loaders(self, dist: Distributed, seed: int) -> None:
        """The sampler and the two loaders. drop_last in the sampler too:
        with len % world_size != 0 it would otherwise repeat samples to even
        the ranks out. The test split: rank r takes every world_size-th
        sample from the r-th, unpadded (a rank may have one fewer, or
        none), its last batch possibly short."""
        self.sampler = DistributedSampler(self.train, num_replicas=dist.world_size,
                                          rank=dist.rank, shuffle=True, seed=seed,
                                          drop_last=True)
        self.train_loader = self._loader(self.train, self.sampler, drop_last=True)
        self.test_shard = self.test_indices[dist.rank::dist.world_size]
        self.test_loader = self._loader(Subset(self.dataset, self.test_shard), None,
                                        drop_last=False)

    def _loader(self, subset: Subset, sampler: DistributedSampler | None, *,
                drop_last: bool) -> DataLoader:
        return DataLoader(subset, sampler=sampler, batch_size=self.settings.batch_size,
                          num_workers=0, pin_memory=False, drop_last=drop_last,
                          collate_fn=functools.partial(collate_samples, self.dataset))

    def fit_normalizer(self, kb: int) -> Normalizer:
        """The normaliser of normalizer_samples training samples, evenly spread."""
        n = len(self.train)
        chosen = sorted({int(i) for i in np.linspace(0, n - 1,
                                                     min(n, self.settings.normalizer_samples))})
        return Normalizer.fit([self.train[i]["state"] for i in chosen], self.grid, kb).checked()

    def close(self) -> None:
        self.dataset.close()


# ------------------------------------------------------------------ the channels
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

    def checked(self, where: str = "fitted on the training split") -> Normalizer:
        """Itself, where every mean and standard deviation is finite and
        every deviation positive; else InputError naming the first channel."""
        bad = ~(torch.isfinite(self.mean) & torch.isfinite(self.std) & (self.std > 0))
        if bad.any():
            c = int(bad.nonzero()[0])
            name, k = channel_layout((self.mean.numel() - 5) // 4 + 1)[c]
            raise InputError(f"the normaliser {where} is not finite: channel {c} ({name}"
                             f"{'' if k is None else f' at k = {k + 1}'}) has mean "
                             f"{float(self.mean[c]):g}, std {float(self.std[c]):g}")
        return self

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


# each corrected field's previous time level (correction_form both_levels)
PREVIOUS = {"u": "ub", "v": "vb", "t": "tb", "s": "sb", "el": "elb", "ua": "uab", "va": "vab"}


def state_increments(correction: torch.Tensor, normalizer: Normalizer, kb: int,
                     scale_factor: float) -> dict[str, torch.Tensor]:
    """Per packed field, its increment in pom2k order: scale_factor * std_c
    * correction_c on the wet points of each channel c (correction:
    (C, jm, im), normalised units); 3-D fields none at k = kb."""
    delta = correction * (scale_factor * normalizer.std[:, None, None].to(correction)) \
        * normalizer.mask.to(correction)
    increments, c = {}, 0
    for name in PACKED:
        if len(variables.ALL[name].dims) == 3:
            increments[name] = F.pad(delta[c:c + kb - 1].permute(2, 1, 0), (0, 1))
            c += kb - 1
        else:
            increments[name] = delta[c].T
            c += 1
    return increments


def apply_correction_to_pom(pom, correction: torch.Tensor, normalizer: Normalizer,
                            scale_factor: float = 1e-3, form: str = "state",
                            fields: Sequence[str] = PACKED) -> None:
    """The correction into the core's state: ``form`` "state", each packed
    field += its increment (:func:`state_increments`); "both_levels" (and
    "tendency", whose share of a cycle's increment each step adds), each
    field of PREVIOUS and its previous level += the field's increment (the
    leapfrog pair shifted together; the uab and vab channels unused). Only
    ``fields`` (and their previous levels) change."""
    increments = state_increments(correction, normalizer, pom.config.kb, scale_factor)
    increments = {name: d for name, d in increments.items() if name in fields}
    if form in ("both_levels", "tendency"):
        increments = {level: d for name, d in increments.items() if name in PREVIOUS
                      for level in (name, PREVIOUS[name])}
    pom.inject({name: pom.state[name] + d.to(pom.state[name].dtype)
                for name, d in increments.items()})
