"""The training command, ``python -m pompy.train`` and ``pompy train``: 0
trained (or --print-config), 2 bad input or no certificate ("pompy:
..."), 3 a model stop outside a batch, 4 a fault of the machine (a full
disk or an unwritable folder at a checkpoint or a log row: the file, the
cause, the last whole checkpoint and the command that continues from it),
130 and 143 interrupted by SIGINT and SIGTERM (the checkpoint to resume
from, and the command that does it). Each is one line; under torchrun the
ranks stop together, and a line every rank would say alike is said by the
first rank of each node."""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist

from pompy import settings
from pompy.distributed import ALIKE
from pompy.errors import EnvironmentFault, InputError, ModelStop
from pompy.launch import LAUNCHER_VARIABLE, OPTIONS_VARIABLE
from pompy.oracle.build import OracleBuildError
from pompy.settings import TrainSettings
from pompy.signals import interruption, stopping
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
    parsed = build_parser().parse_args(argv)
    parsed.words = list(sys.argv[1:] if argv is None else argv)
    return run_parsed(parsed, leave=leave, module="pompy.train")


def run_parsed(parsed: argparse.Namespace, *, leave: bool = False,
               module: str = "pompy train") -> int:
    """The command for a parsed command line; ``module`` is what ``-m``
    names to run it again and the command line's words (``parsed.words``,
    where the parser's caller kept them) its options, for the messages that
    say how to continue. SIGINT and SIGTERM stop it alike
    (pompy.signals.stopping): the status is 128 + the first signal's number
    whatever error reached here after it (a collective a stopped peer left)."""
    words = getattr(parsed, "words", None)
    again = Again(module, None if words is None else _without_resume(words))
    trainer = None
    with stopping() as stop:
        try:
            with stop.raising():
                if parsed.print_config:
                    print(settings.describe(TrainSettings, parsed))
                else:
                    trainer = NPOMTrainerDDP(settings.from_parsed(TrainSettings, parsed))
                    trainer.train()
            code = 0
        except BaseException as exc:
            outcome = _outcome(exc, stop.signum, trainer, again)
            if outcome is None:
                raise
            code, line = outcome
            if line is not None:
                sys.stderr.write(line + "\n")    # one write: the ranks may share stderr
        finally:
            if trainer is not None:
                trainer.cleanup()
            elif dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        if leave:
            _leave(code)
    return code


def _outcome(exc: BaseException, signum: int | None, trainer: NPOMTrainerDDP | None,
             again: Again) -> tuple[int, str | None] | None:
    """The status and the line (None: another rank says it) of a run that
    raised ``exc``; None for a bug (its traceback follows)."""
    if signum is None and interruption(exc) is not None:
        signum = signal.SIGINT
    if signum is not None:
        return 128 + signum, interrupted_message(trainer, again, signum) if _speaks() else None
    if isinstance(exc, InputError):
        code, line = 2, f"pompy: {exc}"
    elif isinstance(exc, ModelStop):
        code, line = 3, f"pompy: {exc}"
    elif isinstance(exc, (EnvironmentFault, OracleBuildError)) or out_of_memory(exc):
        # the machine's: a disk, POMPY_HOME, its memory
        code, line = 4, (f"pompy: out of memory ({_first_words(exc)}): {OUT_OF_MEMORY}"
                         if out_of_memory(exc) else f"pompy: {str(exc).splitlines()[0]}")
        if trainer is not None:                    # it trained: what it keeps, how to go on
            line += f"; {kept(trainer, again)}"
    else:
        return None
    return code, line if not getattr(exc, ALIKE, False) or _speaks() else None


# what lowers a sample's memory, most first (docs/performance.md, memory per sample)
OUT_OF_MEMORY = ("lower batch_size or horizon, give --physics_checkpoint steps (the physics' "
                 "steps recomputed in the backward pass), or run on a device with more memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed: MemoryError, a GPU's
    OutOfMemoryError, or the CPU allocator's RuntimeError."""
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def _first_words(exc: BaseException) -> str:
    """The start of a memory error's message (torch's runs to a paragraph)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    found = text.find("can't allocate memory")       # the CPU allocator's: past its "enforce"
    return (text[found:] if found >= 0 else text).split(". ")[0][:160]


def _speaks() -> bool:
    """Whether this process says a line every rank would say alike: one
    process, or the first on its node under torchrun (LOCAL_RANK 0)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


class Again(NamedTuple):
    """How the command is typed again: ``module`` (what ``-m`` names) and
    its options but --resume (None: not known, said as such)."""
    module: str
    options: list[str] | None


def resume_command(trainer: NPOMTrainerDDP, again: Again, path) -> str:
    """The command that continues ``trainer``'s run from checkpoint
    ``path``: this command's own, its options as given; under torchrun,
    the launcher's (``python -m pompy.launch`` and its options where it
    started the ranks)."""
    module = again.module
    if trainer.dist.many:
        launcher = os.environ.get(LAUNCHER_VARIABLE, "torchrun")
        launch = os.environ.get(OPTIONS_VARIABLE, "<the same launch options>")
        command = f"{launcher} {launch} -m {module}"
    else:                   # as typed: `pompy train`, or `python -m pompy.train`
        command = module if module == "pompy train" else f"python -m {module}"
    options = "<the same options>" if again.options is None else shlex.join(again.options)
    return f"{command} {options} --resume {shlex.quote(str(path))}"


def _without_resume(argv: list[str]) -> list[str]:
    """The training options of a command line: without the word ``train``
    before them (`pompy train`, `-m pompy train`) and without --resume and
    its checkpoint, if one follows it."""
    words = argv[1:] if argv[:1] == ["train"] else list(argv)
    kept, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word == "--resume":
            skip = i + 1 < len(words) and not words[i + 1].startswith("-")
        elif not word.startswith("--resume="):
            kept.append(word)
    return kept


def kept(trainer: NPOMTrainerDDP, again: Again) -> str:
    """What a run that stopped keeps: its last checkpoint (written or
    resumed from) and how to continue from it."""
    if trainer.last_checkpoint is None:
        return "this run wrote no checkpoint; nothing to resume"
    path, epoch = trainer.last_checkpoint
    return f"{path} holds epoch {epoch}: continue with {resume_command(trainer, again, path)}"


def interrupted_message(trainer: NPOMTrainerDDP | None, again: Again,
                        signum: int = signal.SIGINT) -> str:
    """What a signal leaves: the last checkpoint this run wrote or resumed
    from, and the command that continues from it (this command's own
    spelling; under torchrun, the launcher's)."""
    name = signal.Signals(signum).name
    if trainer is None:
        return f"pompy: interrupted ({name}) before training began; no checkpoint was written"
    if trainer.last_checkpoint is None:
        return f"pompy: interrupted ({name}) before this run wrote a checkpoint; nothing to resume"
    return f"pompy: interrupted ({name}); {kept(trainer, again)}"


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
