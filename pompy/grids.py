"""pom2k's analytic grids and bathymetry (seamount, box), and its external CFL time step.

Arrays are numpy float64 of shape (im, jm), indexed as the Fortran is: (i, j) at [i-1, j-1].
iproblem=3 reads its grid from a file at run time, so it has no analytic grid here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pompy.config import Config


def analytic_grid(config: Config) -> dict[str, np.ndarray]:
    """dx, dy, h, fsm, east_c, north_c of pom2k's seamount (iproblem=1) or box (iproblem=2)."""
    if config.iproblem == 1:
        return seamount(config.im, config.jm, config.hmax)
    if config.iproblem == 2:
        return box(config.im, config.jm)
    raise ValueError(f"iproblem={config.iproblem} reads its grid from a file: it has no analytic grid")


def seamount(im: int, jm: int, hmax: float) -> dict[str, np.ndarray]:
    """pom2k seamount: a Gaussian seamount in a channel closed at j=1 and j=jm.

    dx shrinks to delx/2 mid-basin in i, dy likewise in j. The seamount is centred on
    east_c((im+1)/2, j), north_c(i, (jm+1)/2) (integer division), i.e. on a cell's
    west/south face, since east_c/north_c are running sums of dx/dy (see face_coordinates).

    sin is libm's scalar sin (math.sin), as pom2k's j loop uses. The legacy -O3 build
    vectorises the i loop with glibc's SIMD sin (libmvec), so its dx differs from this one by
    up to 9.1e-13 m at some i; dy, fsm, east_c and north_c match it bit for bit, h to 1e-15.
    """
    delh, delx, ra = 0.9, 8000.0, 25000.0
    pi = math.atan(1.0) * 4.0
    sin_i = np.array([math.sin(pi * i / im) for i in range(1, im + 1)])
    sin_j = np.array([math.sin(pi * j / jm) for j in range(1, jm + 1)])
    dx = np.repeat((delx - delx * sin_i / 2.0)[:, None], jm, axis=1)
    dy = np.repeat((delx - delx * sin_j / 2.0)[None, :], im, axis=0)
    east_c, north_c = face_coordinates(dx, dy)
    ic, jc = (im + 1) // 2 - 1, (jm + 1) // 2 - 1
    h = hmax * (1.0 - delh * np.exp(-((east_c - east_c[ic : ic + 1, :]) ** 2
                                      + (north_c - north_c[:, jc : jc + 1]) ** 2) / ra**2))
    h = np.maximum(h, 1.0)  # h < 1 -> 1
    h[:, 0] = h[:, -1] = 1.0  # close the north and south boundaries: a channel
    return dict(dx=dx, dy=dy, h=h, fsm=wet_mask(h), east_c=east_c, north_c=north_c)


def box(im: int, jm: int) -> dict[str, np.ndarray]:
    """pom2k box: uniform 8 km cells, 4500 m deep, walls (h=1) on all four edges."""
    delx, depth = 8000.0, 4500.0
    dx = np.full((im, jm), delx)
    dy = np.full((im, jm), delx)
    h = np.full((im, jm), depth)
    h[:, 0] = h[:, -1] = h[0, :] = h[-1, :] = 1.0
    east_c, north_c = face_coordinates(dx, dy)
    return dict(dx=dx, dy=dy, h=h, fsm=wet_mask(h), east_c=east_c, north_c=north_c)


def face_coordinates(dx: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pom2k east_c, north_c: 0 at i=1 (j=1), then east_c(i) = east_c(i-1) + dx(i-1), likewise north_c."""
    east_c = np.zeros_like(dx)
    east_c[1:] = np.cumsum(dx[:-1], axis=0)
    north_c = np.zeros_like(dy)
    north_c[:, 1:] = np.cumsum(dy[:, :-1], axis=1)
    return east_c, north_c


def wet_mask(h: np.ndarray) -> np.ndarray:
    """pom2k fsm: 1 where h > 1 m (water), 0 on land."""
    return np.where(h > 1.0, 1.0, 0.0)


def external_cfl_timestep(dx: np.ndarray, dy: np.ndarray, h: np.ndarray, fsm: np.ndarray,
                          grav: float, small: float) -> np.ndarray:
    """pom2k tps: the largest stable external time step of each cell (s), 0 on land."""
    return 0.5 / np.sqrt(1.0 / dx**2 + 1.0 / dy**2) / np.sqrt(grav * (h + small)) * fsm
