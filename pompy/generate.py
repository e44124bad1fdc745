"""``pompy generate``: training datasets from ensembles of model runs.

    pompy generate CONFIG --output DIR [--days D --every E] [--core explicit]
        [--reference_dti S --reference_dte S] [--spinup D] [--members N]
        [--perturb ic|wind] [--amplitude A] [--seed S] [--device cpu|cuda]
        [--dtype float64|float32] [--overwrite | --resume] [--force] [--set NAME=VALUE]
    torchrun --nproc_per_node=K -m pompy.generate CONFIG ...   (same arguments)

runs N members of a core, the reference, for D days each on the
generation fast path (Core.run_generation_day: no gradients, detached
snapshots) and writes ``DIR/dataset.nc``: per member and snapshot every
field a core needs to continue bit for bit (the variable table's
"snapshot" category; the grid once), at the first snapshot and every E
days; the format is documented in pompy.dataset, which reads it. E must
be a whole number of the reference's internal steps dti and D a whole
number of E.

Settings. The config's ``&generate`` group holds the settings (SETTINGS:
members, days, every, core, reference_dti, reference_dte, spinup,
perturb, amplitude, seed, device, dtype), so that ``pompy generate
CONFIG --output DIR`` needs no more; a flag given overrides the group.

The reference. The trajectories are the targets a corrector learns, so
they come from a better model than the physics that trains on them (the
config's ``&train`` core at the config's dti): by default pom2k's own
split-explicit core (``core``), at an internal step ``reference_dti``
shorter than the config's (out of external steps of ``reference_dte``;
pompy.generate.reference_config), on the same grid. The dataset's
``target_model`` attribute says which model made it (core, dti, dte,
isplit, grid) and ``config_dti`` the physics' step; the trainer reads it
and warns when the two are the same model and step. ``spinup`` days run
from the set-up before the first snapshot, unrecorded.

Interrupts. SIGINT and SIGTERM alike close the file: no temporary file
stays, the snapshots finished (each member's count in the variable
``snapshots``) are kept in ``DIR/dataset.nc.partial``, and the command
says so with the command that continues; ``--resume`` goes on from them
to the same bits as an uninterrupted run (the settings and sources
checked against the partial file's).

Members. Member 0 is the unperturbed run. Member m > 0 is perturbed from
the seed pair (S, m): its perturbation seed is
``numpy.random.SeedSequence([S, m]).generate_state(1, numpy.uint64)[0] >> 1``
(a non-negative int64, stored per member as ``perturbation_seed``), and

    --perturb ic (initial conditions, the default): after the set-up, at
        every wet point (fsm = 1) and level k = 1..kb-1, t and tb (equal at
        the set-up) get A * z with z = numpy.random.default_rng(
        perturbation_seed).standard_normal((im, jm, kb)) in pom2k's (i, j,
        k) order; A = --amplitude in degC (default 0.01). The density rho
        is then recomputed by the core's dens, as the set-up computes it;
        the grid (rmean, tclim, and the boundary values) stays the
        unperturbed one, so every member shares one grid.

    --perturb wind (forcing): the member runs with its own wind factor
        W_m = wind_factor * (1 + A z), z = numpy.random.default_rng(
        perturbation_seed).standard_normal() (one draw), wind_factor the
        config's (default 1) and A = --amplitude, relative (default 0.1).
        The config parameter wind_factor scales the seamount's wind stress,
        which surface_forcing recomputes every step (ramp * 1e-4 m2 s-2,
        tapered in j): a change to wusurf itself would be overwritten at
        the next step, so the factor is a parameter of the run (the core's
        params), not a field of the state. The initial state is member 0's.
        Refused for the box (iproblem 2), which has no wind.

    Every member's factor is stored as ``wind_factor(member)`` (the config's
    for member 0 and for ic members): the snapshots of member m continue
    bit for bit in a core whose config has wind_factor = wind_factor[m]
    (or whose params["wind_factor"] is set to it), not in one with the
    config's. The Fortran oracle has no wind factor and refuses one other
    than 1 (pompy.oracle.driver.check_supported).

torchrun. Each process reads RANK and WORLD_SIZE (as torchrun sets them;
default 0 and 1), runs members m with m % WORLD_SIZE == RANK and writes its
own ``DIR/dataset_rank<RANK>.nc``; no process group is made (the ranks do
not talk). pompy.dataset.SnapshotDataset combines the files. With
``--device cuda`` a rank runs on ``cuda:LOCAL_RANK``.

The core comes from the registry (pompy.cores: name -> the Core subclass,
its CFL check on the set-up, what it supports); any core on pompy.core.model.Core works, as only
Core's interface is used (run_initialization, capture, snapshot, restore,
inject, run_generation_day). Before anything runs the command checks the
schedule, the output folder (an existing dataset is refused without
--overwrite), the device, the memory and the disk, and prints the
dataset's estimated size on stderr; the file is written under a temporary
name and renamed when complete, so a failed or interrupted generation
leaves no partial dataset.
"""
from __future__ import annotations

if __name__ == "__main__":      # torchrun's workers: tcmalloc before torch loads
    from pompy.utils.allocator import reexec  # (pompy.utils.allocator)
    reexec()

import argparse
import dataclasses
import math
import os
import shlex
import shutil
import signal
import sys
import time as _time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import f90nml
import netCDF4
import numpy as np
import torch

