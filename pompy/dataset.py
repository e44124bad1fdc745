"""Training datasets written by ``pompy generate``: the file format, and
:class:`SnapshotDataset`, the torch Dataset a trainer reads them with.

One file per generating process: ``DIR/dataset.nc``, or
``DIR/dataset_rank<k>.nc`` for rank k of a torchrun launch (member m is in
the file of rank m % WORLD_SIZE). The files of one launch are combined by
the reader: give SnapshotDataset the folder, or the files, and it takes
the union of their members (checking that they come from the same
config and sources and share no member).

A file (CF-1.8 NetCDF, pompy.io's conventions) holds:

    dims      member, time, x, y, sigma, sigma_w (= the config's im, jm, kb, kb)
    member(member)              int32  the member's index in the ensemble (0: unperturbed)
    perturbation_seed(member)   int64  the seed of its perturbation (-1: none; pompy.generate)
    wind_factor(member)         f8     the member's case parameters (pompy.config.CASE_PARAMS:
    inflow(member), ...         f8     wind_factor, inflow, strat_amplitude, seamount_height;
                                       pompy.generate --perturb wind or params; absent in
                                       files written before them: the config's default). A
                                       member's grid is the set-up of the config with its
                                       values; the file's grid is the config's own
    spinup_offset(member)       int32  internal steps the member ran beyond the common
                                       spin-up: its snapshot n is at iint(n) + spinup_offset,
                                       time(n) + spinup_offset dti (0 where absent)
    snapshots(member)           int32  the member's snapshots written whole, from time 0
                                       (all of them in a complete file; an interrupted
                                       generation's ``.partial`` file holds fewer)
    time(time)                  f8     model time, days since 2000-01-01 (iint 0 at time0)
    iint(time)                  int32  the internal step of each snapshot
    the grid                    f8     every "grid" variable of pompy.variables, once:
                                       x, y, sigma, sigma_w coordinates, then z, zz, dz,
                                       dzz, h, dx, dy, fsm, cor, east_e, ..., rmean,
                                       tclim, sclim under their pom2k names
    the state (member, time, ...) f8   every other "snapshot" variable (what
                                       Core.restore needs to continue bit for bit):
                                       el, elb, ..., u, ub, ..., t, tb, ..., q2l,
                                       km, ..., the boundary values ele, ..., sbs,
                                       at the start snapshots (below); the target
                                       fields alone at the others

Start snapshots. A sample starts only where the whole state is held:
snapshot n with n % ``starts_every`` == 0 (the attribute; 1, every
snapshot, where absent). The snapshots between hold only the fields a
trainer scores, ``target_variables`` (an attribute where starts_every >
1: pompy.train.losses.LOSS_FIELDS), as the variables listed in
``between_starts_variables``: where the file holds the physics' b levels,
those (ub_dti, vb_dti) in place of the reference's own ub, vb, which the
trainer (``physics_levels=True``) never reads there; such ub, vb are then
targets only with ``physics_levels=True``. Files written before that
attribute hold the targets and their b levels both, and read as before.
The other variables' chunks there are never written, so they take no
space (and read as the fill value); no reader here reads them.

Where the physics' step (the config's dti) is a whole number >= 2 of the
reference's (``physics_step_ratio``, dividing the snapshot spacing and
the spin-up), each snapshot also holds the leapfrog b levels the physics
keeps: ub_dti, vb_dti, tb_dti, sb_dti, q2b_dti, q2lb_dti (member, time,
...): the reference's state one physics step before the snapshot,
Asselin-filtered as the physics' internal step filters it
(pompy.core.stepping.leapfrog_b_levels). A physics restarted from a
snapshot with the reference's own b levels (one of its shorter steps
back) takes a first leapfrog step over the wrong interval; with these it
starts as if it had run all along. ``physics_levels=True`` gives them in
place of the reference's, in the state and the targets.

Arrays are stored in CF order (member, time, sigma, y, x), i.e. a pom2k
array a(i, j, k) transposed; SnapshotDataset gives them back in pom2k order
(i, j, k) as a core holds them. Time 0 (iint 0) is the member's initial
state (perturbed for m > 0), then one snapshot every ``every`` days. Each
member's snapshot of each per-snapshot variable is one HDF5 chunk,
zlib-compressed with shuffle (lossless; pompy.generate.writer), so that a
sample reads its own snapshots and nothing else of its member.
Global attributes: ``dataset_format``, the config as ``namelist``,
``source_hash`` (pompy.provenance.source_hash), ``core``, ``dtype``,
``torch_version``, ``days``, ``every_days``, ``steps_between_snapshots``,
``dti``, ``time0``, ``target_model`` (the model that made the trajectories,
in words: core, dti, dte, isplit, grid), ``reference_refine`` (1: the
reference ran on the config's grid; 2: on a grid nested 2 x 2 in it,
coarse-grained onto it: pompy.generate.refine), ``config_dti`` and ``config_dte``
(the steps of the config it was generated for: a reference at a shorter
dti than the physics that trains on it, pompy.generate.reference_config), ``members`` (in the whole ensemble), ``seed``,
``perturb``, ``amplitude``, ``perturbation`` (in words), ``rank``,
``world_size``, ``state_variables``, ``grid_variables``, ``grid_hash``
(pompy.provenance.grid_hash of the grid as written: h, dx, dy, fsm) and,
where starts_every > 1, ``starts_every``, ``target_variables`` and
``between_starts_variables``.

A trainer reads it as it reads a restart: the config that trains on it
must be the one it was made for (pompy.train.data: its state parameters,
the physics' steps, the grid), and every value it reads is finite
(:class:`NonFiniteData`, naming member, snapshot and field, otherwise).

A sample of ``SnapshotDataset(paths, horizon=T)`` starts at a start
snapshot n of one member and holds the next T snapshots of that member:
samples never cross members, so a member of R snapshots gives one sample
for each start n with n + T <= R - 1 (R - T of them where every snapshot
is a start; none if R <= T). Sample i counts through the files in the
order given (a folder's files by rank), their members in file order, then
the start n::

    ds = SnapshotDataset("data/", horizon=2)
    sample = ds[0]
    sample["state"]["t"]            # (im, jm, kb) float64: snapshot n, every state field
    sample["target"]["t"]           # (T, im, jm, kb): snapshots n+1 .. n+T, the fields asked for
    sample["member"], sample["time"], sample["iint"]     # of snapshot n
    sample["wind_factor"], sample["inflow"], ...          # the member's case parameters
    sample["target_time"], sample["target_iint"]         # (T,) of the targets
    SnapshotDataset("data/", horizon=2, physics_levels=True)
                                      # ub, vb, tb, sb, q2b, q2lb: the physics' own, where held
    core.restore(ds.restore_record(sample))               # a core at snapshot n ...
    core.params = dict(core.params, **member_params(sample))   # ... under its forcing: bit for bit

``fields`` chooses the target fields, of those held at every snapshot as
read (default: the prognostic fields of pompy.variables among them). Files are
opened lazily, in the process that reads (each DataLoader worker opens its
own; nothing open is pickled).
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import netCDF4
import numpy as np
import torch
from torch.utils.data import Dataset

from pompy import variables
from pompy.config import CASE_PARAMS, case_of
from pompy.errors import InputError
from pompy.io import open_netcdf

# Still 1: each later addition is an attribute that a file without it
# reads as it was written (starts_every: 1; between_starts_variables: the
# targets and their b levels, as files of starts_every > 1 held before it
# was recorded), so this reader reads every file of format 1 as before.
# Only a reader older than an attribute misreads a file that has it (the
# fill value for what it does not hold): read data with the pompy that
# wrote it or a later one.
FORMAT = "pompy generate dataset 1"
FILE_NAME = "dataset.nc"
# the one file of a single process, then those of torchrun ranks
FILE_PATTERNS = (FILE_NAME, "dataset_rank*.nc")


def grid_fields() -> list[str]:
    """The variables stored once per file: the set-up's grid."""
    return variables.names("grid")


