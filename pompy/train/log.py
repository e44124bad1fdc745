"""The trainer's logs, written by rank 0 alone: ``train_log.csv`` (a Train
row per batch, the ranks' average; a Test row per epoch, the whole test
split's loss: pompy.train.losses.CSV_COLUMNS) and ``epoch_log.csv`` (a row
per epoch: learning rate, gradient norms, skipped steps, wall time, the
losses, the baseline and the ratio to it: EPOCH_COLUMNS). A resumed run
keeps the rows of the epochs before the one it starts at.

A row that cannot be written (a full disk, a folder made read-only) is an
EnvironmentFault naming the file and the cause. Alone, the run stops
there; among ranks (``defer``) the log keeps it in :attr:`TrainingLog.fault`
and writes nothing more, and the trainer stops every rank at the epoch's
end, before that epoch's checkpoint (the ranks cannot be told sooner: rank
0 alone writes, while the others are in the batch's collectives). Either
way the last checkpoint is whole and a resumed run drops the rows after
it, a cut last line included."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pompy.errors import EnvironmentFault
from pompy.files import fault
from pompy.train.checkpoint import kept_log_rows
from pompy.train.losses import CSV_COLUMNS, EPOCH_COLUMNS


class TrainingLog:
    """The two CSV files of a run in ``output``, from ``start_epoch`` on;
    ``defer``: keep a failed write's fault for the trainer to stop every
    rank with (see the module's docstring) instead of raising it."""

    def __init__(self, output: Path, start_epoch: int, resuming: bool, defer: bool = False):
        self.defer = defer
        self.fault: EnvironmentFault | None = None
        self.file = self.epoch_file = None
        self.path, self.epoch_path = output / "train_log.csv", output / "epoch_log.csv"
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            self._failed(output, err, "making the output folder")
        self.file = self._open(self.path, CSV_COLUMNS, start_epoch, resuming)
        self.epoch_file = self._open(self.epoch_path, EPOCH_COLUMNS, start_epoch, resuming)

    def _open(self, path: Path, columns: Sequence[str], start_epoch: int, resuming: bool):
        if self.fault is not None:
            return None
        kept = kept_log_rows(path, start_epoch) if resuming else []
        f = None
        try:
            f = open(path, "w")
            f.write("".join([",".join(columns) + "\n", *kept]))
            f.flush()
        except OSError as err:
            self._failed(path, err, "writing the training log's header", f)
            return None
        return f

    def _failed(self, path: Path, err: OSError, doing: str, file=None) -> None:
        """The fault of a write: kept (``defer``) or raised; no more rows
        are written either way."""
        self.fault = self.fault or fault(path, err, doing)
        for f in (file, self.file, self.epoch_file):
            if f is not None:
                with contextlib.suppress(OSError):     # its unwritten rows go
                    f.close()
        self.file = self.epoch_file = None
        if not self.defer:
            raise self.fault

    def _write(self, file, path: Path, row: str, doing: str) -> None:
        if file is None:                   # a write failed before: nothing more
            return
        try:
            file.write(row)
            file.flush()
        except OSError as err:
            self._failed(path, err, doing)

    def step(self, epoch: int, step: int, phase: str, values: Sequence[float]) -> None:
        """A row of train_log.csv: the total loss, then each field's."""
        self._write(self.file, self.path, ",".join([str(epoch), str(step), phase] +
                                                   [repr(float(v)) for v in values]) + "\n",
                    f"writing the training log at epoch {epoch}, step {step}")

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
        self._write(self.epoch_file, self.epoch_path,
                    ",".join(str(v) if isinstance(v, int) else repr(float(v)) for v in row)
                    + "\n", f"writing the epoch log at epoch {epoch}")

    def close(self) -> None:
        for f in (self.file, self.epoch_file):
            if f is not None:
                f.close()
        self.file = self.epoch_file = None
