"""pom2k's set-up, one path for both drivers: a zero state, the IC file's
arrays placed (iproblem 3), pom2k's initialize, the file's output-only
coordinates after; and the external CFL check, which reads that set-up.

    set_up(config)                            torch: float64 CPU tensors
    set_up(config, initialize, zeros, array)  e.g. the oracle: Fortran-ordered numpy
    check_external_cfl(config, state)         dte < the smallest tps over wet points
    check_internal_cfl(config, state)         dti < the internal limit (the implicit core's)
    internal_wave_speed(config, state)        c1, the first baroclinic mode's speed

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


def checked_set_up(config: Config) -> dict:
    """:func:`set_up`, an unreadable or inconsistent IC file a ConfigError
    naming it (bad input, not a bug)."""
    try:
        return set_up(config)
    except ValueError as err:
        if config.iproblem != 3:
            raise
        raise ConfigError(f"icfile={config.icfile!r}: {err}") from err


def setup_grid(config: Config) -> dict[str, np.ndarray]:
    """dx, dy, h, fsm, the external CFL time step tps (pom2k's, 0 on land)
    and the corner coordinates east_c, north_c of the config's set-up, as
    float64 numpy arrays indexed (i, j) at [i-1, j-1]."""
    state = checked_set_up(config)
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


# pom2k's internal mode steps internal gravity waves explicitly (leapfrog on
# the C grid: omega dt < 1 with omega up to 2 c1 sqrt(1/dx**2+1/dy**2)),
# so the implicit core's step is bound by the POM user's guide's internal
# limit dti < 1/(C_T sqrt(1/dx**2+1/dy**2)), C_T = 2 c1 + U_max, with c1
# the first baroclinic mode's speed of the set-up's own stratification
# (internal_wave_speed) and U_max a nominal largest current
ADVECTIVE_SPEED = 1.0


def first_mode_speed(n2: np.ndarray, gap: np.ndarray, thick: np.ndarray) -> np.ndarray:
    """c1 (m/s) of the first baroclinic mode of water columns under a rigid
    lid: the largest c with w'' + N**2/c**2 w = 0, w = 0 at the surface and
    the bottom, discretised on pom2k's w levels. n2 (..., n): N**2 (s-2) at
    the n inner interfaces k = 2..kb-1 (negative values count as 0); gap
    (..., n): their spacing D dzz (m); thick (..., n+1): the layers' D dz
    (m). With K w = c**-2 diag(n2 gap) w (K the symmetric second
    difference), c1**2 is the largest eigenvalue of B K^-1 B, B =
    sqrt(diag(n2 gap))."""
    n = n2.shape[-1]
    k = np.zeros(n2.shape + (n,))
    diag = np.arange(n)
    k[..., diag, diag] = 1 / thick[..., :-1] + 1 / thick[..., 1:]
    k[..., diag[1:], diag[:-1]] = k[..., diag[:-1], diag[1:]] = -1 / thick[..., 1:-1]
    b = np.sqrt(np.maximum(n2, 0.0) * gap)
    m = b[..., :, None] * np.linalg.inv(k) * b[..., None, :]
    return np.sqrt(np.maximum(np.linalg.eigvalsh(m)[..., -1], 0.0))


def internal_wave_speed(config: Config, state: Mapping) -> np.ndarray:
    """c1 (m/s, (im, jm), 0 on land) of the set-up ``state``'s stratification
    (t, s at the t levels; h, fsm, z, dz, dzz): N**2 at each inner w level
    from the density difference of the two t levels around it, both taken
    by pom2k's dens at the w level's pressure (the local, adiabatic
    difference that the baroclinic pressure gradient feels)."""
    from pompy.core.density import dens

    p = parameters(config)
    a = {name: torch.as_tensor(state[name]).detach().cpu().double()
         for name in ("t", "s", "h", "fsm", "z", "dz", "dzz")}
    kb = config.kb
    h, fsm = a["h"], a["fsm"]

    def rho(level: slice) -> torch.Tensor:     # k = 2..kbm1's w levels, t and s of ``level``
        pad = torch.zeros_like(a["t"][:, :, :1])
        t, s = (torch.cat([x[:, :, level], pad], 2) for x in (a["t"], a["s"]))
        zw = torch.cat([a["z"][1:kb - 1], a["z"][kb - 1:]])
        return dens(p["grav"], p["rhoref"], p["tbias"], p["sbias"], zw, h, fsm, s, t,
                    torch.zeros_like(t)).rhoo[:, :, :kb - 2]

    depth = h.numpy()[:, :, None]
    gap = depth * a["dzz"].numpy()[:kb - 2]
    n2 = p["grav"] * (rho(slice(1, kb - 1)) - rho(slice(0, kb - 2))).numpy() / np.where(gap > 0, gap, 1)
    thick = depth * a["dz"].numpy()[:kb - 1]
    wet = fsm.numpy() > 0
    c1 = np.zeros(wet.shape)
    c1[wet] = first_mode_speed(n2[wet], gap[wet], thick[wet])
    return c1


def check_internal_cfl(config: Config, state: Mapping | None = None) -> None:
    """Reject a dti at or above the internal CFL limit, 1/(C_T
    sqrt(1/dx**2+1/dy**2)) over wet points with C_T = 2 c1 + U_max
    (c1 = internal_wave_speed, 0 in mode 4 where t and s are held;
    U_max = ADVECTIVE_SPEED): the limit of a core whose free surface is
    implicit. Measured on the 65x49x21 seamount (c1 up to 3.2 m/s, limit
    407 s): pom2k's own split-explicit core and the implicit core both
    blow up at the same step at dti = 540 and 600 s (59 and 45); the
    implicit core runs 10 days at 390 and at 450 s (U_max is the margin).
    ``state``: the config's set-up (tensors or arrays), by default made
    here."""
    state = checked_set_up(config) if state is None else state
    grid = {name: np.asarray(torch.as_tensor(state[name]).detach().cpu().double())
            for name in ("dx", "dy", "fsm")}
    c1 = internal_wave_speed(config, state) if config.mode == 3 else np.zeros_like(grid["fsm"])
    speed = 2 * c1 + ADVECTIVE_SPEED
    limits = np.where(grid["fsm"] > 0, 1 / np.sqrt(1 / grid["dx"] ** 2 + 1 / grid["dy"] ** 2) / speed,
                      np.inf)
    i, j = np.unravel_index(np.argmin(limits), limits.shape)
    if config.dti >= limits[i, j]:
        raise ConfigError(
            f"dti={config.dti!r} s breaks the internal CFL limit: dti must be < {limits[i, j]:.6g} s, "
            f"1/(C_T sqrt(1/dx**2+1/dy**2)) with C_T = 2 c1 + {ADVECTIVE_SPEED} m/s, at "
            f"(i={i + 1}, j={j + 1}) where dx={grid['dx'][i, j]:.6g} m, dy={grid['dy'][i, j]:.6g} m "
            f"and the first internal wave's speed c1={c1[i, j]:.3g} m/s (mode={config.mode}; "
            f"pom2k's internal mode steps internal waves explicitly, whatever the free surface)")
