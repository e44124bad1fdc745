"""``pompy report RUN``: the page of a training run (RUN, a folder a
trainer wrote: train_log.csv, epoch_log.csv, checkpoints; and what ``pompy
evaluate`` added: evaluation.csv, .png, .json).

Writes ``training_report.html`` (self-contained: figures embedded as PNG)
and ``training_report.json`` in ``--output`` (default RUN): the loss curves
(the mean training loss of each epoch, the test loss, the baseline, the
physics alone, and the ratio of the test loss to it), the evaluation's
figure and table with ``ratio_to_baseline`` by lead time (or a line
saying how to make them), the certificate the run trained under, and the
data's provenance: the model that made the targets, the physics in the
loop, the generation's settings.
"""
from __future__ import annotations

import csv
import io
import json
import math
from html import escape
from pathlib import Path

import netCDF4
import torch

from pompy.errors import InputError
from pompy.report.page import STYLE, html_img, html_table

FILES = ("training_report.html", "training_report.json")
# the dataset attributes shown as its provenance
PROVENANCE = ("target_model", "core", "dti", "config_dti", "members", "days", "every_days",
              "spinup_steps", "perturb", "amplitude", "seed", "source_hash", "torch_version",
              "pompy_version", "history")


def is_training_run(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "train_log.csv").is_file()


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def curves(run: Path) -> dict:
    """By epoch: the mean Train loss and the Test loss of train_log.csv,
    and epoch_log.csv's columns."""
    train, test = {}, {}
    for row in _rows(run / "train_log.csv"):
        table = train if row["Phase"] == "Train" else test
        table.setdefault(int(row["Epoch"]), []).append(_float(row["TotalLoss"]))
    epochs = sorted(set(train) | set(test))
    out = {"epoch": epochs,
           "train_loss": [sum(train.get(e, [math.nan])) / len(train.get(e, [1])) for e in epochs],
           "test_loss": [test[e][0] if e in test else math.nan for e in epochs]}
    log = _rows(run / "epoch_log.csv")
    for column in ("LearningRate", "GradNorm", "SkippedSteps", "WallSeconds", "BaselineLoss",
                   "RatioToBaseline"):
        by = {int(r["Epoch"]): _float(r[column]) for r in log}
        out[column] = [by.get(e, math.nan) for e in epochs]
    return out


def provenance(options: dict) -> dict:
    """The dataset's attributes that say what made it (PROVENANCE), from
    the data the run trained on, where it is still there."""
    from pompy.dataset import dataset_files

    data = options.get("data")
    try:
        path = dataset_files(data)[0]
        with netCDF4.Dataset(path) as ds:
            found = {name: ds.getncattr(name) for name in PROVENANCE if name in ds.ncattrs()}
    except (OSError, ValueError, TypeError, FileNotFoundError):
        return {"data": str(data), "note": "the dataset is not reachable from here"}
    return {"data": str(path), **{k: (v.item() if hasattr(v, "item") else v)
                                  for k, v in found.items()}}


