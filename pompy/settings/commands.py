"""The settings of ``pompy evaluate`` and ``pompy verify`` (neither has a
namelist group: their parameters are the run's or the config's)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pompy import cores
from pompy.errors import InputError
from pompy.settings.base import a_seed, at_least, dtype_setting, setting


def member_list(text: str) -> tuple[int, ...]:
    """``--members 3,5``: member numbers, each >= 0, once."""
    try:
        members = tuple(int(s) for s in str(text).split(",") if s.strip())
    except ValueError:
        members = ()
    if not members or min(members) < 0 or len(set(members)) != len(members):
        raise InputError(f"--members {text}: member numbers M,... (each >= 0, once)")
    return members


@dataclass(frozen=True)
class EvaluateSettings:
    """What ``pompy evaluate`` is given; the model's settings are the run's."""
    GROUP: ClassVar[None] = None
    run: Path = setting(None, "a training run's --output folder (its checkpoints)",
                        positional=True, required=True, metavar="RUN")
    data: Path = setting(None, "a pompy generate dataset of the run's grid, the reference's "
                         "snapshots one correction cycle apart", required=True, metavar="DATA")
    cycles: int | None = setting(None, "correction cycles rolled out (default 4 x the run's "
                                 "horizon, as many as the members' snapshots allow)",
                                 check=at_least(1), metavar="N")
    members: str | None = setting(None, "the members to roll out (default the run's test "
                                  "split, its held-out members)", metavar="M,...",
                                  check=lambda v: member_list(v) and None)
    checkpoint: Path | None = setting(None, "the checkpoint to evaluate (default "
                                      "RUN/checkpoint_last.pt)", metavar="FILE")
    config: Path | None = setting(None, "the run's config, where its own path is not found from "
                                  "here", metavar="CONFIG.nml")
    output: Path | None = setting(None, "folder of evaluation.csv, .json and .png (default "
                                  "RUN)", metavar="DIR")
    overwrite: bool = setting(False, "replace an earlier evaluation's files in --output",
                              flag_only=True)

    @property
    def member_numbers(self) -> tuple[int, ...] | None:
        return member_list(self.members) if self.members else None

    def checked(self) -> EvaluateSettings:
        return self


# what `pompy verify` runs when not told otherwise
DEFAULT_SAMPLES = 2
DEFAULT_STEPS = 12


@dataclass(frozen=True)
class VerifySettings:
    """What ``pompy verify`` is given."""
    GROUP: ClassVar[None] = None
    config: Path | None = setting(None, "the grid and parameters to verify on", positional=True,
                                  metavar="CONFIG.nml")
    overrides: tuple[str, ...] = setting((), "override one parameter, value as in a namelist "
                                         "(repeatable)", flag="--set", append=True,
                                         metavar="NAME=VALUE")
    core: str = setting(cores.DEFAULT, "the torch core to verify", choices=cores.NAMES)
    device: str = setting("cpu", "torch device: cpu, cuda, cuda:N")
    dtype: str = dtype_setting("precision of the core (gradients are checked in float64)")
    samples: int = setting(DEFAULT_SAMPLES, "random states per routine", check=at_least(1))
    steps: int = setting(DEFAULT_STEPS, "internal steps of the whole run against the oracle",
                         check=at_least(1))
    seed: int = setting(0, "first random state's seed, 0 .. 2**32-1", check=a_seed)
    force: bool = setting(False, "verify even if a run on the grid would not fit in the memory",
                          flag_only=True)

    def checked(self) -> VerifySettings:
        if self.config is None:
            raise InputError("pompy verify: give the config to verify on: pompy verify CONFIG.nml")
        return self
