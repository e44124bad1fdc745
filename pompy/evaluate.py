"""``pompy evaluate``: what a trained corrector gains, on held-out members,
over rollouts longer than training's.

    pompy evaluate RUN --data DATA [--cycles N] [--members M,...]
                   [--checkpoint FILE] [--config CONFIG.nml]

From the initial state (snapshot 0) of each held-out member of DATA (the
members the run kept for its test split, the last ``test_fraction`` of
them; ``--members`` names others), rolls out N correction cycles (default
4 x the run's training horizon) of

- the corrected physics: the trainer's own forward
  (NPOMTrainerDDP.run_physics_multistep, the test phase's: networks in eval
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

from pompy import variables
from pompy.errors import InputError, ModelStop

DESCRIPTION = __doc__.split("\n\n", 2)[1] + "\n\n" + __doc__.split("\n\n", 2)[2].split(
    "\nWrites in RUN")[0]
FILES = ("evaluation.csv", "evaluation.png", "evaluation.json")


# ------------------------------------------------------------------ the run's model
def load_run(run: Path, checkpoint: Path | None, config: Path | None) -> tuple[dict, dict]:
    """(the checkpoint's body, its options) of a training run; InputError
    where RUN holds none or the config it names cannot be found."""
    from pompy.train.checks import latest_checkpoint

    if not run.is_dir():
        raise InputError(f"{run}: not a folder (a training run's --output)")
    path = checkpoint if checkpoint is not None else latest_checkpoint(run)
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
        options = dict(body["options"])
    except FileNotFoundError as err:
        raise InputError(f"--checkpoint {path}: no such file") from err
    except Exception as err:
        raise InputError(f"{path}: not a pompy.train checkpoint ({err})") from err
    options["checkpoint"] = str(path)
    if config is not None:
        options["config"] = str(config)
    if not Path(options["config"]).is_file():
        raise InputError(f"the run's config {options['config']} is not found from here; give "
                         "--config CONFIG.nml")
    return body, options


def _trainer_args(options: Mapping) -> argparse.Namespace:
    """The run's options, resolved as the trainer resolved them."""
    from pompy.train.checks import parse_learn, parse_loss_weights

    args = argparse.Namespace(**{k: v for k, v in options.items()})
    args.config = Path(options["config"])
    args.loss_weights_table = parse_loss_weights(options.get("loss_weights", ""))
    args.learn_names = parse_learn(options.get("learn", ""))
    args.device = "cpu" if str(args.device).startswith("cuda") and not torch.cuda.is_available() \
        else args.device
    return args


def build_model(body: Mapping, options: Mapping):
    """A trainer that runs the run's forward alone (no certificate, no
    process group, no data loader): the checkpoint's normaliser, networks
    (eval mode) and learned parameters, the run's core and config."""
    from pompy import cores
    from pompy.train.checkpoint import load_networks
    from pompy.train.data import Normalizer
    from pompy.train.networks import CorrectorNet, PhysicsParameters
    from pompy.train.options import load_model_config
    from pompy.train.trainer import NPOMTrainerDDP

    class Forward(NPOMTrainerDDP):
        """The trainer's forward with a checkpoint's model (see build_model)."""

        def __init__(self, args: argparse.Namespace):
            self.args = args
            self.local_rank, self.global_rank, self.world_size = 0, 0, 1
            self.is_main, self.distributed, self.training = True, False, False
            self.device = torch.device(args.device)
            self.dtype = getattr(torch, args.dtype)
            self.net_dtype = torch.float32 if args.amp == "bf16" else self.dtype
            self.config = load_model_config(args.config)
            self.core_cls = cores.get(args.core).core
            self.steps_per_correction = int(args.steps_per_correction)
            self.loss_weights = args.loss_weights_table
            self.pool, self.log_file, self.epoch_file = None, None, None

    args = _trainer_args(options)
    model = Forward(args)
    n = body["normalizer"]
    model.normalizer = Normalizer(n["mean"], n["std"], n["mask"]).to(model.device)
    channels = 4 * (model.config.kb - 1) + 5

    def corrector():
        net = CorrectorNet(channels, int(args.hidden_channels), model.normalizer.mask,
                           norm=str(getattr(args, "norm", "batch")))
        return net.to(device=model.device, dtype=model.net_dtype)

    model.encoder = corrector() if args.encoder else None
    model.decoder = corrector() if args.decoder else None
    model.physics = None
    if args.learn_names:
        initial = {name: getattr(model.config, name) for name in args.learn_names}
        model.physics = PhysicsParameters(initial, model.dtype).to(model.device)
    load_networks(body["networks"], model._plain_networks(), Path(options["checkpoint"]))
    model._set_mode(False)
    return model


# ------------------------------------------------------------------ the rollouts
def _members(dataset, test_fraction: float, chosen: Sequence[int] | None) -> list[int]:
    from pompy.train.data import split_members

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


def rollouts(model, dataset, members: Sequence[int]) -> tuple[dict, dict, dict, list[float]]:
    """(corrected, uncorrected) predictions, each {field: (M, N, ...)},
    from snapshot 0 of each member, and the members' reference targets
    {field: (M, N, ...)}; the lead times in seconds."""
    from pompy.train.data import collate_samples

    per_member = len(dataset) // len(dataset.members)
    samples = [dataset[dataset.members.index(m) * per_member] for m in members]
    ics, refs = collate_samples(dataset, samples)
    cycles = refs["u"].shape[1]
    preds = {}
    with torch.no_grad():
        for label, corrected in (("corrected", True), ("uncorrected", False)):
            poms = [model._borrow_poms(1)[0] for _ in members]
            preds[label] = model.run_physics_multistep(poms, ics, cycles, corrected=corrected)
            if any(model.failed):
                bad = [m for m, f in zip(members, model.failed) if f]
                raise ModelStop(f"the {label} physics of member(s) {bad} stopped in the rollout")
    lead = [float(t - samples[0]["time"]) * 86400.0 for t in samples[0]["target_time"]]
    return preds["corrected"], preds["uncorrected"], refs, lead


def lead_losses(preds: Mapping, refs: Mapping, grid: Mapping, kb: int, weights: Mapping,
                ) -> tuple[list[float], dict[str, list[float]]]:
    """By lead time: the weighted loss (the trainer's masked MSEs, summed
    with ``weights``) and each field's RMSE, over the members."""
    from pompy.train.losses import LOSS_FIELDS, MASKS

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
    from pompy.train.losses import LOSS_FIELDS

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
def evaluate(run: Path, data: Path, cycles: int | None = None,
             members: Sequence[int] | None = None, checkpoint: Path | None = None,
             config: Path | None = None, log=None) -> dict:
    """The evaluation (see the module docstring): its files written in
    ``run``; returns the JSON's content."""
    from pompy.train.data import open_dataset
    from pompy.train.losses import LOSS_FIELDS

    log = sys.stdout if log is None else log
    body, options = load_run(Path(run), checkpoint, config)
    horizon = int(options["horizon"])
    cycles = 4 * horizon if cycles is None else int(cycles)
    if cycles < 1:
        raise InputError(f"--cycles {cycles}: must be >= 1")
    model = build_model(body, options)
    dataset, grid = open_dataset(Path(data), cycles, LOSS_FIELDS, model.config,
                                 model.steps_per_correction)
    try:
        chosen = _members(dataset, float(options["test_fraction"]), members)
        corrected, uncorrected, refs, lead = rollouts(model, dataset, chosen)
        kb = model.config.kb
        weights = model.loss_weights
        loss_c, rmse_c = lead_losses(corrected, refs, grid, kb, weights)
        loss_u, rmse_u = lead_losses(uncorrected, refs, grid, kb, weights)
        provenance = dataset.model
    finally:
        dataset.close()
    ratio = [c / u if u > 0 else math.nan for c, u in zip(loss_c, loss_u)]
    result = {
        "run": str(run), "checkpoint": options["checkpoint"], "epoch": int(body["epoch"]),
        "certificate": (body.get("certificate") or {}).get("id"),
        "data": str(data), "data_model": provenance["description"],
        "physics": f"pompy {options['core']} core at dti = {model.config.dti:g} s",
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
    parser.add_argument("run", type=Path, metavar="RUN",
                        help="a training run's folder (its --output)")
    parser.add_argument("--data", type=Path, required=True, metavar="DATA",
                        help="the pompy generate dataset (folder or file) the run trained on")
    parser.add_argument("--cycles", type=int, default=None, metavar="N",
                        help="correction cycles of the rollout (default 4 x the run's horizon)")
    parser.add_argument("--members", type=_member_list, default=None, metavar="M,...",
                        help="the members to roll out (default the run's held-out ones)")
    parser.add_argument("--checkpoint", type=Path, default=None, metavar="FILE",
                        help="the checkpoint (default RUN's latest)")
    parser.add_argument("--config", type=Path, default=None, metavar="CONFIG.nml",
                        help="the run's config, where the path it trained with does not "
                             "reach it from here")


def _member_list(text: str) -> list[int]:
    try:
        members = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        members = []
    if not members or min(members) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of member numbers M,...")
    return members


def run_command(args: argparse.Namespace) -> int:
    """The command's handler: 0 done, 3 a rollout blew up; InputError for bad input."""
    try:
        evaluate(args.run, args.data, args.cycles, args.members, args.checkpoint, args.config)
    except ModelStop as stop:
        print(f"pompy: {stop}", file=sys.stderr)
        return 3
    return 0
