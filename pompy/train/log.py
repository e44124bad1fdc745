"""The trainer's logs, written by rank 0 alone: ``train_log.csv`` (a Train
row per batch, the ranks' average; a Test row per epoch, the whole test
split's loss: pompy.train.losses.CSV_COLUMNS) and ``epoch_log.csv`` (a row
per epoch: learning rate, gradient norms, skipped steps, wall time, the
losses, the baseline and the ratio to it: EPOCH_COLUMNS). A resumed run
keeps the rows of the epochs before the one it starts at."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pompy.train.checkpoint import kept_log_rows
from pompy.train.losses import CSV_COLUMNS, EPOCH_COLUMNS


class TrainingLog:
    """The two CSV files of a run in ``output``, from ``start_epoch`` on."""

    def __init__(self, output: Path, start_epoch: int, resuming: bool):
        output.mkdir(parents=True, exist_ok=True)
        self.path, self.epoch_path = output / "train_log.csv", output / "epoch_log.csv"
        self.file = self._open(self.path, CSV_COLUMNS, start_epoch, resuming)
        self.epoch_file = self._open(self.epoch_path, EPOCH_COLUMNS, start_epoch, resuming)

    @staticmethod
    def _open(path: Path, columns: Sequence[str], start_epoch: int, resuming: bool):
        kept = kept_log_rows(path, start_epoch) if resuming else []
        f = open(path, "w")
        f.write("".join([",".join(columns) + "\n", *kept]))
        f.flush()
        return f

    def step(self, epoch: int, step: int, phase: str, values: Sequence[float]) -> None:
        """A row of train_log.csv: the total loss, then each field's."""
        self.file.write(",".join([str(epoch), str(step), phase] +
                                 [repr(float(v)) for v in values]) + "\n")
        self.file.flush()

    def epoch(self, epoch: int, lr: float, grad_norms: Sequence[float], skipped: int,
              wall: float, train_loss: float, test_loss: float | None,
              baseline: float | None) -> None:
        """A row of epoch_log.csv."""
        norms = [n for n in grad_norms if math.isfinite(n)]
        nan = float("nan")
        ratio = test_loss / baseline if test_loss is not None and baseline else nan
        row = [epoch, lr, float(np.mean(norms)) if norms else nan, max(norms, default=nan),
               skipped, wall, train_loss, nan if test_loss is None else test_loss,
               nan if baseline is None else baseline, ratio]
        self.epoch_file.write(",".join(str(v) if isinstance(v, int) else repr(float(v))
                                       for v in row) + "\n")
        self.epoch_file.flush()

    def close(self) -> None:
        self.file.close()
        self.epoch_file.close()
