"""The finer-grid reference (``&generate refine = 2``): the reference core
on a grid nested 2 x 2 in the config's, its states coarse-grained back
onto the config's grid, so that what a corrector learns is the physics'
resolution error (a function of the state) rather than the phase of fast
waves (a shorter dti's).

The nesting. Coarse cell I of the config's grid (1-based) is fine cell 1
when I = 1, fine cell 2I-2 when I = im, and fine cells 2I-2 and 2I-1 in
between: the boundary cells (open edges, walls) stay one cell, so the
open boundaries' faces coincide (coarse u-face 2 is fine u-face 2), and
the fine grid is (2im-2) x (2jm-2) x kb on the same sigma levels. A
fine cell's dx, dy are its coarse cell's halved (not at the boundary
cells), its cor the coarse cell's.

The fine grid's set-up (:func:`fine_ic`, an IC file of pompy.icfile run as
iproblem 3) is the seamount's (iproblem 1), made from the member's own
coarse set-up: the depth reconstructed piecewise-linearly with minmod
slopes, in index space, so that each coarse cell is the mean of its fine
cells (the physics' h, to round-off) and no fine depth leaves its
neighbours' range; T and S pom2k's profiles of that depth, rmean their
density (as the seamount's); the inflow, its boundary transports and the
T, S flowing in as the coarse set-up's, the balanced boundary elevations
reconstructed as the depth is (exact for the linear profile). The box
(iproblem 2) is not nested: its atmospheric-pressure tilt and freshwater
inflow are not IC-file fields.

Coarse-graining (:class:`Coarsening`): T-point and W-point fields by
volume (area x d, the column depth h + el, on each sigma level; 2-D
fields and d itself by area), so that volume (el, d) and heat and salt
(t, s) are conserved to round-off; u and v fields face-weighted (over
the fine faces on the coarse face, by their area dy x depth), so the
coarse face carries the fine faces' mean of transport per area; the edge
arrays of the open boundaries by the length of their fine cells.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from pompy import icfile, variables
from pompy.config import Config
from pompy.core import problems
from pompy.core.density import dens
from pompy.errors import InputError

FACTOR = 2       # the only refinement built: 2 x 2 fine cells in each interior coarse cell


def fine_size(n: int) -> int:
    """The fine grid's cells along an axis of ``n`` coarse cells."""
    return FACTOR * n - 2


def coarse_index(n_fine: int) -> np.ndarray:
    """The coarse cell (0-based) of each fine cell (0-based): (f + 1) // 2."""
    return (np.arange(n_fine) + 1) // 2


def first_fine(n: int) -> np.ndarray:
    """Each coarse cell's first fine cell (0-based); its west (south) face
    is the coarse cell's."""
    return np.maximum(2 * np.arange(n) - 1, 0)


def _offsets(n: int) -> np.ndarray:
    """Each fine cell's centre less its coarse cell's, in coarse cells:
    -1/4 and +1/4 inside, 0 at the boundary cells."""
    ci = coarse_index(fine_size(n))
    off = np.where(np.arange(ci.size) == first_fine(n)[ci], -0.25, 0.25)
    return np.where((ci == 0) | (ci == n - 1), 0.0, off)


def _minmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a * b > 0, np.sign(a) * np.minimum(np.abs(a), np.abs(b)), 0.0)


def _slopes(x: np.ndarray, wet: np.ndarray, axis: int) -> np.ndarray:
    """Minmod slopes of x along ``axis`` (per coarse cell), 0 at the
    boundary cells and where the cell or a neighbour is land."""
    x, wet = np.moveaxis(x, axis, 0), np.moveaxis(wet, axis, 0)
    slope = np.zeros_like(x)
    inner = wet[1:-1] & wet[:-2] & wet[2:]
    slope[1:-1] = np.where(inner, _minmod(x[2:] - x[1:-1], x[1:-1] - x[:-2]), 0.0)
    return np.moveaxis(slope, 0, axis)


def reconstruct(x: np.ndarray, wet: np.ndarray) -> np.ndarray:
    """The fine cells' values of the (im, jm) T-point field x: minmod-
    limited piecewise-linear in index space, each coarse cell the mean of
    its fine cells; land and boundary cells copied."""
    im, jm = x.shape
    ci, cj = coarse_index(fine_size(im)), coarse_index(fine_size(jm))
    si, sj = _slopes(x, wet, 0), _slopes(x, wet, 1)
    oi, oj = _offsets(im)[:, None], _offsets(jm)[None, :]
    return x[np.ix_(ci, cj)] + si[np.ix_(ci, cj)] * oi + sj[np.ix_(ci, cj)] * oj