def b_level_name(name: str) -> str:
    """The variable of a b level at the physics' step (ub -> ub_dti)."""
    return f"{name}_dti"


def state_fields() -> list[str]:
    """The variables stored per member and snapshot: every "snapshot"
    variable (what Core.restore needs) that is not grid."""
    grid = set(grid_fields())
    return [n for n in variables.names("snapshot") if n not in grid]


def is_start(n: int, starts_every: int) -> bool:
    """Whether snapshot n holds the whole state (a sample may start there)."""
    return n % starts_every == 0


def level_field(stored: str) -> str:
    """The field a stored variable holds (ub_dti -> ub; t -> t)."""
    return stored.removesuffix("_dti")


def held_variables(names: Iterable[str], levels: Iterable[str]) -> list[str]:
    """The variables that hold ``names`` at a snapshot: each, then its
    physics' b level where the file has one (``levels``: the names that do)."""
    levels = set(levels)
    return [stored for name in names
            for stored in ((name, b_level_name(name)) if name in levels else (name,))]


def between_starts(targets: Iterable[str], levels: Iterable[str]) -> list[str]:
    """What a snapshot between starts holds (``between_starts_variables``):
    each target, but the physics' b level in place of the reference's own
    where the file has one (``levels``: the names that do), the one the
    trainer scores (physics_levels=True)."""
    levels = set(levels)
    return [b_level_name(name) if name in levels else name for name in targets]


