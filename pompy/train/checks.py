"""The checks of the trainer's resolved options (pompy.train.options):
every refusal an InputError whose message names the option."""
from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path

from pompy.errors import InputError
from pompy.train.losses import LOSS_FIELDS, LOSS_WEIGHTS

# pom2k parameters --learn accepts (positive reals the routines take as tensors)
LEARNABLE = ("horcon", "tprni", "umol", "z0b", "cbcmin")
_COUNTS = ("batch_size", "epochs", "horizon", "steps_per_correction", "hidden_channels",
           "normalizer_samples")
_POSITIVE = ("lr", "correction_scale", "loss_display_scale", "physics_step_seconds")


def parse_loss_weights(text: str) -> dict[str, float]:
    """LOSS_WEIGHTS with the changes ``NAME=WEIGHT,...`` of ``text``."""
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
    """The names of ``--learn NAME,...``, each in LEARNABLE, once."""
    names = [s.strip().lower() for s in str(text or "").split(",") if s.strip()]
    for name in names:
        if name not in LEARNABLE:
            raise InputError(f"--learn {text}: {name!r} cannot be learned; one of "
                             f"{', '.join(LEARNABLE)}")
    if len(set(names)) != len(names):
        raise InputError(f"--learn {text}: a name given twice")
    return names


def parse_physics_checkpoint(text: str) -> tuple[str | None, int | None]:
    """``--physics_checkpoint``: the core's checkpoint kind (None, "routines"
    or "steps") and, for steps, the steps per outer segment (1: one level)."""
    kind, sep, count = str(text).partition(":")
    if kind in ("none", "routines") and not sep:
        return (None if kind == "none" else kind), None
    if kind == "steps" and (not sep or count.isdigit() and int(count) >= 1):
        return "steps", int(count) if sep else 1
    raise InputError(f"--physics_checkpoint {text}: none, routines, steps or steps:K "
                     "(K >= 1 steps per segment)")


def _check_numbers(a: argparse.Namespace) -> None:
    for name in _COUNTS:
        if int(getattr(a, name)) < 1:
            raise InputError(f"--{name} {getattr(a, name)}: must be >= 1")
    for name in _POSITIVE:
        value = float(getattr(a, name))
        if not math.isfinite(value) or value < 0 or (value == 0 and name != "correction_scale"):
            raise InputError(f"--{name} {value}: must be finite and > 0")
    if not 0 <= float(a.test_fraction) < 1:
        raise InputError(f"--test_fraction {a.test_fraction}: in [0, 1)")


def check_options(a: argparse.Namespace, choices: Mapping[str, tuple[str, ...]]) -> None:
    """Refuse what cannot train (values from the &train group are checked
    here alone); add ``loss_weights_table`` and ``learn_names``."""
    if a.data is None or a.output is None:
        raise InputError("--data and --output are required (or set them in &train)")
    a.data, a.output = Path(a.data), Path(a.output)
    if a.resume is True:                     # --resume alone: the latest checkpoint
        a.resume = latest_checkpoint(a.output)
    _check_numbers(a)
    for name, allowed in choices.items():
        if getattr(a, name) not in allowed:
            raise InputError(f"--{name} {getattr(a, name)}: {' or '.join(allowed)}")
    if not math.isclose(a.steps_per_correction * a.physics_step_seconds, a.target_time_per_step,
                        rel_tol=1e-12):
        raise InputError(f"target_time_per_step={a.target_time_per_step} s is not "
                         f"steps_per_correction x physics_step_seconds = "
                         f"{a.steps_per_correction} x {a.physics_step_seconds} s")
    if not (a.encoder or a.decoder or a.learn):
        raise InputError("nothing to train: no encoder, no decoder and no --learn")
    if parse_physics_checkpoint(a.physics_checkpoint)[0] is not None and a.compile:
        raise InputError(f"--compile and --physics_checkpoint {a.physics_checkpoint} do not go "
                         "together: a compiled step's backward keeps what it saves; drop one")
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


def latest_checkpoint(folder: Path) -> Path:
    """The checkpoint ``--resume`` alone continues from: --output's
    checkpoint_last.pt, else its checkpoint_epoch<E>.pt of the largest E;
    InputError if it holds none."""
    last = folder / "checkpoint_last.pt"
    if last.is_file():
        return last
    epochs = [(int(p.stem[len("checkpoint_epoch"):]), p) for p in folder.glob("checkpoint_epoch*.pt")
              if p.stem[len("checkpoint_epoch"):].isdigit()] if folder.is_dir() else []
    if not epochs:
        raise InputError(f"--resume: --output {folder} holds no checkpoint (checkpoint_last.pt "
                         "or checkpoint_epoch<E>.pt) to continue from; give --resume FILE, or "
                         "start without --resume")
    return max(epochs)[1]
