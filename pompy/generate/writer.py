"""The dataset file of a generation: its attributes, its size, and how it
is written so that no half file is ever taken for a dataset.

A process writes its file (pompy.dataset's format; pompy.dataset reads
it) snapshot by snapshot, the whole state at the start snapshots and the
targets alone between them (``starts_every``), under a temporary name,
``dataset.nc.tmp``, and renames it when complete. Interrupted, it keeps the snapshots finished
in ``dataset.nc.partial`` (the readers' patterns miss it), with each
member's count in the variable ``snapshots``; ``--resume`` copies that
file back and goes on, after checking that it was made with the same
settings and sources (:func:`check_resumed`). A reference on a finer grid
(``--refine``) writes its states coarse-grained, which a run cannot go on
from: interrupted, it keeps each unfinished member's fine state at its
last start snapshot beside the file (:func:`fine_state_file`), which
``--resume`` reads instead.
"""
from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import netCDF4
import numpy as np
import torch

from pompy import __version__, variables
from pompy.config import CASE_PARAMS, Config
from pompy.core.stepping import LEAPFROG
from pompy.dataset import (FORMAT, b_level_name, between_starts, grid_fields, held_at,
                           held_variables, is_start, level_field, state_fields)
from pompy.driver import COMPILED
from pompy.errors import InputError
from pompy.generate.perturbations import PERTURBATION_TEXT
from pompy.generate.reference import describe_model
from pompy.io import cf_dims, create_dataset, define_variable, to_cf, write_axes
from pompy.provenance import grid_hash, source_hash
from pompy.settings import GenerateSettings
from pompy.train.losses import LOSS_FIELDS

# HDF5's own bytes in an uncompressed dataset (superblock, object headers,
# attributes): file size less the values' bytes, measured 113.0 to 115.3 kB
# on seamount grids of 8x7x5, 20x15x8 and 65x49x21 with 1 to 3 members and
# 2 to 9 snapshots (the ~110 variable headers do not grow with the grid).
# The estimate is then within 0.5 % of the file (0.01 % at 65x49x21).
HEADER_BYTES = 114_000
# The snapshots' compression: zlib with shuffle, lossless, one chunk per
# member, snapshot and variable, so that a sample reads only its own
# snapshots. On train_tiny's data (8 members x 33 snapshots, 85 MB
# uncompressed) level 1 makes the file 1.61 times smaller, level 4 1.63
# times, for 20 % more time: level 1.
SNAPSHOT_COMPRESSION = dict(zlib=True, shuffle=True, complevel=1)
# what a snapshot between two starts holds: the fields a trainer scores
# (ub, vb as their physics' b levels where held: pompy.dataset.between_starts)
TARGET_FIELDS = LOSS_FIELDS
# attributes that may differ between an interrupted file and its resumption
RESUMABLE = frozenset({"history", "torch_compile"})


def physics_ratio(config: Config, physics: Config, steps: int, spinup_steps: int) -> int:
    """The physics' step (the config's dti) in reference steps, where the
    dataset records the physics' leapfrog b levels (a whole number >= 2
    that divides the snapshot spacing and the spin-up); else 0."""
    ratio = round(physics.dti / config.dti)
    whole = ratio >= 2 and math.isclose(ratio * config.dti, physics.dti, rel_tol=1e-12)
    return ratio if whole and steps % ratio == 0 and spinup_steps % ratio == 0 else 0


def dataset_attributes(config: Config, settings: GenerateSettings, steps: int, rank: int,
                       world: int, physics: Config, spinup_steps: int) -> dict:
    """The global attributes of a rank's file (pompy.dataset documents
    them): the reference ``config`` that made it, the ``physics`` config
    it is for, the settings and the schedule."""
    ref, ens = settings.reference, settings.ensemble
    ratio = physics_ratio(config, physics, steps, spinup_steps)
    return {
        "target_model": describe_model(ref.core, config, ref.refine),
        "reference_refine": ref.refine,
        "config_dti": physics.dti, "config_dte": physics.dte,
        "dataset_format": FORMAT, "core": ref.core, "dtype": ref.dtype,
        "source_hash": source_hash(), "torch_compile": COMPILED if ref.compile else "none",
        "torch_version": torch.__version__, "pompy_version": __version__,
        "days": float(settings.schedule.days), "every_days": steps * config.dti / 86400,
        "steps_between_snapshots": steps, "dti": config.dti, "time0": 0.0,
        "members": ens.members, "seed": ens.seed, "perturb": ens.perturb,
        "amplitude": ens.amplitude, "perturbation": PERTURBATION_TEXT[ens.perturb],
        "rank": rank, "world_size": world,
        "member_split": f"member m is in the file of rank m % {world}",
        "state_variables": " ".join(state_fields()), "grid_variables": " ".join(grid_fields()),
        "spinup_steps": spinup_steps,
        "physics_step_ratio": ratio,
    } | ({"ranges": ens.ranges, "spinup_spread": float(settings.schedule.spinup_spread)}
         if ens.perturb == "params" else {}) | \
        starts_attributes(settings.schedule.starts_every, level_names(bool(ratio)))


