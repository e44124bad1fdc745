"""``pompy evaluate``: what a trained corrector gains, on held-out members,
over rollouts longer than training's.

    pompy evaluate RUN --data DATA [--cycles N] [--members M,...]
                   [--checkpoint FILE] [--config CONFIG.nml] [--output DIR]

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
of 3-D fields), its ratio (corrected over uncorrected; below 1 the
corrector helps), and the headline: the geometric mean of the ratios of
the state a user looks at, u, v, t, s, el, ua and va at their current time
level. The previous time levels (ub, vb, uab, vab) are shown apart: ub
and vb are the physics' own where the data holds them (pompy.dataset),
but uab and vab are the reference's, one of its own external steps back
against the physics' dti, so part of their difference is one of
definitions, not of the flow.
``ratio_to_baseline`` is, as the trainer logs it, the run's weighted loss
(its loss weights on the per-field masked MSEs) corrected over
uncorrected. It prints the checkpoint and its epoch first; it calls the
members "held-out" only when they are the run's own test members of its
own data; and it says plainly where the headline ratio exceeds 1 and
where a headline field is made more than 10 % worse.

Writes in --output (default RUN): ``evaluation.csv`` (per lead time the
corrected, uncorrected and ratio rows: lead_cycle, lead_seconds, model,
loss, each field's RMSE or ratio, the headline ratio), ``evaluation.png``
(the ratios by lead; the RMSE of el, u, ua and t of both models) and
``evaluation.json`` (the same numbers, the members and what they are to
the run, their case parameters, the checkpoint and its epoch, its
certificate id, the data's provenance); an earlier evaluation's files
there are kept unless ``--overwrite``. Exit 0; bad input: one line
``pompy: ...``, exit 2; a core that blows up: exit 3; a folder that cannot
be written: exit 4, before the rollouts.
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

from pompy import files
from pompy import settings as settings_layer
from pompy import variables
from pompy.config import Config, load_config
from pompy.dataset import SnapshotDataset
from pompy.distributed import Distributed, torch_device
from pompy.driver import Progress, prepare_output
from pompy.errors import InputError, ModelStop
from pompy.settings import EvaluateSettings, TrainSettings
from pompy.train.checkpoint import physics_differences
from pompy.train.checks import latest_checkpoint
from pompy.train.correctors import Correctors
from pompy.train.data import MASKS, Normalizer, collate_samples, open_dataset, split_members
from pompy.train.losses import LOSS_FIELDS
from pompy.train.physics import PhysicsRunner, run_hybrid

DESCRIPTION = __doc__.split("\n\n", 2)[1] + "\n\n" + __doc__.split("\n\n", 2)[2].split(
    "\nWrites in --output")[0]
FILES = ("evaluation.csv", "evaluation.png", "evaluation.json")
# the state a user looks at, at its current time level: the headline
HEADLINE_FIELDS = ("u", "v", "t", "s", "el", "ua", "va")
# the previous time levels, shown apart: ub and vb are the physics' own where
# the data holds them (pompy.dataset), but uab and vab are the reference's,
# one of its own external steps back against the physics' dti, so their
# difference is partly one of definitions (docs/training.md)
B_LEVELS = tuple(n for n in LOSS_FIELDS if n not in HEADLINE_FIELDS)


# ------------------------------------------------------------------ the run's model
def load_run(run: Path, checkpoint: Path | None, config: Path | None
             ) -> tuple[dict, TrainSettings]:
    """(the checkpoint's body, the run's settings) of a training run, the
    device the CPU where the run's GPU is not here; InputError where RUN
    holds none or the config it names cannot be found."""
    if not run.is_dir():
        raise InputError(f"{run}: not a folder (a training run's --output)")
    path = checkpoint if checkpoint is not None else latest_checkpoint(
        run, f"{run} holds no checkpoint (checkpoint_last.pt or checkpoint_epoch<E>.pt): not a "
             "training run's --output folder; give the run's, or --checkpoint FILE")
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
        check_trained_physics(body, self.config, settings.config)
        self.normalizer = Normalizer(n["mean"], n["std"], n["mask"]).checked(
            f"of {self.checkpoint}").to(dist.device)
        self.correctors = Correctors(settings.model, self.config, self.normalizer, dtype, dist,
                                     settings.optimizer.seed)
        self.correctors.load(body["networks"], Path(self.checkpoint))
        self.correctors.set_mode(False)
        self.runner = PhysicsRunner(settings.physics, self.config, dist.device, dtype,
                                    settings.data.steps_per_correction, rank=0)

    def rollout(self, ics: Mapping, cycles: int, corrected: bool,
                members: Sequence[int], progress: Progress | None = None) -> dict:
        """``cycles`` correction cycles from ``ics`` (the initial states of
        ``members``), corrected or the physics alone, each told to
        ``progress``; ModelStop naming the members whose physics stopped."""
        poms = self.runner.borrow(len(ics["iint"]))
        which = "corrected" if corrected else "uncorrected"

        def done(n: int) -> None:
            if progress is not None:
                progress.advance(f"{which} rollout, cycle {n} of {cycles}", rollout=which,
                                 cycle=n)
        preds = run_hybrid(self.runner, self.correctors if corrected else None,
                           self.normalizer, poms, ics, cycles, on_cycle=done)
        failed = [m for m, f in zip(members, self.runner.failed) if f]
        if failed:
            raise ModelStop(f"the {which} physics of "
                            f"member(s) {failed} stopped in the rollout")
        return preds


def check_trained_physics(body: Mapping, config: Config, config_path) -> None:
    """InputError where ``config`` is not the physics the checkpoint was
    trained with: another grid (its networks' shapes), other state
    parameters or gradient policies."""
    channels, jm, im = body["normalizer"]["mask"].shape
    kb = (channels - 5) // 4 + 1
    if (im, jm, kb) != (config.im, config.jm, config.kb):
        raise InputError(f"{body['path']} was trained on the {im}x{jm}x{kb} grid, the config "
                         f"{config_path} is {config.im}x{config.jm}x{config.kb}; evaluate with "
                         "the config it was trained with")
    changed = physics_differences(body, config)
    if changed:
        raise InputError(f"{body['path']} was trained with other physics than the config "
                         f"{config_path}: {'; '.join(changed)}; evaluate with the config it "
                         "was trained with")


# ------------------------------------------------------------------ the rollouts
def _members(dataset: SnapshotDataset, test_fraction: float, chosen: Sequence[int] | None,
             required: bool = True) -> list[int]:
    if chosen:
        unknown = [m for m in chosen if m not in dataset.members]
        if unknown:
            raise InputError(f"--members: {', '.join(map(str, unknown))} not in the data "
                             f"(members {', '.join(map(str, dataset.members))})")
        return list(chosen)
    _, test = split_members(dataset, test_fraction)
    per_member = len(dataset) // len(dataset.members)
    held = sorted({dataset.members[i // per_member] for i in test})
    if not held and required:
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
    progress = Progress(2 * cycles, "pompy evaluate", True, unit="cycle")
    try:
        with torch.no_grad():
            corrected = model.rollout(ics, cycles, True, members, progress)
            uncorrected = model.rollout(ics, cycles, False, members, progress)
    finally:
        progress.close()
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


# ------------------------------------------------------------------ the measure
def field_ratios(rmse_c: Mapping, rmse_u: Mapping) -> dict[str, list[float]]:
    """By field and lead: corrected RMSE over uncorrected (nan where the
    physics alone is exact)."""
    return {name: [c / u if u > 0 else math.nan for c, u in zip(rmse_c[name], rmse_u[name])]
            for name in rmse_c}


def headline(ratios: Mapping[str, Sequence[float]]) -> list[float]:
    """By lead: the geometric mean of HEADLINE_FIELDS' ratios, the one
    figure of the state a user looks at."""
    logs = np.log(np.array([ratios[name] for name in HEADLINE_FIELDS], dtype=np.float64))
    return np.exp(logs.mean(0)).tolist()


def verdicts(result: Mapping) -> list[str]:
    """The lines that say plainly where the corrector makes things worse:
    the headline above 1, and each headline field more than 10 % worse."""
    lines, leads = [], result["lead_cycles"]
    bad = [n for n, r in zip(leads, result["headline_ratio"]) if r > 1]
    if bad:
        lines.append(f"pompy evaluate: WORSE than the physics alone: the headline ratio exceeds 1 "
                     f"at cycle(s) {_cycles(bad)} (the horizon is {result['training_horizon']})")
    for name in HEADLINE_FIELDS:
        worse = [n for n, r in zip(leads, result["field_ratio"][name]) if r > 1.1]
        if worse:
            lines.append(f"pompy evaluate: {name} is made more than 10 % worse at cycle(s) "
                         f"{_cycles(worse)} (worst ratio {max(result['field_ratio'][name]):.3g})")
    return lines


def _cycles(cycles: Sequence[int]) -> str:
    return ", ".join(map(str, cycles)) if len(cycles) <= 6 else \
        f"{cycles[0]}..{cycles[-1]} ({len(cycles)} of them)"


def which_members(settings: EvaluateSettings, trained: TrainSettings, chosen: Sequence[int],
                  held: Sequence[int]) -> str:
    """What the rolled-out members are to the run: its held-out test
    members only when they are its own data's test split."""
    own = Path(settings.data).resolve() == Path(trained.data.data).resolve()
    if not own:
        return f"member(s) {list(chosen)} of other data (not the run's {trained.data.data})"
    if set(chosen) <= set(held):
        return f"held-out member(s) {list(chosen)}"
    seen = sorted(set(chosen) - set(held))
    return (f"member(s) {list(chosen)} of the run's own data, {seen} among its TRAINING "
            "members (not held out)")


# ------------------------------------------------------------------ the files
def write_files(folder: Path, result: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "evaluation.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lead_cycle", "lead_seconds", "model", "loss",
                    *(f"{n}_rmse" for n in LOSS_FIELDS), "headline_ratio"])
        for i, lead in enumerate(result["lead_seconds"]):
            for label in ("corrected", "uncorrected"):
                w.writerow([i + 1, lead, label, repr(result[f"{label}_loss"][i]),
                            *(repr(result["rmse"][label][n][i]) for n in LOSS_FIELDS),
                            repr(result["headline_ratio"][i])])
            w.writerow([i + 1, lead, "ratio", repr(result["ratio_to_baseline"][i]),
                        *(repr(result["field_ratio"][n][i]) for n in LOSS_FIELDS),
                        repr(result["headline_ratio"][i])])
    (folder / "evaluation.json").write_text(json.dumps(result, indent=1) + "\n")
    figure(result, folder / "evaluation.png")


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    lead = np.asarray(result["lead_cycles"])
    fig, axes = plt.subplots(1, 5, figsize=(18, 3.4))
    ax = axes[0]
    for name in HEADLINE_FIELDS:
        ax.plot(lead, result["field_ratio"][name], lw=0.8, label=name)
    ax.plot(lead, result["headline_ratio"], "o-", color="k", lw=2, label="geometric mean")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(result["training_horizon"], color="grey", lw=0.8, ls=":")
    top = max(1.1, np.nanmax(result["headline_ratio"]) * 1.2)
    ax.set_ylim(0, min(top, 5))
    ax.set(xlabel="lead (correction cycles; dotted: the training horizon)",
           ylabel="corrected / uncorrected RMSE", title="headline fields")
    ax.legend(fontsize=6, ncol=2)
    for ax, name in zip(axes[1:], ("el", "u", "ua", "t")):
        for label, style in (("uncorrected", "s--"), ("corrected", "o-")):
            ax.plot(lead, result["rmse"][label][name], style, label=label, ms=3)
        ax.set(xlabel="lead (cycles)", title=f"{name} RMSE ({variables.ALL[name].units})")
        ax.set_ylim(bottom=0)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{result['run']} (epoch {result['epoch']}): {result['members_are']}, against "
                 f"{result['data_model']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------ the command
