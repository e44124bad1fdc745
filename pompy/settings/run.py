"""``pompy run``'s settings, in sections: the model that runs, how long,
its files and its stop checks. The pom2k parameters are the config's
(restart_every and output_every among them: the flags override them)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pompy import cores
from pompy.errors import InputError
from pompy.settings.base import at_least, dtype_setting, non_negative_days, positive_days, setting


@dataclass(frozen=True)
class RunModel:
    core: str = setting(cores.DEFAULT, "the torch core, or the Fortran oracle",
                        choices=cores.RUNNABLE)
    device: str = setting("cpu", "torch device of a torch core: cpu, cuda, cuda:N")
    dtype: str = dtype_setting("precision of a torch core")
    oracle: bool = setting(False, "with --core implicit: its Fortran twin (the explicit Fortran "
                           "driver is --core oracle)", flag_only=True)
    fortran_math: bool = setting(False, "the torch core with pom2k's elementary function values "
                                 "(pompy.compat.fortran_math; CPU float64): bit for bit with "
                                 "Fortran", flag="--fortran-math", flag_only=True)
    compile: bool = setting(False, "run the torch core's steps as whole torch.compile graphs (a "
                            "step about 2.5x faster at 65x49x21 on the CPU; the first run of a "
                            "grid compiles for minutes, later ones load Inductor's cache)",
                            flag_only=True)


@dataclass(frozen=True)
class RunLength:
    steps: int | None = setting(None, "internal steps to run (default: the config's days; a "
                                "continued run goes on to the end the run that wrote the restart "
                                "was heading for)", check=at_least(1), metavar="N")
    days: float | None = setting(None, "model days to run (instead of --steps)",
                                 check=positive_days, metavar="DAYS")


@dataclass(frozen=True)
class RunFiles:
    output: Path | None = setting(None, "output folder (default: output/<config name>)",
                                  metavar="DIR")
    restart: Path | None = setting(None, "continue from a restart file written by an earlier "
                                   "run", metavar="FILE")
    restart_every: float | None = setting(None, "write the restart every DAYS of model time, "
                                          "replacing the last (default: the config's "
                                          "restart_every; 0: at the end only)",
                                          flag="--restart-every", check=non_negative_days,
                                          metavar="DAYS")
    output_every: float | None = setting(None, "one NetCDF output record every DAYS (default: "
                                         "the config's output_every; 0: pom2k's print "
                                         "interval)", flag="--output-every",
                                         check=non_negative_days, metavar="DAYS")
    overwrite: bool = setting(False, "replace the output and restart of an earlier run in the "
                              "output folder (never the restart given to --restart)",
                              flag_only=True)
    force: bool = setting(False, "run even if the estimated memory exceeds what is available, "
                          "or if the restart was made with another core, dtype or state "
                          "parameter (said in the output's history)", flag_only=True)


@dataclass(frozen=True)
class StopChecks:
    no_cfl_check: bool = setting(False, "let a dte at or above the external CFL limit through "
                                 "(the run will blow up)", flag="--no-cfl-check", flag_only=True)
    check_every: int = setting(1, "read the stop checks (velocity, finiteness, the implicit "
                               "solver's residual) from the device every N steps (pom2k's: 1); "
                               "a stop still names the first bad step", flag="--check-every",
                               check=at_least(1), metavar="N")


@dataclass(frozen=True)
class RunSettings:
    """What ``pompy run`` is given besides its config's parameters."""
    GROUP: ClassVar[None] = None
    config: Path = setting(None, "Fortran namelist with pom2k parameter names", positional=True,
                           required=True, metavar="CONFIG.nml")
    overrides: tuple[str, ...] = setting((), "override one parameter, value as in a namelist "
                                         "(repeatable)", flag="--set", append=True,
                                         metavar="NAME=VALUE")
    model: RunModel = RunModel()
    length: RunLength = RunLength()
    files: RunFiles = RunFiles()
    checks: StopChecks = StopChecks()

    def checked(self) -> RunSettings:
        """One of --steps and --days; the output folder by the config's name."""
        if self.length.steps is not None and self.length.days is not None:
            raise InputError(f"--steps {self.length.steps} and --days {self.length.days}: give "
                             "one")
        if self.files.output is None:
            files = dataclasses.replace(self.files, output=Path("output") / self.config.stem)
            return dataclasses.replace(self, files=files)
        return self
