"""CF-convention NetCDF output and restart files, from the variable table.

Arrays are stored in CF order (time, sigma level, y, x): a pom2k array
a(i,j,k) is written transposed as a[k, j, i]. Fields on the w levels
(z: w, q2, q2l, l, km, kh, kq, ...) use the dimension ``sigma_w``; the
others ``sigma``. A restart file holds every restart variable plus
``iint``, ``time_days`` and ``time0`` (the model time, in days, of iint 0);
reading it checks every variable and gives back pom2k-ordered arrays equal
to the last bit.

Both files follow CF-1.8 (the IOOS compliance checker's cf:1.8 suite finds
no high or medium priority issue): coordinate variables ``x``, ``y``
(metres), ``sigma``, ``sigma_w`` (ocean_sigma_coordinate), a
``coordinates`` attribute naming each horizontal field's easting and
northing variables, and a ``history`` line. Every variable is compressed
with zlib and shuffle unless ``compress=False`` (lossless: values read back
equal to the last bit).
"""
from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import netCDF4
import numpy as np

from pompy import __version__
from pompy import files
from pompy.config import Config
from pompy.errors import InputError
from pompy.variables import SERIES, VARIABLES, names, shape

W_LEVELS = frozenset(names("w_level"))
_DIM = {"i": "x", "j": "y"}
# zlib level 4 with shuffle (lossless). On the seamount output (two
# records) level 4 writes 8.41 MB in 0.37 s, level 1 8.60 MB in 0.40 s,
# level 9 8.26 MB in 3.5 s; uncompressed, 21.2 MB in 0.07 s.
COMPRESSION = dict(zlib=True, shuffle=True, complevel=4)
# The grid arrays of an output file besides the coordinates below.
OUTPUT_GRID = ("h", "fsm", "dum", "dvm", "dx", "dy")
# The easting and northing of each C-grid location, named by the
# `coordinates` attribute of the fields on it (W sits above T).
_POSITIONS = {"T": ("east_e", "north_e"), "W": ("east_e", "north_e"),
              "U": ("east_u", "north_u"), "V": ("east_v", "north_v"),
              "corner": ("east_c", "north_c")}
OUTPUT_POSITIONS = ("east_e", "north_e", "east_u", "north_u", "east_v", "north_v")
# The sigma coordinate's formula terms: z = eta + sigma * (depth + eta)
# is a height above pom2k's rest level, its mean sea level.
_STANDARD_NAMES = {"el": "sea_surface_height_above_mean_sea_level",
                   "h": "sea_floor_depth_below_mean_sea_level"}


def output_fields() -> list[str]:
    """The time-dependent fields of an output file, in table order."""
    return [n for n, v in VARIABLES.items() if v.output and v.kind != "grid"]


def cf_dims(name: str) -> tuple[str, ...]:
    """The dimensions of the table's variable ``name`` in a file, in CF order (sigma, y, x)."""
    dims = tuple(_DIM.get(d, "sigma_w" if name in W_LEVELS else "sigma")
                 for d in VARIABLES[name].dims)
    return tuple(reversed(dims))


def to_cf(a: np.ndarray) -> np.ndarray:
    """A pom2k-ordered array (i, j, k) as stored: transposed to CF order (k, j, i)."""
    return np.asarray(a).T


def from_cf(a: np.ndarray) -> np.ndarray:
    """A stored (CF-ordered) array back in pom2k order, Fortran-contiguous."""
    return np.asfortranarray(np.asarray(a).T)


def _command() -> str:
    """The command line that runs this process, as a user would type it."""
    argv = list(sys.argv) or ["python3"]
    if Path(argv[0]).name == "__main__.py":          # python3 -m pompy ..., -m pompy.generate ...
        folder = Path(argv[0]).resolve().parent
        root = Path(__file__).resolve().parents[1]       # the folder holding pompy/
        module = ".".join(folder.relative_to(root).parts) if folder.is_relative_to(root) \
            else folder.name
        argv[:1] = ["python3", "-m", module]
    return shlex.join(argv)


