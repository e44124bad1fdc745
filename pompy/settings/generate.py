"""``pompy generate``'s settings (and the config's ``&generate`` group), in
sections: the schedule, the reference that makes the trajectories, the
ensemble's members and the files."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pompy import cores
from pompy.config import CASE_PARAMS, GENERATE_GROUP
from pompy.errors import InputError
from pompy.settings.base import (a_seed, at_least, dtype_setting, non_negative, non_negative_days,
                                 non_negative_seconds, positive_days, setting)

PERTURBATIONS = ("ic", "wind", "params")
# --amplitude of each kind when not given
DEFAULT_AMPLITUDES = {"ic": 0.01,      # degC: well below the seamount's vertical T contrast (~15 degC)
                      "wind": 0.1,     # relative: member wind factors of about 1 +- 0.1
                      "params": 0.0}   # unused: --ranges says how far params members go
# the seamount's case parameters a params member draws, by default: pom2k's
# values (inflow 0.2, strat_amplitude 15, seamount_height 0.9, wind 1) inside,
# members differing by tens of percent of the flow (docs/training.md)
DEFAULT_RANGES = "inflow=0.1:0.3,strat_amplitude=10:20,seamount_height=0.6:0.95,wind_factor=0:2"


def parse_ranges(text: str) -> dict[str, tuple[float, float]]:
    """``inflow=0.1:0.3,strat_amplitude=8:22``: each case parameter's range
    (low <= high, each once, CASE_PARAMS only), in the order given;
    InputError naming what is wrong."""
    ranges: dict[str, tuple[float, float]] = {}
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        name, _, span = item.partition("=")
        low, _, high = span.partition(":")
        try:
            values = (float(low), float(high))
        except ValueError:
            values = ()
        if name.strip() not in CASE_PARAMS or name.strip() in ranges or len(values) != 2 \
                or not values[0] <= values[1]:
            raise InputError(f"--ranges {text}: NAME=LOW:HIGH,... with LOW <= HIGH, each name "
                             f"once, of {', '.join(CASE_PARAMS)} ({item!r})")
        ranges[name.strip()] = values
    if not ranges:
        raise InputError(f"--ranges {text}: name at least one of {', '.join(CASE_PARAMS)}")
    return ranges


def _core(v: str) -> str | None:
    return None if v in cores.CORES else f"one of {', '.join(cores.CORES)}"


@dataclass(frozen=True)
class GenerateSchedule:
    days: float | None = setting(None, "model days each member runs (a whole number of --every)",
                                 check=positive_days)
    every: float | None = setting(None, "days between snapshots (a whole number of the "
                                  "reference's dti; for training, one correction cycle)",
                                  check=positive_days, metavar="E")
    spinup: float = setting(0.0, "days the reference runs from the set-up (and the "
                            "perturbation) before the first snapshot, unrecorded: the data then "
                            "starts from a spun-up state (a whole number of the reference's dti)",
                            check=non_negative_days)
    spinup_spread: float = setting(0.0, "--perturb params: days over which the members' "
                                   "spin-ups spread (each member runs spinup plus a drawn "
                                   "offset, up to this many days in whole steps of the "
                                   "reference's dti), so that their windows lie along the "
                                   "flow's evolution",
                                   check=non_negative_days)
    starts_every: int = setting(1, "snapshots between the starts of samples: snapshot n "
                                "holds the whole state (what a core restarts from) where n "
                                "is a multiple of it, the others only the fields a trainer "
                                "scores (1: every snapshot whole)", check=at_least(1),
                                metavar="K")


@dataclass(frozen=True)
class ReferenceModel:
    core: str = setting(cores.DEFAULT, "the reference core that makes the trajectories ("
                        f"{', '.join(cores.NAMES)})", check=_core, metavar="CORE")
    reference_dti: float = setting(0.0, "the reference's internal step dti in s (0: the "
                                   "config's dte*isplit); the physics that trains on the data "
                                   "keeps the config's", check=non_negative_seconds)
    reference_dte: float = setting(0.0, "the reference's external step dte in s (0: the "
                                   "config's dte); isplit = reference_dti / dte, a whole number",
                                   check=non_negative_seconds)
    refine: int = setting(1, "the reference's grid: 1, the config's; 2, nested 2 x 2 in the "
                          "config's and coarse-grained onto it (the seamount only; "
                          "pompy.generate.refine)", choices=(1, 2))
    device: str = setting("cpu", "torch device: cpu, cuda (cuda:LOCAL_RANK under torchrun), "
                          "cuda:N")
    dtype: str = dtype_setting("precision of the core (stored as float64)")
    compile: bool = setting(False, "run the core's steps as whole torch.compile graphs, the "
                            "members one after another (faster on the CPU; the first run of a "
                            "grid compiles for minutes, later ones load Inductor's cache)",
                            flag_only=True)


@dataclass(frozen=True)
class EnsembleMembers:
    members: int = setting(1, "ensemble size N", check=at_least(1))
    perturb: str = setting("ic", "perturbation of members m > 0 (ic: initial temperature noise; "
                           "wind: a wind stress factor per member; params: the case's "
                           "parameters drawn in --ranges, and a spin-up offset)",
                           choices=PERTURBATIONS)
    ranges: str = setting(DEFAULT_RANGES, "--perturb params: the range each case parameter "
                          "is drawn in, NAME=LOW:HIGH,... (inflow, strat_amplitude, "
                          "seamount_height, wind_factor)", metavar="RANGES",
                          check=lambda v: parse_ranges(v) and None)
    amplitude: float | None = setting(None, "perturbation amplitude: degC for ic (default "
                                      f"{DEFAULT_AMPLITUDES['ic']}), relative for wind (default "
                                      f"{DEFAULT_AMPLITUDES['wind']})", check=non_negative)
    seed: int = setting(0, "ensemble seed S", check=a_seed)


@dataclass(frozen=True)
class DatasetFiles:
    output: Path = setting(None, "folder of the dataset file", flag_only=True, required=True,
                           metavar="DIR")
    overwrite: bool = setting(False, "replace an existing dataset file", flag_only=True)
    resume: bool = setting(False, "continue the generation an interrupt (SIGINT, SIGTERM) "
                           "stopped, from the snapshots its DIR/dataset.nc.partial kept, to the "
                           "same bits as an uninterrupted run (the same settings)",
                           flag_only=True)
    force: bool = setting(False, "run even if the estimated memory or disk space is short",
                          flag_only=True)


@dataclass(frozen=True)
class GenerateSettings:
    """Everything ``pompy generate`` is given (its config's pom2k parameters aside)."""
    GROUP: ClassVar[str] = GENERATE_GROUP
    config: Path = setting(None, "Fortran namelist with pom2k parameter names (and a &generate "
                           "group of the settings below)", positional=True, required=True,
                           metavar="CONFIG.nml")
    overrides: tuple[str, ...] = setting((), "override one parameter, value as in a namelist "
                                         "(repeatable)", flag="--set", append=True,
                                         flag_only=True, metavar="NAME=VALUE")
    schedule: GenerateSchedule = GenerateSchedule()
    reference: ReferenceModel = ReferenceModel()
    ensemble: EnsembleMembers = EnsembleMembers()
    files: DatasetFiles = DatasetFiles()

    def checked(self) -> GenerateSettings:
        """days and every given; the amplitude of the perturbation's kind by default."""
        for name in ("days", "every"):
            if getattr(self.schedule, name) is None:
                raise InputError(f"--{name}: give it, or set {name} in the config's "
                                 f"&{GENERATE_GROUP} group")
        if self.ensemble.amplitude is None:
            ensemble = dataclasses.replace(self.ensemble,
                                          amplitude=DEFAULT_AMPLITUDES[self.ensemble.perturb])
            return dataclasses.replace(self, ensemble=ensemble)
        return self