def held_at(n: int, starts_every: int, state: Iterable[str], levels: Iterable[str],
            between: list[str]) -> list[str]:
    """The variables snapshot n holds: at a start the whole ``state`` and the
    b levels of ``levels``, else ``between`` (between_starts_variables)."""
    return held_variables(state, levels) if is_start(n, starts_every) else list(between)


def dataset_file(output_dir: Path, rank: int = 0, world_size: int = 1) -> Path:
    """The file a process writes: dataset.nc alone, dataset_rank<k>.nc under torchrun."""
    name = FILE_NAME if world_size == 1 else f"dataset_rank{rank}.nc"
    return Path(output_dir) / name


def dataset_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """The files a path or paths name: a folder stands for its dataset.nc,
    or else its dataset_rank<k>.nc files in rank order."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            found.append(path)
            continue
        single = path / FILE_NAME
        ranks = sorted(path.glob(FILE_PATTERNS[1]), key=lambda p: int(p.stem[len("dataset_rank"):]))
        if not single.is_file() and not ranks:
            raise FileNotFoundError(f"{path} holds no {FILE_NAME} or dataset_rank<k>.nc")
        found += [single] if single.is_file() else ranks
    if not found:
        raise ValueError("SnapshotDataset: no dataset file given")
    return found


def _pom2k(a: np.ndarray, lead: int) -> np.ndarray:
    """A CF-ordered array (``lead`` leading dims, then sigma, y, x) in pom2k
    order (lead, x, y, sigma), C-contiguous as a core's tensors are."""
    axes = tuple(range(lead)) + tuple(reversed(range(lead, a.ndim)))
    return np.ascontiguousarray(a.transpose(axes))


