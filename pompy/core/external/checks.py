"""The stop checks a free-surface part reports, and the velocity check
every part shares.

A part's ``external_mode`` leaves its check values in the state under the
names of its ``checks``; the core takes them out, reads those of ``read``
from the device in one go on a checked step (the others stay tensors
until a stop needs them), and asks the part:

    part.within(config, values)        whether the step may go on: a bool
                                       tensor of the values as tensors (no
                                       read), or a bool of the values read
    part.failure(iint, config, values) the stop (pompy.errors.ModelStop) of
                                       a step that is not within, or None
                                       when the part's own checks passed

pom2k's check is the velocity check (vamax > vmaxl stops the run): every
part makes it (:func:`vel_check`) and adds its own (the implicit part its
solver's residual).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import Tensor

from pompy.config import Config
from pompy.errors import CFLViolation
from pompy.ops import host

VELOCITY = ("vamax", "imax", "jmax")     # the velocity check's values in a state


def vel_check(vaf: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """max |vaf| and pom2k's (imax, jmax): the last point, in Fortran order,
    where it is reached. Tensors: no host synchronisation (0-d arrays of
    a host array, pompy.ops.host)."""
    im, jm = vaf.shape
    if host(vaf):
        a = np.abs(vaf).T[::-1, ::-1].reshape(-1)
        back = np.argmax(a)             # the first maximum, as torch.max's (a NaN's, first)
        return np.asarray(a[back]), np.asarray(im - back % im), np.asarray(jm - back // im)
    a = vaf.detach().abs()
    # the values in Fortran order (i fastest) read from the end: the first
    # maximum there (torch.max's index) is pom2k's last
    vamax, back = torch.max(a.t().flip((0, 1)).reshape(-1), 0)
    return vamax, im - back % im, jm - back // im


def as_float64(value):
    """A tensor in float64 (a value read from the device already is one):
    the checks compare what a checked step reads, whatever the dtype."""
    return value.double() if torch.is_tensor(value) else value


def velocity_within(config: Config, values: Mapping):
    """vamax <= vmaxl (a NaN fails)."""
    return as_float64(values["vamax"]) <= config.vmaxl


def velocity_failure(iint: int, config: Config, values: Mapping, field: str
                     ) -> CFLViolation | None:
    """pom2k's stop when vamax > vmaxl, at (imax, jmax) of ``field``."""
    if values["vamax"] > config.vmaxl:
        return CFLViolation(iint, values["vamax"], int(values["imax"]), int(values["jmax"]),
                            config.vmaxl, field=field)
    return None
