"""The trainer's networks: CorrectorNet (the encoder and the decoder),
the learned pom2k parameters (PhysicsParameters), and SyncBatchNorm on
CPU (SyncBatchNormCPU: ``nn.SyncBatchNorm`` works on GPUs only, its
forward and DDP refusing CPU modules; this one computes the global batch's
statistics with differentiable all-reduces, the same semantics)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F


class _AllReduceSum(torch.autograd.Function):
    """all_reduce(SUM) with its gradient: the all-reduced sum of the
    gradients (every rank's loss depends on the sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def all_reduce_sum(x: torch.Tensor, group=None) -> torch.Tensor:
    return _AllReduceSum.apply(x, group)


class SyncBatchNormCPU(nn.modules.batchnorm._BatchNorm):
    """nn.SyncBatchNorm's semantics on CPU (gloo), where torch's own
    forward refuses CPU tensors and DDP refuses SyncBatchNorm modules: in
    training under a process group of more than one rank, the global
    batch's mean and (biased) variance from two differentiable
    all-reduces, running statistics updated as nn.BatchNorm does with the
    unbiased global variance; otherwise nn.BatchNorm's forward."""

    process_group = None

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2-D input (got {x.dim()}-D)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = self.process_group or (dist.group.WORLD if dist.is_available()
                                       and dist.is_initialized() else None)
        if not (self.training and group is not None and dist.get_world_size(group) > 1):
            return super().forward(x)
        self._check_input_dim(x)
        # statistics at least in the running statistics' precision (a bf16
        # input under autocast: float32, as torch's own SyncBatchNorm)
        like = next((t for t in (self.running_mean, self.weight) if t is not None), x)
        dtype_in, x = x.dtype, x.to(torch.promote_types(x.dtype, like.dtype))
        shape = [1, -1] + [1] * (x.dim() - 2)
        mean, centred, var, count = _global_moments(x, group)
        if self.track_running_stats:
            self._update_running_stats(mean, var, count)
        y = centred / torch.sqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(dtype_in)

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor,
                              count: torch.Tensor) -> None:
        """As nn.BatchNorm, with the unbiased global variance."""
        self.num_batches_tracked += 1
        m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        self.running_mean.mul_(1 - m).add_(mean.detach() * m)
        self.running_var.mul_(1 - m).add_(var.detach() * (count / (count - 1)) * m)


def _global_moments(x: torch.Tensor, group) -> tuple[torch.Tensor, ...]:
    """Per channel (dim 1), differentiable: the global batch's mean, x less
    it, the biased variance; and the count of values (two all-reduces)."""
    dims = [0] + list(range(2, x.dim()))
    n = torch.tensor([x.numel() // x.shape[1]], dtype=x.dtype, device=x.device)
    total = all_reduce_sum(torch.cat([x.sum(dims), n]), group=group)
    count = total[-1].detach()
    mean = total[:-1] / count
    centred = x - mean.view([1, -1] + [1] * (x.dim() - 2))
    var = all_reduce_sum((centred * centred).sum(dims), group=group) / count
    return mean, centred, var, count


def convert_sync_batchnorm(module: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """nn.SyncBatchNorm.convert_sync_batchnorm; on CPU each SyncBatchNorm
    then becomes a SyncBatchNormCPU (same state, a forward that works)."""
    module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
    if torch.device(device).type == "cpu":
        for m in module.modules():
            if type(m) is nn.SyncBatchNorm:
                m.__class__ = SyncBatchNormCPU
    return module


# the CorrectorNet's normalisation layers (option ``norm``)
NORMS = ("batch", "group")


def _norm(kind: str, channels: int) -> nn.Module:
    """batch: nn.BatchNorm2d (the default; SyncBatchNorm once converted for DDP);
    group: nn.GroupNorm of groups of 4 channels, per sample, the same in
    training and evaluation whatever the batch."""
    if kind == "group":
        return nn.GroupNorm(max(channels // 4, 1), channels)
    if kind != "batch":
        raise ValueError(f"norm {kind!r}: one of {', '.join(NORMS)}")
    return nn.BatchNorm2d(channels)


def _block(cin: int, cout: int, stride: int = 1, norm: str = "batch") -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), _norm(norm, cout),
                         nn.ReLU())


class CorrectorNet(nn.Module):
    """A conv encoder-decoder (two 3x3 conv blocks, a stride-2 block, an
    upsampled block joined with the skip, a 3x3 head) from packed
    channels to corrections of the same channels, zero on land. ``norm``:
    the blocks' normalisation (NORMS; batch norm, SyncBatchNorm under DDP, by default).
    ``zero_head``: the head's weights and bias start at zero, so that the
    hybrid starts as the physics alone (the default: torch's init, whose
    first corrections are noise)."""

    def __init__(self, channels: int, hidden: int, mask: torch.Tensor, norm: str = "batch",
                 zero_head: bool = False):
        super().__init__()
        self.enc = nn.Sequential(_block(channels, hidden, norm=norm),
                                 _block(hidden, hidden, norm=norm))
        self.down = _block(hidden, 2 * hidden, stride=2, norm=norm)
        self.up = _block(2 * hidden, hidden, norm=norm)
        self.head = nn.Conv2d(2 * hidden, channels, 3, padding=1)
        if zero_head:             # no correction until training finds one: the physics alone
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        self.register_buffer("mask", mask.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.enc(x)
        low = self.down(skip)
        up = self.up(F.interpolate(low, size=skip.shape[-2:], mode="nearest"))
        return self.head(torch.cat([skip, up], dim=1)) * self.mask.to(x.dtype)


class PhysicsParameters(nn.Module):
    """Learned pom2k parameters, positive: value = exp(log_value)."""

    def __init__(self, initial: Mapping[str, float], dtype: torch.dtype):
        super().__init__()
        self.log_values = nn.ParameterDict({
            name: nn.Parameter(torch.tensor(math.log(float(v)), dtype=dtype))
            for name, v in initial.items()})

    def forward(self) -> dict[str, torch.Tensor]:
        return {name: p.exp() for name, p in self.log_values.items()}
