"""CF-convention NetCDF output and restart files, from the variable table.

Arrays are stored in CF order (time, sigma level, y, x): a pom2k array
a(i,j,k) is written transposed as a[k, j, i]. Fields on the w levels
(z: w, q2, q2l, l, km, kh, kq, ...) use the dimension ``sigma_w``; the
others ``sigma``. A restart file holds every restart variable plus
``iint``, ``time_days`` and ``time0`` (the model time, in days, of iint 0);
reading it gives back pom2k-ordered arrays equal to the last bit.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import netCDF4
import numpy as np

from pompy import __version__
from pompy.config import Config
from pompy.variables import VARIABLES, names

W_LEVELS = frozenset(names("w_level"))
_DIM = {"i": "x", "j": "y"}


def _cf_dims(name: str) -> tuple[str, ...]:
    dims = tuple(_DIM.get(d, "sigma_w" if name in W_LEVELS else "sigma")
                 for d in VARIABLES[name].dims)
    return tuple(reversed(dims))


def _to_cf(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).T


def _from_cf(a: np.ndarray) -> np.ndarray:
    return np.asfortranarray(np.asarray(a).T)


def _create(path: Path, config: Config, title: str) -> netCDF4.Dataset:
    ds = netCDF4.Dataset(path, "w")
    ds.Conventions = "CF-1.8"
    ds.title = title
    ds.source = f"pompy {__version__} (pom2k algorithm)"
    ds.namelist = str(config.to_namelist())
    ds.createDimension("x", config.im)
    ds.createDimension("y", config.jm)
    ds.createDimension("sigma", config.kb)
    ds.createDimension("sigma_w", config.kb)
    return ds


def _define(ds, name: str, extra_dims=()):
    var = VARIABLES[name]
    v = ds.createVariable(name, "f8", extra_dims + _cf_dims(name))
    v.units = var.units
    v.long_name = var.long_name
    return v


def _coordinates(ds, state: dict) -> None:
    for name, dim, std in (("zz", "sigma", "ocean_sigma_coordinate"),
                           ("z", "sigma_w", "ocean_sigma_coordinate")):
        v = ds.createVariable(dim, "f8", (dim,))
        v[:] = state[name]
        v.standard_name, v.positive, v.units = std, "up", "1"
        v.long_name = VARIABLES[name].long_name
        v.formula_terms = f"sigma: {dim} eta: el depth: h"
    for name, axis in (("east_e", "X"), ("north_e", "Y")):
        v = ds.createVariable(name, "f8", ("y", "x"))
        v[:] = _to_cf(state[name])
        v.units, v.long_name, v.axis = "m", VARIABLES[name].long_name, axis


class OutputWriter:
    """Writes the output fields of the variable table at each call of write()."""

    def __init__(self, path: Path, config: Config, state: dict):
        self.path = Path(path)
        self.ds = _create(self.path, config, config.title)
        self.ds.createDimension("time", None)
        t = self.ds.createVariable("time", "f8", ("time",))
        t.units, t.standard_name, t.calendar = "days since 2000-01-01 00:00:00", "time", "standard"
        _coordinates(self.ds, state)
        for name in ("h", "fsm", "dum", "dvm", "dx", "dy"):
            _define(self.ds, name)[:] = _to_cf(state[name])
        self.fields = [n for n, v in VARIABLES.items() if v.output and v.kind != "grid"]
        for name in self.fields:
            _define(self.ds, name, ("time",))
        self.iint = self.ds.createVariable("iint", "i4", ("time",))
        self.iint.long_name = "internal step number"

    def write(self, state: dict, iint: int, time_days: float) -> None:
        n = len(self.ds.dimensions["time"])
        self.ds["time"][n] = time_days
        self.iint[n] = iint
        for name in self.fields:
            self.ds[name][n] = _to_cf(state[name])
        self.ds.sync()

    def close(self) -> None:
        self.ds.close()


def write_restart(path: Path, config: Config, state: dict, iint: int, time_days: float,
                  time0: float = 0.0) -> Path:
    """Every restart variable of the table, with iint, time and time0, to NetCDF."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    ds = _create(tmp, config, f"{config.title}: restart at iint={iint}")
    try:
        ds.iint = int(iint)
        ds.time_days = float(time_days)
        ds.time0 = float(time0)
        for name, var in VARIABLES.items():
            if var.restart:
                _define(ds, name)[:] = _to_cf(state[name])
    finally:
        ds.close()
    tmp.replace(path)  # a crash mid-write never leaves a half restart file
    return path


class Restart(NamedTuple):
    state: dict          # restart variables, pom2k order
    iint: int            # the step the state is at
    time_days: float     # its model time
    time0: float         # the model time of iint 0


def read_restart(path: Path) -> Restart:
    """A restart file's state (arrays in pom2k order), iint, time and time0."""
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        state = {name: _from_cf(ds[name][:]) for name in VARIABLES
                 if VARIABLES[name].restart and name in ds.variables}
        time0 = float(getattr(ds, "time0", 0.0))
        return Restart(state, int(ds.iint), float(ds.time_days), time0)
