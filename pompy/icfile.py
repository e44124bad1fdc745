"""pompy's initial-condition (IC) file: the grid and initial state of iproblem=3.

pom2k's iproblem=3 (subroutine ``file2ic``) reads the grid and the initial
temperature and salinity from a file. pompy's file is NetCDF (any format
netCDF4 reads), laid out like pompy's output (pompy.io): arrays in CF order,
a pom2k array ``a(i,j,k)`` stored transposed as ``a[k, j, i]``.

Dimensions
    x      im   (pom2k's i, eastward)
    y      jm   (pom2k's j, northward)
    sigma  kb   (pom2k's k, the sigma t-levels zz(k), k=1 at the surface)

im, jm and kb must equal the config's. The sigma levels themselves are not
read: they are pom2k's ``depth`` levels of the config (kb, kl1, kl2). A
coordinate variable ``sigma(sigma)``, if present, must hold those zz levels
(to 1e-12); coordinate variables ``x(x)`` and ``y(y)`` may be present and are
ignored. Any other variable is an error (a misspelt name would otherwise
fall back to its default silently).

Required variables

    name   dims           units    meaning
    dx     (y, x)         m        grid spacing along i at t-points, > 0
    dy     (y, x)         m        grid spacing along j at t-points, > 0
    h      (y, x)         m        bottom depth (positive). h <= 1 m is land, as in
                                   pom2k; values below 1 are set to 1
    cor    (y, x)         s-1      Coriolis parameter
    t      (sigma, y, x)  degC     potential temperature at the t-levels: the actual
                                   value; the set-up subtracts tbias
    s      (sigma, y, x)  1e-3     salinity (psu), likewise; the set-up subtracts sbias

Optional variables, with their defaults

    name            dims           units   meaning, default
    tclim, sclim    (sigma, y, x)  as t,s  climatology (the reference of horizontal
                                           diffusion; actual values). Default: t, s
    rmean           (sigma, y, x)  1       reference density anomaly (rho-1000)/rhoref
                                           that baropg subtracts before integrating: a
                                           function of depth only. Default: 0, see below
    u, v            (sigma, y, x)  m s-1   velocity at u-points (the face between i-1
                                           and i) and v-points (between j-1 and j).
                                           Default: ua, va at every level, else 0
    ua, va          (y, x)         m s-1   depth-averaged velocity. Default: the depth
                                           mean of u, v (sum of u*dz over k=1..kb-1),
                                           else 0
    el              (y, x)         m       surface elevation. Default: 0
    east_e, north_e (y, x)         m       coordinates of the t-points, for output
                                           only (give both or neither). Default:
                                           pom2k's running sums of dx, dy
                                           (grid_coordinates), as seamount and box
    ele, elw        (y)            m       elevation on the east (i=im), west (i=1)
    eln, els        (x)            m       and north (j=jm), south (j=1) open
                                           boundaries. Default: el on that edge
    uabe, uabw      (y)            m s-1   depth-averaged inflow at the east (u at i=im)
                                           and west (u at i=2) boundaries. Default: ua
                                           there
    vabn, vabs      (x)            m s-1   likewise north (v at j=jm), south (v at j=2).
                                           Default: va there
    tbe, tbw, sbe, sbw  (sigma, y) as t,s  T and S (actual values) flowing in at the
    tbn, tbs, sbn, sbs  (sigma, x)         east, west, north and south boundaries.
                                           Default: t, s on that edge (i=im, i=1,
                                           j=jm, j=1), as seamount

Every value must be finite (no NaN, inf or fill values). Level k=kb of the
sigma variables lies below the deepest t-level, pom2k never uses it: it must
be finite, and is read as 0 (the value the seamount and box set-ups leave).
At least one point must be wet (h > 1 m).

What the set-up (pom2k's file2ic, after pompy places these arrays in the
state) makes of them: the sigma levels, land h < 1 set to 1, areas and masks
(fsm = 1 where h > 1), the slope limiter slpmax when slmax < 1, tb = t - tbias
and sb = s - sbias (both time levels of the initial state), tclim, sclim and
the boundary T, S less the biases, the velocities masked by the u and v masks
(dum, dvm), the elevation masked by fsm. The wind stress of iproblem 3 is
the seamount's (pompy's surface_forcing), not read from this file.

rmean, and why its default is 0: pom2k's rmean is the horizontally averaged
density; baropg integrates the pressure gradient of rho - rmean and drops
that of rmean. This is exact only when rmean is a function of depth alone
(then its pressure gradient is zero), and it pays off by removing the
sigma-coordinate error of the mean stratification over sloping bottoms.
rmean = 0 drops nothing: baropg integrates the full density, with the
sigma-coordinate error of all of it. The alternatives are worse as defaults.
rmean = the initial rho (what seamount and box set, right there because their
initial density depends on depth alone) cancels the initial baroclinic
pressure gradient of any other state. A mean along each sigma level varies
with depth along a sloping level and carries a real pressure gradient that
baropg would drop: on the seamount at rest (true gradient 0) the largest
|drhox| is 5e8 with it, against 4e5 with rmean = 0 (65 x 49 x 21). A mean
profile in depth interpolated linearly from the sigma levels was no better
than 0 there (3.5e5 to 8.6e5, depending on the depth grid of the
profile): linear interpolation on ~20 levels leaves kinks whose sigma error
is as large as that of the smooth full profile. To reduce the error, give rmean:
(rho-1000)/rhoref of your area-mean T, S profile evaluated at each point's
depth zz(k)*h with pom2k's dens (its pressure term included).

Write a file with :func:`write_ic` (arrays in pom2k order) or, from a state
of pompy (e.g. the seamount set-up), with :func:`write_ic_from_state`; read it
with :func:`read_ic`, which checks it against a config and fills in the
defaults. For example, for a 20 x 15 x 11 basin::

    write_ic("basin.nc", dx=np.full((20, 15), 5e3), dy=np.full((20, 15), 5e3),
             h=h, cor=np.full((20, 15), 1e-4), t=t, s=s)      # t, s: (20, 15, 11)

and run it with ``iproblem = 3, icfile = 'basin.nc', im = 20, jm = 15, kb = 11``.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import netCDF4
import numpy as np
import torch

from pompy.core.grid import depth
from pompy.errors import InputError
from pompy.io import cf_dims, from_cf, to_cf
from pompy.variables import VARIABLES, names

if TYPE_CHECKING:
    from pompy.config import Config

# name -> (units, long name): the IC-file fields of the variable table
REQUIRED = {name: (VARIABLES[name].units, VARIABLES[name].long_name)
            for name in names("ic_required")}
OPTIONAL = {name: (VARIABLES[name].units, VARIABLES[name].long_name)
            for name in names("ic_optional")}
FIELDS = {**REQUIRED, **OPTIONAL}
COORDINATE_VARIABLES = ("x", "y", "sigma")
# output-only coordinates: pompy's set-up computes them (grid_coordinates) and
# the file's, if any, replace them after the set-up (nothing reads them)
COORDINATES = ("east_e", "north_e")
# the 2-D velocities at each open boundary (pom2k (i, j) of the u or v point)
_EDGE_VELOCITY = {"uabe": ("ua", 0, -1), "uabw": ("ua", 0, 1),
                  "vabn": ("va", 1, -1), "vabs": ("va", 1, 1)}
# (boundary array, field, axis of the edge, index of the edge)
_EDGES = [(f"{q}b{side}", field, axis, index)
          for q, field in (("t", "t"), ("s", "s"))
          for side, axis, index in (("e", 0, -1), ("w", 0, 0), ("n", 1, -1), ("s", 1, 0))]
_EDGES += [(f"el{side}", "el", axis, index)
           for side, axis, index in (("e", 0, -1), ("w", 0, 0), ("n", 1, -1), ("s", 1, 0))]


def _shape(name: str, im: int, jm: int, kb: int) -> tuple[int, ...]:
    """The CF shape of an IC variable."""
    size = {"x": im, "y": jm, "sigma": kb}
    return tuple(size[d] for d in cf_dims(name))


def _where(index: tuple, dims: tuple[str, ...]) -> str:
    """'(i=3, j=2)' for a CF index (k, j, i) into dims (sigma, y, x)."""
    letter = {"x": "i", "y": "j", "sigma": "k"}
    named = {letter[d]: int(n) + 1 for d, n in zip(dims, index)}
    return "(" + ", ".join(f"{k}={named[k]}" for k in ("i", "j", "k") if k in named) + ")"


def sigma_levels(config: Config) -> tuple[np.ndarray, np.ndarray]:
    """zz and dz of the config: pom2k's depth(kb, kl1, kl2)."""
    z = torch.zeros(config.kb, dtype=torch.float64)
    levels = depth(config.kl1, config.kl2, z, z, z, z)
    return levels.zz.numpy(), levels.dz.numpy()


