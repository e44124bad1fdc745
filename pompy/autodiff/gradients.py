"""Gradient clipping and monitoring for training through the model.

Backpropagation through hundreds of time steps can accumulate large
gradients (exploding gradients: one such step of the optimiser can wreck
the weights). ``clip_gradients`` bounds the update instead: it clips the
global L2 norm of the trainable parameters' gradients to
``grad_clip_norm`` (default 1.0) when it is set and positive.
``gradient_norms`` and ``log_gradient_norms`` report the global norm and
each parameter's, so unhealthy gradient flow shows early.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch
from torch import Tensor

GRAD_CLIP_NORM = 1.0

_LOG = logging.getLogger("pompy.gradients")


def clip_gradients(parameters: Iterable[Tensor] | Iterable[tuple[str, Tensor]],
                   grad_clip_norm: float | None = GRAD_CLIP_NORM,
                   logger: logging.Logger | None = None) -> float | None:
    """Clip the global gradient norm of ``parameters`` (tensors, or
    ``(name, tensor)`` pairs as ``module.named_parameters()`` gives) to
    ``grad_clip_norm`` (torch.nn.utils.clip_grad_norm_); None or <= 0 turns
    clipping off. Returns the global norm before clipping, or None when
    clipping is off or no parameter has a gradient.

    A non-finite gradient would make every clipped gradient NaN. Instead the
    step is skipped: a warning names the parameters whose gradient is not
    finite, every gradient is cleared (``p.grad = None``: optimizers leave
    such parameters unchanged) and the non-finite norm is returned, for the
    caller to count (under DDP every rank sees the same averaged gradients,
    so all ranks skip together)."""
    named = [(item if isinstance(item, tuple) else (f"parameter {i}", item))
             for i, item in enumerate(parameters)]
    named = [(name, p) for name, p in named if p.grad is not None]
    if grad_clip_norm is None or float(grad_clip_norm) <= 0 or not named:
        return None
    params = [p for _, p in named]
    if _all_finite(params):
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm=float(grad_clip_norm)))
    norm = float(torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(p.grad.detach().double()) for p in params])))
    bad = [name for name, p in named if not bool(torch.isfinite(p.grad).all())]
    (logger or _LOG).warning(f"pompy: non-finite gradient in {', '.join(bad)} (global norm "
                             f"{norm}); optimizer step skipped, gradients cleared")
    for p in params:
        p.grad = None
    return norm


def _all_finite(params: list[Tensor]) -> bool:
    return bool(torch.stack([torch.isfinite(p.grad).all() for p in params]).all())


def gradient_norms(named_parameters: Iterable[tuple[str, Tensor]]) -> dict[str, float]:
    """{"global": the L2 norm over all gradients, name: each parameter's}
    for the parameters that have a gradient (inf or NaN pass through)."""
    norms = {name: float(torch.linalg.vector_norm(p.grad.detach().double()))
             for name, p in named_parameters if p.grad is not None}
    return {"global": math.sqrt(sum(n * n for n in norms.values())), **norms}


def log_gradient_norms(named_parameters: Iterable[tuple[str, Tensor]], step: int | None = None,
                       logger: logging.Logger | None = None) -> dict[str, float]:
    """Log the gradient norms (one line: global first, then each parameter,
    flagging non-finite ones) and return them."""
    norms = gradient_norms(named_parameters)
    bad = [name for name, n in norms.items() if not math.isfinite(n)]
    text = " ".join(f"{name}={n:.3e}" for name, n in norms.items())
    prefix = f"step {step}: " if step is not None else ""
    (logger or _LOG).log(logging.WARNING if bad else logging.INFO,
                         f"{prefix}gradient norms {text}" + (f" (not finite: {', '.join(bad)})" if bad else ""))
    return norms
