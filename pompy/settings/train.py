"""The trainer's settings (``pompy train``, ``python -m pompy.train`` and
the config's ``&train`` group), in sections as the trainer's parts take
them: data, model, optimizer, physics, checkpoint, log."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pompy import cores
from pompy.config import TRAIN_GROUP
from pompy.errors import InputError
from pompy.settings.base import (at_least, dtype_setting, flat, from_values, leaves, non_negative, positive,
                                 a_seed, setting)
from pompy.train.checks import latest_checkpoint
from pompy.train.losses import LOSS_FIELDS, LOSS_WEIGHTS

# pom2k parameters --learn accepts (positive reals the routines take as tensors)
LEARNABLE = ("horcon", "tprni", "umol", "z0b", "cbcmin")


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


def parse_learn(text: str) -> tuple[str, ...]:
    """The names of ``--learn NAME,...``, each in LEARNABLE, once."""
    names = [s.strip().lower() for s in str(text or "").split(",") if s.strip()]
    for name in names:
        if name not in LEARNABLE:
            raise InputError(f"--learn {text}: {name!r} cannot be learned; one of "
                             f"{', '.join(LEARNABLE)}")
    if len(set(names)) != len(names):
        raise InputError(f"--learn {text}: a name given twice")
    return tuple(names)


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


def _fraction(v: float) -> str | None:
    return None if 0 <= v < 1 else "in [0, 1)"


def _core(v: str) -> str | None:
    return None if v in cores.CORES else f"one of {', '.join(cores.CORES)}"


@dataclass(frozen=True)
class Data:
    data: Path | None = setting(None, "a pompy generate dataset (folder or files), its snapshots "
                                "one correction cycle (steps_per_correction x the config's dti) "
                                "apart; this or &train's data is required", metavar="DIR")
    horizon: int = setting(2, "correction cycles per sample (its target snapshots)",
                           check=at_least(1))
    pushforward: int = setting(0, "cycles each sample first runs through the hybrid without "
                               "gradients (its own corrections included), the loss on the "
                               "horizon's cycles after them: training from the states the "
                               "hybrid makes, not the reference's alone", check=at_least(0))
    steps_per_correction: int = setting(2, "physics steps of the config's dti per correction "
                                        "cycle", check=at_least(1))
    batch_size: int = setting(1, "samples per batch on each process", check=at_least(1))
    test_fraction: float = setting(0.25, "fraction of the members, the last ones, kept for the "
                                   "test phase, in [0, 1)", check=_fraction)
    normalizer_samples: int = setting(64, "training samples, evenly spread, the normaliser is "
                                      "fitted on", check=at_least(1))


CORRECTION_FORMS = ("state", "both_levels", "tendency")
# the fields the networks see and may correct (pompy.variables' "packed")
PACKED_FIELDS = ("u", "v", "t", "s", "el", "ua", "va", "uab", "vab")


def parse_corrected(text: str) -> tuple[str, ...]:
    """``u,v,t``: packed field names, each once (empty: all of them)."""
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    unknown = [n for n in names if n not in PACKED_FIELDS]
    if unknown or len(set(names)) != len(names):
        raise InputError(f"--corrected {text}: NAME,... of {', '.join(PACKED_FIELDS)}, each once")
    return names or PACKED_FIELDS


@dataclass(frozen=True)
class Model:
    encoder: bool = setting(True, "a CorrectorNet correcting the state before each cycle's "
                            "physics")
    decoder: bool = setting(True, "a CorrectorNet correcting the state after each cycle's "
                            "physics")
    hidden_channels: int = setting(32, "channels of the CorrectorNets' full-resolution blocks "
                                   "(twice that downsampled)", check=at_least(1))
    norm: str = setting("batch", "the CorrectorNets' normalisation: batch (SyncBatchNorm: "
                        "running statistics in the test phase) or group (GroupNorm per sample, "
                        "the same in both phases)", choices=("batch", "group"))
    correction_scale: float = setting(1e-3, "a correction adds scale x the channel's std x the "
                                      "network's output on the wet points (0: the physics "
                                      "alone)", check=non_negative)
    zero_head: bool = setting(False, "the CorrectorNets' last layer starts at zero: the hybrid "
                              "starts as the physics alone (default: torch's initialisation, "
                              "whose first corrections are noise)")
    corrected: str = setting("", "the fields a correction changes, NAME,... of the packed "
                             f"fields ({', '.join(PACKED_FIELDS)}; default all): the networks "
                             "still see every channel", check=lambda v: parse_corrected(v) and None)
    correction_form: str = setting("state", "how a correction enters the state: state (the "
                                   "packed fields' current levels, uab and vab their own "
                                   "channels) or both_levels (each field's increment added to "
                                   "its previous level too, u and ub, t and tb, el and elb, ua "
                                   "and uab, ...: the leapfrog pair's difference, its "
                                   "tendency, unchanged) or tendency (the decoder's increment "
                                   "spread over the cycle's physics steps, a share after each, "
                                   "on both levels)", choices=CORRECTION_FORMS)
    learn: str = setting("", "pom2k parameters trained too, NAME,... of "
                         f"{', '.join(LEARNABLE)} (each exp of a learned log)",
                         check=lambda v: parse_learn(v) and None)
    amp: str = setting("none", "bf16: the networks alone under bfloat16 autocast (their weights "
                       "float32)", choices=("none", "bf16"))

    @property
    def learn_names(self) -> tuple[str, ...]:
        return parse_learn(self.learn)

    @property
    def corrected_fields(self) -> tuple[str, ...]:
        return parse_corrected(self.corrected)


@dataclass(frozen=True)
class Optimizer:
    lr: float = setting(1e-4, "Adam's initial learning rate (cosine-annealed to 1e-7 over the "
                        "epochs)", check=positive)
    epochs: int = setting(1, "epochs: each the training split, the test split, a checkpoint",
                          check=at_least(1))
    grad_clip_norm: float = setting(1.0, "largest global gradient norm; <= 0: no clipping (a "
                                    "non-finite gradient still skips the step)")
    loss_weights: str = setting("", "changes to the per-field loss weights (pompy.train.losses."
                                "LOSS_WEIGHTS), NAME=WEIGHT,... (e.g. u=10,el=20)",
                                check=lambda v: parse_loss_weights(v) and None)
    loss_display_scale: float = setting(1.0, "factor on the total loss and the logged "
                                        "per-field losses", check=positive)
    seed: int = setting(0, "seed of the initial weights (the same on every rank) and of the "
                        "sampler's shuffling", check=a_seed)

    @property
    def weights(self) -> dict[str, float]:
        """The loss weight of each field (LOSS_WEIGHTS with --loss_weights' changes)."""
        return parse_loss_weights(self.loss_weights)

    @property
    def clip(self) -> float:
        """The clipping norm (inf: none)."""
        return self.grad_clip_norm if self.grad_clip_norm > 0 else math.inf


@dataclass(frozen=True)
class Physics:
    core: str = setting(cores.TRAINING, "the verified torch core the physics runs on ("
                        f"{', '.join(cores.NAMES)})", check=_core, metavar="CORE")
    dtype: str = dtype_setting("the core's precision (its certificate's)")
    device: str = setting("cpu", "torch device: cpu, or cuda (each rank on cuda:LOCAL_RANK)")
    physics_checkpoint: str = setting(
        "none", "the physics' autograd memory: none; routines (the heavy routines, turbulence, "
        "tracers and momentum, recomputed in the backward pass); steps (every physics step's "
        "saved tensors recomputed); or steps:K (two levels: segments of K steps, then their "
        "steps). The same gradients to the bit", metavar="{none,routines,steps,steps:K}",
        check=lambda v: parse_physics_checkpoint(v) and None)
    compile: bool = setting(False, "the physics as whole-step compiled graphs (torch.compile, "
                            "their backward traced too: the explicit core's recorded steps; the "
                            "implicit core's run eagerly but for the test phase's), the gradient "
                            "policies decided in the forward pass; minutes of compiling at a "
                            "grid's first run")
    reuse_core_pool: bool = setting(False, "a pool of initialised cores restored to their clean "
                                    "state each batch (else new cores each batch)")

    @property
    def checkpoint_kind(self) -> tuple[str | None, int | None]:
        return parse_physics_checkpoint(self.physics_checkpoint)


@dataclass(frozen=True)
class Checkpoint:
    output: Path | None = setting(None, "folder for train_log.csv and the checkpoints; this or "
                                  "&train's output is required", metavar="DIR")
    resume: Path | None = setting(None, "continue from this checkpoint file (trained under the "
                                  "same certificate); alone: from the latest checkpoint in "
                                  "--output", flag_only=True, metavar="FILE", const=True)
    overwrite: bool = setting(False, "let a fresh run replace an earlier run's log and "
                              "checkpoints in --output")


@dataclass(frozen=True)
class Log:
    progress: bool = setting(True, "progress on rank 0: a bar per epoch on a terminal, in a "
                             "log a line at each tenth of its batches")


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run is given (its config's pom2k parameters aside)."""
    GROUP: ClassVar[str] = TRAIN_GROUP
    # settings that were, and why they went (a config setting them is told)
    RETIRED: ClassVar[dict[str, str]] = {
        "physics_step_seconds": "the physics step is the config's dti = dte*isplit",
        "target_time_per_step": "a correction cycle is steps_per_correction x the config's dti",
    }
    config: Path = setting(None, "namelist: the pom2k parameters and a &train group of these "
                           "settings", flag_only=True, required=True, metavar="CONFIG.nml")
    data: Data = Data()
    model: Model = Model()
    optimizer: Optimizer = Optimizer()
    physics: Physics = Physics()
    checkpoint: Checkpoint = Checkpoint()
    log: Log = Log()

    def checked(self) -> TrainSettings:
        """What needs more than one setting; ``--resume`` alone resolved."""
        if self.data.data is None or self.checkpoint.output is None:
            raise InputError("--data and --output are required (or set them in &train)")
        m = self.model
        if not (m.encoder or m.decoder or m.learn):
            raise InputError("nothing to train: no encoder, no decoder and no --learn")
        if self.physics.checkpoint_kind[0] is not None and self.physics.compile:
            raise InputError(f"--compile and --physics_checkpoint "
                             f"{self.physics.physics_checkpoint} do not go together: a compiled "
                             "step's backward keeps what it saves; drop one")
        if self.checkpoint.resume is True:             # --resume alone: the latest checkpoint
            latest = latest_checkpoint(self.checkpoint.output)
            return dataclasses.replace(
                self, checkpoint=dataclasses.replace(self.checkpoint, resume=latest))
        return self

    def record(self) -> dict[str, Any]:
        """The settings as a checkpoint keeps them (plain values)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in flat(self).items()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrainSettings:
        """The settings of a checkpoint's record (an older checkpoint's
        retired and derived entries dropped), not resuming."""
        known = {leaf.name for leaf in leaves(cls)}
        values = {k: v for k, v in record.items() if k in known}
        return from_values(cls, values | {"resume": None})


__all__ = ["TrainSettings", "Data", "Model", "Optimizer", "Physics", "Checkpoint", "Log",
           "LEARNABLE", "parse_learn", "parse_loss_weights",
           "parse_physics_checkpoint"]