from pompy import __version__, cores, variables
from pompy.calls import apply
from pompy.config import Config, ConfigError, load_config
from pompy.core.ensemble import Ensemble
from pompy.core.model import Core, forward_only
from pompy.dataset import FORMAT, dataset_file, grid_fields, state_fields
from pompy.driver import COMPILED, COMPILING, check_device, check_memory, prepare_output
from pompy.errors import InputError, ModelStop
from pompy.io import _axes, _create, _define, _to_cf
from pompy.provenance import source_hash
from pompy.resources import gigabytes

PERTURBATIONS = ("ic", "wind")
# --amplitude of each kind when not given
DEFAULT_AMPLITUDES = {"ic": 0.01,      # degC: well below the seamount's vertical T contrast (~15 degC)
                      "wind": 0.1}     # relative: member wind factors of about 1 +- 0.1
# HDF5's own bytes in an uncompressed dataset (superblock, object headers,
# attributes): file size less the values' bytes, measured 113.0 to 115.3 kB
# on seamount grids of 8x7x5, 20x15x8 and 65x49x21 with 1 to 3 members and
# 2 to 9 snapshots (the ~110 variable headers do not grow with the grid).
# The estimate is then within 0.5 % of the file (0.01 % at 65x49x21).
HEADER_BYTES = 114_000
# steps (between snapshots, in the run) within this of a whole number count
# as whole: a value printed with the nearest-valid message reads back valid
STEP_TOLERANCE = 1e-4
PACKAGE = Path(__file__).resolve().parent


# ---------------------------------------------------------------- schedule

def _days(steps: int, config: Config) -> str:
    """A number of steps in days, with digits enough to read back within STEP_TOLERANCE."""
    return f"{steps * config.dti / 86400:.{max(6, len(str(steps)) + 5)}g}"


def _whole(value: float, unit: float, config: Config, what: str, unit_text: str) -> int:
    """value / unit as a whole number >= 1, else InputError naming the nearest valid values."""
    ratio = value / unit
    n = round(ratio)
    if n >= 1 and abs(ratio - n) <= STEP_TOLERANCE:
        return n
    steps = unit * 86400 / config.dti
    near = [k for k in (math.floor(ratio), math.ceil(ratio)) if k >= 1]
    nearest = " or ".join(dict.fromkeys(_days(round(k * steps), config) for k in near))
    raise InputError(f"{what}: not a multiple of {unit_text}; nearest: {nearest} days")


def schedule(config: Config, days: float, every: float) -> tuple[int, int]:
    """(internal steps between snapshots, snapshots after time 0) for a run of
    ``days`` with a snapshot every ``every`` days; InputError unless every
    is a whole number of dti and days a whole number of every."""
    dti_days = config.dti / 86400
    steps = _whole(every, dti_days, config, f"--every {every:g}", f"dti = {config.dti:g} s")
    every_days = steps * dti_days
    records = _whole(days, every_days, config, f"--days {days:g}",
                     f"--every = {_days(steps, config)} days ({steps} steps of dti = {config.dti:g} s)")
    return steps, records


# ---------------------------------------------------------------- the &generate group

GENERATE_GROUP = "generate"


class Setting(NamedTuple):
    """One generation setting: a flag (``--name``) and a name of the
    config's ``&generate`` group; the flag overrides the group, the group
    the default."""
    name: str
    type: type
    default: object
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("days", float, None, "model days each member runs (a whole number of --every)"),
    Setting("every", float, None, "days between snapshots (a whole number of the reference's dti; "
            "for training, one correction cycle)"),
    Setting("members", int, 1, "ensemble size N"),
    Setting("core", str, cores.DEFAULT, "the reference core that makes the trajectories"),
    Setting("reference_dti", float, 0.0, "the reference's internal step dti in s (0: the "
            "config's dte*isplit); the physics that trains on the data keeps the config's"),
    Setting("reference_dte", float, 0.0, "the reference's external step dte in s (0: the "
            "config's dte); isplit = reference_dti / dte, a whole number"),
    Setting("spinup", float, 0.0, "days the reference runs from the set-up (and the "
            "perturbation) before the first snapshot, unrecorded: the data then starts from a "
            "spun-up state (a whole number of the reference's dti)"),
    Setting("perturb", str, "ic", "perturbation of members m > 0 (ic: initial temperature noise; "
            "wind: a wind stress factor per member)"),
    Setting("amplitude", float, None, "perturbation amplitude: degC for ic (default 0.01), "
            "relative for wind (default 0.1)"),
    Setting("seed", int, 0, "ensemble seed S"),
    Setting("device", str, "cpu", "torch device: cpu, cuda (cuda:LOCAL_RANK under torchrun), "
            "cuda:N"),
    Setting("dtype", str, "float64", "precision of the core (stored as float64)"),
)
SETTING = {s.name: s for s in SETTINGS}