def read_ic(path: str | Path, config: Config) -> dict[str, np.ndarray]:
    """The IC file's arrays, checked against ``config`` (im, jm, kb, and the
    sigma levels if the file gives them), with the defaults of the format
    filled in: Fortran-ordered float64 numpy arrays in pom2k (i, j[, k])
    order. Level kb of the sigma variables is 0. east_e and north_e are
    returned only if the file has them (the set-up computes them otherwise;
    place them after it). Raises InputError (bad input: exit 2) naming the variable and the
    problem."""
    path = Path(path)
    try:
        ds = netCDF4.Dataset(path)
    except (OSError, ValueError) as err:
        raise InputError(f"IC file {path}: cannot read it as NetCDF ({err})") from err
    with ds:
        ds.set_auto_mask(True)
        where = f"IC file {path}"
        for name in ds.variables:
            if name not in FIELDS and name not in COORDINATE_VARIABLES:
                close = difflib.get_close_matches(name, list(FIELDS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else (
                    f"; the format's variables are {', '.join(FIELDS)} (see pompy.icfile)")
                raise InputError(f"{where}: unknown variable {name!r}{hint}")
        for name, (units, meaning) in REQUIRED.items():
            if name not in ds.variables:
                raise InputError(f"{where}: required variable {name!r} ({meaning}, {units}) is "
                                 "missing")
        cf = {name: _checked(ds, name, config, where) for name in FIELDS if name in ds.variables}
        if "sigma" in ds.variables:
            _check_sigma(ds, config, where)
    if ("east_e" in cf) != ("north_e" in cf):
        given = "east_e" if "east_e" in cf else "north_e"
        raise InputError(f"{where}: {given!r} is given without "
                         f"{'north_e' if given == 'east_e' else 'east_e'!r}: give both or neither")
    for name in ("dx", "dy"):
        bad = np.argwhere(cf[name] <= 0)
        if bad.size:
            raise InputError(f"{where}: {name!r} must be > 0 m; it is {float(cf[name][tuple(bad[0])])!r} "
                             f"at {_where(tuple(bad[0]), cf_dims(name))} "
                             f"({len(bad)} such points)")
    if not (cf["h"] > 1.0).any():
        raise InputError(f"{where}: 'h' has no wet point: h <= 1 m (land) everywhere")
    ic = {name: from_cf(a) for name, a in cf.items()}
    _fill_defaults(ic, config)
    for name, a in ic.items():
        if "k" in VARIABLES[name].dims:          # k is the last index
            a[..., config.kb - 1] = 0.0          # level kb: unused, 0 as in seamount
    return ic


def _checked(ds, name: str, config: Config, where: str) -> np.ndarray:
    """Variable ``name`` as float64 in CF order, after checking its dims,
    shape and values."""
    var = ds[name]
    dims = cf_dims(name)
    want = _shape(name, config.im, config.jm, config.kb)
    sizes = dict(zip(("x", "y", "sigma"), (config.im, config.jm, config.kb)))
    if tuple(var.dimensions) != dims or tuple(var.shape) != want:
        raise InputError(
            f"{where}: variable {name!r} has dims {tuple(var.dimensions)} and shape {tuple(var.shape)}; "
            f"expected dims {dims} and shape {want} = "
            f"({', '.join(f'{d}={sizes[d]}' for d in dims)}) for the config "
            f"(im={config.im}, jm={config.jm}, kb={config.kb})")
    data = var[...]
    mask = np.ma.getmaskarray(data)
    values = np.ma.getdata(data).astype(np.float64)
    bad = mask | ~np.isfinite(values)
    if bad.any():
        first = tuple(np.argwhere(bad)[0])
        kind = "missing (fill)" if mask[first] else repr(float(values[first]))
        raise InputError(f"{where}: variable {name!r} has {int(bad.sum())} non-finite or missing "
                         f"values, the first {kind} at {_where(first, dims)}")
    return values


def _check_sigma(ds, config: Config, where: str) -> None:
    var = ds["sigma"]
    zz, _ = sigma_levels(config)
    values = np.ma.getdata(var[...]).astype(np.float64)
    if tuple(var.dimensions) != ("sigma",) or values.shape != zz.shape \
            or not np.allclose(values, zz, rtol=0, atol=1e-12):
        raise InputError(
            f"{where}: its sigma levels {np.array2string(values, precision=6)} are not the config's "
            f"t-levels zz of depth(kb={config.kb}, kl1={config.kl1}, kl2={config.kl2}) = "
            f"{np.array2string(zz, precision=6)}")


def _fill_defaults(ic: dict, config: Config) -> None:
    """The format's defaults, in place (pom2k order)."""
    im, jm, kb = config.im, config.jm, config.kb
    ic.setdefault("tclim", ic["t"].copy(order="F"))
    ic.setdefault("rmean", np.zeros((im, jm, kb), order="F"))
    ic.setdefault("sclim", ic["s"].copy(order="F"))
    _, dz = sigma_levels(config)
    for name3, name2 in (("u", "ua"), ("v", "va")):
        if name3 in ic and name2 not in ic:       # the depth mean, k = 1..kbm1
            ic[name2] = np.asfortranarray(ic[name3][:, :, :kb - 1] @ dz[:kb - 1])
        elif name2 in ic and name3 not in ic:     # uniform in depth
            ic[name3] = np.asfortranarray(np.repeat(ic[name2][:, :, None], kb, axis=2))
        else:
            ic.setdefault(name3, np.zeros((im, jm, kb), order="F"))
            ic.setdefault(name2, np.zeros((im, jm), order="F"))
    ic.setdefault("el", np.zeros((im, jm), order="F"))
    for name, (field, axis, index) in _EDGE_VELOCITY.items():
        if name not in ic:
            ic[name] = np.ascontiguousarray(np.take(ic[field], index, axis=axis))
    for name, field, axis, index in _EDGES:
        if name not in ic:
            ic[name] = np.asfortranarray(np.take(ic[field], index, axis=axis))


def split_ic(config: Config) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The IC file of an iproblem=3 config as (arrays to place in the state
    before the set-up, output-only coordinates to place after it)."""
    ic = read_ic(config.icfile, config)
    after = {name: ic.pop(name) for name in COORDINATES if name in ic}
    return ic, after


def write_ic(path: str | Path, title: str = "pompy initial conditions", **arrays) -> Path:
    """Write an IC file from pom2k-ordered arrays named as in the format
    (``dx=..., h=..., t=...``); ``sigma`` (optional) is the zz levels.
    im, jm come from dx, kb from t. Only the names are checked here; read_ic
    checks the rest against a config."""
    path = Path(path)
    unknown = sorted(set(arrays) - set(FIELDS) - {"sigma"})
    if unknown:
        raise ValueError(f"write_ic: unknown variables {unknown}; the format's are "
                         f"{', '.join(FIELDS)} and sigma")
    missing = [name for name in REQUIRED if name not in arrays]
    if missing:
        raise ValueError(f"write_ic: required variables {missing} are missing")
    im, jm = np.shape(arrays["dx"])
    kb = np.shape(arrays["t"])[2]
    with netCDF4.Dataset(path, "w") as ds:
        ds.Conventions = "CF-1.8"
        ds.title = title
        ds.description = "pompy initial-condition file for iproblem=3 (format: pompy.icfile)"
        for dim, size in (("x", im), ("y", jm), ("sigma", kb)):
            ds.createDimension(dim, size)
        if "sigma" in arrays:
            v = ds.createVariable("sigma", "f8", ("sigma",))
            v[:] = np.asarray(arrays["sigma"], dtype=np.float64)
            v.standard_name, v.positive, v.units = "ocean_sigma_coordinate", "up", "1"
            v.long_name = "sigma at t levels (zz)"
        for name, value in arrays.items():
            if name == "sigma":
                continue
            units, meaning = FIELDS[name]
            v = ds.createVariable(name, "f8", cf_dims(name))
            v[:] = to_cf(np.asarray(value, dtype=np.float64))
            v.units, v.long_name = units, meaning
    return path


def state_ic(state: Mapping[str, np.ndarray], config: Config) -> dict[str, np.ndarray]:
    """The IC arrays of a pompy state (pom2k-ordered, e.g. oracle new_state):
    grid, level-n fields (t, s, u, v, ua, va, el), tclim, sclim, rmean, the
    t-point coordinates and every boundary array, with tbias, sbias added
    back to the temperatures and salinities; ``sigma`` the state's zz."""
    arrays = {name: np.asarray(state[name], dtype=np.float64) for name in FIELDS}
    for name in ("t", "tclim", "tbe", "tbw", "tbn", "tbs"):
        arrays[name] = arrays[name] + config.tbias
    for name in ("s", "sclim", "sbe", "sbw", "sbn", "sbs"):
        arrays[name] = arrays[name] + config.sbias
    arrays["sigma"] = np.asarray(state["zz"], dtype=np.float64)
    return arrays


def write_ic_from_state(path: str | Path, state: Mapping[str, np.ndarray], config: Config,
                        omit: tuple[str, ...] = ()) -> Path:
    """Write the IC file of a pompy state (see :func:`state_ic`); ``omit``
    names optional variables to leave out, so that they take their defaults."""
    arrays = state_ic(state, config)
    for name in omit:
        if name in REQUIRED:
            raise ValueError(f"write_ic_from_state: {name!r} is required, it cannot be omitted")
        arrays.pop(name)
    return write_ic(path, title=f"{config.title}: initial conditions", **arrays)