def evaluate(settings: EvaluateSettings, log=None) -> dict:
    """The evaluation (see the module docstring): its files written in
    --output (default the run's folder); returns the JSON's content."""
    log = sys.stdout if log is None else log
    run = settings.run
    body, trained = load_run(run, settings.checkpoint, settings.config)
    horizon = trained.data.horizon
    cycles = 4 * horizon if settings.cycles is None else settings.cycles
    model = TrainedModel(body, trained)
    print(f"pompy evaluate: {body['path']}, epoch {int(body['epoch'])} (trained on horizon "
          f"{horizon}), {cycles} cycles", file=log, flush=True)
    dataset, grid = open_dataset(settings.data, cycles, LOSS_FIELDS, model.config,
                                 trained.data.steps_per_correction)
    try:
        held = _members(dataset, trained.data.test_fraction, None, required=False)
        chosen = _members(dataset, trained.data.test_fraction, settings.member_numbers)
        # where the files go, checked before the rollouts (an earlier evaluation kept)
        folder = Path(settings.output) if settings.output is not None else Path(run)
        prepare_output(folder, tuple(folder / name for name in FILES), settings.overwrite)
        corrected, uncorrected, refs, lead = rollouts(model, dataset, chosen)
        kb = model.config.kb
        weights = trained.optimizer.weights
        loss_c, rmse_c = lead_losses(corrected, refs, grid, kb, weights)
        loss_u, rmse_u = lead_losses(uncorrected, refs, grid, kb, weights)
        provenance = dataset.model
        cases = {m: dataset.member_case(m) for m in chosen}
    finally:
        dataset.close()
    ratio = [c / u if u > 0 else math.nan for c, u in zip(loss_c, loss_u)]
    ratios = field_ratios(rmse_c, rmse_u)
    result = {
        "run": str(run), "checkpoint": body["path"], "epoch": int(body["epoch"]),
        "certificate": (body.get("certificate") or {}).get("id"),
        "data": str(settings.data), "data_model": provenance["description"],
        "physics": f"pompy {trained.physics.core} core at dti = {model.config.dti:g} s",
        "members": chosen, "members_are": which_members(settings, trained, chosen, held),
        "member_cases": {str(m): c for m, c in cases.items()},
        "cycles": cycles, "training_horizon": horizon,
        "lead_cycles": list(range(1, cycles + 1)), "lead_seconds": lead,
        "headline_fields": list(HEADLINE_FIELDS), "headline_ratio": headline(ratios),
        "field_ratio": ratios, "b_level_fields": list(B_LEVELS),
        "ratio_to_baseline": ratio, "loss_weights": dict(weights),
        "corrected_loss": loss_c, "uncorrected_loss": loss_u,
        "rmse": {"corrected": rmse_c, "uncorrected": rmse_u},
    }
    try:
        write_files(folder, result)
    except OSError as err:              # a full disk, say: the machine's, not the input's
        raise files.fault(folder, err, "writing the evaluation") from None
    _say(result, folder, log)
    return result


