"""NPOMTrainerDDP, the seed's "DDP Training Pipeline": neural correctors
trained end to end through a verified pompy core, on one process or many.

    torchrun --nproc_per_node=N -m pompy.train --config configs/train_tiny.nml \\
        --data DATA_DIR --output RUN_DIR [--batch_size 1 --lr 1e-4 --epochs 1 ...]
    python -m pompy.train --config ... --data ... --output ...     (one process)
    pompy train --config ... (the same options; torchrun ... -m pompy train ...)

Every rank first asks pompy.verify.certificate.require_certificate for a
passed ``pompy verify`` certificate of exactly this core, device type,
dtype, torch version, sources, grid and solver settings, holding every
check the verifier defines (pompy.verify.certificate); without one it prints ``pompy:
...`` (what did not match, the ``pompy verify`` command to run) and exits
2. There is no bypass. Bad input of any other kind is refused the same way.

Distribution. LOCAL_RANK, RANK and WORLD_SIZE come from the environment
(torchrun sets them; default 0, 0, 1). With WORLD_SIZE > 1 the process
group is NCCL on CUDA and gloo on CPU; the networks and the learned
parameters are DDP-wrapped. WORLD_SIZE 1 is a plain process (no group).
``nn.SyncBatchNorm`` works on GPUs only (its forward and DDP refuse CPU
modules); on CPU its modules become pompy.train.networks.SyncBatchNormCPU,
which computes the global batch's statistics with differentiable
all-reduces (the same semantics).

Options (``&train`` group of the config, overridden by the command line;
the seed's names): pompy.train.options.OPTIONS. Loss weights default to the
seed's table (pompy.train.losses.LOSS_WEIGHTS); ``--loss_weights u=10,el=20``
changes some.

One batch (``run_single_train_batch``), as the seed orders it: borrow
batch_size cores (CorePool with ``--reuse_core_pool``: captured clean
states restored as fresh detached tensors; else new cores), inject each
sample's initial state (``inject_core_state``), then for each of the
``horizon`` correction cycles: encoder correction, decoder forward,
``steps_per_correction`` physics steps of ``physics_step_seconds`` (= the
core's dti, checked), decoder correction, record. The per-field losses are
masked MSEs against the dataset's next snapshots (which must be
steps_per_correction steps apart, checked); Adam, CosineAnnealingLR
(T_max=epochs, eta_min=1e-7), gradient clipping; a non-finite gradient
(or a core stop in the batch) skips the step on every rank, logged and
counted.

Network channels: pompy.train.data (``pack_pom_batch``). A correction is in
normalised units: ``field += correction_scale * std_c * correction_c``
on the wet points of its channel.

Output folder: ``train_log.csv`` (rank 0; columns pompy.train.losses.CSV_COLUMNS,
per-field values times loss_display_scale: a Train row per batch, the
ranks' average; one Test row per epoch, the whole test split's average,
each sample evaluated once whatever the number of processes),
``epoch_log.csv`` (rank 0; beside the seed's CSV, whose columns stay the
seed's: pompy.train.losses.EPOCH_COLUMNS, a row per epoch: learning rate,
gradient norms, skipped steps, wall time, train and test loss, the
baseline and the test loss's ratio to it),
``checkpoint_epoch<E>.pt`` each epoch and ``checkpoint_last.pt`` (atomic;
tensors and plain containers, loaded with ``weights_only=True``: networks,
optimizer, scheduler, normaliser, learned parameters, every rank's RNG
states, epoch, skipped steps, the certificate's id and key; a file
carrying any other pickled object is refused); ``--resume FILE``
(or ``--resume`` alone: --output's latest checkpoint)
continues from one and gives the losses an uninterrupted run gives (the
log's rows of an interrupted later epoch are dropped, as that epoch runs
again). A checkpoint trained under another certificate (an edited core,
another torch, device type or dtype) is refused, naming both ids. A fresh
run refuses a folder holding an earlier run's log or checkpoints unless
``--overwrite``.

The baseline. Before the first epoch the test split's loss of the
physics alone (no network, no learned parameter) is measured and printed
(``baseline_loss``; kept in the checkpoints, so a resumed run does not
measure it again); each epoch prints its test loss and the ratio to it.
The data says which model made its targets (pompy.dataset: the
reference, e.g. the explicit core at a shorter dti); a warning says when
that is the physics in the loop itself at the same step, whose targets
the physics alone reproduces. The snapshots' spacing must be one
correction cycle in seconds (the reference's dti may differ from the
physics'); each sample starts at its snapshot's model time.

``--amp bf16``: the networks alone run under bfloat16 autocast (their
weights float32); packing, corrections, losses, the learned parameters and
the physics stay in the core's dtype.

``--learn horcon,umol`` trains pom2k parameters too: each is exp of a
learned log (positive), initialised at the config's value, given to every
core as a 0-d tensor in core.params; printed each epoch.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset

from pompy import cores
from pompy.autodiff.gradients import clip_gradients
from pompy.errors import InputError, ModelStop
from pompy.verify.certificate import require_certificate
from pompy.train.checkpoint import (certificate_id, kept_log_rows, load_networks, load_resume,
                                    rng_state, save_atomically, set_rng_state)
from pompy.train.checks import check_output
from pompy.train.data import (Normalizer, apply_correction_to_pom, collate_samples, open_dataset,
                              pack_pom_batch, same_model_warning, split_members)
from pompy.train.losses import (CSV_COLUMNS, EPOCH_COLUMNS, LOSS_FIELDS, component_losses,
                                sample_losses, weighted_total)
from pompy.train.networks import CorrectorNet, PhysicsParameters, convert_sync_batchnorm
from pompy.train.options import load_model_config
from pompy.train.pool import (CorePool, build_initialized_core, inject_core_state, release_graphs,
                              run_as_ensemble)


def _distribution(environ: Mapping[str, str]) -> tuple[int, int, int]:
    return (int(environ.get("LOCAL_RANK", 0)), int(environ.get("RANK", 0)),
            int(environ.get("WORLD_SIZE", 1)))


class NPOMTrainerDDP:
    """The seed's trainer (see the module's docstring)."""

    # a cycle's physics as one ensemble where that equals the cores' own runs
    # (_ensemble_cycle); False: one core at a time (the tests' reference)
    batch_physics = True

    def __init__(self, args: argparse.Namespace, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.args = args
        self.local_rank, self.global_rank, self.world_size = _distribution(environ)
        self.is_main = self.global_rank == 0
        if str(args.device).startswith("cuda"):
            self.device = torch.device(f"cuda:{self.local_rank}")
        else:
            self.device = torch.device(args.device)
        self.dtype = getattr(torch, args.dtype)
        # the networks' weights: float32 under --amp bf16 (autocast's master copy)
        self.net_dtype = torch.float32 if args.amp == "bf16" else self.dtype
        self.log_file = self.epoch_file = None
        self.skipped_steps = 0
        self.baseline: float | None = None      # the test split's loss of the physics alone
        self.grad_norms: list[float] = []        # this epoch's, before clipping
        self.training = True                   # the phase (_set_mode)
        self.last_checkpoint: tuple[Path, int] | None = None     # (file, its epoch)
        self.config = self._load_config()     # (the certificate's key holds its grid, cg_tol, ...)
        resume = self._pass_the_gate()
        self._join_group()
        self.core_cls = cores.get(args.core).core
        self.steps_per_correction = int(args.steps_per_correction)
        self.loss_weights = args.loss_weights_table
        self._build_data()
        self.pool = CorePool(self.core_cls, self.config, self.device, self.dtype,
                             args.batch_size, args.physics_checkpoint, args.compile) \
            if args.reuse_core_pool else None
        self.start_epoch = 0
        self._build_model(resume)
        if resume is not None:
            self._load_checkpoint(resume)
        if self.is_main:
            warning = same_model_warning(self.dataset, args.core, self.config)
            if warning:
                print(warning, file=sys.stderr, flush=True)
        if self.is_main:
            self._open_log(resume is not None)

    # -------------------------------------------------------------- set-up
    def _pass_the_gate(self) -> dict | None:
        """The certificate, on every rank before anything is built or joined,
        and so the checkpoint to resume and the output folder, so that every
        rank refuses alike. The checkpoint's body, if resuming."""
        a = self.args
        self.certificate = require_certificate(a.core, self.device, a.dtype, self.config,
                                               config_name=str(a.config))
        self.certificate_id = certificate_id(self.certificate)
        resume = load_resume(a.resume, self.certificate) if a.resume is not None else None
        if resume is None:
            check_output(a.output, bool(a.overwrite))
        return resume

    def _load_config(self):
        config = load_model_config(self.args.config)
        if not math.isclose(config.dti, self.args.physics_step_seconds, rel_tol=1e-12):
            raise InputError(f"physics_step_seconds={self.args.physics_step_seconds} s but the "
                             f"config's dti = dte*isplit = {config.dti} s (the core steps "
                             f"dti): make them equal")
        return config

    def _join_group(self) -> None:
        """NCCL on CUDA, gloo on CPU; WORLD_SIZE 1: no group."""
        self.distributed = self.world_size > 1
        if self.distributed and not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")

    def _build_data(self) -> None:
        a = self.args
        self.dataset, self.grid = open_dataset(a.data, a.horizon, LOSS_FIELDS, self.config,
                                               self.steps_per_correction)
        self.train_indices, self.test_indices = split_members(self.dataset, a.test_fraction)
        self.train_ds = Subset(self.dataset, self.train_indices)
        self.test_ds = Subset(self.dataset, self.test_indices)
        if len(self.train_ds) < a.batch_size * self.world_size:
            raise InputError(f"{len(self.train_ds)} training samples are fewer than one global "
                             f"batch ({a.batch_size} x {self.world_size} processes)")
        # drop_last in the samplers too: with len % world_size != 0 they would
        # otherwise repeat samples to even the ranks out
        self.sampler = DistributedSampler(self.train_ds, num_replicas=self.world_size,
                                          rank=self.global_rank, shuffle=True, seed=int(a.seed),
                                          drop_last=True)
        self.train_loader = self._loader(self.train_ds, self.sampler, drop_last=True)
        # the test split whole, each sample once: rank r takes every
        # world_size-th sample from the r-th, unpadded (a rank may have one
        # fewer, or none), its last batch possibly short
        self.test_shard = self.test_indices[self.global_rank::self.world_size]
        self.test_loader = self._loader(Subset(self.dataset, self.test_shard), None,
                                        drop_last=False)

    def _loader(self, subset: Subset, sampler: DistributedSampler | None, *,
                drop_last: bool) -> DataLoader:
        return DataLoader(subset, sampler=sampler, batch_size=self.args.batch_size,
                          num_workers=0, pin_memory=False, drop_last=drop_last,
                          collate_fn=functools.partial(collate_samples, self.dataset))

    def _build_model(self, resume: Mapping | None) -> None:
        """The normaliser (the checkpoint's, or fitted), the networks, the
        learned parameters, the optimiser and its schedule."""
        if resume is not None:
            self.normalizer = Normalizer(**{k: resume["normalizer"][k]
                                            for k in ("mean", "std", "mask")})
        else:
            self.normalizer = self._fit_normalizer()
        self.normalizer = self.normalizer.to(self.device)
        torch.manual_seed(int(self.args.seed))          # same initial weights on every rank
        self.encoder = self._build_corrector() if self.args.encoder else None
        self.decoder = self._build_corrector() if self.args.decoder else None
        self.physics = self._build_physics_parameters()
        self.trainable_params = [(f"{label}.{n}", p) for label, net in
                                 self._plain_networks().items() if net is not None
                                 for n, p in net.named_parameters()]
        self.optimizer = torch.optim.Adam([p for _, p in self.trainable_params], lr=self.args.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=self.args.epochs, eta_min=1e-7)

    def _fit_normalizer(self) -> Normalizer:
        n = len(self.train_ds)
        chosen = sorted({int(i) for i in np.linspace(0, n - 1, min(n, self.args.normalizer_samples))})
        states = [self.train_ds[i]["state"] for i in chosen]
        return Normalizer.fit(states, self.grid, self.config.kb)

    def _wrap(self, module: nn.Module) -> nn.Module:
        if not self.distributed:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def _build_corrector(self) -> nn.Module:
        """A CorrectorNet, SyncBatchNorm, DDP-wrapped (one process: plain)."""
        channels = 4 * (self.config.kb - 1) + 5
        net = CorrectorNet(channels, int(self.args.hidden_channels), self.normalizer.mask,
                           norm=str(self.args.norm))
        net = convert_sync_batchnorm(net, self.device).to(device=self.device, dtype=self.net_dtype)
        return self._wrap(net)

    def _build_physics_parameters(self) -> nn.Module | None:
        if not self.args.learn_names:
            return None
        initial = {name: getattr(self.config, name) for name in self.args.learn_names}
        for name, value in initial.items():
            if not value > 0:
                raise InputError(f"--learn {name}: its config value {value} is not > 0 (a "
                                 f"learned parameter is exp of a learned log)")
        return self._wrap(PhysicsParameters(initial, self.dtype).to(self.device))

    def _networks(self) -> dict[str, nn.Module | None]:
        return {"encoder": self.encoder, "decoder": self.decoder, "physics": self.physics}

    def _plain_networks(self) -> dict[str, nn.Module | None]:
        """The networks without their DDP wrappers."""
        return {name: self._plain(net) for name, net in self._networks().items()}

    @staticmethod
    def _plain(module: nn.Module | None) -> nn.Module | None:
        return module.module if isinstance(module, DDP) else module

    def _open_log(self, resuming: bool) -> None:
        """Rank 0's CSV log: the header, and a resumed run's earlier rows."""
        self.args.output.mkdir(parents=True, exist_ok=True)
        self.log_path = self.args.output / "train_log.csv"
        kept = kept_log_rows(self.log_path, self.start_epoch) if resuming else []
        self.log_file = open(self.log_path, "w")
        self.log_file.write("".join([",".join(CSV_COLUMNS) + "\n", *kept]))
        self.log_file.flush()
        # the per-epoch log beside the seed's CSV (whose columns stay the seed's)
        self.epoch_log_path = self.args.output / "epoch_log.csv"
        kept = kept_log_rows(self.epoch_log_path, self.start_epoch) if resuming else []
        self.epoch_file = open(self.epoch_log_path, "w")
        self.epoch_file.write("".join([",".join(EPOCH_COLUMNS) + "\n", *kept]))
        self.epoch_file.flush()

    # -------------------------------------------------------------- the batch
    def _borrow_poms(self, batch_size: int | None = None) -> list:
        batch_size = batch_size or self.args.batch_size
        if self.pool is not None:
            return self.pool.reset_batch(batch_size)
        return [build_initialized_core(self.core_cls, self.config, self.device, self.dtype,
                                       self.args.physics_checkpoint, self.args.compile)
                for _ in range(batch_size)]

    def _network(self, net: nn.Module, packed: torch.Tensor) -> torch.Tensor:
        """A network's corrections in the core's dtype. With --amp bf16 the
        network alone runs under bfloat16 autocast, from its float32
        weights (autocast leaves float64 tensors alone: a float64 network
        would run in float64); packing, corrections and physics stay out."""
        if self.args.amp == "bf16":
            with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
                out = net(packed.to(self.net_dtype))
            return out.to(self.dtype)
        return net(packed)

    def _apply(self, poms: list, corrections: torch.Tensor) -> None:
        for i, pom in enumerate(poms):
            apply_correction_to_pom(pom, corrections[i], self.normalizer,
                                    scale_factor=float(self.args.correction_scale))

    def run_physics_multistep(self, poms: list, ics: Mapping, n_steps: int,
                              corrected: bool = True) -> dict:
        """The seed's forward: inject, then per cycle encoder, decoder
        forward, physics, decoder correction, record. (B, T, ...) per field.
        A core that stops keeps its last good state for the rest of the
        batch (the networks still run on every rank) and is marked in
        ``self.failed``. ``corrected`` False: the physics alone (no
        network, no learned parameter), the baseline."""
        nets = self._phase_networks() if corrected else \
            {"encoder": None, "decoder": None, "physics": None}
        encoder, decoder, physics = nets["encoder"], nets["decoder"], nets["physics"]
        self._inject(poms, ics, physics)
        seq = {key: [] for key in LOSS_FIELDS}
        for _ in range(n_steps):
            if encoder is not None:
                packed = pack_pom_batch(poms, self.normalizer)
                self._apply(poms, self._network(encoder, packed))
            if decoder is not None:
                corrections_dec = self._network(decoder, pack_pom_batch(poms, self.normalizer))
            self._physics_cycle(poms)
            if decoder is not None:
                self._apply(poms, corrections_dec)
            for key in seq:
                seq[key].append(torch.stack([getattr(pom, key) for pom in poms]))
        return {key: torch.stack(values, dim=1) for key, values in seq.items()}

    def _phase_networks(self) -> dict[str, nn.Module | None]:
        """The networks this phase runs: DDP's wrappers in training, the
        plain modules in the test phase, whose ranks may run different
        numbers of batches: a DDP forward after a training one broadcasts
        rank 0's buffers, a collective each rank would wait in for ever."""
        return self._networks() if self.training else self._plain_networks()

    def _inject(self, poms: list, ics: Mapping, physics: nn.Module | None) -> None:
        """Each sample's initial state into its core, and the learned
        parameters' values into every core."""
        for index, pom in enumerate(poms):
            inject_core_state(pom, ics, sample_index=index)
        if physics is not None:
            values = physics()
            for pom in poms:
                pom.params = dict(pom.params, **values)
        self.failed = [False] * len(poms)

    def _physics_cycle(self, poms: list) -> None:
        """steps_per_correction physics steps of every core not failed: as one
        ensemble where it may (_ensemble_cycle), else one by one, a core
        that stops marked failed and back at its last good state."""
        live = [i for i in range(len(poms)) if not self.failed[i]]
        for i in live:
            poms[i].time0, poms[i].iint = poms[i].time, 0
            poms[i].iend = self.steps_per_correction
        if self._ensemble_cycle([poms[i] for i in live]):
            return
        for i in live:
            try:
                poms[i].run_time_loop()
            except ModelStop as stop:
                print(f"pompy train [rank {self.global_rank}]: sample {i}: {stop}",
                      file=sys.stderr)
                poms[i].state = dict(poms[i].last_good)
                self.failed[i] = True

    def _ensemble_cycle(self, poms: list) -> bool:
        """A cycle of ``poms`` as one ensemble (pool.run_as_ensemble) where
        that pays (``batch_physics``, two or more cores) and equals their
        own runs; True if it ran."""
        return bool(self.batch_physics and len(poms) > 1
                    and run_as_ensemble(poms, self.steps_per_correction))

    def _compute_component_losses(self, preds: Mapping, refs: Mapping) -> dict:
        """Per field: the masked MSE (losses.component_losses)."""
        return component_losses(preds, refs, self.grid, self.config.kb, self.device)

    def combine_loss_components(self, losses: Mapping) -> torch.Tensor:
        """loss_display_scale * sum_f w_f L_f."""
        return weighted_total(self.loss_weights, losses, float(self.args.loss_display_scale))

    def _reduce_losses(self, total: torch.Tensor, losses: Mapping) -> list[float]:
        """[total, per-field losses x loss_display_scale]: the ranks' average."""
        scale = float(self.args.loss_display_scale)
        stacked = torch.stack([total.detach().double()] +
                              [losses[n].detach().double() * scale for n in LOSS_FIELDS])
        if self.distributed:
            stacked = stacked.to(self.device)
            dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
            stacked = stacked / self.world_size
        return stacked.cpu().tolist()

    def _set_mode(self, training: bool) -> None:
        self.training = training
        for net in self._networks().values():
            if net is not None:
                net.train(training)

    def _batch_loss(self, ics: Mapping, refs: Mapping) -> tuple[torch.Tensor, dict]:
        poms = self._borrow_poms(len(ics["iint"]))
        preds = self.run_physics_multistep(poms, ics, n_steps=refs["u"].shape[1])
        release_graphs(poms)
        losses = self._compute_component_losses(preds, refs)
        return self.combine_loss_components(losses), losses

    def run_single_train_batch(self, ics: Mapping, refs: Mapping) -> list[float]:
        self._set_mode(True)
        total_loss, losses = self._batch_loss(ics, refs)
        if any(self.failed):       # every gradient NaN, so every rank skips the step
            total_loss = total_loss * float("nan")
        self.optimizer.zero_grad(set_to_none=True)
        total_loss.backward()
        self._step()
        return self._reduce_losses(total_loss, losses)

    def _step(self) -> None:
        """Clip the gradients and step; a non-finite gradient norm skips the
        step (on every rank: DDP's gradients are the same on each)."""
        clip = float(self.args.grad_clip_norm)
        norm = clip_gradients(self.trainable_params, clip if clip > 0 else math.inf)
        if norm is not None:
            self.grad_norms.append(norm)
        if norm is not None and not math.isfinite(norm):
            self.skipped_steps += 1
            if self.is_main:
                print(f"pompy train: non-finite gradient (norm {norm}); step skipped "
                      f"({self.skipped_steps} so far)", file=sys.stderr)
        else:
            self.optimizer.step()

    def run_single_test_batch(self, ics: Mapping, refs: Mapping,
                              corrected: bool = True) -> torch.Tensor:
        """This batch's share of the test split's loss: per field, the sum of
        its samples' MSEs; then its number of samples (float64, on the
        device: test_epoch adds every rank's batches up, then divides).
        ``corrected`` False: of the physics alone (the baseline)."""
        self._set_mode(False)
        with torch.no_grad():
            poms = self._borrow_poms(len(ics["iint"]))
            preds = self.run_physics_multistep(poms, ics, n_steps=refs["u"].shape[1],
                                               corrected=corrected)
            losses = sample_losses(preds, refs, self.grid, self.config.kb, self.device)
        sums = [losses[n].double().sum() for n in LOSS_FIELDS]
        return torch.stack(sums + [sums[0].new_tensor(float(len(poms)))])

    # -------------------------------------------------------------- epochs
    def log_step(self, epoch: int, step: int, phase: str, values: Sequence[float]) -> None:
        if self.log_file is None:
            return
        self.log_file.write(",".join([str(epoch), str(step), phase] + [repr(float(v)) for v in values])
                            + "\n")
        self.log_file.flush()

    def _progress(self, loader, desc: str):
        if not (self.is_main and self.args.progress):
            return loader
        from tqdm import tqdm
        return tqdm(loader, desc=desc, leave=False, file=sys.stderr, disable=None)

    def _run_epoch(self, epoch: int, phase: str, loader, run) -> tuple[float, int]:
        """Every batch of ``loader`` through ``run``, logged; (the average
        total loss, the number of batches)."""
        totals, desc = [], f"epoch {epoch} {phase.lower()}"
        for step, (ics, refs) in enumerate(self._progress(loader, desc)):
            values = run(ics, refs)
            self.log_step(epoch, step, phase, values)
            totals.append(values[0])
        return (float(np.mean(totals)) if totals else float("nan")), len(totals)

    def train_epoch(self, epoch: int) -> float:
        self.sampler.set_epoch(epoch)
        average, batches = self._run_epoch(epoch, "Train", self.train_loader,
                                           self.run_single_train_batch)
        if self.is_main:
            print(f"epoch {epoch}: train loss {average:.6e} ({batches} batches, "
                  f"{self.skipped_steps} skipped steps so far)", flush=True)
        return average

    def test_epoch(self, epoch: int) -> float | None:
        """The whole test split's loss (None where it is empty): every
        sample once over the ranks (test_shard), the per-field MSE sums and
        sample counts added over all of them, divided once. It is logged as
        one Test row (Step 0) of CSV_COLUMNS, not a row per batch: a batch's
        loss, and a per-rank average, would depend on the number of
        processes and the batch size; this depends on neither. Printed with
        its ratio to the baseline (the physics alone)."""
        if not self.test_indices:
            return None
        values, count = self._test_split_loss(f"epoch {epoch} test", corrected=True)
        self.log_step(epoch, 0, "Test", values)
        if self.is_main:
            ratio = (f", {values[0] / self.baseline:.4g} x the baseline {self.baseline:.6e}"
                     if self.baseline else "")
            print(f"epoch {epoch}: test loss {values[0]:.6e} ({count} samples){ratio}",
                  flush=True)
        return values[0]

    def _test_split_loss(self, desc: str, corrected: bool) -> tuple[list[float], int]:
        """[total, per-field losses x loss_display_scale] of the whole test
        split (see test_epoch), and its number of samples."""
        sums = torch.zeros(len(LOSS_FIELDS) + 1, dtype=torch.float64, device=self.device)
        for ics, refs in self._progress(self.test_loader, desc):
            sums += self.run_single_test_batch(ics, refs, corrected=corrected)
        if self.distributed:
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        *fields, count = sums.cpu().tolist()
        average = dict(zip(LOSS_FIELDS, (s / count for s in fields)))
        scale = float(self.args.loss_display_scale)
        values = [float(self.combine_loss_components(average))] + [average[n] * scale
                                                                   for n in LOSS_FIELDS]
        return values, int(count)

    def baseline_loss(self) -> float | None:
        """The test split's loss of the physics alone (no correction, no
        learned parameter): what the correctors are measured against.
        Printed; None where the test split is empty."""
        if not self.test_indices:
            return None
        values, count = self._test_split_loss("baseline", corrected=False)
        if self.is_main:
            print(f"baseline (the physics alone, {self.args.core} core at dti = "
                  f"{self.config.dti:g} s, against {self.dataset.model['description']}): test "
                  f"loss {values[0]:.6e} ({count} samples)", flush=True)
        return values[0]

    def learned_values(self) -> dict[str, float]:
        physics = self._plain(self.physics)
        return {} if physics is None else {n: float(v.detach()) for n, v in physics().items()}

    def train(self, stop_after: int | None = None) -> None:
        """Epochs start_epoch .. epochs-1 (``stop_after``: only that many,
        as an interrupted run would)."""
        last = self.args.epochs if stop_after is None else \
            min(self.args.epochs, self.start_epoch + stop_after)
        if self.baseline is None:
            self.baseline = self.baseline_loss()
        for epoch in range(self.start_epoch, last):
            started = time.perf_counter()
            self.grad_norms = []
            lr = float(self.optimizer.param_groups[0]["lr"])
            train_loss = self.train_epoch(epoch)
            test_loss = self.test_epoch(epoch)
            self.scheduler.step()
            if self.is_main and self.physics is not None:
                print(f"epoch {epoch}: learned " + ", ".join(
                    f"{n}={v:.6g}" for n, v in self.learned_values().items()), flush=True)
            self.save_checkpoint(epoch)
            wall = time.perf_counter() - started
            self.log_epoch(epoch, lr, train_loss, test_loss, wall)
            if self.is_main:
                print(f"epoch {epoch}: {wall:.1f} s", flush=True)

    def log_epoch(self, epoch: int, lr: float, train_loss: float, test_loss: float | None,
                  wall: float) -> None:
        """A row of the per-epoch log (EPOCH_COLUMNS; rank 0)."""
        if self.epoch_file is None:
            return
        norms = [n for n in self.grad_norms if math.isfinite(n)]
        nan = float("nan")
        ratio = test_loss / self.baseline if test_loss is not None and self.baseline else nan
        row = [epoch, lr, float(np.mean(norms)) if norms else nan, max(norms, default=nan),
               self.skipped_steps, wall, train_loss,
               nan if test_loss is None else test_loss,
               nan if self.baseline is None else self.baseline, ratio]
        self.epoch_file.write(",".join(str(v) if isinstance(v, int) else repr(float(v))
                                       for v in row) + "\n")
        self.epoch_file.flush()

    # -------------------------------------------------------------- checkpoints
    def save_checkpoint(self, epoch: int) -> Path | None:
        """Rank 0 writes checkpoint_epoch<E>.pt and checkpoint_last.pt
        (each atomically); every rank's RNG state is in it."""
        rng = [None] * self.world_size
        if self.distributed:
            dist.all_gather_object(rng, rng_state(self.device))
        else:
            rng = [rng_state(self.device)]
        path = None
        if self.is_main:
            path = self.args.output / f"checkpoint_epoch{epoch}.pt"
            save_atomically(self._checkpoint_body(epoch, rng),
                            (path, self.args.output / "checkpoint_last.pt"))
            self.last_checkpoint = (path, epoch)
        if self.distributed:
            dist.barrier()
        return path

    def _checkpoint_body(self, epoch: int, rng: list) -> dict:
        """Tensors and plain containers alone (rng_state's too): --resume
        loads it with torch.load(weights_only=True), which runs no pickled
        code (checkpoint.load_resume)."""
        return {"epoch": epoch,
                "networks": {n: (m.state_dict() if m is not None else None)
                             for n, m in self._plain_networks().items()},
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "normalizer": {k: v.cpu() for k, v in self.normalizer.state_dict().items()},
                "learned": self.learned_values(),
                "rng": rng, "world_size": self.world_size,
                "skipped_steps": self.skipped_steps, "baseline": self.baseline,
                "certificate": {"id": self.certificate_id, "key": self.certificate.get("key")},
                "options": {k: (str(v) if isinstance(v, Path) else v)
                            for k, v in vars(self.args).items()}}

    def _load_checkpoint(self, body: Mapping) -> None:
        load_networks(body["networks"], self._plain_networks(), self.args.resume)
        self.optimizer.load_state_dict(body["optimizer"])
        self.scheduler.load_state_dict(body["scheduler"])
        self.start_epoch = int(body["epoch"]) + 1
        self.last_checkpoint = (self.args.resume, int(body["epoch"]))
        self.skipped_steps = int(body.get("skipped_steps", 0))
        self.baseline = body.get("baseline")
        rng = body.get("rng") or []
        if len(rng) == self.world_size and rng[self.global_rank] is not None:
            set_rng_state(rng[self.global_rank], self.device)

    def cleanup(self) -> None:
        for name in ("log_file", "epoch_file"):
            if getattr(self, name) is not None:
                getattr(self, name).close()
                setattr(self, name, None)
        if hasattr(self, "dataset"):
            self.dataset.close()
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()
