"""``pompy evaluate``: what a trained corrector gains, on held-out members,
over rollouts longer than training's.

    pompy evaluate RUN --data DATA [--cycles N] [--members M,...]
                   [--checkpoint FILE] [--config CONFIG.nml]

From the initial state (snapshot 0) of each held-out member of DATA (the
members the run kept for its test split, the last ``test_fraction`` of
them; ``--members`` names others), rolls out N correction cycles (default
4 x the run's training horizon) of

- the corrected physics: the trainer's own forward
  (pompy.train.physics.run_hybrid, the test phase's: networks in eval
  mode) with the networks, normaliser and learned parameters of the run's
  checkpoint (default RUN/checkpoint_last.pt), and
- the uncorrected physics: the same forward without networks or learned
  parameters (the trainer's baseline),

and measures both against the dataset's reference snapshots at each lead
time (cycle 1..N): per field the RMSE over the wet points (levels 1..kb-1
of 3-D fields), and the run's weighted loss (its loss weights, the
trainer's per-field masked MSEs). ``ratio_to_baseline`` is, by lead time,
the corrected loss over the uncorrected one (below 1: the corrector helps).

Writes in RUN: ``evaluation.csv`` (one row per lead time and model:
lead_cycle, lead_seconds, model, loss, then each field's RMSE),
``evaluation.png`` (the ratio by lead time; the RMSE of el, u, v and t of
both models) and ``evaluation.json`` (the same numbers: ratio_to_baseline,
lead_seconds, the losses, the RMSEs, the members, the checkpoint, its
certificate id, the data's provenance: the model that made it). It ends by
printing the worst (largest) ratio. Exit 0; bad input: one line ``pompy:
...``, exit 2; a core that blows up: exit 3.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from pompy import settings as settings_layer
from pompy import variables
from pompy.config import load_config
from pompy.dataset import SnapshotDataset
from pompy.distributed import Distributed, torch_device
from pompy.errors import InputError, ModelStop
from pompy.settings import EvaluateSettings, TrainSettings
from pompy.train.checks import latest_checkpoint
from pompy.train.correctors import Correctors
from pompy.train.data import MASKS, Normalizer, collate_samples, open_dataset, split_members
from pompy.train.losses import LOSS_FIELDS
from pompy.train.physics import PhysicsRunner, run_hybrid

DESCRIPTION = __doc__.split("\n\n", 2)[1] + "\n\n" + __doc__.split("\n\n", 2)[2].split(
    "\nWrites in RUN")[0]
FILES = ("evaluation.csv", "evaluation.png", "evaluation.json")


# ------------------------------------------------------------------ the run's model
def load_run(run: Path, checkpoint: Path | None, config: Path | None
             ) -> tuple[dict, TrainSettings]:
    """(the checkpoint's body, the run's settings) of a training run, the
    device the CPU where the run's GPU is not here; InputError where RUN
    holds none or the config it names cannot be found."""
    if not run.is_dir():
        raise InputError(f"{run}: not a folder (a training run's --output)")
    path = checkpoint if checkpoint is not None else latest_checkpoint(run)
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
        record = dict(body["options"])
    except FileNotFoundError as err:
        raise InputError(f"--checkpoint {path}: no such file") from err
    except Exception as err:
        raise InputError(f"{path}: not a pompy.train checkpoint ({err})") from err
    record["config"] = str(config) if config is not None else record["config"]
    if not Path(record["config"]).is_file():
        raise InputError(f"the run's config {record['config']} is not found from here; give "
                         "--config CONFIG.nml")
    if str(record.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
        record["device"] = "cpu"
    body["path"] = str(path)
    return body, TrainSettings.from_record(record)


class TrainedModel:
    """A run's hybrid model from one of its checkpoints: its normaliser,
    networks (eval mode) and learned parameters around its physics (new
    cores for each rollout); no certificate, process group or data loader."""

    def __init__(self, body: Mapping, settings: TrainSettings):
        self.settings, self.checkpoint = settings, body["path"]
        self.config = load_config(settings.config)
        dist = Distributed(device=torch_device(settings.physics.device))
        dtype = getattr(torch, settings.physics.dtype)
        n = body["normalizer"]
        self.normalizer = Normalizer(n["mean"], n["std"], n["mask"]).to(dist.device)
        self.correctors = Correctors(settings.model, self.config, self.normalizer, dtype, dist,
                                     settings.optimizer.seed)
        self.correctors.load(body["networks"], Path(self.checkpoint))
        self.correctors.set_mode(False)
        self.runner = PhysicsRunner(settings.physics, self.config, dist.device, dtype,
                                    settings.data.steps_per_correction, rank=0)

    def rollout(self, ics: Mapping, cycles: int, corrected: bool,
                members: Sequence[int]) -> dict:
        """``cycles`` correction cycles from ``ics`` (the initial states of
        ``members``), corrected or the physics alone; ModelStop naming the
        members whose physics stopped."""
        poms = self.runner.borrow(len(ics["iint"]))
        preds = run_hybrid(self.runner, self.correctors if corrected else None,
                           self.normalizer, poms, ics, cycles)
        failed = [m for m, f in zip(members, self.runner.failed) if f]
        if failed:
            raise ModelStop(f"the {'corrected' if corrected else 'uncorrected'} physics of "
                            f"member(s) {failed} stopped in the rollout")
        return preds


# ------------------------------------------------------------------ the rollouts
def _members(dataset: SnapshotDataset, test_fraction: float, chosen: Sequence[int] | None
             ) -> list[int]:
    if chosen:
        unknown = [m for m in chosen if m not in dataset.members]
        if unknown:
            raise InputError(f"--members: {', '.join(map(str, unknown))} not in the data "
                             f"(members {', '.join(map(str, dataset.members))})")
        return list(chosen)
    _, test = split_members(dataset, test_fraction)
    per_member = len(dataset) // len(dataset.members)
    held = sorted({dataset.members[i // per_member] for i in test})
    if not held:
        raise InputError(f"the run kept no member for its test split (test_fraction = "
                         f"{test_fraction}); name members with --members")
    return held


def rollouts(model: TrainedModel, dataset: SnapshotDataset, members: Sequence[int]
             ) -> tuple[dict, dict, dict, list[float]]:
    """(corrected, uncorrected) predictions, each {field: (M, N, ...)},
    from snapshot 0 of each member, and the members' reference targets
    {field: (M, N, ...)}; the lead times in seconds."""
    per_member = len(dataset) // len(dataset.members)
    samples = [dataset[dataset.members.index(m) * per_member] for m in members]
    ics, refs = collate_samples(dataset, samples)
    cycles = refs["u"].shape[1]
    with torch.no_grad():
        corrected = model.rollout(ics, cycles, True, members)
        uncorrected = model.rollout(ics, cycles, False, members)
    lead = [float(t - samples[0]["time"]) * 86400.0 for t in samples[0]["target_time"]]
    return corrected, uncorrected, refs, lead


def lead_losses(preds: Mapping, refs: Mapping, grid: Mapping, kb: int, weights: Mapping,
                ) -> tuple[list[float], dict[str, list[float]]]:
    """By lead time: the weighted loss (the trainer's masked MSEs, summed
    with ``weights``) and each field's RMSE, over the members."""
    mse = {}
    for name in LOSS_FIELDS:
        p, r = preds[name].double(), refs[name].to(preds[name].device, torch.float64)
        mask = grid[MASKS[variables.ALL[name].location]].to(p)
        if p.dim() == 5:
            p, r = p[..., :kb - 1], r[..., :kb - 1]
            mask = mask[..., None].expand(*mask.shape, kb - 1)
        err = ((p - r) ** 2 * mask).transpose(0, 1).flatten(1).sum(1)       # (N,)
        mse[name] = err / (mask.sum() * p.shape[0])
    loss = sum(weights[name] * mse[name] for name in LOSS_FIELDS)
    return loss.tolist(), {name: v.sqrt().tolist() for name, v in mse.items()}


