"""The elevation equation's operator: a symmetric five-point stencil on
the (i, j) grid (see pompy.core.external.cg for its form), applied on the
interior i = 2..imm1, j = 2..jmm1 with the boundary ring the identity. The
CG solvers and the multigrid preconditioner both build on it.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from pompy.ops import put


class FivePoint(NamedTuple):
    diag: Tensor       # (im, jm)
    cx: Tensor         # (im, jm): face between i-1 and i; 0 unless both cells are active
    cy: Tensor         # (im, jm): face between j-1 and j
    active: Tensor     # (im, jm) bool: the unknowns, inside the ring (i = 2..im-1, j = 2..jm-1)

    def __matmul__(self, x: Tensor) -> Tensor:
        return apply(self, x)


class Interior(NamedTuple):
    """A FivePoint's coefficients on the interior i = 2..imm1, j = 2..jmm1
    (views), each as the stencil reads it: the loop invariants of a solve."""
    im: int
    jm: int
    diag: Tensor       # diag(i,j)
    cx: Tensor         # cx(i,j)
    cx_p: Tensor       # cx(i+1,j)
    cy: Tensor         # cy(i,j)
    cy_p: Tensor       # cy(i,j+1)
    active: Tensor     # active(i,j)


def interior_of(a: FivePoint) -> Interior:
    """Of one system (im, jm), or of members (a leading dimension)."""
    im, jm = a.diag.shape[-2:]
    I, J = slice(1, im - 1), slice(1, jm - 1)          # span(2, imm1), span(2, jmm1)
    return Interior(im, jm, a.diag[..., I, J], a.cx[..., I, J], a.cx[..., 2:im, J],
                     a.cy[..., I, J], a.cy[..., I, 2:jm], a.active[..., I, J])


def apply_interior(v: Interior, x: Tensor) -> Tensor:
    """A x on the interior (pom2k's ranges, as views), x on the boundary ring;
    of members (x with a leading dimension) outside autograd only: they
    are written in place of a copy, where one system goes through put,
    which torch.vmap and autograd take."""
    im, jm = v.im, v.jm
    I, J = slice(1, im - 1), slice(1, jm - 1)          # span(2, imm1), span(2, jmm1)
    xc = x[..., I, J]
    ax = (v.diag * xc - v.cx * x[..., :im - 2, J] - v.cx_p * x[..., 2:im, J]
          - v.cy * x[..., I, :jm - 2] - v.cy_p * x[..., I, 2:jm])
    if x.dim() == 2:
        return put(x, torch.where(v.active, ax, xc), i=(2, im - 1), j=(2, jm - 1))
    out = x.clone()
    out[..., I, J] = torch.where(v.active, ax, xc)
    return out


def apply(a: FivePoint, x: Tensor) -> Tensor:
    """A x (the module docstring), computed on the interior i = 2..imm1,
    j = 2..jmm1 that holds the active cells; the boundary ring is the
    identity (A x = x)."""
    return apply_interior(interior_of(a), x)