def _edge(x: np.ndarray, n: int) -> np.ndarray:
    """An open edge's array along one axis (n coarse cells; trailing axes
    kept), reconstructed as :func:`reconstruct` does along it."""
    flat = x.reshape(n, -1)
    slope = _slopes(flat, np.ones(flat.shape, bool), 0)
    ci = coarse_index(fine_size(n))
    return (flat[ci] + slope[ci] * _offsets(n)[:, None]).reshape((ci.size,) + x.shape[1:])


def _faces(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Face values along ``axis`` (a u-field along i, a v-field along j) on
    the fine faces: a coarse face's value on its own fine face, the mean
    of a coarse cell's two faces on the fine face inside it."""
    x = np.moveaxis(x, axis, 0)
    ci, first = coarse_index(fine_size(n)), first_fine(n)
    inside = np.arange(ci.size) != first[ci]
    nxt = np.minimum(ci + 1, n - 1)
    fine = np.where(inside.reshape((-1,) + (1,) * (x.ndim - 1)), 0.5 * (x[ci] + x[nxt]), x[ci])
    return np.moveaxis(fine, 0, axis)


def _spread(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """x copied onto the fine cells along ``axis`` (the coarse cell's value)."""
    return np.take(x, coarse_index(fine_size(n)), axis=axis)


def check_nestable(config: Config) -> None:
    """InputError unless ``config``'s problem is the seamount (the only one nested)."""
    if config.iproblem != 1:
        raise InputError(f"--refine {FACTOR}: only the seamount (iproblem 1) is nested; "
                         f"iproblem {config.iproblem}'s set-up is not an IC file's")


def fine_ic(config: Config, start: Mapping) -> dict[str, np.ndarray]:
    """The IC arrays (pompy.icfile, pom2k order) of the fine grid nested in
    the seamount set-up ``start`` (a capture of ``config`` with the
    member's case), as the module docstring says."""
    check_nestable(config)
    c = {name: np.asarray(torch.as_tensor(start[name]).detach().cpu().double())
         for name in ("dx", "dy", "cor", "h", "fsm", "uab", "ub", "zz", "ele", "elw", "uabe",
                      "uabw")}
    im, jm = config.im, config.jm
    interior_i = (np.arange(im) > 0) & (np.arange(im) < im - 1)
    interior_j = (np.arange(jm) > 0) & (np.arange(jm) < jm - 1)
    halve = np.where(interior_i[:, None], 0.5, 1.0), np.where(interior_j[None, :], 0.5, 1.0)
    spread = lambda a: _spread(_spread(a, im, 0), jm, 1)        # noqa: E731
    h = reconstruct(c["h"], c["fsm"] > 0)
    zz = torch.from_numpy(c["zz"])
    t = problems.seamount_temperature(zz, torch.from_numpy(h), config.strat_amplitude).numpy()
    s = np.full_like(t, problems.SEAMOUNT_SALINITY)
    t[:, :, -1] = s[:, :, -1] = 0.0                                # level kb: unused, 0
    rho = dens(config.grav, config.rhoref, config.tbias, config.sbias, zz, torch.from_numpy(h),
               torch.from_numpy((h > 1.0).astype(np.float64)),
               torch.from_numpy(s - config.sbias), torch.from_numpy(t - config.tbias),
               torch.zeros(t.shape, dtype=torch.float64)).rhoo.numpy()
    rho[:, :, -1] = 0.0
    u = _spread(_faces(c["ub"], im, 0), jm, 1)
    return {
        "dx": spread(c["dx"] * halve[0]), "dy": spread(c["dy"] * halve[1]),
        "cor": spread(c["cor"]), "h": h, "t": t, "s": s, "rmean": rho,
        "u": u, "ua": _spread(_faces(c["uab"], im, 0), jm, 1),
        "ele": _edge(c["ele"], jm), "elw": _edge(c["elw"], jm),
        "uabe": _spread(c["uabe"], jm, 0), "uabw": _spread(c["uabw"], jm, 0),
    }


def fine_size_config(config: Config) -> Config:
    """``config`` with the fine grid's sizes (for estimates of memory: its
    grid is the config's own)."""
    return dataclasses.replace(config, im=fine_size(config.im), jm=fine_size(config.jm))


def fine_config(config: Config, path: Path) -> Config:
    """``config`` on the fine grid of the IC file ``path`` (iproblem 3)."""
    return dataclasses.replace(fine_size_config(config), iproblem=3, icfile=str(path),
                               title=f"{config.title} (2x finer)")


def write_fine_ic(config: Config, start: Mapping, path: Path) -> Config:
    """Write the fine IC file of ``start`` to ``path``; its config."""
    icfile.write_ic(path, title=f"{config.title}: the grid nested {FACTOR} x {FACTOR}",
                    **fine_ic(config, start))
    return fine_config(config, path)


class Coarsening:
    """Coarse-graining of a fine grid's records onto a coarse one (the
    module docstring says how). ``fine``, ``coarse``: the two set-ups'
    grids (art, dx, dy, at least), tensors of the records' dtype and
    device."""

    def __init__(self, fine: Mapping, coarse: Mapping):
        im, jm = coarse["art"].shape
        self.shape = (im, jm)
        self.art = fine["art"]
        self.dx, self.dy = fine["dx"], fine["dy"]
        device = self.art.device
        self.ci = torch.as_tensor(coarse_index(fine_size(im)), device=device)
        self.cj = torch.as_tensor(coarse_index(fine_size(jm)), device=device)
        self.fi = torch.as_tensor(first_fine(im), device=device)
        self.fj = torch.as_tensor(first_fine(jm), device=device)

    def _sum(self, x: torch.Tensor, axis: int, along_j: bool) -> torch.Tensor:
        """Block sums along ``axis`` of x, whose cells there are fine j
        (``along_j``) or fine i."""
        index, n = (self.cj, self.shape[1]) if along_j else (self.ci, self.shape[0])
        shape = list(x.shape)
        shape[axis] = n
        return torch.zeros(shape, dtype=x.dtype, device=x.device).index_add_(axis, index, x)

    def _mean(self, x: torch.Tensor, weight: torch.Tensor,
              axes: tuple[tuple[int, bool], ...]) -> torch.Tensor:
        """The ``weight``-ed block means of x over ``axes`` ((axis, along_j), ...)."""
        top, bottom = x * weight, weight.expand_as(x)
        for axis, along_j in axes:
            top, bottom = self._sum(top, axis, along_j), self._sum(bottom, axis, along_j)
        return top / bottom

    def weights(self, d: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each location's weights for a record of fine column depth ``d``
        (h + el): T and W cells by area (2-D) and volume (3-D); u and v by
        the area of the fine faces on each coarse face."""
        u = (self.dy * (0.5 * (d + torch.roll(d, 1, 0)))).index_select(0, self.fi)
        v = (self.dx * (0.5 * (d + torch.roll(d, 1, 1)))).index_select(1, self.fj)
        return {"T2": self.art, "T3": (self.art * d).unsqueeze(-1), "U2": u,
                "U3": u.unsqueeze(-1), "V2": v, "V3": v.unsqueeze(-1)}

    def field(self, name: str, x: torch.Tensor, weights: Mapping) -> torch.Tensor:
        """The coarse value of the fine field ``name`` (``weights``: the
        record's, :meth:`weights`)."""
        var = variables.VARIABLES[name]
        dims, loc = var.dims, var.location
        if dims == ("k",):
            return x.clone()
        if dims in (("i", "j"), ("i", "j", "k")):
            n = len(dims)
            if loc in ("T", "W"):
                return self._mean(x, weights[f"T{n}"], ((0, False), (1, True)))
            if loc == "U":      # the fine faces on each coarse face (first fine i of a block)
                return self._mean(x.index_select(0, self.fi), weights[f"U{n}"], ((1, True),))
            if loc == "V":
                return self._mean(x.index_select(1, self.fj), weights[f"V{n}"], ((0, False),))
        # the open edges' arrays: (j,), (j, k) east and west; (i,), (i, k) north and south
        along_j = dims[0] == "j"
        edge = {"w": 0, "e": -1, "s": 0, "n": -1}[name[-1]]
        length = self.dy[edge] if along_j else self.dx[:, edge]
        return self._mean(x, length.unsqueeze(-1) if x.dim() == 2 else length, ((0, along_j),))

    def __call__(self, record: Mapping) -> dict:
        """A coarse record of the fine ``record`` (a snapshot: its tensors by
        pom2k name, iint and times passed on)."""
        weights = self.weights(record["d"])
        return {name: self.field(name, value, weights) if torch.is_tensor(value) else value
                for name, value in record.items()}