# ------------------------------------------------------------------ the files
def write_files(run: Path, result: dict) -> None:

    with open(run / "evaluation.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lead_cycle", "lead_seconds", "model", "loss",
                    *(f"{n}_rmse" for n in LOSS_FIELDS)])
        for i, lead in enumerate(result["lead_seconds"]):
            for label in ("corrected", "uncorrected"):
                w.writerow([i + 1, lead, label, repr(result[f"{label}_loss"][i]),
                            *(repr(result["rmse"][label][n][i]) for n in LOSS_FIELDS)])
    (run / "evaluation.json").write_text(json.dumps(result, indent=1) + "\n")
    figure(result, run / "evaluation.png")


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    lead = np.asarray(result["lead_seconds"]) / 3600.0
    fig, axes = plt.subplots(1, 5, figsize=(18, 3.4))
    ax = axes[0]
    ax.plot(lead, result["ratio_to_baseline"], "o-", color="k")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, max(1.1, max(result["ratio_to_baseline"]) * 1.1))
    ax.set(xlabel="lead (h)", ylabel="corrected / uncorrected loss", title="ratio_to_baseline")
    for ax, name in zip(axes[1:], ("el", "u", "v", "t")):
        for label, style in (("uncorrected", "s--"), ("corrected", "o-")):
            ax.plot(lead, result["rmse"][label][name], style, label=label)
        ax.set(xlabel="lead (h)", title=f"{name} RMSE ({variables.ALL[name].units})")
        ax.set_ylim(bottom=0)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{result['run']}: held-out members {result['members']} against "
                 f"{result['data_model']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------ the command
