"""The trainer's options: one table (:data:`OPTIONS`) from which the
command line (``python -m pompy.train`` and ``pompy train``) and the
``&train`` group of the config are both read.

Precedence: an option's default, then the config's ``&train`` group, then
the command line. A namelist value is taken as f90nml reads it (no
conversion), a command-line value as its type parses it.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import f90nml

from pompy import cores
from pompy.config import TRAIN_GROUP, Config, load_config
from pompy.errors import InputError
from pompy.train.checks import LEARNABLE, check_options

DESCRIPTION = ("Train CorrectorNets through a verified pompy core "
               "(one process, or torchrun --nproc_per_node=N).")


@dataclass(frozen=True)
class Option:
    """One training option: its name is the seed's spelling, both the
    command-line flag (``--name``) and, where ``in_namelist``, the name in
    the config's ``&train`` group."""
    name: str
    type: type
    default: object
    help: str
    choices: tuple[str, ...] | None = None
    in_namelist: bool = True           # False: the command line alone sets it
    required: bool = False
    metavar: str | None = None         # None: by its type (_METAVARS)
    const: object = None               # the value of the flag given alone (its value optional)

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def namelist_name(self) -> str | None:
        return self.name if self.in_namelist else None

    def shown_default(self) -> str | None:
        """The default as help shows it (None: nothing to show)."""
        if self.default is None or self.required:
            return None
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return str(self.default) if self.default != "" else "none"


