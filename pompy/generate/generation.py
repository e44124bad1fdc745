"""One process's generation: what it will do, checked before anything
runs (:func:`plan`), then done (:func:`generate`).

Under torchrun each process reads RANK, WORLD_SIZE and LOCAL_RANK
(pompy.distributed.Distributed), runs the members m with m % WORLD_SIZE == RANK
and writes its own file; the ranks never talk, so no process group is
made.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time as _time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from pompy import cores
from pompy.config import SETUP_PARAMS, Config, case_of
from pompy.core.model import Core
from pompy.dataset import dataset_file
from pompy.distributed import Distributed
from pompy.driver import COMPILING, Progress, check_device, check_memory, prepare_output
from pompy.errors import InputError, ModelStop
from pompy.generate import refine
from pompy.generate.members import (batched, member_start, run_ensemble, run_member, same,
                                    set_up)
from pompy.generate.perturbations import member_cases, member_seed
from pompy.generate.reference import reference_config, schedule, spinup_steps
from pompy.generate.writer import (DatasetWriter, check_partial, check_resumed, dataset_attributes,
                                   estimate_dataset_bytes, partial_file)
from pompy.resources import gigabytes
from pompy.settings import GenerateSettings
from pompy.settings.generate import parse_ranges
from pompy.signals import interruption


def _check_disk(folder: Path, size: int, force: bool) -> None:
    free = shutil.disk_usage(folder).free
    if size > free and not force:
        raise InputError(f"the dataset needs about {gigabytes(size)} and {folder} has "
                         f"{gigabytes(free)} free; give --force to write it anyway")


class Plan(NamedTuple):
    """What one process will do, known before anything runs."""
    path: Path                 # its dataset file
    members: list[int]         # its members (m % world == rank)
    steps: int                 # internal steps between snapshots
    records: int               # snapshots after time 0
    device: str
    rank: int
    world: int
    together: bool             # its members stepped as one Ensemble (batched)


def plan(config: Config, settings: GenerateSettings, environ: Mapping[str, str]) -> Plan:
    """Every check before the reference (``config``) runs, InputError
    naming what is wrong: the core's options, the perturbation, the
    torchrun split (``environ``), the schedule, the device, the output
    folder and file, memory and disk."""
    ref, ens, files = settings.reference, settings.ensemble, settings.files
    if ref.compile and not cores.get(ref.core).compile:
        raise InputError(f"--compile: the core {ref.core!r} takes no compile option")
    if ens.perturb == "wind" and config.iproblem == 2:
        raise InputError("--perturb wind: the box (iproblem=2) has no wind stress to perturb; "
                         "use --perturb ic")
    if ens.perturb == "params" and config.iproblem != 1:
        raise InputError(f"--perturb params: the case parameters are the seamount's "
                         f"(iproblem=1), not iproblem={config.iproblem}'s; use --perturb ic")
    if ref.refine > 1:
        refine.check_nestable(config)
    if settings.schedule.spinup_spread and ens.perturb != "params":
        raise InputError("--spinup_spread: only params members draw spin-up offsets; give "
                         "--perturb params, or --spinup_spread 0")
    ranks = Distributed.from_environ(environ, ref.device)
    rank, world = ranks.rank, ranks.world_size
    if ens.members < world:
        raise InputError(f"--members {ens.members} < WORLD_SIZE = {world}: rank {world - 1} "
                         "would have no member")
    steps, records = schedule(config, settings.schedule.days, settings.schedule.every)
    device = str(ranks.device)
    check_device(ref.core, device, ref.dtype)
    mine = list(range(rank, ens.members, world))
    output = Path(files.output)
    path = dataset_file(output, rank, world)
    prepare_output(output, (path,), files.overwrite)
    check_partial(path, files.resume, files.overwrite)
    together = ref.refine == 1 and batched(config, ref.core, ens.perturb, len(mine), ref.dtype,
                                           ref.compile, device)
    check_memory(refine.fine_size_config(config) if ref.refine > 1 else config, ref.core,
                 ref.dtype, files.force, len(mine) if together else 1)
    _check_disk(output, estimate_dataset_bytes(config, len(mine), records + 1,
                                               starts_every=settings.schedule.starts_every),
                files.force)
    return Plan(path, mine, steps, records, device, rank, world, together)


def generate(config: Config, settings: GenerateSettings, *,
             environ: Mapping[str, str] | None = None, log=None) -> Path:
    """Write this process's dataset file (pompy.generate says what it
    holds) for the physics ``config`` and return its path; InputError
    before anything runs for bad input, ModelStop (with ``member`` set) if
    a member blows up. ``environ``: where RANK and WORLD_SIZE are read
    (default os.environ); ``log``: the stream of the size line and
    per-member lines (default stderr). Interrupted (KeyboardInterrupt, or
    :class:`pompy.errors.Interrupted`, or an error raised from one:
    pompy.signals.interruption finds it), the finished snapshots are kept
    in the ``.partial`` file (``kept`` of the interruption: that file and
    what it holds, in words) and no temporary file stays."""
    log = sys.stderr if log is None else log
    ref, ens = settings.reference, settings.ensemble
    reference = reference_config(config, ref.reference_dti, ref.reference_dte)
    p = plan(reference, settings, os.environ if environ is None else environ)
    spin = spinup_steps(reference, settings.schedule.spinup)
    attributes = dataset_attributes(reference, settings, p.steps, p.rank, p.world, config, spin)
    if settings.files.resume:
        check_resumed(partial_file(p.path), reference, attributes)
    prefix = f"pompy generate [rank {p.rank}/{p.world}]" if p.world > 1 else "pompy generate"
    size = estimate_dataset_bytes(reference, len(p.members), p.records + 1,
                                  bool(attributes["physics_step_ratio"]),
                                  settings.schedule.starts_every)
    print(f"{prefix}: {p.path} will take at most {size / 1e6:.3g} MB, its size uncompressed "
          f"({_count(len(p.members), 'member')} x {_count(p.records + 1, 'snapshot')}, every "
          f"{p.steps} steps of the {ref.core} core at dti = {reference.dti:g} s"
          f"{_starts_text(settings.schedule.starts_every)})", file=log, flush=True)
    if ref.compile:
        print(f"{prefix}: {COMPILING}", file=log, flush=True)
    model = set_up(ref.core, reference, p.device, ref.dtype, ref.compile)
    start = model.capture()
    seeds = [member_seed(ens.seed, m) for m in p.members]
    cases = member_cases(reference, ens.perturb, seeds, ens.amplitude, parse_ranges(ens.ranges),
                         int(settings.schedule.spinup_spread * 86400 / reference.dti + 1e-9),
                         p.steps)
    own = case_of(reference, SETUP_PARAMS)
    starts = [start if {n: case[n] for n in own} == own else
              member_start(ref.core, reference, {n: case[n] for n in own}, p.device, ref.dtype)
              for case, _ in cases]
    if settings.files.resume:
        writer = DatasetWriter.reopen(p.path)
        print(f"{prefix}: resuming {writer.partial} ({writer.kept(p.members)})", file=log,
              flush=True)
    else:
        writer = DatasetWriter(p.path, reference, start, p.members, seeds, cases,
                               [spin + n * p.steps for n in range(p.records + 1)],
                               start["time0"], attributes)
    writer.progress = Progress(writer.to_write(p.records, p.together), prefix, True,
                               stream=log, unit="snapshot")
    members = [(model, start, same) for start in starts]
    if ref.refine > 1:
        members = _fine_members(reference, settings, p, starts, [case for case, _ in cases])
    _run(members, writer, p, settings, seeds, [case for case, _ in cases], prefix, log)
    return p.path


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _starts_text(starts_every: int) -> str:
    """What the size line says of the start snapshots (nothing where all are)."""
    return "" if starts_every == 1 else \
        f"; the whole state every {_count(starts_every, 'snapshot')}, the targets between"


def reference_grid_file(path: Path, member: int) -> Path:
    """Where a dataset file's member keeps its fine grid (--refine 2): an
    IC file (pompy.icfile) beside the dataset."""
    return path.parent / "reference_grids" / f"member_{member}.nc"


def _fine_members(reference: Config, settings: GenerateSettings, p: Plan, starts: list[dict],
                  cases: list[dict]) -> list[tuple[Core, dict, Callable]]:
    """Each member's fine core (its grid nested in its own set-up, the IC
    file written beside the dataset), that core's set-up and the
    coarse-graining of its records onto the member's set-up."""
    ref, members = settings.reference, []
    for m, start, case in zip(p.members, starts, cases):
        path = reference_grid_file(p.path, m)
        path.parent.mkdir(exist_ok=True)
        member = dataclasses.replace(reference, **{n: case[n] for n in SETUP_PARAMS})
        core = set_up(ref.core, refine.write_fine_ic(member, start, path), p.device, ref.dtype,
                      ref.compile)
        fine = core.capture()
        members.append((core, fine, refine.Coarsening(fine, start)))
    return members