def evaluate(settings: EvaluateSettings, log=None) -> dict:
    """The evaluation (see the module docstring): its files written in
    the run's folder; returns the JSON's content."""
    log = sys.stdout if log is None else log
    run = settings.run
    body, trained = load_run(run, settings.checkpoint, settings.config)
    horizon = trained.data.horizon
    cycles = 4 * horizon if settings.cycles is None else settings.cycles
    model = TrainedModel(body, trained)
    dataset, grid = open_dataset(settings.data, cycles, LOSS_FIELDS, model.config,
                                 trained.data.steps_per_correction)
    try:
        chosen = _members(dataset, trained.data.test_fraction, settings.member_numbers)
        corrected, uncorrected, refs, lead = rollouts(model, dataset, chosen)
        kb = model.config.kb
        weights = trained.optimizer.weights
        loss_c, rmse_c = lead_losses(corrected, refs, grid, kb, weights)
        loss_u, rmse_u = lead_losses(uncorrected, refs, grid, kb, weights)
        provenance = dataset.model
    finally:
        dataset.close()
    ratio = [c / u if u > 0 else math.nan for c, u in zip(loss_c, loss_u)]
    result = {
        "run": str(run), "checkpoint": body["path"], "epoch": int(body["epoch"]),
        "certificate": (body.get("certificate") or {}).get("id"),
        "data": str(settings.data), "data_model": provenance["description"],
        "physics": f"pompy {trained.physics.core} core at dti = {model.config.dti:g} s",
        "members": chosen, "cycles": cycles, "training_horizon": horizon,
        "lead_seconds": lead, "ratio_to_baseline": ratio,
        "corrected_loss": loss_c, "uncorrected_loss": loss_u,
        "rmse": {"corrected": rmse_c, "uncorrected": rmse_u},
    }
    write_files(Path(run), result)
    worst = int(np.nanargmax(ratio))
    print(f"pompy evaluate: {len(chosen)} held-out member(s) {chosen}, {cycles} cycles: "
          f"ratio_to_baseline {', '.join(f'{r:.3g}' for r in ratio)}", file=log)
    print(f"pompy evaluate: worst ratio_to_baseline {ratio[worst]:.4g} at lead "
          f"{lead[worst]:g} s (cycle {worst + 1}); wrote "
          f"{', '.join(str(Path(run) / f) for f in FILES)}", file=log, flush=True)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings_layer.add_arguments(parser, EvaluateSettings, print_config=False)


def run_command(args: argparse.Namespace) -> int:
    """The command's handler: 0 done, 3 a rollout blew up; InputError for bad input."""
    try:
        evaluate(settings_layer.from_parsed(EvaluateSettings, args))
    except ModelStop as stop:
        print(f"pompy: {stop}", file=sys.stderr)
        return 3
    return 0