class _FileInfo:
    """What SnapshotDataset keeps of one file (small, picklable)."""

    def __init__(self, path: Path):
        with open_netcdf(path, "dataset file") as ds:
            if getattr(ds, "dataset_format", None) != FORMAT:
                raise ValueError(f"{path} is not a pompy generate dataset "
                                 f"(no dataset_format = {FORMAT!r})")
            self.path = path
            self.members = [int(m) for m in ds["member"][:]]
            self.seeds = [int(s) for s in ds["perturbation_seed"][:]]
            # files written before a case parameter existed ran with its default
            self.cases = [{name: (float(ds[name][i]) if name in ds.variables else default)
                           for name, default in case_of().items()}
                          for i in range(len(self.members))]
            self.offsets = ([int(n) for n in ds["spinup_offset"][:]]
                            if "spinup_offset" in ds.variables else [0] * len(self.members))
            self.time = np.asarray(ds["time"][:], dtype=np.float64)
            self.iint = np.asarray(ds["iint"][:], dtype=np.int64)
            self.time0 = float(ds.time0)
            self.core, self.dti = str(ds.core), float(ds.dti)
            self.target_model = str(getattr(ds, "target_model", f"pompy {self.core} core at "
                                                                 f"dti = {self.dti:g} s"))
            self.namelist, self.source_hash = ds.namelist, ds.source_hash
            # the physics' steps it was made for (absent before they were recorded)
            self.made_for = {name: float(getattr(ds, name)) if name in ds.ncattrs() else None
                             for name in ("config_dti", "config_dte")}
            self.grid_hash = str(getattr(ds, "grid_hash", "")) or None
            self.state = ds.state_variables.split()
            # the physics' own leapfrog b levels (pompy.generate: physics_step_ratio)
            self.levels = [n for n in self.state if b_level_name(n) in ds.variables]
            self.grid = ds.grid_variables.split()
            self.starts_every = int(getattr(ds, "starts_every", 1))
            # the fields every snapshot holds, the others only the start snapshots
            self.targets = (ds.target_variables.split() if self.starts_every > 1
                            else list(self.state))
            # the variables a snapshot between starts holds (older files:
            # the targets and their b levels both; see FORMAT)
            self.between = (ds.between_starts_variables.split()
                            if "between_starts_variables" in ds.ncattrs()
                            else held_variables(self.targets, self.levels))

    def starts(self, horizon: int) -> list[int]:
        """The snapshots a sample of ``horizon`` targets starts at."""
        return list(range(0, len(self.iint) - horizon, self.starts_every))

    def stored(self, name: str, physics_levels: bool) -> str:
        """The variable field ``name`` is read from: its physics' b level
        where asked for (``physics_levels``) and held."""
        return b_level_name(name) if physics_levels and name in self.levels else name

    def every_snapshot(self, physics_levels: bool) -> list[str]:
        """The fields every snapshot holds, read as asked (b levels or not)."""
        between = set(self.between)
        return [n for n in self.state if self.stored(n, physics_levels) in between]

    def held(self, n: int) -> list[str]:
        """The variables snapshot n holds (b levels included)."""
        return held_at(n, self.starts_every, self.state, self.levels, self.between)

    def same_run(self, other: _FileInfo) -> str | None:
        """What differs between two files of one dataset, or None."""
        for what in ("namelist", "source_hash", "core", "state", "grid", "time0",
                     "starts_every", "targets", "between"):
            if getattr(self, what) != getattr(other, what):
                return what
        if not np.array_equal(self.iint, other.iint):
            return "iint"
        return None


# Every file a SnapshotDataset opened, until the process that opened it
# closes it. A forked child inherits these handles and must neither close
# nor free them: closing one there corrupted HDF5's copied state (a crash
# in H5FL_reg_malloc with netCDF4 1.7.5: 4 of 6 runs of 60 two-worker
# DataLoaders, none after). Holding them here keeps them open in the
# child, unused, whatever its garbage collector frees.
_OPENED: dict[int, netCDF4.Dataset] = {}