def history_line() -> str:
    """A file's ``history`` line: the time (UTC), pompy's version and the command."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp}: written by pompy {__version__}: {_command()}"


def create_dataset(path: Path, config: Config, title: str,
                   attributes: dict | None) -> netCDF4.Dataset:
    """A new NetCDF file: pompy's global attributes, ``attributes``, the grid's dimensions."""
    ds = netCDF4.Dataset(path, "w")
    ds.Conventions = "CF-1.8"
    ds.title = title
    ds.source = f"pompy {__version__} (pom2k algorithm)"
    ds.history = history_line()
    ds.namelist = str(config.to_namelist())
    ds.setncatts(attributes or {})
    ds.createDimension("x", config.im)
    ds.createDimension("y", config.jm)
    ds.createDimension("sigma", config.kb)
    ds.createDimension("sigma_w", config.kb)
    return ds


def define_variable(ds, name: str, extra_dims=(), compress: bool | dict = True,
                    located: bool = False, chunks: tuple[int, ...] | None = None):
    """Variable ``name`` of the table, with its units and long name; with
    ``located``, a `coordinates` attribute naming its easting and northing.
    ``compress``: COMPRESSION, none, or the zlib settings given; ``chunks``:
    HDF5 chunk sizes (default the library's)."""
    var = VARIABLES[name]
    zlib = COMPRESSION if compress is True else (compress or {})
    v = ds.createVariable(name, "f8", extra_dims + cf_dims(name), chunksizes=chunks, **zlib)
    v.units = var.units
    v.long_name = var.long_name
    if name in _STANDARD_NAMES:
        v.standard_name = _STANDARD_NAMES[name]
    positions = _POSITIONS[var.location]
    if located and {"i", "j"} <= set(var.dims) and name not in positions:
        v.coordinates = " ".join(positions)
    return v


def write_axes(ds, state: dict, compress: bool) -> None:
    """Coordinate variables x, y (m) and the sigma levels, then the
    easting and northing arrays the fields' `coordinates` name."""
    # x, y: east_e along the first row (j = 1) and north_e along the first
    # column (i = 1), i.e. the running sums of dx, dy at the cell centres:
    # exact for a rectilinear grid (seamount, box); on any other grid the
    # 2-D east_*/north_* arrays give each point's true position.
    for dim, values, axis in (("x", state["east_e"][:, 0], "X"), ("y", state["north_e"][0, :], "Y")):
        v = ds.createVariable(dim, "f8", (dim,))
        v[:] = values
        v.units, v.axis, v.standard_name = "m", axis, f"projection_{dim}_coordinate"
        v.long_name = f"{'easting' if dim == 'x' else 'northing'} of the cell centres"
    for name, dim in (("zz", "sigma"), ("z", "sigma_w")):
        v = ds.createVariable(dim, "f8", (dim,))
        v[:] = state[name]
        v.standard_name, v.positive, v.units, v.axis = "ocean_sigma_coordinate", "up", "1", "Z"
        v.long_name = VARIABLES[name].long_name
        v.formula_terms = f"sigma: {dim} eta: el depth: h"
        v.computed_standard_name = "height_above_mean_sea_level"
    for name in OUTPUT_POSITIONS:
        define_variable(ds, name, compress=compress)[:] = to_cf(state[name])


def incomplete_path(path: Path) -> Path:
    """Where an output file is written until it is complete
    (``<name>.incomplete.nc``): a file it replaces stays whole until then."""
    path = Path(path)
    return path.with_name(f"{path.stem}.incomplete{path.suffix}")


INCOMPLETE = "incomplete: the run writing it has not finished, or failed"


class OutputWriter:
    """Writes the output fields of the variable table at each call of write();
    ``attributes``: more global attributes (name: str or number).

    The file is written aside (:func:`incomplete_path`, its ``status``
    attribute "incomplete ...") and renamed to ``path`` by close(), which
    sets ``status`` to "complete" (or what finish() was given): a run that
    fails leaves the records written so far readable under the
    ``.incomplete.nc`` name, and never a half file in place of an earlier one.
    Each record is checked for room on the disk before it is written, so a
    full disk stops the writer with the file still whole; a failed write
    raises :class:`pompy.errors.EnvironmentFault` naming the file and cause.

    With ``background``, a record is compressed and written by a thread of
    its own while the caller goes on (netCDF4 lets go of the GIL there):
    write() copies the fields and returns, after the record before it is
    written. An error of a record is raised by the next write() or by
    close(). HDF5 is not thread-safe: call drain() before any other netCDF
    work in the process (a restart)."""

    def __init__(self, path: Path, config: Config, state: dict, compress: bool = True,
                 attributes: dict | None = None, background: bool = False, series=(),
                 reserve: int = 0):
        self.series = tuple(series)        # a core's per-step values (variables.SERIES)
        self.path = Path(path)
        self.part = incomplete_path(self.path)
        self._pending: Future | None = None
        self._error: BaseException | None = None
        # a record needs its own room and leaves ``reserve`` (the restart a
        # run writes when it stops) and some for HDF5
        self.record_bytes = _data_bytes(config, 1) - _data_bytes(config, 0) + reserve
        self.last_iint: int | None = None
        try:
            files.check_room(self.part, HEADER_BYTES + reserve + files.FULL_BYTES,
                             "the output's header")
            self.ds = create_dataset(self.part, config, config.title, attributes)
        except (OSError, RuntimeError) as err:
            self.part.unlink(missing_ok=True)         # no empty file left behind
            raise files.fault(self.part, err, "creating the output") from None
        try:
            self.ds.status = INCOMPLETE
            self._define_all(state, compress)
        except BaseException as err:       # no half-defined file left behind
            with suppress(OSError, RuntimeError):
                self.ds.close()
            self.part.unlink(missing_ok=True)
            if isinstance(err, (OSError, RuntimeError)):
                raise files.fault(self.part, err, "creating the output") from None
            raise
        self._pool = ThreadPoolExecutor(1, "pompy-output") if background else None

    def _define_all(self, state: dict, compress: bool) -> None:
        self.ds.createDimension("time", None)
        t = self.ds.createVariable("time", "f8", ("time",))
        t.units, t.standard_name, t.calendar = "days since 2000-01-01 00:00:00", "time", "standard"
        t.axis = "T"
        write_axes(self.ds, state, compress)
        for name in OUTPUT_GRID:
            define_variable(self.ds, name, compress=compress, located=True)[:] = to_cf(state[name])
        self.fields = output_fields()
        for name in self.fields:
            define_variable(self.ds, name, ("time",), compress, located=True)
        for name in self.series:
            v = self.ds.createVariable(name, "f8", ("time",))
            v.units, v.long_name = SERIES[name].units, SERIES[name].long_name
        self.fields = [*self.fields, *self.series]
        self.iint = self.ds.createVariable("iint", "i4", ("time",))
        self.iint.long_name = "internal step number"

    def write(self, state: dict, iint: int, time_days: float, series: dict | None = None) -> None:
        state = {**state, **(series or {})}
        if self._pool is None:
            return self._write({name: state[name] for name in self.fields}, iint, time_days)
        self.drain()
        self._raise()
        fields = {name: np.array(state[name]) for name in self.fields}   # the caller's arrays may change
        self._pending = self._pool.submit(self._write, fields, iint, time_days)

    def _write(self, fields: dict, iint: int, time_days: float) -> None:
        doing = f"writing the record of iint={iint}"
        files.check_room(self.part, self.record_bytes + files.FULL_BYTES, doing)
        try:
            n = len(self.ds.dimensions["time"])
            self.ds["time"][n] = time_days
            self.iint[n] = iint
            for name, value in fields.items():
                self.ds[name][n] = to_cf(value)
            self.ds.sync()
        except (OSError, RuntimeError) as err:
            raise files.fault(self.part, err, doing) from None
        self.last_iint = iint

    def failed(self) -> None:
        """Raise the error of a record that failed in the background, as
        soon as it has (a run stops at once, not at its next record)."""
        if self._pending is not None and self._pending.done():
            self.drain()
        self._raise()

    def drain(self) -> None:
        """Wait for the record being written; its error is kept for the next
        write() or close()."""
        if self._pending is not None:
            self._error = self._error or self._pending.exception()
            self._pending = None

    def _take(self) -> BaseException | None:
        error, self._error = self._error, None
        return error

    def _raise(self) -> None:
        error = self._take()
        if error is not None:
            raise error

    def close(self, status: str = "complete") -> None:
        """Write the last record, set ``status``, close the file and put it
        in place (again: nothing); raises a record's error not raised
        before, leaving the file under its ``.incomplete.nc`` name."""
        error = self.abandon(status)
        if error is not None:
            raise error

    def abandon(self, status: str | None = None) -> BaseException | None:
        """close() for a caller failing already: a record's error not raised
        before is returned, not raised. With ``status`` (a run that stopped
        cleanly: a blow-up, a signal) the file is put in place as close()
        does; without, it stays under its ``.incomplete.nc`` name."""
        if not self.ds.isopen():
            return self._take()
        self.drain()
        if self._pool is not None:
            self._pool.shutdown()
        error = self._take()
        if error is not None or status is None:
            with suppress(OSError, RuntimeError):      # a full disk may fail the close too
                self.ds.close()
            return error
        try:
            self.ds.status = status
            self.ds.close()
            self.part.replace(self.path)
        except (OSError, RuntimeError) as err:
            with suppress(OSError, RuntimeError):
                self.ds.close()
            return files.fault(self.part, err, "closing the output")
        return None


# Compressed size / values' size, measured on the seamount (65 x 49 x 21)
# with COMPRESSION: 0.39 for `pompy run configs/seamount.nml` (iint 6, 12:
# a flow just starting), 0.62 for one day (80 records), 0.67 for ten days
# at one record a day (`--core oracle --steps 4800 --set prtd1=1.0`).
# A developed flow compresses worse; 0.7 errs towards a larger estimate.
COMPRESSED_RATIO = 0.7
# HDF5's own bytes (superblock, object headers, attributes, chunk indexes):
# 167 kB +- 1 kB in uncompressed output files of 1 to 5 records on grids
# of 8 x 7 x 5 to 65 x 49 x 21 (51 kB with no record).
HEADER_BYTES = 167_000


def _data_bytes(config: Config, records: int) -> int:
    """The bytes of the values an output file of ``records`` records holds."""
    im, jm, kb = config.im, config.jm, config.kb
    fixed = im + jm + 2 * kb + sum(np.prod(shape(n, im, jm, kb), dtype=np.int64)
                                   for n in OUTPUT_GRID + OUTPUT_POSITIONS)
    record = sum(np.prod(shape(n, im, jm, kb), dtype=np.int64) for n in output_fields())
    return int(8 * fixed + records * (8 * record + 8 + 4))    # + time (f8), iint (i4)


def estimate_output_bytes(config: Config, records: int, compress: bool = True) -> int:
    """The expected size in bytes of an output file of ``records`` records.

    Uncompressed: the exact bytes of the values (from the variable table)
    plus HEADER_BYTES for HDF5's metadata, measured. Compressed: the values
    times COMPRESSED_RATIO = 0.7, measured on seamount runs of 12 steps to
    10 days (0.39 to 0.67, see above): a fluid at rest compresses better,
    a noisy one worse."""
    data = _data_bytes(config, records)
    return int(data * (COMPRESSED_RATIO if compress else 1.0)) + HEADER_BYTES


def write_restart(path: Path, config: Config, state: dict, iint: int, time_days: float,
                  time0: float = 0.0, compress: bool = True,
                  attributes: dict | None = None) -> Path:
    """Every restart variable of the table, with iint, time and time0, to
    NetCDF. Its fields carry no `coordinates` attribute: a restart is for
    pompy to read back, not for plotting (and the attribute on its hundred
    variables doubles the time the CF checker takes on it). ``attributes``:
    more global attributes."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    doing = f"writing the restart of iint={iint}"
    ds = None
    try:
        ds = create_dataset(tmp, config, f"{config.title}: restart at iint={iint}", attributes)
        ds.iint = int(iint)
        ds.time_days = float(time_days)
        ds.time0 = float(time0)
        write_axes(ds, state, compress)
        for name in names("restart"):
            if name not in ds.variables:                 # east_e, ... are in already
                define_variable(ds, name, compress=compress)[:] = to_cf(state[name])
        ds.close()
        tmp.replace(path)  # a crash mid-write never leaves a half restart file
    except BaseException as err:          # the previous restart stays whole, no .tmp left
        if ds is not None:
            with suppress(OSError, RuntimeError):
                ds.close()
        tmp.unlink(missing_ok=True)
        if isinstance(err, (OSError, RuntimeError)):
            raise files.fault(path, err, doing) from None
        raise
    return path


def restart_bytes(config: Config) -> int:
    """An upper bound of a restart file's size: its values uncompressed and
    4 kB of HDF5 metadata a variable (an 8x7x5 restart takes 374 kB)."""
    im, jm, kb = config.im, config.jm, config.kb
    restart = names("restart")
    values = sum(8 * int(np.prod(shape(n, im, jm, kb), dtype=np.int64)) for n in restart)
    return values + 4096 * len(restart)


class _State(NamedTuple):
    state: dict          # restart variables, pom2k order
    iint: int            # the step the state is at
    time_days: float     # its model time
    time0: float         # the model time of iint 0


class Restart(_State):
    """A restart's state, iint, time_days and time0 (unpacks as those four);
    ``written``: the RESTART_ATTRIBUTES its file holds (read_restart sets
    them; none for a state made in memory)."""

    written: Mapping[str, Any] = MappingProxyType({})


# The global attributes of a restart that say how it was made (pompy.driver
# checks a continued run against them): the core, its precision, the
# namelist and the model day the run that wrote it was to end at.
RESTART_ATTRIBUTES = ("core", "dtype", "namelist", "run_end_days")


@contextmanager
def open_netcdf(path: Path, what: str = "file") -> Iterator[netCDF4.Dataset]:
    """``path`` opened read-only (auto masking off); a file that is missing,
    not NetCDF, truncated or damaged raises InputError naming it, e.g.
    ``restart file R.nc is not a readable NetCDF file (NetCDF: HDF error)``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist" if not path.exists()
                         else f"{what} {path} is not a file")
    try:
        ds = netCDF4.Dataset(path)
    except (OSError, RuntimeError, ValueError) as err:
        files.check_not_being_written(path, what)      # busy, not broken: the machine's (exit 4)
        raise InputError(f"{what} {path} is not a readable NetCDF file ({_reason(err)})") from None
    try:
        ds.set_auto_mask(False)
        yield ds
    except (OSError, RuntimeError) as err:   # HDF5 failing on a damaged chunk
        raise InputError(f"{what} {path} is damaged: {_reason(err)}") from None
    finally:
        with suppress(OSError, RuntimeError):   # closing a damaged file may fail as well
            ds.close()


