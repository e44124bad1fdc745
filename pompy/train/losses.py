"""The trainer's losses: the per-field loss weights, the CSV log's
columns, the masked per-field MSEs and their weighted sum."""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from pompy import variables
from pompy.train.data import MASKS

# the per-field loss weights (the defaults; --loss_weights changes them), in CSV order
LOSS_WEIGHTS: dict[str, float] = {"u": 12.0, "ub": 18.0, "v": 10.0, "vb": 12.0, "t": 1.0,
                                  "s": 6.0, "el": 30.0, "ua": 60.0, "uab": 60.0, "va": 60.0,
                                  "vab": 60.0}
LOSS_FIELDS = tuple(LOSS_WEIGHTS)
CSV_COLUMNS = ("Epoch", "Step", "Phase", "TotalLoss",
               *(f"{name.upper()}_MSE" for name in LOSS_FIELDS))
# the per-epoch log (epoch_log.csv, beside the per-step train_log.csv, so
# that file's CSV_COLUMNS stay as they are for its readers): the
# epoch's learning rate, the mean and largest gradient norm of its steps
# (before clipping), the steps skipped so far, its wall time (s), the mean
# training loss, the test split's loss, the baseline (the test split's loss
# of the physics alone) and the test loss's ratio to it
EPOCH_COLUMNS = ("Epoch", "LearningRate", "GradNorm", "GradNormMax", "SkippedSteps",
                 "WallSeconds", "TrainLoss", "TestLoss", "BaselineLoss", "RatioToBaseline")


def _squared_errors(preds: Mapping, refs: Mapping, grid: Mapping, kb: int,
                    device: torch.device) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """Per field: (its squared errors on the wet points, (B, T, ...), levels
    k = 1..kb-1 of 3-D fields; the number of those points in one snapshot)."""
    for name in LOSS_FIELDS:
        p, r = preds[name], refs[name].to(device=device, dtype=preds[name].dtype)
        mask = grid[MASKS[variables.ALL[name].location]].to(p)
        if p.dim() == 5:
            p, r = p[..., :kb - 1], r[..., :kb - 1]
            mask = mask[..., None].expand(*mask.shape, kb - 1)
        yield name, (p - r) ** 2 * mask, mask.sum()


def component_losses(preds: Mapping, refs: Mapping, grid: Mapping, kb: int,
                     device: torch.device) -> dict[str, torch.Tensor]:
    """Per field: the MSE over the wet points (its mask) and levels
    k = 1..kb-1 of 3-D fields, over the batch and the T snapshots."""
    losses = {}
    for name, errors, wet in _squared_errors(preds, refs, grid, kb, device):
        losses[name] = errors.sum() / (wet * errors.shape[0] * errors.shape[1])
    return losses


def sample_losses(preds: Mapping, refs: Mapping, grid: Mapping, kb: int,
                  device: torch.device) -> dict[str, torch.Tensor]:
    """Per field: each sample's MSE over its T snapshots, (B,). Every sample
    has as many points, so a split's mean of these is its MSE."""
    return {name: errors.flatten(1).sum(1) / (wet * errors.shape[1])
            for name, errors, wet in _squared_errors(preds, refs, grid, kb, device)}


def weighted_total(weights: Mapping[str, float], losses: Mapping, display_scale: float):
    """display_scale * sum_f w_f L_f."""
    return display_scale * sum(weights[name] * losses[name] for name in LOSS_FIELDS)
