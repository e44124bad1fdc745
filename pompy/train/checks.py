"""The training run's folder: a fresh run refuses one holding an earlier
run, and ``--resume`` alone finds the checkpoint to continue from."""
from __future__ import annotations

import os
from pathlib import Path

from pompy.errors import EnvironmentFault, InputError
from pompy.files import writable


def check_output(folder: Path, overwrite: bool, resume: Path | None = None) -> None:
    """A fresh run, or one resumed from a checkpoint of another folder
    (``resume``: its logs would be cut to that checkpoint's epoch), refuses
    a folder holding an earlier run's log or checkpoints, unless
    ``overwrite``."""
    if resume is not None and Path(resume).resolve().parent == Path(folder).resolve():
        return                          # the folder's own run, continued
    logs = [] if resume is not None else [folder / "train_log.csv"]   # a fork's own log: not a run
    earlier = sorted(p.name for p in [*logs, *folder.glob("checkpoint_*.pt")]
                     if p.exists()) if folder.is_dir() else []
    if earlier and not overwrite:
        held = f"--output {folder} holds an earlier run ({', '.join(earlier[:3])}" \
               f"{' ...' if len(earlier) > 3 else ''})"
        if resume is not None:
            raise InputError(f"--resume {resume} is another folder's checkpoint and {held}, "
                             "whose logs it would cut; --overwrite replaces that run, or "
                             "choose another folder")
        raise InputError(f"{held}; --resume FILE continues it, --overwrite replaces it, or "
                         "choose another folder")


def check_writable(folder: Path) -> None:
    """EnvironmentFault unless ``folder``, or the nearest folder above it
    that exists (it is made later), may be written in; nothing is made."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"--output {folder}: {existing} is a file, not a folder")
    if not writable(existing):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        where = "" if existing == folder else f" ({existing}, where it would be made)"
        raise EnvironmentFault(f"--output {folder}{where} is not writable"
                               + (" (a read-only file system)" if read_only else ""))


def latest_checkpoint(folder: Path, none: str | None = None) -> Path:
    """The checkpoint ``--resume`` alone continues from: --output's
    checkpoint_last.pt, else its checkpoint_epoch<E>.pt of the largest E;
    InputError if it holds none (``none``: what it then says, else
    --resume's message)."""
    last = folder / "checkpoint_last.pt"
    if last.is_file():
        return last
    epochs = [(int(p.stem[len("checkpoint_epoch"):]), p) for p in folder.glob("checkpoint_epoch*.pt")
              if p.stem[len("checkpoint_epoch"):].isdigit()] if folder.is_dir() else []
    if not epochs and none is not None:
        raise InputError(none)
    if not epochs:
        raise InputError(f"--resume: --output {folder} holds no checkpoint (checkpoint_last.pt "
                         "or checkpoint_epoch<E>.pt) to continue from; give --resume FILE, or "
                         "start without --resume")
    return max(epochs)[1]
