"""``pompy generate``: training datasets from ensembles of model runs.

    pompy generate CONFIG --output DIR [--days D --every E] [--core explicit]
        [--reference_dti S --reference_dte S] [--spinup D] [--members N]
        [--perturb ic|wind] [--amplitude A] [--seed S] [--device cpu|cuda]
        [--dtype float64|float32] [--overwrite | --resume] [--force] [--set NAME=VALUE]
        [--print-config]
    torchrun --nproc_per_node=K -m pompy.generate CONFIG ...   (same arguments)

runs N members of a core, the reference, for D days each on the
generation fast path (Core.run_generation_day: no gradients, detached
snapshots) and writes ``DIR/dataset.nc``: per member and snapshot every
field a core needs to continue bit for bit (the variable table's
"snapshot" category; the grid once), at the first snapshot and every E
days, or with ``starts_every`` K > 1 that whole state at every K-th
snapshot alone and the fields a trainer scores at the others; the format
is documented in pompy.dataset, which reads it. E must
be a whole number of the reference's internal steps dti and D a whole
number of E, so that every snapshot falls on a step.

Settings. The settings are pompy.settings.generate.GenerateSettings: the
config's ``&generate`` group holds them (members, days, every, spinup,
starts_every, core, reference_dti, reference_dte, device, dtype, perturb,
amplitude, seed), so that ``pompy generate CONFIG --output DIR`` needs no more, and
a flag given overrides the group; ``--print-config`` shows what a run
would use and where each value comes from.

The reference. The trajectories are the targets a corrector learns, so
they come from a better model than the physics that trains on them (the
config's ``&train`` core at the config's dti): by default pom2k's own
split-explicit core (``core``), at an internal step ``reference_dti``
shorter than the config's (out of external steps of ``reference_dte``;
:func:`reference_config`), on the same grid. The dataset's
``target_model`` attribute says which model made it (core, dti, dte,
isplit, grid) and ``config_dti`` the physics' step; the trainer reads it
and warns when the two are the same model and step. With ``refine = 2``
the reference runs on a grid nested 2 x 2 in the config's (each member's
own, its IC file kept in ``DIR/reference_grids/member_<m>.nc``) and its
states are coarse-grained onto the config's grid (pompy.generate.refine):
what the physics then lacks is resolution (``reference_refine`` records
the choice). ``spinup`` days run
from the set-up before the first snapshot, unrecorded, so that the data
starts from a developed flow rather than the set-up's state of rest.

Members. Member 0 is the unperturbed run; member m > 0 is perturbed from
the seed pair (S, m), its initial temperature (``--perturb ic``), its
wind stress (``--perturb wind``) or the seamount's case parameters and
its spin-up (``--perturb params``), as pompy.generate.perturbations
describes. Every member's seed and wind factor are stored: the snapshots
of member m continue bit for bit in a core whose config has wind_factor
= wind_factor[m] (or whose params["wind_factor"] is set to it), not in
one with the config's. The Fortran oracle has no wind factor and refuses
one other than 1 (pompy.oracle.driver.check_supported).

Interrupts. SIGINT and SIGTERM alike close the file: no temporary file
stays, the snapshots finished (each member's count in the variable
``snapshots``) are kept in ``DIR/dataset.nc.partial``, and the command
says so with the command that continues; ``--resume`` goes on from them
to the same bits as an uninterrupted run (the settings and sources
checked against the partial file's). With ``refine = 2`` the fine state
of each unfinished member's last start snapshot is kept beside them
(pompy.generate.writer.fine_state_file), as the file holds only its
coarse-graining.

torchrun. Each process reads RANK and WORLD_SIZE (as torchrun sets them;
default 0 and 1), runs members m with m % WORLD_SIZE == RANK and writes its
own ``DIR/dataset_rank<RANK>.nc``; no process group is made (the ranks do
not talk). pompy.dataset.SnapshotDataset combines the files. With
``--device cuda`` a rank runs on ``cuda:LOCAL_RANK``.

The core comes from the registry (pompy.cores: name -> the Core subclass,
its CFL check on the set-up, what it supports); any core on
pompy.core.model.Core works: the members are run through Core's interface
and Ensemble's, and through three of Core's attributes that interface
has no call for (pompy.generate.members says which). Before anything runs
the command checks the schedule, the output folder (an existing dataset
is refused without --overwrite), the device, the memory and the disk,
and prints the dataset's estimated size on stderr; the file is written
under a temporary name and renamed when complete, so a failed or
interrupted generation leaves no partial dataset.

The package, one idea a module:

    reference       the reference's config and the snapshots' schedule
    perturbations   the members' seeds and perturbations
    writer          the dataset file: attributes, size, temporary and partial files
    members         running members one by one or as an Ensemble
    generation      a process's plan (checks, torchrun split) and generation
    command         the command line and its exit status

The names below are loaded on first use, so that ``python -m
pompy.generate`` chooses its allocator before torch loads
(pompy.generate.__main__).
"""
from __future__ import annotations

from pompy.utils.lazy import lazy_exports

_EXPORTS = {
    "InputError": "pompy.errors",
    "PERTURBATIONS": "pompy.settings.generate", "DEFAULT_AMPLITUDES": "pompy.settings.generate",
    "GenerateSettings": "pompy.settings.generate",
    "reference_config": "pompy.generate.reference", "schedule": "pompy.generate.reference",
    "describe_model": "pompy.generate.reference",
    "member_seed": "pompy.generate.perturbations",
    "ic_perturbation": "pompy.generate.perturbations",
    "wind_factor": "pompy.generate.perturbations", "perturb_ic": "pompy.generate.perturbations",
    "PERTURBATION_TEXT": "pompy.generate.perturbations",
    "DatasetWriter": "pompy.generate.writer", "HEADER_BYTES": "pompy.generate.writer",
    "estimate_dataset_bytes": "pompy.generate.writer",
    "partial_file": "pompy.generate.writer", "temporary_file": "pompy.generate.writer",
    "BATCH_CELLS": "pompy.generate.members", "batched": "pompy.generate.members",
    "Plan": "pompy.generate.generation", "plan": "pompy.generate.generation",
    "generate": "pompy.generate.generation",
    "DESCRIPTION": "pompy.generate.command", "add_arguments": "pompy.generate.command",
    "continue_command": "pompy.generate.command", "main": "pompy.generate.command",
    "run_command": "pompy.generate.command",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, lambda: globals())