def _reason(err: Exception) -> str:
    """netCDF4's message without its errno prefix and repeated file name."""
    text = getattr(err, "strerror", None) or str(err)
    return " ".join(text.split())


def read_restart(path: Path, config: Config | None = None) -> Restart:
    """A restart file's state (arrays in pom2k order), iint, time and time0,
    after checking that every restart variable is there, on the file's grid
    (and ``config``'s, if given), finite, and h > 0 where fsm = 1. Any
    failure raises InputError naming the file, the variable and the first
    bad point (1-based, pom2k's (i, j, k))."""
    where = f"restart file {path}"
    with open_netcdf(path, "restart file") as ds:
        grid = _restart_grid(ds, where, config)
        for attr in ("iint", "time_days"):
            if attr not in ds.ncattrs():
                raise InputError(f"{where} lacks attribute {attr}")
        state = {name: _restart_array(ds, name, grid, where) for name in names("restart")}
        time0 = float(getattr(ds, "time0", 0.0))
        iint, time_days = int(ds.iint), float(ds.time_days)
        if iint < 0:
            raise InputError(f"{where}: iint = {iint}; a restart is of a step >= 0")
        written = {name: ds.getncattr(name) for name in RESTART_ATTRIBUTES
                   if name in ds.ncattrs()}
    _check_depth(state, where)
    saved = Restart(state, iint, time_days, time0)
    saved.written = written
    return saved