OPTIONS: tuple[Option, ...] = (
    Option("config", Path, None, "namelist: the pom2k parameters and a &train group of these "
           "options", in_namelist=False, required=True, metavar="CONFIG.nml"),
    # --data and --output: the command line or &train (required from one;
    # relative paths, in &train too, from the working directory)
    Option("data", Path, None, "a pompy generate dataset (folder or files), its snapshots "
           "steps_per_correction steps apart (this or &train's data is required)",
           metavar="DIR"),
    Option("output", Path, None, "folder for train_log.csv and the checkpoints (this or "
           "&train's output is required)", metavar="DIR"),
    Option("resume", Path, None, "continue from this checkpoint file (trained under the same "
           "certificate); alone: from the latest checkpoint in --output",
           in_namelist=False, metavar="FILE", const=True),
    Option("batch_size", int, 1, "samples per batch on each process"),
    Option("lr", float, 1e-4, "Adam's initial learning rate (cosine-annealed to 1e-7 over the "
           "epochs)"),
    Option("epochs", int, 1, "epochs: each the training split, the test split, a checkpoint"),
    Option("correction_scale", float, 1e-3, "a correction adds scale x the channel's std x the "
           "network's output on the wet points (0: the physics alone)"),
    Option("grad_clip_norm", float, 1.0, "largest global gradient norm; <= 0: no clipping (a "
           "non-finite gradient still skips the step)"),
    Option("loss_weights", str, "", "changes to the seed's per-field loss weights, "
           "NAME=WEIGHT,... (e.g. u=10,el=20)"),
    Option("loss_display_scale", float, 1.0, "factor on the total loss and the logged per-field "
           "losses"),
    Option("horizon", int, 2, "correction cycles per sample (its target snapshots)"),
    Option("steps_per_correction", int, 2, "physics steps per correction cycle (the dataset's "
           "snapshot spacing)"),
    Option("physics_step_seconds", float, 600.0, "a physics step in seconds: the config's "
           "dti = dte*isplit"),
    Option("target_time_per_step", float, 1200.0, "seconds per correction cycle: "
           "steps_per_correction x physics_step_seconds"),
    Option("physics_checkpoint", str, "none", "the physics' autograd memory: none; routines "
           "(the heavy routines, turbulence, tracers and momentum, recomputed in the backward "
           "pass); steps (every physics step's saved tensors recomputed); or steps:K (two "
           "levels: segments of K steps, then their steps). The same gradients to the bit",
           metavar="{none,routines,steps,steps:K}"),
    Option("compile", bool, False, "the physics as whole-step compiled graphs (torch.compile, "
           "their backward traced too: the explicit core's recorded steps; the implicit core's "
           "run eagerly but for the test phase's), the gradient policies decided in the forward "
           "pass; minutes of compiling at a grid's first run"),
    Option("reuse_core_pool", bool, False, "a pool of initialised cores restored to their clean "
           "state each batch (else new cores each batch)"),
    Option("encoder", bool, True, "a CorrectorNet correcting the state before each cycle's "
           "physics"),
    Option("decoder", bool, True, "a CorrectorNet correcting the state after each cycle's "
           "physics"),
    Option("hidden_channels", int, 32, "channels of the CorrectorNets' full-resolution blocks "
           "(twice that downsampled)"),
    Option("norm", str, "batch", "the CorrectorNets' normalisation: batch (the seed's "
           "SyncBatchNorm: running statistics in the test phase) or group (GroupNorm per "
           "sample, the same in both phases)", choices=("batch", "group")),
    Option("test_fraction", float, 0.25, "fraction of the members, the last ones, kept for the "
           "test phase, in [0, 1)"),
    Option("normalizer_samples", int, 64, "training samples, evenly spread, the normaliser is "
           "fitted on"),
    Option("learn", str, "", "pom2k parameters trained too, NAME,... of "
           f"{', '.join(LEARNABLE)} (each exp of a learned log)"),
    Option("amp", str, "none", "bf16: the networks alone under bfloat16 autocast (their weights "
           "float32)", choices=("none", "bf16")),
    Option("core", str, cores.TRAINING, "the verified torch core the physics runs on",
           choices=cores.NAMES),
    Option("dtype", str, "float64", "the core's precision (its certificate's)",
           choices=("float64", "float32")),
    Option("seed", int, 0, "seed of the initial weights (the same on every rank) and of the "
           "sampler's shuffling"),
    Option("device", str, "cpu", "torch device: cpu, or cuda (each rank on cuda:LOCAL_RANK)"),
    Option("progress", bool, True, "a progress bar per epoch on rank 0"),
    Option("overwrite", bool, False, "let a fresh run replace an earlier run's log and "
           "checkpoints in --output"),
)
NAMELIST = tuple(option.namelist_name for option in OPTIONS if option.in_namelist)
_METAVARS = {int: "N", float: "X", str: "TEXT"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option as a flag; a flag not given parses to None, so that
    the ``&train`` group's value stands."""
    for option in OPTIONS:
        shown = option.shown_default()
        kw = dict(default=None, required=option.required,
                  help=option.help + (f" (default: {shown})" if shown is not None else ""))
        if option.type is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw.update(type=option.type, choices=option.choices,
                      metavar=None if option.choices else option.metavar or _METAVARS[option.type])
            if option.const is not None:
                kw.update(nargs="?", const=option.const)
        parser.add_argument(option.flag, **kw)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pompy.train", description=DESCRIPTION)
    add_arguments(parser)
    return parser


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
        if name not in NAMELIST:
            raise InputError(f"{path}: &{TRAIN_GROUP} has unknown option {name!r}; known: "
                             f"{', '.join(NAMELIST)}")
    return values


def load_model_config(path: str | Path) -> Config:
    """The pom2k config of a training config (load_config leaves the
    ``&train`` group to this module)."""
    return load_config(path)


def resolve_parsed(parsed: argparse.Namespace) -> argparse.Namespace:
    """The options of a parsed command line (other attributes, such as the
    ``pompy`` command's, ignored): defaults, then the config's &train
    group, then the flags given; checked."""
    given = {option.name: getattr(parsed, option.name) for option in OPTIONS}
    merged = {option.name: option.default for option in OPTIONS} | read_train_group(parsed.config)
    merged |= {name: value for name, value in given.items() if value is not None}
    args = argparse.Namespace(**merged)
    check_options(args, {option.name: option.choices for option in OPTIONS if option.choices})
    return args


def resolve_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Options: defaults, then the config's &train group, then the command line."""
    return resolve_parsed(build_parser().parse_args(argv))
