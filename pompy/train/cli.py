"""The training command, ``python -m pompy.train`` and ``pompy train``: 0
trained, 2 bad input or no certificate ("pompy: ..."), 3 a model stop
outside a batch."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import torch.distributed as dist

from pompy.errors import InputError, ModelStop
from pompy.train.options import resolve_options, resolve_parsed
from pompy.train.trainer import NPOMTrainerDDP


def main(argv: Sequence[str] | None = None, *, leave: bool = False) -> int:
    """The command: 0 trained, 2 bad input or no certificate ("pompy: ..."),
    3 a model stop outside a batch. ``leave`` (``python -m pompy.train``):
    end the process with that status once the trainer is cleaned up,
    before Python tears its objects down (_leave)."""
    return _train(lambda: resolve_options(argv), leave)


def run_parsed(parsed: argparse.Namespace, *, leave: bool = False) -> int:
    """:func:`main` for a command line already parsed (``pompy train``)."""
    return _train(lambda: resolve_parsed(parsed), leave)


def _train(resolve: Callable[[], argparse.Namespace], leave: bool) -> int:
    trainer = None
    try:
        trainer = NPOMTrainerDDP(resolve())
        trainer.train()
        code = 0
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        code = 2
    except ModelStop as stop:
        print(f"pompy: {stop}", file=sys.stderr)
        code = 3
    finally:
        if trainer is not None:
            trainer.cleanup()
        elif dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if leave:
        _leave(code)
    return code


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