def level_names(held: bool) -> list[str]:
    """The fields whose physics' b levels a file holds where it holds them
    (ub, vb, tb, ...: a physics_step_ratio > 0)."""
    return [b for _, b in LEAPFROG] if held else []


def starts_attributes(starts_every: int, levels: list[str]) -> dict:
    """The start snapshots' attributes, for a file holding the b levels of
    ``levels``; none where every snapshot is one, so that such a file is the
    one made without the setting (and a partial one made without it resumes)."""
    if starts_every == 1:
        return {}
    return {"starts_every": starts_every, "target_variables": " ".join(TARGET_FIELDS),
            "between_starts_variables": " ".join(between_starts(TARGET_FIELDS, levels))}


def _chunks(config: Config, name: str) -> tuple[int, ...]:
    """One member's snapshot of ``name`` (CF order) per chunk."""
    return (1, 1) + tuple(reversed(variables.shape(name, config.im, config.jm, config.kb)))


def _count(config: Config, names: list[str]) -> int:
    """The values of stored variables ``names`` (b levels too) at one snapshot."""
    return sum(math.prod(variables.shape(level_field(n), config.im, config.jm, config.kb))
               for n in names)


def estimate_dataset_bytes(config: Config, members: int, records: int,
                           b_levels: bool = False, starts_every: int = 1) -> int:
    """The size of a dataset file of ``members`` members and ``records``
    snapshots (time 0 included), with the physics' b levels or not, the
    whole state every ``starts_every`` snapshots and the targets alone
    between, uncompressed: the values' bytes from the variable table
    (float64) plus HEADER_BYTES, measured. The file, compressed, is
    smaller (1.6 times on train_tiny's data): an upper bound, as the disk
    check needs."""
    coordinates = config.im + config.jm + 2 * config.kb           # x, y, sigma, sigma_w
    grid = 8 * (coordinates + _count(config, grid_fields()))
    levels = level_names(b_levels)
    starts = len(range(0, records, starts_every))
    state = 8 * _count(config, held_variables(state_fields(), levels))
    targets = 8 * _count(config, between_starts(TARGET_FIELDS, levels))
    per_member = 4 + 8 + 8 * len(CASE_PARAMS) + 4 + 4    # member, seed, case, count, offset
    return (grid + members * (starts * state + (records - starts) * targets)
            + records * (8 + 4) + members * per_member + HEADER_BYTES)


def temporary_file(path: Path) -> Path:
    """Where a dataset file is written until it is complete."""
    return Path(path).with_name(Path(path).name + ".tmp")


def partial_file(path: Path) -> Path:
    """Where an interrupted dataset file's finished snapshots are kept
    (the readers' patterns, dataset.nc and dataset_rank*.nc, miss it)."""
    return Path(path).with_name(Path(path).name + ".partial")


def fine_state_file(path: Path, member: int) -> Path:
    """Where an interrupted generation of dataset file ``path`` with a
    finer reference grid keeps member ``member``'s fine state (a torch
    file of its snapshot record), beside the member's fine grid."""
    return path.parent / "reference_grids" / f"member_{member}.partial.pt"


def _numpy(record: Mapping, name: str) -> np.ndarray:
    return record[name].detach().to("cpu", torch.float64).numpy()