def _restart_grid(ds, where: str, config: Config | None) -> tuple[int, int, int]:
    """(im, jm, kb) of a restart file's dimensions, checked against ``config``."""
    for dim in ("x", "y", "sigma", "sigma_w"):
        if dim not in ds.dimensions:
            raise InputError(f"{where} lacks dimension {dim}")
    grid = tuple(len(ds.dimensions[d]) for d in ("x", "y", "sigma"))
    if len(ds.dimensions["sigma_w"]) != grid[2]:
        raise InputError(f"{where}: dimension sigma_w = {len(ds.dimensions['sigma_w'])} "
                         f"differs from sigma = {grid[2]}")
    if config is not None and grid != (config.im, config.jm, config.kb):
        raise InputError(f"{where}: grid im, jm, kb = {', '.join(map(str, grid))} differs from "
                         f"the config's {config.im}, {config.jm}, {config.kb}")
    return grid


def _restart_array(ds, name: str, grid: tuple[int, int, int], where: str) -> np.ndarray:
    """Variable ``name`` in pom2k order, present, of the grid's shape and finite."""
    if name not in ds.variables:
        raise InputError(f"{where} lacks variable {name}")
    dims = VARIABLES[name].dims
    want = shape(name, *grid)
    a = from_cf(ds[name][...])
    if a.shape != want:
        raise InputError(f"{where}: {name} has shape {a.shape}, "
                         f"expected ({', '.join(dims)}) = {want}")
    if ds[name].dimensions != cf_dims(name):      # e.g. x and y swapped where im = jm
        raise InputError(f"{where}: {name} has dims ({', '.join(ds[name].dimensions)}), "
                         f"expected ({', '.join(cf_dims(name))})")
    bad = ~np.isfinite(a)
    if bad.any():
        first = tuple(np.argwhere(bad)[0])
        value = "NaN" if np.isnan(a[first]) else f"{a[first]:g}"
        raise InputError(f"{where}: {name} is {value} at {_place(dims, first)}")
    return a


def _place(dims: tuple[str, ...], index: tuple[int, ...]) -> str:
    """'(i, j, k) = (3, 4, 2)' for a 0-based numpy index into dims."""
    return f"({', '.join(dims)}) = ({', '.join(str(int(n) + 1) for n in index)})"


def _check_depth(state: dict, where: str) -> None:
    """pom2k divides by h (through d = h + el) at every wet point."""
    bad = (state["fsm"] == 1) & ~(state["h"] > 0)
    if bad.any():
        first = tuple(np.argwhere(bad)[0])
        raise InputError(f"{where}: h = {state['h'][first]:g} at {_place(('i', 'j'), first)} "
                         "where fsm = 1")
