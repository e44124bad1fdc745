"""``pompy generate`` and ``python -m pompy.generate``: the command line,
made from the settings' declarations (pompy.settings.generate), and what
the command prints and returns when a generation ends, fails or is
interrupted.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys

from pompy.config import load_config
from pompy.errors import InputError, ModelStop
from pompy.generate.generation import generate
from pompy.settings import GenerateSettings, describe, from_parsed
from pompy.settings import add_arguments as add_settings_arguments
from pompy.signals import interruption, raising_signals

DESCRIPTION = """\
Run N members of a core, the reference, for --days and write a NetCDF
training dataset, DIR/dataset.nc (DIR/dataset_rank<k>.nc under torchrun),
with every field a core needs to restart bit for bit at the first snapshot
and every --every days (a whole number of the reference's dti; --days a
whole number of --every); with --starts_every K > 1 only every K-th
snapshot holds that whole state (samples start there), the others the
fields a trainer scores. Format and reader: pompy.dataset
(SnapshotDataset). The settings come from the config's &generate group,
then the flags (--print-config shows them). The reference (--core, default
the explicit core) may step a shorter --reference_dti than the config's
dti, which the physics that trains on the data keeps; the dataset says
which model made it.

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
wind_factor. --perturb params (the seamount) draws each case parameter
named in --ranges (inflow, strat_amplitude, seamount_height, wind_factor)
uniformly in its range, then a spin-up offset of whole snapshot intervals
within --spinup_spread days; each member is the set-up of the config with
its values, run the common spin-up plus its offset, and its values and
offset are stored (pompy run --set NAME=VALUE for each reproduces it).

Where the config's dti is a whole number (>= 2) of the reference's, each
snapshot also holds the physics' own leapfrog b levels (ub_dti, ...; see
pompy.dataset), which the trainer and pompy evaluate use.

torchrun --nproc_per_node=K -m pompy.generate (same arguments): member m
runs on rank m % K, each rank writes its own file, no process group; the
reader combines the files."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `pompy generate` (and of python -m pompy.generate):
    every setting of GenerateSettings, and --print-config."""
    add_settings_arguments(parser, GenerateSettings)


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
    command that continues). ``--print-config``: the settings, and 0."""
    if getattr(args, "print_config", False):
        print(describe(GenerateSettings, args))
        return 0
    s = from_parsed(GenerateSettings, args)
    config = load_config(s.config, s.overrides)
    try:
        with raising_signals():
            generate(config, s)
    except ModelStop as exc:
        print(f"pompy generate stopped: member {getattr(exc, 'member', '?')}: {exc}; "
              "no dataset was written", file=sys.stderr)
        return 3
    except BaseException as exc:
        stop = interruption(exc)
        if stop is None:
            raise
        _say_interrupted(stop)
        return 128 + int(getattr(stop, "signum", signal.SIGINT))
    return 0


def _say_interrupted(exc: BaseException) -> None:
    """The line an interrupted generation ends with: what was kept and the
    command that continues."""
    name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
    kept, what = getattr(exc, "kept", (None, ""))
    if kept is None:
        print(f"pompy generate: interrupted ({name}); no snapshot was finished, nothing was "
              "kept and no dataset was written", file=sys.stderr)
    else:
        print(f"pompy generate: interrupted ({name}); kept {kept} ({what}); continue with: "
              f"{continue_command(sys.argv[1:])}", file=sys.stderr)


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
