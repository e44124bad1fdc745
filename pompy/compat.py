"""Bit-for-bit compatibility with the compiled pom2k (opt-in).

pompy's torch core is the oracle's algorithm operation for operation; where
the two round differently is in the elementary functions. gfortran -O3 (the
golden pom2k build, and the oracle's) evaluates the sin, exp, log and
``x**1.5`` of pom2k's vectorisable loops with glibc's vector math library,
libmvec, up to 4 ulp from the correctly rounded value; torch's are
correctly rounded almost always. Measured on random arguments, a quarter
to a half of the values differ in the last bit. In the seamount set-up
(sin in dx, exp in h and t, log in cbc) that leaves an ulp in a few
points; in the time loop (|s|**1.5 in dens) an ulp of rho here and there.
Continuity's cancellation amplifies either to ~1e-10 of w within a few
steps, and the turbulence closure can carry it further (measured in
tests/test_explicit_core.py).

Inside ``with fortran_math():`` the torch core takes these function values
from the oracle's compiled module, computed in the same loop nests as
pom2k's (reference_fortran/compat.f90), and then reproduces the oracle and
golden pom2k to the last bit (the implicit core's elevation solve takes the
reference CG there, the algorithm of its Fortran twin's cg_solve). It runs on the CPU in float64 only, needs the
oracle built (gfortran), and is not differentiable: it is for regression
runs against Fortran, not for training. Outside it (the default) the torch
functions are used and nothing here touches the oracle.
"""
from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar

import numpy as np
import torch
from torch import Tensor

from pompy.oracle.build import load
from pompy.utils.safety import safe_abs_pow, safe_log

_FORTRAN_MATH: ContextVar[bool] = ContextVar("pompy_fortran_math", default=False)


@contextlib.contextmanager
def fortran_math():
    """Within the block, the torch core's elementary functions are pom2k's."""
    token = _FORTRAN_MATH.set(True)
    try:
        yield
    finally:
        _FORTRAN_MATH.reset(token)


# Dynamo cannot trace ContextVar.get: a compiled graph takes the value it had
# when traced, without a guard (pompy.core.compiled's graphs run only
# outside fortran_math, whose host callbacks no graph could hold anyway)
@torch.compiler.assume_constant_result
def in_force() -> bool:
    """Whether the caller runs inside fortran_math()."""
    return _FORTRAN_MATH.get()


def _pom2k(name: str, values: tuple[Tensor, ...], inputs: tuple[Tensor, ...] = (),
           **scalars) -> tuple[Tensor, ...]:
    """``values`` (torch's), or inside fortran_math() the values the oracle
    routine ``name`` computes from ``inputs``, written over copies of them."""
    if not in_force():
        return values
    for t in (*inputs, *values):
        if t.dtype != torch.float64 or t.device.type != "cpu" or t.requires_grad:
            raise RuntimeError("fortran_math() needs float64 CPU tensors without gradients "
                               f"(got {t.dtype} on {t.device}, requires_grad={t.requires_grad})")
    in_names, out_names = _ARGS[name]
    arrays = {n: np.asfortranarray(t.numpy()) for n, t in zip(in_names, inputs)}
    results = {n: np.array(t.numpy(), order="F") for n, t in zip(out_names, values)}  # copies
    getattr(load(), name)(**arrays, **results, **scalars)
    return tuple(torch.from_numpy(np.ascontiguousarray(results[n])) for n in out_names)


# the oracle routines' array arguments (reference_fortran/compat.f90): (inputs, outputs)
_ARGS = {"abs_pow15": (("sr",), ("pw",)), "seamount_sin": ((), ("si", "sj")),
         "seamount_exp": (("east_c", "north_c"), ("e",)), "seamount_texp": (("zz", "h"), ("e",)),
         "cbc_log": (("zz", "h"), ("g",))}


def abs_pow15(sr: Tensor) -> Tensor:
    """|sr|**1.5 (dens; pom2k's for k = 1..kbm1 inside fortran_math)."""
    return _pom2k("abs_pow15", (safe_abs_pow(sr, 1.5, layer="dens"),), (sr,))[0]


def seamount_sin(im: int, jm: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """sin(pi*i/im) and sin(pi*j/jm) on the (i, j) grid (seamount's dx, dy)."""
    pi = math.atan(1.0) * 4.0
    ii = torch.arange(1, im + 1, dtype=like.dtype, device=like.device).unsqueeze(1)
    jj = torch.arange(1, jm + 1, dtype=like.dtype, device=like.device).unsqueeze(0)
    return _pom2k("seamount_sin", (torch.sin(pi * ii / im).expand(im, jm).contiguous(),
                                   torch.sin(pi * jj / jm).expand(im, jm).contiguous()))


def seamount_exp(east_c: Tensor, north_c: Tensor, ra: float) -> Tensor:
    """exp(-r2/ra**2), r the distance from the seamount's centre
    (east_c((im+1)/2, j), north_c(i, (jm+1)/2))."""
    im, jm = east_c.shape
    ic, jc = (im + 1) // 2 - 1, (jm + 1) // 2 - 1
    r2 = (east_c - east_c[ic:ic + 1]) ** 2 + (north_c - north_c[:, jc:jc + 1]) ** 2
    return _pom2k("seamount_exp", (torch.exp(-r2 / ra ** 2),), (east_c, north_c), ra=ra)[0]


def seamount_texp(zz: Tensor, h: Tensor) -> Tensor:
    """exp(zz(k)*h/1000) (seamount's temperature; pom2k's for k = 1..kbm1
    inside fortran_math)."""
    value = torch.exp(zz.view(1, 1, -1) * h.unsqueeze(-1) / 1000.0)
    return _pom2k("seamount_texp", (value,), (zz, h))[0]


def cbc_log(zz: Tensor, h: Tensor, z0b: float) -> Tensor:
    """log((1+zz(kbm1))*h/z0b) (the bottom friction coefficient)."""
    value = safe_log((1.0 + zz[-2]) * h / z0b, layer="bottom_drag")
    return _pom2k("cbc_log", (value,), (zz, h), z0b=z0b)[0]
