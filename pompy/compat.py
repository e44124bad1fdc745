"""Bit-for-bit compatibility with the compiled pom2k (opt-in).

pompy's torch core is the oracle's algorithm operation for operation; the
one place where the two round differently in the time loop is ``x**1.5``
in dens. gfortran -O3 (the golden pom2k build, and the oracle's) evaluates
it with glibc's vector math library, libmvec, whose pow is up to 4 ulp
from the correctly rounded value; torch's pow is correctly rounded almost
always. About a quarter of the values differ in the last bit; after
rounding into rho a few points differ by 1 ulp, and the cancellation of
the continuity equation amplifies that to ~1e-11 of w within three steps
(measured on the seamount; 1.5e-11 on the prognostic fields after 240 steps).

Inside ``with fortran_pow():`` the torch dens takes its ``|sr|**1.5`` from
the oracle's compiled module (the same loop nest and flags as its dens),
so the torch core reproduces the oracle and golden pom2k bit for bit. It
runs on the CPU in float64 only, needs the oracle built (gfortran), and is
not differentiable: it is for regression runs against Fortran, not for
training. Outside it (the default) nothing here is used.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar

import numpy as np
import torch
from torch import Tensor

_FORTRAN_POW: ContextVar[bool] = ContextVar("pompy_fortran_pow", default=False)


@contextlib.contextmanager
def fortran_pow():
    """Within the block dens evaluates |s|**1.5 as the compiled pom2k does."""
    token = _FORTRAN_POW.set(True)
    try:
        yield
    finally:
        _FORTRAN_POW.reset(token)


def abs_pow15(sr: Tensor) -> Tensor:
    """|sr|**1.5, as torch evaluates it, or inside fortran_pow() as gfortran
    -O3 does in dens (for k = 1..kbm1; k = kb is torch's)."""
    if not _FORTRAN_POW.get():
        return torch.abs(sr) ** 1.5
    if sr.dtype != torch.float64 or sr.device.type != "cpu" or sr.requires_grad:
        raise RuntimeError("fortran_pow() needs float64 CPU tensors without gradients "
                           f"(got {sr.dtype} on {sr.device}, requires_grad={sr.requires_grad})")
    from pompy.oracle.run import oracle

    x = np.asfortranarray(sr.numpy())
    pw = np.asfortranarray((torch.abs(sr) ** 1.5).numpy())
    oracle().module.abs_pow15(sr=x, pw=pw)
    return torch.from_numpy(np.ascontiguousarray(pw))