class SnapshotDataset(Dataset):
    """Samples of ``pompy generate`` datasets (see the module docstring):
    an initial state, every field a core restores, and the next ``horizon``
    snapshots of ``fields`` (default: the prognostic fields) of the same
    member, with member and time metadata; float64 tensors in pom2k order."""

    def __init__(self, paths: str | Path | Sequence[str | Path], horizon: int = 1,
                 fields: Sequence[str] | None = None, physics_levels: bool = False):
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"horizon={horizon!r}: the number of target snapshots, an integer >= 1")
        self.paths = dataset_files(paths)
        self.horizon = int(horizon)
        self.physics_levels = physics_levels
        self._files = [_FileInfo(p) for p in self.paths]
        self._check_files()
        first = self._files[0]
        self.state_fields = list(first.state)
        readable = first.every_snapshot(physics_levels)
        self.fields = list(fields) if fields is not None else \
            [n for n in variables.names("prognostic") if n in readable]
        unknown = [n for n in self.fields if n not in first.state]
        if unknown:
            raise ValueError(f"fields {', '.join(unknown)} are not in the dataset; it has "
                             f"{', '.join(first.state)}")
        _refuse_unheld([n for n in self.fields if n not in readable], first, readable)
        self._starts = first.starts(self.horizon)        # each member's, the same in every file
        self._per_member = len(self._starts)
        self._members = [(f, local) for f, info in enumerate(self._files)
                         for local in range(len(info.members))]
        self._handles: dict[int, netCDF4.Dataset] = {}
        self._grids: dict[int, dict[str, torch.Tensor]] = {}
        self._pid = os.getpid()

    def _check_files(self) -> None:
        first, seen = self._files[0], {}
        for info in self._files:
            what = first.same_run(info)
            if what is not None:
                raise ValueError(f"{info.path} and {first.path} are not of the same dataset: "
                                 f"their {what} differ")
            for m in info.members:
                if m in seen:
                    raise ValueError(f"member {m} is in both {seen[m]} and {info.path}")
                seen[m] = info.path

    @property
    def model(self) -> dict:
        """What made the trajectories: {"core", "dti", "description"}."""
        first = self._files[0]
        return {"core": first.core, "dti": first.dti, "description": first.target_model}

    @property
    def members(self) -> list[int]:
        """The ensemble member indices, in sample order."""
        return [self._files[f].members[local] for f, local in self._members]

    def __len__(self) -> int:
        return len(self._members) * self._per_member

    def __getitem__(self, index: int) -> dict:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)}")
        (f, local) = self._members[index // self._per_member]
        n = self._starts[index % self._per_member]
        info, ds, span = self._files[f], self._open(f), slice(n + 1, n + 1 + self.horizon)
        offset = info.offsets[local]             # the member's own spin-up beyond the common one
        days = offset * info.dti / 86400.0

        def read(name: str, at, lead: int) -> torch.Tensor:
            values = ds[info.stored(name, self.physics_levels)][local, at]
            _check_finite(values, info, local, name, n if lead == 0 else n + 1)
            return torch.from_numpy(_pom2k(values, lead))

        return {
            "state": {name: read(name, n, 0) for name in self.state_fields},
            "target": {name: read(name, span, 1) for name in self.fields},
            "member": info.members[local], "file": f, **info.cases[local],
            "time": float(info.time[n]) + days, "iint": int(info.iint[n]) + offset,
            "target_time": torch.from_numpy(info.time[span] + days),
            "target_iint": torch.from_numpy(info.iint[span] + offset),
        }

    def check_finite(self, members: Sequence[int] | None = None) -> None:
        """Every snapshot of ``members`` (default: all) read once and checked
        finite (the grid too): NonFiniteData naming the first bad member,
        snapshot and field."""
        wanted = set(self.members if members is None else members)
        for f, info in enumerate(self._files):
            ds = self._open(f)
            for name in info.grid:
                _check_finite(ds[name][...], info, None, name, None)
            for local, member in enumerate(info.members):
                if member not in wanted:
                    continue
                for n in range(len(info.iint)):
                    for stored in info.held(n):          # never a chunk left unwritten
                        _check_finite(ds[stored][local, n], info, local, stored, n)

    @functools.cached_property
    def grid_hash(self) -> str:
        """pompy.provenance.grid_hash of the files' grid (the config's own
        set-up); a file whose recorded hash differs from its grid is damaged."""
        from pompy.provenance import grid_hash

        info = self._files[0]
        ds = self._open(0)
        found = grid_hash({name: _pom2k(ds[name][...], 0) for name in ("h", "dx", "dy", "fsm")})
        if info.grid_hash not in (None, found):
            raise ValueError(f"{info.path}: its grid's hash is {found}, not the {info.grid_hash} "
                             "it records: the file was changed after it was written")
        return found

    @property
    def made_for(self) -> dict:
        """The config the data was generated for: {"namelist": its text (the
        reference's: the config with the reference's dte and isplit),
        "config_dti", "config_dte": the physics' steps (None where the file
        predates them)}."""
        first = self._files[0]
        return {"namelist": first.namelist, **first.made_for}

    def member_case(self, member: int) -> dict[str, float]:
        """A member's case parameters (pompy.config.CASE_PARAMS) and its
        spin-up offset (internal steps beyond the common spin-up)."""
        for info in self._files:
            if member in info.members:
                local = info.members.index(member)
                return {**info.cases[local], "spinup_offset": info.offsets[local]}
        raise KeyError(f"member {member} is not in the dataset")

    def restore_record(self, sample: dict) -> dict:
        """A record Core.restore() accepts, for one sample (not a batch):
        its initial state, the grid of its file and its iint and time0;
        the core then continues from that snapshot bit for bit."""
        f = int(sample["file"])
        info = self._files[f]
        if f not in self._grids:
            ds = self._open(f)
            self._grids[f] = {name: torch.from_numpy(_pom2k(ds[name][...], 0))
                              for name in info.grid}
        return {**self._grids[f], **sample["state"], "iint": int(sample["iint"]),
                "time0": info.time0}

    def _open(self, f: int) -> netCDF4.Dataset:
        """File f, opened once per process: a forked DataLoader worker opens
        its own and leaves the parent's handles alone (see _OPENED)."""
        if self._pid != os.getpid():
            self._handles, self._pid = {}, os.getpid()
        if f not in self._handles:
            ds = netCDF4.Dataset(self.paths[f])
            ds.set_auto_mask(False)
            _OPENED[id(ds)] = ds
            self._handles[f] = ds
        return self._handles[f]

    def close(self) -> None:
        """Close the files this process opened (a forked child's inherited
        handles are only forgotten)."""
        if self._pid == os.getpid():
            for ds in self._handles.values():
                _OPENED.pop(id(ds), None)
                ds.close()
        self._handles = {}

    def __del__(self) -> None:
        if getattr(self, "_handles", None):
            with contextlib.suppress(Exception):    # at interpreter exit
                self.close()

    def __getstate__(self) -> dict:
        # open files stay behind: the unpickling process opens its own
        return {k: v for k, v in self.__dict__.items() if k != "_handles"} | {"_handles": {}}


def _refuse_unheld(unheld: list[str], info: _FileInfo, readable: list[str]) -> None:
    """ValueError saying what to do where targets ``unheld`` are not held
    at every snapshot (``readable`` are), as ``info``'s file holds them."""
    levels = [n for n in unheld if info.stored(n, True) in info.between]
    if levels:        # between starts only their physics' b levels, the trainer's
        raise ValueError(f"fields {', '.join(levels)} are held between starts only as the "
                         f"physics' b levels ({', '.join(map(b_level_name, levels))}): read "
                         "them with physics_levels=True (as pompy train and pompy evaluate "
                         "do), or generate with --starts_every 1 for the reference's own")
    if unheld:
        raise ValueError(f"fields {', '.join(unheld)} are held only where a sample "
                         f"starts (snapshots n with n % {info.starts_every} == 0), not at "
                         f"every snapshot as targets are: ask for some of {', '.join(readable)}")


class NonFiniteData(InputError):
    """A dataset's value that is NaN or infinite: bad input (exit 2)."""


def _check_finite(values: np.ndarray, info: _FileInfo, local: int | None, name: str,
                  first: int | None) -> None:
    """NonFiniteData naming the member, snapshot (``first`` is the snapshot
    of values[0] where they span several), field and point of the first
    non-finite value; ``local`` None: the grid."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    where = np.argwhere(bad)[0]
    value = values[tuple(where)]
    dims = variables.ALL[level_field(name)].dims if level_field(name) in variables.ALL \
        else tuple(f"n{d + 1}" for d in range(values.ndim))
    if local is None:
        what = f"the grid's {name}"
    else:
        spans = values.ndim > len(dims)
        n = first + int(where[0]) if spans else first
        what = (f"member {info.members[local]}, snapshot {n} (iint "
                f"{int(info.iint[n]) + info.offsets[local]}), field {name}")
        where = where[1:] if spans else where
    place = ", ".join(str(int(i) + 1) for i in reversed(where))      # CF order back to pom2k's
    raise NonFiniteData(f"{info.path}: {what} is {'NaN' if np.isnan(value) else value} at "
                        f"({', '.join(dims)}) = ({place}); the data is damaged: generate it "
                        "again")


def member_params(sample: Mapping) -> dict[str, float]:
    """The case parameters that may differ between a dataset's members
    (pompy.config.CASE_PARAMS) for one sample (or one entry of a batch): a
    core restored from the sample continues bit for bit once its params
    carry them and, for those that shape the set-up (SETUP_PARAMS), it was
    set up with them."""
    return {name: float(sample[name]) for name in CASE_PARAMS}