def _run(members: list[tuple[Core, dict, Callable]], writer: DatasetWriter, p: Plan,
         settings: GenerateSettings, seeds: list[int], cases: list[dict], prefix: str,
         log) -> None:
    """The members (each one's core, set-up and what the writer is given of
    its states), together or one by one, into ``writer``; the file
    renamed into place when complete, kept as ``.partial`` when
    interrupted, removed otherwise."""
    ens = settings.ensemble
    complete = False
    try:
        if p.together:
            began = _time.perf_counter()
            model, start, _ = members[0]
            run_ensemble(model, start, writer, p.members, ens.perturb, seeds, ens.amplitude,
                         cases, p.steps, p.records)
            print(f"{prefix}: members {', '.join(map(str, p.members))} together: "
                  f"{p.records * p.steps} steps in {_time.perf_counter() - began:.2f} s",
                  file=log, flush=True)
        else:
            for local, (m, m_seed, case) in enumerate(zip(p.members, seeds, cases)):
                if writer.done[local] == p.records + 1:
                    continue                  # finished before the interruption
                began = _time.perf_counter()
                model, start, view = members[local]
                try:
                    run_member(model, start, writer, local, ens.perturb, m_seed,
                               ens.amplitude, case, p.steps, p.records, view)
                except ModelStop as exc:
                    exc.member = m            # for the message: which member blew up
                    raise
                print(f"{prefix}: member {m}: {p.records * p.steps} steps in "
                      f"{_time.perf_counter() - began:.2f} s", file=log, flush=True)
        complete = True
    except BaseException as exc:
        stop = interruption(exc)              # a signal's, torch.compile's error from one
        if stop is None:
            raise
        kept = writer.close(False, keep=True)
        stop.kept = (kept, writer.kept(p.members) if kept is not None else "")
        writer = None
        raise
    finally:
        if writer is not None:
            writer.close(complete)       # renamed into place only when complete
