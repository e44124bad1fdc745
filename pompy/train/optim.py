"""The trainer's optimisation: Adam over the correctors' parameters, the
learning rate cosine-annealed to 1e-7 over the epochs, the global
gradient norm clipped, and a step with a non-finite gradient skipped
(under DDP every rank sees the same averaged gradients, so all skip)."""
from __future__ import annotations

import math
import sys
from collections.abc import Mapping

import torch
from torch import nn

from pompy.autodiff.gradients import clip_gradients
from pompy.settings.train import Optimizer

ETA_MIN = 1e-7          # the learning rate the cosine schedule ends at


class Optimisation:
    """Adam and its schedule for ``named`` parameters, with the clipping
    and the skipped-step count of one run."""

    def __init__(self, named: list[tuple[str, nn.Parameter]], settings: Optimizer,
                 verbose: bool = True):
        self.named, self.settings, self.verbose = named, settings, verbose
        self.optimizer = torch.optim.Adam([p for _, p in named], lr=settings.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, T_max=settings.epochs, eta_min=ETA_MIN)
        self.skipped_steps = 0
        self.grad_norms: list[float] = []        # this epoch's, before clipping

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """Clip the gradients and step; a non-finite gradient norm skips the step."""
        norm = clip_gradients(self.named, self.settings.clip)
        if norm is not None:
            self.grad_norms.append(norm)
        if norm is not None and not math.isfinite(norm):
            self.skipped_steps += 1
            if self.verbose:
                print(f"pompy train: non-finite gradient (norm {norm}); step skipped "
                      f"({self.skipped_steps} so far)", file=sys.stderr)
        else:
            self.optimizer.step()

    def start_epoch(self) -> None:
        self.grad_norms = []

    def end_epoch(self) -> None:
        self.scheduler.step()

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "skipped_steps": self.skipped_steps}

    def load(self, body: Mapping) -> None:
        self.optimizer.load_state_dict(body["optimizer"])
        self.scheduler.load_state_dict(body["scheduler"])
        self.skipped_steps = int(body.get("skipped_steps", 0))
