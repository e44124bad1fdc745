"""The training run's folder: a fresh run refuses one holding an earlier
run, and ``--resume`` alone finds the checkpoint to continue from."""
from __future__ import annotations

from pathlib import Path

from pompy.errors import InputError


def check_output(folder: Path, overwrite: bool) -> None:
    """A fresh run refuses a folder holding an earlier run's log or
    checkpoints, unless ``overwrite``."""
    earlier = sorted(p.name for p in [folder / "train_log.csv", *folder.glob("checkpoint_*.pt")]
                     if p.exists()) if folder.is_dir() else []
    if earlier and not overwrite:
        raise InputError(f"--output {folder} holds an earlier run ({', '.join(earlier[:3])}"
                         f"{' ...' if len(earlier) > 3 else ''}); --resume FILE continues it, "
                         f"--overwrite replaces it, or choose another folder")


def latest_checkpoint(folder: Path) -> Path:
    """The checkpoint ``--resume`` alone continues from: --output's
    checkpoint_last.pt, else its checkpoint_epoch<E>.pt of the largest E;
    InputError if it holds none."""
    last = folder / "checkpoint_last.pt"
    if last.is_file():
        return last
    epochs = [(int(p.stem[len("checkpoint_epoch"):]), p) for p in folder.glob("checkpoint_epoch*.pt")
              if p.stem[len("checkpoint_epoch"):].isdigit()] if folder.is_dir() else []
    if not epochs:
        raise InputError(f"--resume: --output {folder} holds no checkpoint (checkpoint_last.pt "
                         "or checkpoint_epoch<E>.pt) to continue from; give --resume FILE, or "
                         "start without --resume")
    return max(epochs)[1]