def read_generate_group(path: str | Path) -> dict[str, object]:
    """The ``&generate`` group of a config file ({} if none), each value
    of its setting's type; an unknown name or a value of another type is
    an InputError naming it."""
    try:
        nml = f90nml.read(str(path))
    except (OSError, ValueError, AssertionError, StopIteration, IndexError, KeyError,
            TypeError) as err:
        raise InputError(f"cannot read {path}: {err}") from err
    group = {str(k).lower(): v for k, v in dict(nml.get(GENERATE_GROUP, {})).items()}
    values = {}
    for name, value in group.items():
        if name not in SETTING:
            raise InputError(f"{path}: &{GENERATE_GROUP} has unknown setting {name!r}; known: "
                             f"{', '.join(SETTING)}")
        kind = SETTING[name].type
        ok = (isinstance(value, str) if kind is str else
              isinstance(value, int) and not isinstance(value, bool) if kind is int else
              isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok:
            raise InputError(f"{path}: &{GENERATE_GROUP} {name} = {value!r}: expected a "
                             f"{kind.__name__}")
        values[name] = kind(value)
    return values


def resolve_settings(args: argparse.Namespace) -> argparse.Namespace:
    """The generation settings: defaults, then the config's &generate
    group, then the flags given (a flag not given parses to None)."""
    merged = {s.name: s.default for s in SETTINGS} | read_generate_group(args.config)
    merged |= {s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name) is not None}
    if not (merged["spinup"] >= 0 and math.isfinite(merged["spinup"])):
        raise InputError(f"spinup = {merged['spinup']}: a number of days >= 0")
    for name in ("days", "every"):
        if merged[name] is None:
            raise InputError(f"--{name}: give it, or set {name} in the config's &{GENERATE_GROUP} "
                             "group")
        if not (merged[name] > 0 and math.isfinite(merged[name])):
            raise InputError(f"{name} = {merged[name]}: a number of days > 0")
    if merged["dtype"] not in ("float64", "float32"):
        raise InputError(f"dtype = {merged['dtype']!r}: float64 or float32")
    return argparse.Namespace(**merged)


def reference_config(config: Config, dti: float = 0.0, dte: float = 0.0) -> Config:
    """The config the reference runs under: ``config`` with the internal
    step ``dti`` (0: the config's) out of external steps of ``dte`` (0:
    the config's dte), isplit = dti / dte a whole number; all else the
    config's. InputError naming a step that does not divide."""
    if not (dti >= 0 and dte >= 0 and math.isfinite(dti) and math.isfinite(dte)):
        raise InputError(f"reference_dti = {dti}, reference_dte = {dte}: >= 0 (0: the config's)")
    if dti == 0 and dte == 0:
        return config
    dti = dti or config.dti
    dte = dte or config.dte
    isplit = round(dti / dte)
    if isplit < 1 or not math.isclose(isplit * dte, dti, rel_tol=1e-12):
        raise InputError(f"reference_dti = {dti:g} s is not a whole number of reference_dte = "
                         f"{dte:g} s; set reference_dte to a divisor of it")
    try:
        return dataclasses.replace(config, dte=dte, isplit=isplit)
    except ConfigError as err:
        raise InputError(f"the reference (dte = {dte:g} s, isplit = {isplit}): {err}") from err


def describe_model(core: str, config: Config) -> str:
    """The model that made a dataset's trajectories, in words."""
    return (f"pompy {core} core ({cores.get(core).description}) at dti = {config.dti:g} s "
            f"(dte = {config.dte:g} s x isplit = {config.isplit}), {config.im}x{config.jm}x"
            f"{config.kb}")


# ---------------------------------------------------------------- members