def _say(result: dict, folder: Path, log) -> None:
    """The closing lines: the headline by lead, the b levels apart, where
    it is worse, the worst ratio and the files."""
    lead, top = result["lead_seconds"], result["headline_ratio"]
    print(f"pompy evaluate: {result['members_are']}: headline ratio (geometric mean of corrected "
          f"over uncorrected RMSE of {', '.join(HEADLINE_FIELDS)}) by cycle: "
          f"{', '.join(f'{r:.3g}' for r in top)}", file=log)
    print(f"pompy evaluate: b levels apart ({', '.join(B_LEVELS)}; ub, vb the physics' own "
          "where the data holds them, uab, vab the reference's, one of its own external steps "
          "back against the physics' dti): "
          + "; ".join(f"{n} {min(result['field_ratio'][n]):.3g}..{max(result['field_ratio'][n]):.3g}"
                      for n in B_LEVELS), file=log)
    for line in verdicts(result):
        print(line, file=log)
    worst = int(np.nanargmax(top))
    print(f"pompy evaluate: worst headline ratio {top[worst]:.4g} at lead {lead[worst]:g} s "
          f"(cycle {worst + 1}); worst ratio_to_baseline (the run's weighted loss) "
          f"{max(result['ratio_to_baseline']):.4g}; wrote "
          f"{', '.join(str(folder / f) for f in FILES)}", file=log, flush=True)


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
