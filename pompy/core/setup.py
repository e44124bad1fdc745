"""pom2k's set-up, one path for both drivers: a zero state, the IC file's
arrays placed (iproblem 3), pom2k's initialize, the file's output-only
coordinates after; and the external CFL check, which reads that set-up.

    set_up(config)                            torch: float64 CPU tensors
    set_up(config, initialize, zeros, array)  e.g. the oracle: Fortran-ordered numpy
    check_external_cfl(config, state)         dte < the smallest tps over wet points
    check_internal_cfl(config, state)         dti < the internal limit (the implicit core's)

A run sets up once: the driver builds its model (one set-up) and checks the
CFL limit on the model's own state before the first step.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from pompy import icfile, variables
from pompy.config import Config, parameters
from pompy.core import stepping
from pompy.errors import ConfigError


def _torch_zeros(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.float64)


def _torch_array(value: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(value, dtype=np.float64))


def set_up(config: Config, initialize: Callable[[dict, dict], dict] = stepping.initialize,
           zeros: Callable[[tuple[int, ...]], Any] = _torch_zeros,
           array: Callable[[np.ndarray], Any] = _torch_array) -> dict:
    """pom2k's state at iint 0 for ``config``: every variable and work array
    of pompy.variables made by ``zeros``, then ``initialize(state, params)``
    (pom2k's set-up; returns the state); for iproblem 3 the IC file's arrays
    (pompy.icfile) are placed, made by ``array``, before it and its
    output-only coordinates after. By default the torch set-up in float64
    on the CPU."""
    state = {name: zeros(variables.shape(name, config.im, config.jm, config.kb))
             for name in variables.ALL}
    after: dict[str, np.ndarray] = {}
    if config.iproblem == 3:
        ic, after = icfile.split_ic(config)
        state.update({name: array(value) for name, value in ic.items()})
    state = initialize(state, parameters(config))
    state.update({name: array(value) for name, value in after.items()})
    return state


GRID = ("dx", "dy", "h", "fsm", "tps", "east_c", "north_c")


def setup_grid(config: Config) -> dict[str, np.ndarray]:
    """dx, dy, h, fsm, the external CFL time step tps (pom2k's, 0 on land)
    and the corner coordinates east_c, north_c of the config's set-up, as
    float64 numpy arrays indexed (i, j) at [i-1, j-1]."""
    try:
        state = set_up(config)
    except ValueError as err:
        if config.iproblem != 3:
            raise
        raise ConfigError(f"icfile={config.icfile!r}: {err}") from err
    return {name: state[name].numpy() for name in GRID}


def check_external_cfl(config: Config, state: Mapping | None = None) -> None:
    """Reject a dte at or above pom2k's external CFL limit, the smallest tps
    over wet points. ``state`` holds dx, dy, h, fsm and tps (a set-up state,
    tensors or arrays); by default the config's own set-up."""
    grid = setup_grid(config) if state is None else {
        name: np.asarray(torch.as_tensor(state[name]).detach().cpu().double())
        for name in ("dx", "dy", "h", "fsm", "tps")}
    tps = np.where(grid["fsm"] > 0, grid["tps"], np.inf)
    i, j = np.unravel_index(np.argmin(tps), tps.shape)
    limit = tps[i, j]
    if config.dte >= limit:
        raise ConfigError(
            f"dte={config.dte!r} breaks the external CFL limit: dte must be < {limit:.6g} s, the smallest "
            f"tps = 0.5/sqrt(1/dx**2+1/dy**2)/sqrt(grav*(h+small)) over wet points, at (i={i + 1}, j={j + 1}) "
            f"where dx={grid['dx'][i, j]:.6g} m, dy={grid['dy'][i, j]:.6g} m, h={grid['h'][i, j]:.6g} m"
        )


# the internal mode's speed bound C_T = 2 C + U_max of the POM user's guide
# (C ~ 2 m/s the largest internal gravity wave speed, U_max ~ 1 m/s the
# largest advective speed): the implicit core's CFL limit
INTERNAL_SPEED = 5.0


def check_internal_cfl(config: Config, state: Mapping) -> None:
    """Reject a dti at or above the internal (advective) CFL limit,
    0.5/sqrt(1/dx**2+1/dy**2)/C_T over wet points (C_T = INTERNAL_SPEED),
    the one limit of a core whose free surface is implicit."""
    grid = {name: np.asarray(torch.as_tensor(state[name]).detach().cpu().double())
            for name in ("dx", "dy", "fsm")}
    limits = np.where(grid["fsm"] > 0, 0.5 / np.sqrt(1 / grid["dx"] ** 2 + 1 / grid["dy"] ** 2)
                      / INTERNAL_SPEED, np.inf)
    i, j = np.unravel_index(np.argmin(limits), limits.shape)
    if config.dti >= limits[i, j]:
        raise ConfigError(
            f"dti={config.dti!r} s breaks the internal CFL limit: dti must be < {limits[i, j]:.6g} s, "
            f"0.5/sqrt(1/dx**2+1/dy**2)/C_T with C_T = {INTERNAL_SPEED} m/s (internal waves and "
            f"advection), at (i={i + 1}, j={j + 1}) where dx={grid['dx'][i, j]:.6g} m, "
            f"dy={grid['dy'][i, j]:.6g} m")