class DatasetWriter:
    """A dataset file (pompy.dataset's format) written snapshot by snapshot
    into ``path``.tmp, renamed to ``path`` by :meth:`close` (``complete``),
    or, interrupted, kept as ``path``.partial for ``--resume``. The
    variable ``snapshots(member)`` counts each member's snapshots written
    whole, from time 0 (all of them in a complete file)."""

    def __init__(self, path: Path, config: Config, grid: Mapping, members: list[int],
                 seeds: list[int], cases: list[tuple[dict, int]], iints: list[int],
                 time0: float, attributes: dict):
        self.path, self.tmp, self.partial = Path(path), temporary_file(path), partial_file(path)
        ds = self.ds = create_dataset(self.tmp, config, f"{config.title}: pompy generate dataset",
                                      attributes)
        ds.createDimension("member", len(members))
        ds.createDimension("time", len(iints))
        self._index("member", "i4", members, "ensemble member (0: unperturbed)",
                    standard_name="realization")
        self._index("perturbation_seed", "i8", seeds,
                    "seed of numpy.random.default_rng for the member's perturbation (-1: none)",
                    dim="member")
        for name in CASE_PARAMS:
            self._index(name, "f8", [case[name] for case, _ in cases],
                        f"the member's {name} (config {name}; a restart from its snapshots "
                        "needs it)", dim="member")
        self._index("spinup_offset", "i4", [offset for _, offset in cases],
                    "internal steps the member ran beyond the common spin-up: its snapshot n "
                    "is at step iint(n) + spinup_offset", dim="member")
        self._index("snapshots", "i4", [0] * len(members),
                    "the member's snapshots written whole, from time 0 (all: complete)",
                    dim="member")
        t = self._index("time", "f8", [config.dti * n / 86400 + time0 for n in iints], "model time")
        t.units, t.standard_name, t.calendar, t.axis = \
            "days since 2000-01-01 00:00:00", "time", "standard", "T"
        self._index("iint", "i4", iints, "internal step number", dim="time")
        grid_np = {name: _numpy(grid, name) for name in grid_fields()}
        ds.grid_hash = grid_hash(grid_np)      # of the grid as written (a trainer compares it)
        write_axes(ds, grid_np, compress=False)
        for name in grid_fields():
            if name not in ds.variables:                 # east_e, ... are in already
                define_variable(ds, name, compress=False, located=True)[:] = to_cf(grid_np[name])
        for name in state_fields():
            define_variable(ds, name, ("member", "time"), compress=SNAPSHOT_COMPRESSION,
                            located=True, chunks=_chunks(config, name))
        self.ratio = int(attributes["physics_step_ratio"])
        for name in level_names(bool(self.ratio)):
            v = ds.createVariable(b_level_name(name), "f8", ("member", "time") + cf_dims(name),
                                  chunksizes=_chunks(config, name), **SNAPSHOT_COMPRESSION)
            v.units = variables.ALL[name].units
            v.long_name = (f"{variables.ALL[name].long_name}, the physics' own: the "
                           f"reference's state one physics step (the config's dti, "
                           f"{self.ratio} reference steps) before the snapshot, "
                           "Asselin-filtered as the physics' leapfrog filters it")
        self.iints = iints
        self.offsets = [offset for _, offset in cases]
        self.done = [0] * len(members)
        self.fine = {}
        self._set_starts(attributes)

    @classmethod
    def reopen(cls, path: Path) -> DatasetWriter:
        """The writer of an interrupted file, ``path``.partial, copied to
        ``path``.tmp and opened to go on (the partial file stays until the
        dataset is complete)."""
        self = cls.__new__(cls)
        self.path, self.tmp, self.partial = Path(path), temporary_file(path), partial_file(path)
        shutil.copyfile(self.partial, self.tmp)
        self.ds = netCDF4.Dataset(self.tmp, "a")
        self.ds.set_auto_mask(False)
        self.iints = [int(n) for n in self.ds["iint"][:]]
        self.ratio = int(getattr(self.ds, "physics_step_ratio", 0))
        self.offsets = [int(n) for n in self.ds["spinup_offset"][:]]
        self.done = [int(n) for n in self.ds["snapshots"][:]]
        self.fine = {}
        self._set_starts({name: self.ds.getncattr(name) for name in self.ds.ncattrs()})
        return self

    def _set_starts(self, attributes: Mapping) -> None:
        """Which snapshots hold the whole state, and what the others hold (a
        file of this version: check_resumed refuses any other's)."""
        self.starts_every = int(attributes.get("starts_every", 1))
        self.between = str(attributes.get("between_starts_variables", "")).split()

    def held(self, n: int) -> list[str]:
        """The variables snapshot n holds (b levels included)."""
        return held_at(n, self.starts_every, state_fields(), level_names(bool(self.ratio)),
                       self.between)

    progress = None          # a pompy.driver.Progress told of each snapshot written

    def to_write(self, records: int, together: bool) -> int:
        """The snapshots a generation of ``records`` + 1 a member has still to
        write: from each member's last start snapshot (members together: the
        earliest of theirs), none of a member already complete."""
        if together:
            return len(self.done) * (records + 1 - self.resumable_together())
        return sum(0 if done == records + 1 else records + 1 - self.resumable(m)
                   for m, done in enumerate(self.done))

    def resumable_together(self) -> int:
        """How many snapshots of every member a generation stepping them
        together keeps: the fewest any member's :meth:`resumable` keeps."""
        return min(map(self.resumable, range(len(self.done))))

    def resumable(self, member: int) -> int:
        """How many of a member's snapshots a resumed generation keeps: up to
        its last start snapshot, the last whole state to go on from (0: none)."""
        done = self.done[member]
        return done and (done - 1) // self.starts_every * self.starts_every + 1

    def _index(self, name, kind, values, long_name, dim=None, **attrs):
        v = self.ds.createVariable(name, kind, (dim or name,))
        v[:] = np.asarray(values)
        v.long_name = long_name
        v.setncatts(attrs)
        return v

    def write(self, member: int, n: int, record: Mapping, levels: Mapping | None = None) -> None:
        """Snapshot n of the file's member number ``member`` (0-based in the
        file), with the physics' b levels ``levels`` where the file has them."""
        want = self.iints[n] + self.offsets[member]
        if int(record["iint"]) != want:
            raise RuntimeError(f"snapshot {n} is at iint {record['iint']}, expected {want}")
        # between starts only the targets: the other chunks stay unwritten, taking no space
        values = {**record, **{b_level_name(name): v for name, v in (levels or {}).items()}}
        for stored in self.held(n):
            self.ds[stored][member, n] = to_cf(_numpy(values, stored))
        if n + 1 > self.done[member]:            # counted once every field is in
            self.done[member] = n + 1
            self.ds["snapshots"][member] = n + 1
        if self.progress is not None:
            m = int(self.ds["member"][member])
            self.progress.advance(f"member {m} snapshot {n}", member=m, snapshot=n)

    def read(self, member: int, n: int, device, dtype: torch.dtype) -> dict:
        """Snapshot n of the file's member ``member`` as a snapshot record
        (pom2k order, the core's device and dtype), to continue from: a
        start snapshot, the only ones that hold the whole state."""
        if not is_start(n, self.starts_every):
            raise RuntimeError(f"snapshot {n} holds no whole state to continue from (only "
                               f"those n with n % {self.starts_every} == 0 do)")
        record = {name: torch.from_numpy(np.ascontiguousarray(
            np.asarray(self.ds[name][member, n], dtype=np.float64).T)).to(device=device, dtype=dtype)
            for name in state_fields()}
        return dict(record, iint=self.iints[n] + self.offsets[member], time0=float(self.ds.time0))

    def hold_fine(self, member: int, n: int, take: Callable[[], dict]) -> None:
        """The fine state whose coarse-graining is snapshot n of the file's
        member ``member``, written: taken (``take``: a core's
        :meth:`~pompy.core.model.Core.snapshot`) where n is a start
        snapshot, the one :meth:`close` keeps should the generation stop
        before the member is complete (dropped once it is). A signal
        between the write and this leaves the start before held, from
        which :meth:`read_fine` goes on."""
        if n == len(self.iints) - 1:
            self.fine.pop(member, None)
        elif is_start(n, self.starts_every):
            self.fine[member] = (n, take())

    def read_fine(self, member: int, last: int, device, dtype: torch.dtype
                  ) -> tuple[int, dict] | None:
        """(n, the fine state) an interrupted generation kept of the file's
        member ``member``: of its start snapshot n, at most ``last`` (the
        last start written; the snapshots after n are written again, to the
        same bits), to continue from; None, said on stderr, where it is
        missing or of no such snapshot (the member then starts again from
        its set-up, to the same bits)."""
        path = fine_state_file(self.path, int(self.ds["member"][member]))
        try:
            record = torch.load(path, weights_only=True, mmap=True)
            n = int(record.pop("snapshot", -1))
            if not (0 <= n <= last and is_start(n, self.starts_every)
                    and int(record["iint"]) == self.iints[n] + self.offsets[member]):
                raise ValueError(f"it holds iint {int(record['iint'])}, of no start snapshot "
                                 f"up to the member's last ({last})")
        except FileNotFoundError:
            why = "missing"
        except Exception as err:          # noqa: BLE001 - whatever the file holds instead
            why = str(err) if isinstance(err, ValueError) else "not a state pompy wrote"
        else:
            return n, {name: v.to(device=device, dtype=dtype) if torch.is_tensor(v) else v
                       for name, v in record.items()}
        print(f"pompy generate: --resume: {path} ({why}): member "
              f"{int(self.ds['member'][member])} starts again from its set-up",
              file=sys.stderr, flush=True)
        return None

    def _keep_fine(self, members: list[int]) -> None:
        """Each unfinished member's fine state held (:meth:`hold_fine`) into
        its file, written whole before it replaces an older one; one that
        cannot be written (a full disk, a second signal) is left out, and
        its member starts again on --resume."""
        for member, (n, record) in self.fine.items():
            path = fine_state_file(self.path, members[member])
            tmp = temporary_file(path)
            try:
                torch.save({name: v.cpu() if torch.is_tensor(v) else v
                            for name, v in record.items()} | {"snapshot": n}, tmp)
                tmp.replace(path)
            except BaseException:       # noqa: BLE001 - the partial file is safe already
                tmp.unlink(missing_ok=True)
                path.unlink(missing_ok=True)

    def close(self, complete: bool, keep: bool = False) -> Path | None:
        """Close the file: complete, renamed to ``path`` (the fine states an
        interruption kept removed); else, with ``keep`` and a snapshot
        written, kept as ``path``.partial (returned) with the fine states
        held; else removed. No temporary file is left either way."""
        if self.progress is not None:
            self.progress.close()
        members = [int(m) for m in self.ds["member"][:]]
        self.ds.close()
        if complete:
            self.tmp.replace(self.path)
            self.partial.unlink(missing_ok=True)
            for m in members:
                fine_state_file(self.path, m).unlink(missing_ok=True)
            return self.path
        if keep and any(self.done):
            self.tmp.replace(self.partial)
            self._keep_fine(members)        # after: the partial file is safe whatever happens
            return self.partial
        self.tmp.unlink(missing_ok=True)
        return None

    def kept(self, members: list[int]) -> str:
        """What a partial file holds, in words."""
        total = len(self.iints)
        return ", ".join(f"member {m}: {d} of {total} snapshots" for m, d in zip(members, self.done))


