"""The reference and its schedule: the model that makes a dataset's
trajectories (a core at its own internal step, on the config's grid) and
the steps at which its snapshots fall.

A corrector learns the difference between the reference's trajectories
and the physics it corrects (the config's core at the config's dti), so
the reference may step a shorter dti than the config's
(:func:`reference_config`). Snapshots are a whole number of the
reference's dti apart and a run a whole number of snapshot intervals
long (:func:`schedule`): a value that is not is refused with the
nearest valid ones, printed so that they read back valid.
"""
from __future__ import annotations

import dataclasses
import math

from pompy import cores
from pompy.config import Config, ConfigError
from pompy.errors import InputError

# steps (between snapshots, in the run) within this of a whole number count
# as whole: a value printed with the nearest-valid message reads back valid
STEP_TOLERANCE = 1e-4


def _days(steps: int, config: Config) -> str:
    """A number of steps in days, with digits enough to read back within STEP_TOLERANCE."""
    return f"{steps * config.dti / 86400:.{max(6, len(str(steps)) + 5)}g}"


def whole_steps(value: float, unit: float, config: Config, what: str, unit_text: str) -> int:
    """value / unit as a whole number >= 1, else InputError naming the nearest valid values."""
    ratio = value / unit
    n = round(ratio)
    if n >= 1 and abs(ratio - n) <= STEP_TOLERANCE:
        return n
    steps = unit * 86400 / config.dti
    near = [k for k in (math.floor(ratio), math.ceil(ratio)) if k >= 1]
    nearest = " or ".join(dict.fromkeys(_days(round(k * steps), config) for k in near))
    raise InputError(f"{what}: not a multiple of {unit_text}; nearest: {nearest} days")


def schedule(config: Config, days: float, every: float) -> tuple[int, int]:
    """(internal steps between snapshots, snapshots after time 0) for a run of
    ``days`` with a snapshot every ``every`` days; InputError unless every
    is a whole number of dti and days a whole number of every."""
    dti_days = config.dti / 86400
    steps = whole_steps(every, dti_days, config, f"--every {every:g}", f"dti = {config.dti:g} s")
    every_days = steps * dti_days
    records = whole_steps(days, every_days, config, f"--days {days:g}",
                          f"--every = {_days(steps, config)} days ({steps} steps of dti = "
                          f"{config.dti:g} s)")
    return steps, records


def spinup_steps(config: Config, spinup: float) -> int:
    """The internal steps of ``spinup`` days (0: none), a whole number of dti."""
    if spinup <= 0:
        return 0
    return whole_steps(spinup, config.dti / 86400, config, f"spinup {spinup:g}",
                       f"dti = {config.dti:g} s")


def reference_config(config: Config, dti: float = 0.0, dte: float = 0.0) -> Config:
    """The config the reference runs under: ``config`` with the internal
    step ``dti`` (0: the config's) out of external steps of ``dte`` (0:
    the config's dte), isplit = dti / dte a whole number; all else the
    config's. InputError naming a step that does not divide."""
    if not (dti >= 0 and dte >= 0 and math.isfinite(dti) and math.isfinite(dte)):
        raise InputError(f"reference_dti = {dti}, reference_dte = {dte}: >= 0 (0: the config's)")
    if dti == 0 and dte == 0:
        return config
    dti = dti or config.dti
    dte = dte or config.dte
    isplit = round(dti / dte)
    if isplit < 1 or not math.isclose(isplit * dte, dti, rel_tol=1e-12):
        raise InputError(f"reference_dti = {dti:g} s is not a whole number of reference_dte = "
                         f"{dte:g} s; set reference_dte to a divisor of it")
    try:
        return dataclasses.replace(config, dte=dte, isplit=isplit)
    except ConfigError as err:
        raise InputError(f"the reference (dte = {dte:g} s, isplit = {isplit}): {err}") from err


def describe_model(core: str, config: Config, refine: int = 1) -> str:
    """The model that made a dataset's trajectories, in words (``refine``:
    on the config's grid, or nested 2 x 2 in it, pompy.generate.refine)."""
    grid = f"{config.im}x{config.jm}x{config.kb}"
    if refine > 1:
        grid = (f"on the {2 * config.im - 2}x{2 * config.jm - 2}x{config.kb} grid nested "
                f"{refine} x {refine} in the {grid}, coarse-grained onto it")
    return (f"pompy {core} core ({cores.get(core).description}) at dti = {config.dti:g} s "
            f"(dte = {config.dte:g} s x isplit = {config.isplit}), {grid}")