def loss_figure(c: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    a.semilogy(c["epoch"], c["train_loss"], "o-", label="train (mean of the epoch)")
    a.semilogy(c["epoch"], c["test_loss"], "s-", label="test")
    a.semilogy(c["epoch"], c["BaselineLoss"], "k--", label="baseline (the physics alone)")
    a.set(xlabel="epoch", ylabel="weighted loss", title="losses")
    a.legend(fontsize=8)
    b.plot(c["epoch"], c["RatioToBaseline"], "o-", color="k")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set(xlabel="epoch", ylabel="test / baseline", title="ratio to the baseline")
    b.set_ylim(bottom=0)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def make_training_report(run: Path, output: Path | None = None) -> dict:
    """The report's body (written as JSON beside the page)."""
    from pompy.train.checks import latest_checkpoint

    run = Path(run)
    output = run if output is None else Path(output)
    output.mkdir(parents=True, exist_ok=True)
    try:
        body = torch.load(latest_checkpoint(run), map_location="cpu", weights_only=True)
    except InputError:
        body = {}
    options = body.get("options", {})
    c = curves(run)
    evaluation = run / "evaluation.json"
    report = {
        "run": str(run), "epochs": c["epoch"], "curves": c,
        "certificate": body.get("certificate", {}),
        "options": {k: v for k, v in options.items() if not isinstance(v, (dict, list))},
        "provenance": provenance(options) if options else {},
        "evaluation": json.loads(evaluation.read_text()) if evaluation.is_file() else None,
        "latest_epoch": body.get("epoch"),
    }
    (output / FILES[1]).write_text(json.dumps(report, indent=1, default=str) + "\n")
    (output / FILES[0]).write_text(render(report, loss_figure(c), run / "evaluation.png"))
    return report


def render(report: dict, losses_png: bytes, evaluation_png: Path) -> str:
    c, ev = report["curves"], report["evaluation"]
    parts = [(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>pompy training report: "
              f"{escape(report['run'])}</title><style>{STYLE}</style></head><body>"),
             f"<h1>pompy training report: {escape(report['run'])}</h1>",
             "<h2>losses</h2>", html_img(losses_png, "loss curves"),
             html_table(["epoch", "train_loss", "test_loss", "BaselineLoss", "RatioToBaseline",
                     "LearningRate", "GradNorm", "SkippedSteps", "WallSeconds"],
                    [[e, c["train_loss"][i], c["test_loss"][i], c["BaselineLoss"][i],
                      c["RatioToBaseline"][i], c["LearningRate"][i], c["GradNorm"][i],
                      c["SkippedSteps"][i], c["WallSeconds"][i]]
                     for i, e in enumerate(c["epoch"])]),
             "<h2>evaluation</h2>"]
    if ev is None:
        parts.append(f"<p>not evaluated: pompy evaluate {escape(report['run'])} --data DATA</p>")
    else:
        stale = stale_evaluation(ev, report.get("latest_epoch"))
        if stale:
            parts.append(f"<p class='stale'>{escape(stale)}: pompy evaluate "
                         f"{escape(report['run'])} --data DATA --overwrite evaluates it</p>")
        if evaluation_png.is_file():
            parts.append(html_img(evaluation_png.read_bytes(), "evaluation"))
        # an evaluation.json from before the headline measure has none
        headline = ev.get("headline_ratio") or [math.nan] * len(ev["lead_seconds"])
        who = ev.get("members_are") or f"members {ev['members']}"
        parts.append(f"<p>{escape(who)}, "
                     f"{ev['cycles']} correction cycles, checkpoint "
                     f"{escape(ev['checkpoint'])}; worst headline ratio {max(headline):.4g} "
                     f"(geometric mean of corrected over uncorrected RMSE of u, v, t, s, el, "
                     f"ua, va); worst ratio_to_baseline {max(ev['ratio_to_baseline']):.4g}</p>")
        parts.append(html_table(["lead_seconds", "headline_ratio", "ratio_to_baseline",
                                 "corrected_loss", "uncorrected_loss"],
                                [[lead, headline[i], ev["ratio_to_baseline"][i],
                                  ev["corrected_loss"][i], ev["uncorrected_loss"][i]]
                                 for i, lead in enumerate(ev["lead_seconds"])]))
    cert = report["certificate"]
    parts += ["<h2>certificate</h2>",
              html_table(["", "value"], [["id", cert.get("id", "-")],
                                         *([k, str(v)] for k, v in
                                           sorted(cert.get("key", {}).items()))]),
              "<h2>data provenance</h2>",
              html_table(["attribute", "value"], [[k, str(v)] for k, v in
                                              report["provenance"].items()]),
              "<h2>options</h2>",
              html_table(["option", "value"], [[k, str(v)] for k, v in report["options"].items()]),
              "</body></html>"]
    return "\n".join(parts)


def stale_evaluation(evaluation: dict, latest_epoch: int | None) -> str | None:
    """Why ``evaluation`` is not of the run's latest checkpoint (of
    ``latest_epoch``), or None where it is."""
    epoch = evaluation.get("epoch")
    if latest_epoch is None or epoch == latest_epoch:
        return None
    which = "of an unrecorded epoch" if epoch is None else f"of epoch {epoch}"
    return (f"this evaluation is {which} ({evaluation.get('checkpoint', '?')}), not of the "
            f"run's latest checkpoint, epoch {latest_epoch}")


def run_command(run: Path, output: Path | None) -> int:
    report = make_training_report(run, output)
    where = Path(run) if output is None else Path(output)
    ratio = report["curves"]["RatioToBaseline"]
    last = ratio[-1] if ratio else math.nan
    print(f"pompy report: {where / FILES[0]} and {FILES[1]}; {len(report['epochs'])} epochs, "
          f"last test/baseline {last:.4g}" + (
              f", worst ratio_to_baseline {max(report['evaluation']['ratio_to_baseline']):.4g}"
              if report["evaluation"] else ", not evaluated"))
    stale = report["evaluation"] and stale_evaluation(report["evaluation"], report["latest_epoch"])
    if stale:
        print(f"pompy report: {stale}")
    return 0
