"""NPOMTrainerDDP: neural correctors trained end to end through a verified
pompy core, on one process or many.

    torchrun --nproc_per_node=N -m pompy.train --config configs/train_tiny.nml \\
        --data DATA_DIR --output RUN_DIR [--batch_size 1 --lr 1e-4 --epochs 1 ...]
    python -m pompy.train --config ... --data ... --output ...     (one process)
    pompy train --config ... (the same settings; torchrun ... -m pompy train ...)

The gate. Every rank first asks its gate for a passed ``pompy verify``
certificate of exactly this core, device type, dtype, torch version,
sources, grid and solver settings (pompy.verify.certificate.
require_certificate, the only gate the command line uses); without one it
prints ``pompy: ...`` (what did not match, the ``pompy verify`` command to
run) and exits 2. A caller that builds a trainer in Python may inject
another gate (validation/gpu_check.py times grids nobody verified); every
checkpoint records the id of the certificate its run passed and the
physics it trained (the config's namelist and gradient policies:
``--resume`` refuses other physics). The data is then read as a restart
is (pompy.train.data): made for this config (its state parameters, the
physics' dti, the grid's fields), every value finite, a test split of
whole members; a refusal on any rank stops every rank.

The parts, each behind a narrow interface:

    settings     pompy.settings.TrainSettings (data, model, optimizer,
                 physics, checkpoint, log)
    distributed  pompy.distributed.Distributed: rank, world, device, group
    data         pompy.train.data.TrainingData: dataset, split, loaders,
                 normaliser
    correctors   pompy.train.correctors.Correctors: networks, learned
                 parameters, corrections into the state
    physics      pompy.train.physics.PhysicsRunner: cores stepped through
                 Core's public interface; run_hybrid, the forward
    optimisation pompy.train.optim.Optimisation: Adam, cosine schedule,
                 clipping, skipped steps
    log          pompy.train.log.TrainingLog: train_log.csv, epoch_log.csv
    checkpoints  pompy.train.checkpoint: atomic files, --resume, RNG states

With WORLD_SIZE > 1 the process group is NCCL on CUDA and gloo on CPU;
the networks and learned parameters are DDP-wrapped. ``nn.SyncBatchNorm``
works on GPUs only; on CPU its modules become
pompy.train.networks.SyncBatchNormCPU (the same semantics).

One batch: borrow batch_size cores, start each at its sample's initial
state, then for each of the ``horizon`` correction cycles: encoder
correction, decoder forward, ``steps_per_correction`` physics steps of the
config's dti, decoder correction, record. The per-field losses are masked
MSEs against the dataset's next snapshots (one correction cycle apart,
checked); a non-finite gradient (or a core stop in the batch) skips the
step on every rank, logged and counted.

Output folder: the logs (pompy.train.log), ``checkpoint_epoch<E>.pt`` each
epoch and ``checkpoint_last.pt`` (atomic; tensors and plain containers,
loaded with ``weights_only=True``: networks, optimizer, scheduler,
normaliser, learned parameters, every rank's RNG states, epoch, skipped
steps, the baseline, the certificate's id and key, the settings).
``--resume FILE`` (or ``--resume`` alone: --output's latest checkpoint)
continues from one and gives the losses an uninterrupted run gives. A
checkpoint trained under another certificate is refused, naming both ids;
a fresh run refuses a folder holding an earlier run unless ``--overwrite``.

The baseline. Before the first epoch the test split's loss of the physics
alone (no network, no learned parameter) is measured and printed; each
epoch prints its test loss and the ratio to it. A warning says when the
data's targets come from the physics in the loop itself at the same step.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from pompy.config import Config, load_config
from pompy.distributed import Distributed
from pompy.driver import Progress
from pompy.errors import EnvironmentFault, InputError, ModelStop
from pompy.settings.train import TrainSettings
from pompy.train.checkpoint import (certificate_id, load_resume, physics_record, rng_state,
                                    save_atomically, serialized, set_rng_state)
from pompy.train.checks import check_output, check_writable
from pompy.train.correctors import Correctors
from pompy.train.data import Normalizer, TrainingData, same_model_warning
from pompy.train.log import TrainingLog
from pompy.train.losses import LOSS_FIELDS, component_losses, sample_losses, weighted_total
from pompy.train.optim import Optimisation
from pompy.train.physics import PhysicsRunner, run_hybrid
from pompy.train.pool import release_graphs
from pompy.verify.certificate import require_certificate

# (core, device, dtype, config, config_name) -> the certificate to train under
Gate = Callable[..., dict]


class NPOMTrainerDDP:
    """The DDP trainer (see the module's docstring)."""

    def __init__(self, settings: TrainSettings, environ: Mapping[str, str] | None = None, *,
                 dist: Distributed | None = None, gate: Gate = require_certificate):
        self.settings = s = settings
        self.dist = dist or Distributed.from_environ(os.environ if environ is None else environ,
                                                     s.physics.device)
        self.device = self.dist.device
        self.dtype = getattr(torch, s.physics.dtype)
        self.config: Config = load_config(s.config)
        self.baseline: float | None = None      # the test split's loss of the physics alone
        self.last_checkpoint: tuple[Path, int] | None = None     # (file, its epoch)
        self.log: TrainingLog | None = None
        self.start_epoch = 0
        self.stopped_batches = 0                # this epoch's batches whose physics stopped
        self.dist.join()
        resume = self._pass_the_gate(gate)
        self.data.loaders(self.dist, s.optimizer.seed)
        self.physics = PhysicsRunner(s.physics, self.config, self.device, self.dtype,
                                     s.data.steps_per_correction,
                                     s.data.batch_size if s.physics.reuse_core_pool else None,
                                     self.dist.rank)
        normalizer = Normalizer(**{k: resume["normalizer"][k] for k in ("mean", "std", "mask")}
                                ).checked(f"of {s.checkpoint.resume}") \
            if resume is not None else self.data.fit_normalizer(self.config.kb)
        self.normalizer = normalizer.to(self.device)
        self.correctors = Correctors(s.model, self.config, self.normalizer, self.dtype, self.dist,
                                     s.optimizer.seed)
        self.optim = Optimisation(self.correctors.named_parameters(), s.optimizer,
                                  verbose=self.dist.is_main)
        if resume is not None:
            self._load_checkpoint(resume)
        if self.dist.is_main:
            for warning in (same_model_warning(self.data.dataset, s.physics.core, self.config),
                            self.data.warning):
                if warning:
                    print(warning, file=sys.stderr, flush=True)
            self.log = TrainingLog(s.checkpoint.output, self.start_epoch, resume is not None,
                                   defer=self.dist.many)

    def _pass_the_gate(self, gate: Gate) -> dict | None:
        """The certificate on every rank before anything is built, and so the
        checkpoint to resume and the output folder; the ranks then agree,
        so that a refusal on one (its own certificate folder, its disk) stops
        them all, each with a line. The checkpoint's body, if resuming."""
        refusal = None
        try:
            resume = self._open_the_gate(gate)
            if self.is_main:                   # rank 0 writes the log and the checkpoints
                check_writable(self.settings.checkpoint.output)
        except (InputError, EnvironmentFault) as err:
            refusal, resume = err, None
        self.dist.stop_together(refusal)       # the refusing rank's line on every rank
        return resume

    def _open_the_gate(self, gate: Gate) -> dict | None:
        s = self.settings
        self.certificate = gate(s.physics.core, self.device, s.physics.dtype, self.config,
                                config_name=str(s.config))
        self.certificate_id = certificate_id(self.certificate)
        resume = s.checkpoint.resume
        check_output(s.checkpoint.output, s.checkpoint.overwrite, resume)
        body = None if resume is None else load_resume(resume, self.certificate, self.config)
        # the data as a restart is read: made for this config, every value finite
        self.data = TrainingData(s.data, self.config, LOSS_FIELDS, self.dist)
        return body

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    # -------------------------------------------------------------- a batch
    def forward(self, ics: Mapping, cycles: int, corrected: bool = True) -> dict:
        """The hybrid forward of a batch (pompy.train.physics.run_hybrid) on
        borrowed cores; ``corrected`` False: the physics alone."""
        poms = self.physics.borrow(len(ics["iint"]))
        preds = run_hybrid(self.physics, self.correctors if corrected else None,
                           self.normalizer, poms, ics, cycles, self.settings.data.pushforward)
        release_graphs(poms)
        return preds

    def targets(self, refs: Mapping) -> dict:
        """A batch's targets of the loss: its snapshots after the pushforward cycles."""
        skip = self.settings.data.pushforward
        return {name: value[:, skip:] for name, value in refs.items()}

    def component_losses(self, preds: Mapping, refs: Mapping) -> dict:
        """Per field: the masked MSE (losses.component_losses)."""
        return component_losses(preds, refs, self.data.grid, self.config.kb, self.device)

    def total_loss(self, losses: Mapping) -> torch.Tensor:
        """loss_display_scale * sum_f w_f L_f."""
        o = self.settings.optimizer
        return weighted_total(o.weights, losses, o.loss_display_scale)

    def train_batch(self, ics: Mapping, refs: Mapping) -> list[float]:
        """One optimiser step on a batch; [total, per-field losses x
        loss_display_scale], the ranks' average."""
        self.correctors.set_mode(True)
        losses = self.component_losses(self.forward(ics, refs["u"].shape[1]), self.targets(refs))
        total = self.total_loss(losses)
        if any(self.physics.failed):   # every gradient NaN, so every rank skips the step
            total = total * float("nan")
            self.stopped_batches += 1
        self.optim.zero_grad()
        total.backward()
        self.optim.step()
        scale = self.settings.optimizer.loss_display_scale
        stacked = torch.stack([total.detach().double()] +
                              [losses[n].detach().double() * scale for n in LOSS_FIELDS])
        return self.dist.mean(stacked).cpu().tolist()

    def test_batch(self, ics: Mapping, refs: Mapping, corrected: bool = True) -> torch.Tensor:
        """This batch's share of the test split's loss: per field, the sum of
        its samples' MSEs; then its number of samples (float64, on the
        device). ``corrected`` False: of the physics alone (the baseline)."""
        self.correctors.set_mode(False)
        with torch.no_grad():
            preds = self.forward(ics, refs["u"].shape[1], corrected)
            losses = sample_losses(preds, self.targets(refs), self.data.grid, self.config.kb,
                                   self.device)
        sums = [losses[n].double().sum() for n in LOSS_FIELDS]
        return torch.stack(sums + [sums[0].new_tensor(float(len(ics["iint"])))])

    # -------------------------------------------------------------- epochs
    def _progress(self, loader, desc: str):
        """The loader's batches, told to a pompy.driver.Progress: a bar on a
        terminal, in a log a line at each tenth of them (with the time left)."""
        if not (self.is_main and self.settings.log.progress):
            return loader
        return _told(loader, f"pompy train: {desc}")

    def train_epoch(self, epoch: int) -> float:
        """Every training batch, logged; the average total loss."""
        self.data.sampler.set_epoch(epoch)
        totals, skipped, self.stopped_batches = [], self.optim.skipped_steps, 0
        for step, (ics, refs) in enumerate(self._progress(self.data.train_loader,
                                                          f"epoch {epoch} train")):
            values = self.train_batch(ics, refs)
            if self.log is not None:
                self.log.step(epoch, step, "Train", values)
            totals.append(values[0])
        if totals and self.optim.skipped_steps - skipped == len(totals):
            raise ModelStop(self._all_skipped(epoch, len(totals)))
        average = float(np.mean(totals)) if totals else float("nan")
        if self.is_main:
            print(f"epoch {epoch}: train loss {average:.6e} ({len(totals)} batches, "
                  f"{self.optim.skipped_steps} skipped steps so far)", flush=True)
        return average

    def _all_skipped(self, epoch: int, steps: int) -> str:
        """Why a run stops whose every optimiser step of an epoch was
        skipped, and what it keeps."""
        stopped = self.stopped_batches
        if stopped == steps:
            why = "each with a sample whose physics stopped: the lines above say why"
        elif stopped:
            why = (f"{stopped} on this rank with a sample whose physics stopped (the lines "
                   "above say why), the others with a non-finite gradient")
        else:
            why = ("each with a non-finite gradient of finite physics: lower lr, horizon or "
                   "correction_scale")
        kept = (f"{self.last_checkpoint[0]} (epoch {self.last_checkpoint[1]}) is the last good "
                "checkpoint" if self.last_checkpoint else "no checkpoint was written")
        return (f"every one of the {steps} optimiser steps of epoch {epoch} was skipped ({why}); "
                f"the correctors learned nothing, so training stops; {kept}")

    def test_epoch(self, epoch: int) -> float | None:
        """The whole test split's loss (None where it is empty), logged as one
        Test row (Step 0): every sample once over the ranks, the per-field
        MSE sums and sample counts added over all of them, divided once, so
        that it depends on neither the number of processes nor the batch
        size. Printed with its ratio to the baseline."""
        if not self.data.test_indices:
            return None
        values, count = self.test_split_loss(f"epoch {epoch} test", corrected=True)
        if self.log is not None:
            self.log.step(epoch, 0, "Test", values)
        if self.is_main:
            ratio = (f", {values[0] / self.baseline:.4g} x the baseline {self.baseline:.6e}"
                     if self.baseline else "")
            print(f"epoch {epoch}: test loss {values[0]:.6e} ({count} samples){ratio}",
                  flush=True)
        return values[0]

    def test_split_loss(self, desc: str, corrected: bool) -> tuple[list[float], int]:
        """[total, per-field losses x loss_display_scale] of the whole test
        split (see test_epoch), and its number of samples."""
        sums = torch.zeros(len(LOSS_FIELDS) + 1, dtype=torch.float64, device=self.device)
        for ics, refs in self._progress(self.data.test_loader, desc):
            sums += self.test_batch(ics, refs, corrected=corrected)
        *fields, count = self.dist.sum(sums).cpu().tolist()
        average = dict(zip(LOSS_FIELDS, (s / count for s in fields)))
        scale = self.settings.optimizer.loss_display_scale
        values = [float(self.total_loss(average))] + [average[n] * scale for n in LOSS_FIELDS]
        return values, int(count)

    def baseline_loss(self) -> float | None:
        """The test split's loss of the physics alone: what the correctors
        are measured against. Printed; None where the test split is empty."""
        if not self.data.test_indices:
            return None
        values, count = self.test_split_loss("baseline", corrected=False)
        if self.is_main:
            print(f"baseline (the physics alone, {self.settings.physics.core} core at dti = "
                  f"{self.config.dti:g} s, against {self.data.dataset.model['description']}): "
                  f"test loss {values[0]:.6e} ({count} samples)", flush=True)
        return values[0]

    def train(self, stop_after: int | None = None) -> None:
        """Epochs start_epoch .. epochs-1 (``stop_after``: only that many,
        as an interrupted run would)."""
        epochs = self.settings.optimizer.epochs
        last = epochs if stop_after is None else min(epochs, self.start_epoch + stop_after)
        if self.baseline is None:
            self.baseline = self.baseline_loss()
        for epoch in range(self.start_epoch, last):
            started = time.perf_counter()
            self.optim.start_epoch()
            lr = self.optim.lr
            train_loss = self.train_epoch(epoch)
            test_loss = self.test_epoch(epoch)
            self.optim.end_epoch()
            if self.is_main and self.correctors.wrapped["physics"] is not None:
                print(f"epoch {epoch}: learned " + ", ".join(
                    f"{n}={v:.6g}" for n, v in self.correctors.learned_values().items()),
                    flush=True)
            wall = time.perf_counter() - started
            if self.log is not None:        # before the checkpoint that says the epoch is done
                self.log.epoch(epoch, lr, self.optim.grad_norms, self.optim.skipped_steps, wall,
                               train_loss, test_loss, self.baseline)
            self.save_checkpoint(epoch)
            if self.is_main:
                print(f"epoch {epoch}: {wall:.1f} s", flush=True)
        if self.is_main and last == epochs and last > self.start_epoch:
            print(self.closing_line(last - 1, test_loss), flush=True)

    def closing_line(self, epoch: int, test_loss: float | None) -> str:
        """What a finished run says last: its headline figure and what it
        means, where it wrote, and how to evaluate it."""
        o = self.settings.optimizer
        output = self.settings.checkpoint.output
        if test_loss is None:
            figure = "no test split (test_fraction = 0): no test loss"
        else:
            ratio = (f" = {test_loss / self.baseline:.4g} x the baseline {self.baseline:.6e} "
                     "(the physics alone)" if self.baseline else "")
            figure = f"test loss {test_loss:.6e}{ratio}"
        terms = " + ".join(f"{w:g} {n}" for n, w in o.weights.items() if w)
        scale = "" if o.loss_display_scale == 1 else f"{o.loss_display_scale:g} x "
        return (f"pompy train: done, {epoch + 1} epochs; {figure}; the loss is {scale}({terms}), "
                "each the field's mean squared error (its own units) over the wet points of the "
                f"target snapshots; checkpoints in {output} (checkpoint_last.pt: epoch {epoch}), logs "
                f"{output / 'train_log.csv'} and {output / 'epoch_log.csv'}; evaluate with: "
                f"pompy evaluate {output} --data {self.settings.data.data}"
                + (" --overwrite" if (output / "evaluation.json").exists() else ""))

    # -------------------------------------------------------------- checkpoints
    def save_checkpoint(self, epoch: int) -> Path | None:
        """Rank 0 writes checkpoint_epoch<E>.pt and checkpoint_last.pt
        (each atomically); every rank's RNG state is in it. Then the ranks
        agree: a fault of rank 0's disk, or of its log this epoch (then no
        checkpoint is written: the epoch's rows are not all there), stops
        every rank with the same line (exit 4), each knowing the last whole
        checkpoint (``last_checkpoint``). Rank 0's file, None elsewhere."""
        rng = self.dist.gather(rng_state(self.device))
        output = self.settings.checkpoint.output
        path = output / f"checkpoint_epoch{epoch}.pt"
        fault = None
        if self.log is not None and self.log.fault is not None:
            fault = EnvironmentFault(f"{self.log.fault}; epoch {epoch}'s checkpoint was not "
                                     "written")
        elif self.is_main:
            try:
                data = serialized(self.checkpoint_body(epoch, rng))
                doing = f"writing the checkpoint of epoch {epoch}"
                save_atomically(data, [path], doing)
                self.last_checkpoint = (path, epoch)
                save_atomically(data, [output / "checkpoint_last.pt"], doing)
            except EnvironmentFault as err:
                fault = err
        self.last_checkpoint = self.dist.gather(self.last_checkpoint)[0]     # rank 0's
        self.dist.stop_together(fault)
        return path if self.is_main else None

    def checkpoint_body(self, epoch: int, rng: Sequence) -> dict:
        """Tensors and plain containers alone: --resume loads it with
        torch.load(weights_only=True), which runs no pickled code."""
        return {"epoch": epoch, "networks": self.correctors.state_dict(),
                **self.optim.state_dict(),
                "normalizer": {k: v.cpu() for k, v in self.normalizer.state_dict().items()},
                "learned": self.correctors.learned_values(),
                "rng": list(rng), "world_size": self.dist.world_size,
                "baseline": self.baseline,
                "certificate": {"id": self.certificate_id, "key": self.certificate.get("key")},
                "physics": physics_record(self.config),
                "data": {"path": str(self.settings.data.data),
                         "grid_hash": self.data.dataset.grid_hash},
                "options": self.settings.record()}

    def _load_checkpoint(self, body: Mapping) -> None:
        path = self.settings.checkpoint.resume
        self.correctors.load(body["networks"], path)
        self.optim.load(body)
        self.start_epoch = int(body["epoch"]) + 1
        self.last_checkpoint = (path, int(body["epoch"]))
        self.baseline = body.get("baseline")
        rng = body.get("rng") or []
        if len(rng) == self.dist.world_size and rng[self.dist.rank] is not None:
            set_rng_state(rng[self.dist.rank], self.device)

    def cleanup(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        if hasattr(self, "data"):
            self.data.close()
        self.dist.leave()


def _told(loader, desc: str):
    """``loader``'s batches, each told to a Progress of ten marks."""
    bar = Progress(len(loader), desc, True, unit="batch", marks=10)
    try:
        for n, batch in enumerate(loader, 1):
            yield batch
            bar.advance(f"batch {n} of {bar.total}")
    finally:
        bar.close()