def check_partial(path: Path, resume: bool, overwrite: bool) -> None:
    """--resume needs the .partial file of an interrupted generation; a
    fresh one refuses to start over it unless --overwrite."""
    partial = partial_file(path)
    if resume and not partial.is_file():
        raise InputError(f"--resume: {partial} does not exist: no interrupted generation to "
                         "continue here (run without --resume)")
    if not resume and partial.is_file() and not overwrite:
        raise InputError(f"{partial} holds an interrupted generation: --resume continues it, "
                         "--overwrite starts over")


def check_resumed(partial: Path, config: Config, attributes: dict) -> None:
    """The interrupted file was made with this generation's settings and
    sources (its attributes but RESUMABLE, and the namelist); else
    InputError naming what differs."""
    every = {"starts_every": 1}       # what a file that records none was made with
    want = every | dict(attributes, namelist=str(config.to_namelist()))
    try:
        with netCDF4.Dataset(partial) as ds:
            made = every | {name: ds.getncattr(name) for name in ds.ncattrs()}
    except OSError as err:
        raise InputError(f"--resume: {partial} cannot be read ({err}); --overwrite starts "
                         "over") from err
    differ = [name for name, value in want.items() if name not in RESUMABLE
              and (name not in made or str(made[name]) != str(value))]
    if differ:
        name = differ[0]
        old = made.get(name, "(none)")
        old = old.item() if isinstance(old, np.generic) else old
        raise InputError(f"--resume: {partial} was made with {name} = {_value_text(old)}, this "
                         f"generation has {_value_text(want[name])}; give the settings it was "
                         f"made with, or --overwrite to start over")


def _value_text(value) -> str:
    return repr(value) if not isinstance(value, str) or "\n" not in value else "another namelist"
