"""The training command, ``python -m pompy.train`` and ``pompy train``: 0
trained (or --print-config), 2 bad input or no certificate ("pompy:
..."), 3 a model stop outside a batch, 4 a fault of the machine, 130
interrupted (Ctrl-C: the checkpoint to resume from, and the command that
does it)."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import torch.distributed as dist

from pompy import settings
from pompy.errors import EnvironmentFault, InputError, ModelStop
from pompy.oracle.build import OracleBuildError
from pompy.settings import TrainSettings
from pompy.train.trainer import NPOMTrainerDDP

DESCRIPTION = ("Train CorrectorNets through a verified pompy core (one process, or torchrun "
               "--nproc_per_node=N). Each setting's default is shown; a config's &train group "
               "overrides it and a flag overrides both: --print-config shows what a given "
               "config and flags will use.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, TrainSettings)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pompy.train", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> TrainSettings:
    """The settings of a ``python -m pompy.train`` command line (defaults,
    the config's &train group, the flags), checked."""
    return settings.from_parsed(TrainSettings, build_parser().parse_args(argv))


def main(argv: Sequence[str] | None = None, *, leave: bool = False) -> int:
    """``python -m pompy.train``. ``leave``: end the process with the status
    once the trainer is cleaned up, before Python tears its objects down
    (_leave)."""
    return run_parsed(build_parser().parse_args(argv), leave=leave, module="pompy.train")


def run_parsed(parsed: argparse.Namespace, *, leave: bool = False,
               module: str = "pompy train") -> int:
    """The command for a parsed command line; ``module`` is what ``-m``
    names to run it again, for the message of an interrupted run."""
    trainer = None
    try:
        if parsed.print_config:
            print(settings.describe(TrainSettings, parsed))
            code = 0
        else:
            trainer = NPOMTrainerDDP(settings.from_parsed(TrainSettings, parsed))
            trainer.train()
            code = 0
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        code = 2
    except ModelStop as stop:
        print(f"pompy: {stop}", file=sys.stderr)
        code = 3
    except (EnvironmentFault, OracleBuildError) as err:   # the machine's: a disk, POMPY_HOME
        print(f"pompy: {str(err).splitlines()[0]}", file=sys.stderr)
        code = 4
    except KeyboardInterrupt:
        if trainer is None or trainer.is_main:
            print(interrupted_message(trainer, module), file=sys.stderr)
        code = 130
    finally:
        if trainer is not None:
            trainer.cleanup()
        elif dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if leave:
        _leave(code)
    return code


def interrupted_message(trainer: NPOMTrainerDDP | None, module: str) -> str:
    """What a Ctrl-C leaves: the last checkpoint this run wrote or resumed
    from, and the command that continues from it (this command's own
    spelling; under torchrun, torchrun's)."""
    if trainer is None:
        return "pompy: interrupted (SIGINT) before training began; no checkpoint was written"
    if trainer.last_checkpoint is None:
        return ("pompy: interrupted (SIGINT) before this run wrote a checkpoint; nothing to "
                "resume")
    path, epoch = trainer.last_checkpoint
    if trainer.dist.many:
        command = f"torchrun <the same launch options> -m {module}"
    else:                   # as typed: `pompy train`, or `python -m pompy.train`
        command = module if module == "pompy train" else f"python -m {module}"
    return (f"pompy: interrupted (SIGINT); {path} holds epoch {epoch}: continue with "
            f"{command} <the same options> --resume {path}")


def _leave(code: int) -> None:
    """Exit now, output flushed, without Python's teardown: a rank under
    torchrun (gloo) hung in 1 of 114 runs after its work was done and
    its process group destroyed, its main thread at main()'s return, where
    the trainer's objects are freed, and one native thread idle (py-spy),
    so torchrun waited on it for ever. Every file the trainer writes is
    closed and on disk by then (cleanup, the checkpoints' fsync)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