def member_seed(seed: int, member: int) -> int:
    """Member m's perturbation seed from the run's seed S: a non-negative
    int64 drawn from SeedSequence([S, m]); -1 for member 0 (unperturbed)."""
    if member == 0:
        return -1
    return int(np.random.SeedSequence([seed, member]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def ic_perturbation(fsm: np.ndarray, kb: int, seed: int, amplitude: float) -> np.ndarray:
    """The ic perturbation of t (pom2k order): amplitude * N(0, 1) at wet
    points, levels 1..kb-1 (the module docstring says how it is drawn)."""
    noise = np.random.default_rng(seed).standard_normal((*fsm.shape, kb))
    wet = fsm[:, :, None] * (np.arange(kb) < kb - 1)
    return amplitude * (noise * wet)


def wind_factor(config: Config, perturb: str, seed: int, amplitude: float) -> float:
    """The wind factor of a member of perturbation seed ``seed`` (-1: member
    0): the config's, times 1 + amplitude * one N(0, 1) draw for wind."""
    if perturb != "wind" or seed < 0:
        return config.wind_factor
    return config.wind_factor * (1.0 + amplitude * np.random.default_rng(seed).standard_normal())


def perturb_ic(core: Core, seed: int, amplitude: float) -> None:
    """t and tb of a set-up core perturbed (ic_perturbation), rho recomputed
    by the core's own dens as the set-up does."""
    fsm = core.fsm.detach().cpu().double().numpy()
    delta = torch.from_numpy(ic_perturbation(fsm, core.config.kb, seed, amplitude))
    delta = delta.to(device=core.device, dtype=core.dtype)
    s = dict(core.state)
    s["t"], s["tb"] = s["t"] + delta, s["tb"] + delta
    with torch.no_grad():
        apply(s, core.params, "dens(s,t,rho)", routines=core.routines)
    core.inject({name: s[name] for name in ("t", "tb", "rho")})


# ---------------------------------------------------------------- the file

def _count(config: Config, names: list[str]) -> int:
    return sum(math.prod(variables.shape(n, config.im, config.jm, config.kb)) for n in names)


def estimate_dataset_bytes(config: Config, members: int, records: int) -> int:
    """The size of a dataset file of ``members`` members and ``records``
    snapshots (time 0 included): the values' bytes from the variable table
    (float64, uncompressed) plus HEADER_BYTES, measured."""
    coordinates = config.im + config.jm + 2 * config.kb           # x, y, sigma, sigma_w
    grid = 8 * (coordinates + _count(config, grid_fields()))
    state = 8 * _count(config, state_fields())
    return (grid + members * records * state + records * (8 + 4) + members * (4 + 8 + 8)
            + HEADER_BYTES)


def _numpy(record: Mapping, name: str) -> np.ndarray:
    return record[name].detach().to("cpu", torch.float64).numpy()


class DatasetWriter:
    """A dataset file (pompy.dataset's format) written snapshot by snapshot
    into ``path``.tmp, renamed to ``path`` by :meth:`close` (``complete``),
    or, interrupted, kept as ``path``.partial for ``--resume``. The
    variable ``snapshots(member)`` counts each member's snapshots written
    whole, from time 0 (all of them in a complete file)."""

    def __init__(self, path: Path, config: Config, grid: Mapping, members: list[int],
                 seeds: list[int], wind_factors: list[float], iints: list[int], time0: float,
                 attributes: dict):
        self.path, self.tmp, self.partial = Path(path), temporary_file(path), partial_file(path)
        ds = self.ds = _create(self.tmp, config, f"{config.title}: pompy generate dataset",
                               attributes)
        ds.createDimension("member", len(members))
        ds.createDimension("time", len(iints))
        self._index("member", "i4", members, "ensemble member (0: unperturbed)",
                    standard_name="realization")
        self._index("perturbation_seed", "i8", seeds,
                    "seed of numpy.random.default_rng for the member's perturbation (-1: none)",
                    dim="member")
        self._index("wind_factor", "f8", wind_factors,
                    "factor on the wind stress the member ran with (config wind_factor; "
                    "a restart from its snapshots needs it)", dim="member")
        self._index("snapshots", "i4", [0] * len(members),
                    "the member's snapshots written whole, from time 0 (all: complete)",
                    dim="member")
        t = self._index("time", "f8", [config.dti * n / 86400 + time0 for n in iints], "model time")
        t.units, t.standard_name, t.calendar, t.axis = \
            "days since 2000-01-01 00:00:00", "time", "standard", "T"
        self._index("iint", "i4", iints, "internal step number", dim="time")
        grid_np = {name: _numpy(grid, name) for name in grid_fields()}
        _axes(ds, grid_np, compress=False)
        for name in grid_fields():
            if name not in ds.variables:                 # east_e, ... are in already
                _define(ds, name, compress=False, located=True)[:] = _to_cf(grid_np[name])
        for name in state_fields():
            _define(ds, name, ("member", "time"), compress=False, located=True)
        self.iints = iints
        self.done = [0] * len(members)

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
        self.done = [int(n) for n in self.ds["snapshots"][:]]
        return self

    def _index(self, name, kind, values, long_name, dim=None, **attrs):
        v = self.ds.createVariable(name, kind, (dim or name,))
        v[:] = np.asarray(values)
        v.long_name = long_name
        v.setncatts(attrs)
        return v

    def write(self, member: int, n: int, record: Mapping) -> None:
        """Snapshot n of the file's member number ``member`` (0-based in the file)."""
        if int(record["iint"]) != self.iints[n]:
            raise RuntimeError(f"snapshot {n} is at iint {record['iint']}, expected {self.iints[n]}")
        for name in state_fields():
            self.ds[name][member, n] = _to_cf(_numpy(record, name))
        if n + 1 > self.done[member]:            # counted once every field is in
            self.done[member] = n + 1
            self.ds["snapshots"][member] = n + 1

    def read(self, member: int, n: int, device, dtype: torch.dtype) -> dict:
        """Snapshot n of the file's member ``member`` as a snapshot record
        (pom2k order, the core's device and dtype), to continue from."""
        record = {name: torch.from_numpy(np.ascontiguousarray(
            np.asarray(self.ds[name][member, n], dtype=np.float64).T)).to(device=device, dtype=dtype)
            for name in state_fields()}
        return dict(record, iint=self.iints[n], time0=float(self.ds.time0))

    def close(self, complete: bool, keep: bool = False) -> Path | None:
        """Close the file: complete, renamed to ``path``; else, with
        ``keep`` and a snapshot written, kept as ``path``.partial
        (returned); else removed. No temporary file is left either way."""
        self.ds.close()
        if complete:
            self.tmp.replace(self.path)
            self.partial.unlink(missing_ok=True)
            return self.path
        if keep and any(self.done):
            self.tmp.replace(self.partial)
            return self.partial
        self.tmp.unlink(missing_ok=True)
        return None

    def kept(self, members: list[int]) -> str:
        """What a partial file holds, in words."""
        total = len(self.iints)
        return ", ".join(f"member {m}: {d} of {total} snapshots" for m, d in zip(members, self.done))


def temporary_file(path: Path) -> Path:
    """Where a dataset file is written until it is complete."""
    return Path(path).with_name(Path(path).name + ".tmp")


def partial_file(path: Path) -> Path:
    """Where an interrupted dataset file's finished snapshots are kept
    (the readers' patterns, dataset.nc and dataset_rank*.nc, miss it)."""
    return Path(path).with_name(Path(path).name + ".partial")


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a generation (raised by the handler that
    run_command installs, so that the files are closed as for Ctrl-C)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ---------------------------------------------------------------- generation

def distribution(environ: Mapping[str, str]) -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) as torchrun sets them; (0, 1, 0) without."""
    values = {}
    for name, default in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", None)):
        text = environ.get(name, default)
        if text is None:
            continue
        try:
            values[name] = int(text)
        except ValueError:
            raise InputError(f"environment variable {name}={text!r} is not an integer") from None
    rank, world = values["RANK"], values["WORLD_SIZE"]
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"RANK={rank}, WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    return rank, world, values.get("LOCAL_RANK", rank)


def _device(device: str, local_rank: int, world: int) -> str:
    """Each rank on its own GPU (cuda:LOCAL_RANK) when a bare 'cuda' is asked for."""
    return f"cuda:{local_rank}" if device == "cuda" and world > 1 else device


def _set_up(core_name: str, config: Config, device: str, dtype: str, compile: bool = False) -> Core:
    spec = cores.get(core_name)
    options = {"compile": True} if compile else {}       # a registered core may not take it
    core = spec.make(config, device=device, dtype=getattr(torch, dtype), **options)
    core.run_initialization()
    spec.check_cfl(config, core.state)          # the set-up's own grid, as pompy run does
    return core


def _run_member(core: Core, start: dict, writer: DatasetWriter, local: int, perturb: str,
                seed: int, amplitude: float, wind: float, steps: int, records: int) -> None:
    """One member from the set-up ``start`` with wind factor ``wind``:
    perturbed (seed >= 0), its time-0 snapshot, then ``records`` snapshots
    every ``steps`` steps; a member the writer holds snapshots of (an
    interrupted file, --resume) goes on from its last one."""
    done = writer.done[local]
    if done:
        core.restore({**start, **writer.read(local, done - 1, core.device, core.dtype)})
    else:
        core.restore(start)
    core.params = dict(core.params, wind_factor=wind)     # what surface_forcing reads
    if not done:
        if seed >= 0 and perturb == "ic":
            perturb_ic(core, seed, amplitude)
        if writer.iints[0]:                  # the spin-up, unrecorded
            core.run_generation_day(writer.iints[0], capture_interval=0)
        writer.write(local, 0, core.snapshot())
    for n in range(max(done, 1), records + 1):
        (record,) = core.run_generation_day(steps, capture_interval=steps)
        core.generation_records.clear()     # written: the core need not keep it
        writer.write(local, n, record)


# On the CPU an Ensemble pays only while a member's fields are small:
# validation/ensemble.py, per member and step at B = 8 against B = 1, 1
# thread, in inference mode: 0.37-0.41x at 21x17x11, 0.49x at 33x25x21,
# 0.45-0.69x at 45x35x21 (33,075 cells), 0.97-1.08x at 55x41x21,
# 0.96-1.15x at 65x49x21; at 128x128x21 (B = 4) 1.31x. Beyond this many
# cells a CPU process steps its members one after another.
BATCH_CELLS = 40_000


def batched(config: Config, core: str, perturb: str, members: int, dtype: str,
            compile: bool = False, device: str = "cpu") -> bool:
    """Whether a process runs its members as one Ensemble: the explicit
    core, more than one member, with ic perturbations (one set of
    parameters) or, in float64, wind members (a wind factor each:
    Ensemble.set_member_params), and on the CPU a grid of at most
    BATCH_CELLS cells, where it pays; each member is its single run to the
    last bit either way. On a GPU always (not measured: no GPU has been
    lent; a batch there fills a device a small grid leaves idle). Not a
    core whose registry entry says no ``ensembles`` (the implicit core: its
    members batched are their single runs' bits, its PCG run for all at
    once, but that has been timed in training alone), nor float32 wind
    members (their factor would round otherwise), nor with ``compile``: compiled graphs do not serve the
    ensemble's vmap, and one compiled core stepping the members in turn is
    faster still."""
    small = torch.device(device).type != "cpu" or config.im * config.jm * config.kb <= BATCH_CELLS
    return not compile and cores.get(core).ensembles and members > 1 and small \
        and (perturb == "ic" or dtype == "float64")


def _run_ensemble(model: Core, start: dict, writer: DatasetWriter, members: list[int],
                  perturb: str, seeds: list[int], amplitude: float, winds: list[float],
                  steps: int, records: int) -> None:
    """The process's members as one Ensemble: each perturbed from ``start``
    and given its wind factor as _run_member does, then stepped together;
    with snapshots already written (--resume), from the last one every
    member has."""
    done = min(writer.done)
    initial = []
    for local, m_seed in enumerate(seeds):
        if done:
            model.restore({**start, **writer.read(local, done - 1, model.device, model.dtype)})
        else:
            model.restore(start)
            if m_seed >= 0 and perturb == "ic":
                perturb_ic(model, m_seed, amplitude)
        initial.append(model.snapshot())
    ens = Ensemble(model, len(members))
    for local, (record, wind) in enumerate(zip(initial, winds)):
        ens.load_member(local, {n: record[n] for n in ens.state if n in record})
        if wind != model.params["wind_factor"]:
            ens.set_member_params(local, wind_factor=wind)
    spin = writer.iints[0]
    try:
        with forward_only(model):
            if not done:
                ens.advance(spin)            # the spin-up, unrecorded (none: iint 0)
                for local, record in enumerate(initial):
                    writer.write(local, 0, ens.snapshot(local) if spin else record)
            for n in range(max(done, 1), records + 1):
                ens.advance(spin + n * steps)
                for local in range(len(members)):
                    writer.write(local, n, ens.snapshot(local))
    except ModelStop as exc:
        exc.member = members[exc.member]
        raise


class Plan(NamedTuple):
    """What one process will do, known before anything runs."""
    path: Path                 # its dataset file
    members: list[int]         # its members (m % world == rank)
    steps: int                 # internal steps between snapshots
    records: int               # snapshots after time 0
    device: str
    rank: int
    world: int


def plan(config: Config, output_dir: Path, days: float, every: float, core: str, members: int,
         perturb: str, amplitude: float, seed: int, device: str, dtype: str, overwrite: bool,
         force: bool, environ: Mapping[str, str], compile: bool = False,
         resume: bool = False) -> Plan:
    """Every check before the run (InputError naming what is wrong): the
    choices, the torchrun split, the schedule, the device, the output
    folder and file, memory and disk."""
    _check_choices(core, members, perturb, amplitude, seed)
    if compile and not cores.get(core).compile:
        raise InputError(f"--compile: the core {core!r} takes no compile option")
    if perturb == "wind" and config.iproblem == 2:
        raise InputError("--perturb wind: the box (iproblem=2) has no wind stress to perturb; "
                         "use --perturb ic")
    rank, world, local_rank = distribution(environ)
    if members < world:
        raise InputError(f"--members {members} < WORLD_SIZE = {world}: rank {world - 1} "
                         "would have no member")
    steps, records = schedule(config, days, every)
    device = _device(device, local_rank, world)
    check_device(core, device, dtype)
    mine = list(range(rank, members, world))
    path = dataset_file(output_dir, rank, world)
    prepare_output(Path(output_dir), (path,), overwrite)
    _check_partial(path, resume, overwrite)
    check_memory(config, core, dtype, force,
                 len(mine) if batched(config, core, perturb, len(mine), dtype, compile, device) else 1)
    _check_disk(Path(output_dir), estimate_dataset_bytes(config, len(mine), records + 1), force)
    return Plan(path, mine, steps, records, device, rank, world)


def generate(config: Config, output_dir: Path, days: float, every: float, core: str = cores.DEFAULT,
             members: int = 1, perturb: str = "ic", amplitude: float | None = None,
             seed: int = 0, device: str = "cpu", dtype: str = "float64", overwrite: bool = False,
             force: bool = False, environ: Mapping[str, str] | None = None,
             log=None, compile: bool = False, reference_dti: float = 0.0,
             reference_dte: float = 0.0, resume: bool = False, spinup: float = 0.0) -> Path:
    """Write this process's dataset file (see the module docstring) and
    return its path; InputError before anything runs for bad input,
    ModelStop (with ``member`` set) if a member blows up. ``amplitude``:
    None for the kind's default (DEFAULT_AMPLITUDES). ``environ``:
    where RANK and WORLD_SIZE are read (default os.environ); ``log``: the
    stream of the size line and per-member lines (default stderr);
    ``compile``: the core's steps as whole torch.compile graphs, the members
    one after another (a dataset equal to the uncompiled one's).
    ``reference_dti``, ``reference_dte``: the reference's steps
    (reference_config; 0: the config's). ``spinup``: days run before the
    first snapshot, unrecorded (a whole number of dti). ``resume``: go on from the
    ``.partial`` file an interrupted generation of the same settings kept.
    Interrupted (KeyboardInterrupt, or :class:`Interrupted`), the finished
    snapshots are kept in the ``.partial`` file (``self.kept`` of the
    exception: that file and what it holds) and no temporary file stays."""
    log = sys.stderr if log is None else log
    if amplitude is None and perturb in DEFAULT_AMPLITUDES:
        amplitude = DEFAULT_AMPLITUDES[perturb]
    physics = config
    config = reference_config(config, reference_dti, reference_dte)
    p = plan(config, output_dir, days, every, core, members, perturb, amplitude, seed, device,
             dtype, overwrite, force, os.environ if environ is None else environ, compile, resume)
    spin = _whole(spinup, config.dti / 86400, config, f"spinup {spinup:g}",
                  f"dti = {config.dti:g} s") if spinup > 0 else 0
    attributes = _attributes(config, core, dtype, days, p.steps, members, perturb, amplitude,
                             seed, p.rank, p.world, compile, physics)
    attributes["spinup_steps"] = spin
    if resume:
        _check_resumed(partial_file(p.path), config, attributes)
    prefix = f"pompy generate [rank {p.rank}/{p.world}]" if p.world > 1 else "pompy generate"
    size = estimate_dataset_bytes(config, len(p.members), p.records + 1)
    print(f"{prefix}: {p.path} will take about {size / 1e6:.3g} MB ({len(p.members)} members x "
          f"{p.records + 1} snapshots, every {p.steps} steps of the {core} core at dti = "
          f"{config.dti:g} s)", file=log, flush=True)
    if compile:
        print(f"{prefix}: {COMPILING}", file=log, flush=True)
    model = _set_up(core, config, p.device, dtype, compile)
    start = model.capture()
    seeds = [member_seed(seed, m) for m in p.members]
    winds = [wind_factor(config, perturb, m_seed, amplitude) for m_seed in seeds]
    if resume:
        writer = DatasetWriter.reopen(p.path)
        print(f"{prefix}: resuming {writer.partial} ({writer.kept(p.members)})", file=log,
              flush=True)
    else:
        writer = DatasetWriter(p.path, config, start, p.members, seeds, winds,
                               [spin + n * p.steps for n in range(p.records + 1)],
                               start["time0"],
                               attributes)
    complete = False
    try:
        if batched(config, core, perturb, len(p.members), dtype, compile, p.device):
            began = _time.perf_counter()
            _run_ensemble(model, start, writer, p.members, perturb, seeds, amplitude, winds,
                          p.steps, p.records)
            print(f"{prefix}: members {', '.join(map(str, p.members))} together: "
                  f"{p.records * p.steps} steps in {_time.perf_counter() - began:.2f} s",
                  file=log, flush=True)
            complete = True
            return p.path
        for local, (m, m_seed, wind) in enumerate(zip(p.members, seeds, winds)):
            if writer.done[local] == p.records + 1:
                continue                  # finished before the interruption
            began = _time.perf_counter()
            try:
                _run_member(model, start, writer, local, perturb, m_seed, amplitude, wind,
                            p.steps, p.records)
            except ModelStop as exc:
                exc.member = m            # for the message: which member blew up
                raise
            print(f"{prefix}: member {m}: {p.records * p.steps} steps in "
                  f"{_time.perf_counter() - began:.2f} s", file=log, flush=True)
        complete = True
    except (KeyboardInterrupt, Interrupted) as exc:
        kept = writer.close(False, keep=True)
        exc.kept = (kept, writer.kept(p.members) if kept is not None else "")
        writer = None
        raise
    finally:
        if writer is not None:
            writer.close(complete)       # renamed into place only when complete
    return p.path


def _check_partial(path: Path, resume: bool, overwrite: bool) -> None:
    """--resume needs the .partial file of an interrupted generation; a
    fresh one refuses to start over it unless --overwrite."""
    partial = partial_file(path)
    if resume and not partial.is_file():
        raise InputError(f"--resume: {partial} does not exist: no interrupted generation to "
                         "continue here (run without --resume)")
    if not resume and partial.is_file() and not overwrite:
        raise InputError(f"{partial} holds an interrupted generation: --resume continues it, "
                         "--overwrite starts over")


# attributes that may differ between an interrupted file and its resumption
_RESUMABLE = {"history", "torch_compile"}


def _check_resumed(partial: Path, config: Config, attributes: dict) -> None:
    """The interrupted file was made with this generation's settings and
    sources; else InputError naming what differs."""
    want = dict(attributes, namelist=str(config.to_namelist()))
    try:
        with netCDF4.Dataset(partial) as ds:
            made = {name: ds.getncattr(name) for name in ds.ncattrs()}
    except OSError as err:
        raise InputError(f"--resume: {partial} cannot be read ({err}); --overwrite starts "
                         "over") from err
    differ = [name for name, value in want.items() if name not in _RESUMABLE
              and (name not in made or str(made[name]) != str(value))]
    if differ:
        name = differ[0]
        old = made.get(name, "(none)")
        old = old.item() if isinstance(old, np.generic) else old
        raise InputError(f"--resume: {partial} was made with {name} = {value_text(old)}, this "
                         f"generation has {value_text(want[name])}; give the settings it was "
                         f"made with, or --overwrite to start over")


def value_text(value) -> str:
    return repr(value) if not isinstance(value, str) or "\n" not in value else "another namelist"


def _check_choices(core: str, members: int, perturb: str, amplitude: float, seed: int) -> None:
    if core not in cores.CORES:
        raise InputError(f"--core {core}: one of {', '.join(cores.CORES)}")
    if perturb not in PERTURBATIONS:
        raise InputError(f"--perturb {perturb}: one of {', '.join(PERTURBATIONS)}")
    if members < 1 or seed < 0 or amplitude is None or not (amplitude >= 0
                                                             and math.isfinite(amplitude)):
        raise InputError(f"--members {members}, --seed {seed}, --amplitude {amplitude}: need "
                         "members >= 1, seed >= 0, a finite amplitude >= 0")


def _check_disk(folder: Path, size: int, force: bool) -> None:
    free = shutil.disk_usage(folder).free
    if size > free and not force:
        raise InputError(f"the dataset needs about {gigabytes(size)} and {folder} has "
                         f"{gigabytes(free)} free; give --force to write it anyway")


def _attributes(config: Config, core: str, dtype: str, days: float, steps: int, members: int,
                perturb: str, amplitude: float, seed: int, rank: int, world: int,
                compile: bool = False, physics: Config | None = None) -> dict:
    every = steps * config.dti / 86400
    physics = config if physics is None else physics
    return {
        "target_model": describe_model(core, config),
        "config_dti": physics.dti, "config_dte": physics.dte,
        "dataset_format": FORMAT, "core": core, "dtype": dtype, "source_hash": source_hash(),
        "torch_compile": COMPILED if compile else "none",
        "torch_version": torch.__version__, "pompy_version": __version__,
        "days": float(days), "every_days": every, "steps_between_snapshots": steps,
        "dti": config.dti, "time0": 0.0, "members": members, "seed": seed,
        "perturb": perturb, "amplitude": amplitude,
        "perturbation": PERTURBATION_TEXT[perturb],
        "rank": rank, "world_size": world,
        "member_split": f"member m is in the file of rank m % {world}",
        "state_variables": " ".join(state_fields()), "grid_variables": " ".join(grid_fields()),
    }


PERTURBATION_TEXT = {   # the dataset's "perturbation" attribute, by kind
    "ic": ("member 0 unperturbed; member m > 0: t and tb += amplitude (degC) * "
           "numpy.random.default_rng(perturbation_seed[m]).standard_normal((im, jm, kb)) at "
           "fsm = 1, k = 1..kb-1 (pom2k order), then rho = dens(s, t)"),
    "wind": ("member 0 unperturbed; member m > 0: the initial state of member 0, run with "
             "wind_factor[m] = (the namelist's wind_factor) * (1 + amplitude * "
             "numpy.random.default_rng(perturbation_seed[m]).standard_normal()), the factor on "
             "the seamount's wind stress; restart its snapshots with that wind_factor"),
}


# ---------------------------------------------------------------- command line

DESCRIPTION = """\
Run N members of a core, the reference, for --days and write a NetCDF
training dataset, DIR/dataset.nc (DIR/dataset_rank<k>.nc under torchrun),
with every field a core needs to restart bit for bit at the first snapshot
and every --every days (a whole number of the reference's dti; --days a
whole number of --every). Format and reader: pompy.dataset
(SnapshotDataset). The settings come from the config's &generate group,
then the flags. The reference (--core, default the explicit core) may step
a shorter --reference_dti than the config's dti, which the physics that
trains on the data keeps; the dataset says which model made it.

SIGINT or SIGTERM: no temporary file stays; the finished snapshots are kept
in DIR/dataset.nc.partial and --resume continues from them to the bits of
an uninterrupted run.

Members: member 0 is unperturbed; member m > 0 is perturbed from the pair
(--seed S, m), with numpy default_rng seeded from SeedSequence([S, m]) (the
seed stored per member): --perturb ic adds --amplitude A (degC, default
0.01) times Gaussian noise to the initial t and tb at wet points (fsm = 1)
and levels 1..kb-1, then recomputes rho; --perturb wind runs the member
from member 0's initial state with the wind stress scaled by its own
factor wind_factor * (1 + A z), z one Gaussian draw, A relative (default
0.1); not for the box (no wind). Each member's factor is stored
(wind_factor): a core restarts its snapshots bit for bit with that
wind_factor.

torchrun --nproc_per_node=K -m pompy.generate (same arguments): member m
runs on rank m % K, each rank writes its own file, no process group; the
reader combines the files."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `pompy generate` (and of python -m pompy.generate).
    The settings (SETTINGS) parse to None when not given, so that the
    config's &generate group stands."""
    parser.add_argument("config", type=Path, metavar="CONFIG.nml",
                        help="Fortran namelist with pom2k parameter names (and a &generate group "
                             "of the settings below)")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="override one parameter, value as in a namelist (repeatable)")
    parser.add_argument("--output", type=Path, required=True, metavar="DIR",
                        help="folder of the dataset file")
    kinds = {"days": _positive_float, "every": _positive_float, "reference_dti": _seconds,
             "reference_dte": _seconds, "spinup": _days_or_zero}
    choices = {"core": cores.NAMES, "perturb": PERTURBATIONS, "dtype": ("float64", "float32")}
    for setting in SETTINGS:
        shown = "" if setting.default is None else f" (default {setting.default})"
        parser.add_argument(f"--{setting.name}", type=kinds.get(setting.name, setting.type),
                            choices=choices.get(setting.name), default=None,
                            metavar="E" if setting.name == "every" else None,
                            help=f"{setting.help}{shown}; &{GENERATE_GROUP} {setting.name}")
    parser.add_argument("--compile", action="store_true",
                        help="run the core's steps as whole torch.compile graphs, the members one "
                             "after another (faster on the CPU; the first run of a grid compiles "
                             "for minutes, later ones load Inductor's cache)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset file")
    parser.add_argument("--resume", action="store_true",
                        help="continue the generation an interrupt (SIGINT, SIGTERM) stopped, from "
                             "the snapshots its DIR/dataset.nc.partial kept, to the same bits as "
                             "an uninterrupted run (the same settings)")
    parser.add_argument("--force", action="store_true",
                        help="run even if the estimated memory or disk space is short")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days > 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _days_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days >= 0")
    return value


def _on_signal(signum, frame) -> None:
    raise Interrupted(signum)


def continue_command(argv: list[str]) -> str:
    """The command that continues an interrupted generation: this one with --resume."""
    words = list(argv)
    if "generate" in words:
        words = words[words.index("generate") + 1:]
    words = [w for w in words if w != "--overwrite"]
    return shlex.join(["pompy", "generate", *words] + ([] if "--resume" in words else ["--resume"]))


def run_command(args: argparse.Namespace) -> int:
    """The command's handler: 0 done, 3 a member blew up, 130 (SIGINT) or
    143 (SIGTERM) interrupted; InputError for bad input. SIGINT and SIGTERM
    alike close the dataset: no temporary file stays, the snapshots
    finished are kept in DIR/dataset.nc.partial (said on stderr, with the
    command that continues)."""
    config = load_config(args.config, args.set)
    s = resolve_settings(args)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        generate(config, args.output, s.days, s.every, core=s.core,
                 members=s.members, perturb=s.perturb, amplitude=s.amplitude,
                 seed=s.seed, device=s.device, dtype=s.dtype,
                 overwrite=args.overwrite, force=args.force, compile=args.compile,
                 reference_dti=s.reference_dti, reference_dte=s.reference_dte,
                 resume=args.resume, spinup=s.spinup)
    except ModelStop as exc:
        print(f"pompy generate stopped: member {getattr(exc, 'member', '?')}: {exc}; "
              "no dataset was written", file=sys.stderr)
        return 3
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        kept, what = getattr(exc, "kept", (None, ""))
        name = signal.Signals(signum).name
        if kept is None:
            print(f"pompy generate: interrupted ({name}); no snapshot was finished, nothing was "
                  "kept and no dataset was written", file=sys.stderr)
        else:
            print(f"pompy generate: interrupted ({name}); kept {kept} ({what}); continue with: "
                  f"{continue_command(sys.argv[1:])}", file=sys.stderr)
        return 128 + int(signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m pompy.generate`` (what torchrun launches): as `pompy generate`."""
    parser = argparse.ArgumentParser(prog="python -m pompy.generate", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_command(args)
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
