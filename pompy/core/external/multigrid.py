"""A geometric multigrid V-cycle: the elevation solve's other preconditioner.

Jacobi-preconditioned CG takes iterations that grow as the square root of
the operator's condition number, about 1 + 8 c_f/art with c_f the
coefficient of a face: at dti = 600 s that is 175 (median) to 300 times a
seamount cell's area term, and Jacobi's PCG takes 300-600 iterations to
cg_tol 1e-12; c_f/art grows as (dt/dx)^2, so a finer grid or a longer
step takes more. On a GPU each iteration is a chain of small kernels and
a host read. One V-cycle costs a few five-point products per level, and
the PCG with it converges in 12-14 iterations on each seamount grid from
65x49 to 720x480 (validation/multigrid.py).

The levels. The operator A (pompy.core.external.cg.FivePoint) is split on
each active cell into its faces' coefficients and what is left on the
diagonal, the cell's own term m = diag - (sum of its faces) >= 0 (its area
art, plus the radiation term on the open edges). A coarse cell is a block
of 2x2 fine interior cells (2x1 or 1x2 once the interior is COARSEST cells
or fewer in one direction, which then stays: a long channel coarsens
along its length; one row or column of padding where the interior is
odd), active where any of them is; its own term is the sum of theirs (an
area adds up), and the coefficient of a coarse face is the sum of the
fine faces it covers over the coarsening factor across it (half the sum
of two for 2x2 blocks): c_f is theta^2 dt^2 g D dy/dx, and coarsened by
2 in x a cell's dx doubles while the face's dy is the two fine faces'.
The Galerkin product of piecewise-constant interpolation (P^T A P) would
give the sum, a coarse operator twice too stiff for the waves it must
correct (Braess's observation for aggregation multigrid; measured on the
seamount at dti 600 s: 30 iterations where this takes 14). Land stays
land: a coarse face joins two coarse cells only where a fine face joined
two active cells.

The cycle. Restriction is P^T (the sum over a block's active cells) and
prolongation P (the coarse value on each active cell of the block, 0 on
land), exactly each other's transpose. Smoothing is red-black Gauss-Seidel,
red then black before the coarse correction, black then red after: each
half-sweep is self-adjoint in the A inner product, so the cycle is a
symmetric operator M; Gauss-Seidel contracts in the A norm, so M is
positive definite for any symmetric positive definite coarse solve (the
coarsest level's symmetric sweeps are): a valid CG preconditioner
(tests/test_multigrid.py checks <x, M y> = <M x, y> and <x, M x> > 0).
Land and the boundary ring, identity rows of A, are identity rows of M.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from pompy.core.external.stencil import FivePoint, Interior, apply_interior, interior_of

# Gauss-Seidel sweeps (red and black) before and after each coarse correction
SWEEPS = 2
# the coarsest level: a direction is coarsened while the interior has more
# than COARSEST cells along it; at the coarsest SWEEPS_COARSEST symmetric
# sweeps solve (its own terms, up to 4^levels times the finest's, dominate
# there: 1, 2, 4 or 8 sweeps all gave 12-14 iterations on the seamount
# grids at dti 600 s, and 13-16 with every face 16 times stiffer)
COARSEST = 3
SWEEPS_COARSEST = 2


class Level(NamedTuple):
    """One grid of the hierarchy, with what its cycle reads."""
    a: FivePoint
    stencil: Interior     # a's coefficients as cg.apply_interior reads them
    red: Tensor            # 1/diag on the cells of (i + j) even, the first colour; 0 elsewhere
    black: Tensor          # likewise on the other cells (land and the ring: 1, identity rows)
    active: Tensor         # a.active's interior (what restriction sums)
    factors: tuple[int, int]   # the blocks of the next level: 2 (or 1) cells along i and j


def _level(a: FivePoint) -> Level:
    im, jm = a.diag.shape
    factors = (2 if im - 2 > COARSEST else 1, 2 if jm - 2 > COARSEST else 1)
    i = torch.arange(im, device=a.diag.device)[:, None]
    j = torch.arange(jm, device=a.diag.device)[None, :]
    red = (i + j) % 2 == 0
    inverse = torch.where(a.active, 1.0 / a.diag, torch.ones_like(a.diag))
    zero = torch.zeros_like(inverse)
    return Level(a, interior_of(a), torch.where(red, inverse, zero), torch.where(red, zero, inverse),
                 a.active[1:im - 1, 1:jm - 1], factors)


def _blocks(a: Tensor, fx: int, fy: int) -> Tensor:
    """The interior array a (n, m) padded with zeros to whole blocks, summed
    over blocks of fx x fy: (ceil(n/fx), ceil(m/fy))."""
    a = F.pad(a, (0, -a.shape[1] % fy, 0, -a.shape[0] % fx))
    return a.reshape(a.shape[0] // fx, fx, a.shape[1] // fy, fy).sum((1, 3))


def _ring(a: Tensor, value: float) -> Tensor:
    """An interior array with the boundary ring around it set to ``value``."""
    return F.pad(a, (1, 1, 1, 1), value=value)


def coarsen(level: Level) -> FivePoint:
    """The coarse operator of a level (the module docstring): blocks of its
    interior, own terms summed, each coarse face the fine faces it covers
    over the factor across it, and a boundary ring of identity rows."""
    v, (fx, fy) = level.stencil, level.factors
    zero = torch.zeros_like(v.diag)
    own = torch.where(v.active, v.diag - (v.cx + v.cx_p + v.cy + v.cy_p), zero)
    active = _blocks(v.active.to(v.diag.dtype), fx, fy) > 0
    # cx(i) joins i-1 and i: the face between blocks b-1 and b is the fine
    # face at interior index fx b (at b = 0 the ring's, none), summed along
    # the block's other direction
    cx = _blocks(v.cx[::fx], 1, fy) / fx
    cy = _blocks(v.cy[:, ::fy], fx, 1) / fy
    cx = _ring(torch.cat([torch.zeros_like(cx[:1]), cx[1:]], 0), 0.0)
    cy = _ring(torch.cat([torch.zeros_like(cy[:, :1]), cy[:, 1:]], 1), 0.0)
    im, jm = cx.shape
    sides = (cx[1:im - 1, 1:jm - 1] + cx[2:im, 1:jm - 1]
             + cy[1:im - 1, 1:jm - 1] + cy[1:im - 1, 2:jm])
    diag = torch.where(active, _blocks(own, fx, fy) + sides, torch.ones_like(sides))
    return FivePoint(_ring(diag, 1.0), cx, cy, _ring(active, False))


def hierarchy(a: FivePoint) -> list[Level]:
    """The levels from ``a`` down to an interior of at most COARSEST cells
    each way."""
    levels = [_level(a)]
    while levels[-1].factors != (1, 1):
        levels.append(_level(coarsen(levels[-1])))
    return levels


def restrict(r: Tensor, fine: Level) -> Tensor:
    """P^T r: each coarse cell the sum of r over its block's active cells."""
    im, jm = r.shape
    inner = torch.where(fine.active, r[1:im - 1, 1:jm - 1], torch.zeros_like(fine.active, dtype=r.dtype))
    return _ring(_blocks(inner, *fine.factors), 0.0)


def prolong(e: Tensor, fine: Level) -> Tensor:
    """P e: the coarse value on each active fine cell of its block, 0 on land
    and the ring."""
    n, m = fine.active.shape
    fx, fy = fine.factors
    inner = e[1:-1, 1:-1].repeat_interleave(fx, 0).repeat_interleave(fy, 1)[:n, :m]
    return _ring(torch.where(fine.active, inner, torch.zeros_like(inner)), 0.0)


def _sweep(level: Level, x: Tensor, r: Tensor, colour: Tensor) -> Tensor:
    """A Gauss-Seidel half-sweep of A x = r on the cells of one colour
    (``colour``: their 1/diag, 0 on the others; a cell's neighbours all
    have the other colour)."""
    return x + colour * (r - apply_interior(level.stencil, x))


def _smooth(level: Level, x: Tensor, r: Tensor, sweeps: int, first: Tensor, second: Tensor
            ) -> Tensor:
    for _ in range(sweeps):
        x = _sweep(level, _sweep(level, x, r, first), r, second)
    return x


def _presmooth(level: Level, r: Tensor, sweeps: int) -> Tensor:
    """``sweeps`` red-black sweeps from x = 0 (the first half-sweep's
    residual is r itself)."""
    x = _sweep(level, level.red * r, r, level.black)
    return _smooth(level, x, r, sweeps - 1, level.red, level.black)


def v_cycle(levels: list[Level], r: Tensor, k: int = 0) -> Tensor:
    """M r: one V-cycle from level k for A x = r, from x = 0."""
    level = levels[k]
    if k == len(levels) - 1:
        x = _presmooth(level, r, SWEEPS_COARSEST)
        return _smooth(level, x, r, SWEEPS_COARSEST, level.black, level.red)
    x = _presmooth(level, r, SWEEPS)
    coarse = v_cycle(levels, restrict(r - apply_interior(level.stencil, x), level), k + 1)
    x = x + prolong(coarse, level)
    return _smooth(level, x, r, SWEEPS, level.black, level.red)


class Multigrid:
    """The preconditioner of an operator: ``Multigrid(a)(r)`` is M r, one
    V-cycle (no gradients: the solves that use it are differentiated
    implicitly)."""

    def __init__(self, a: FivePoint):
        with torch.no_grad():
            self.levels = hierarchy(a)

    def __call__(self, r: Tensor) -> Tensor:
        with torch.no_grad():
            return v_cycle(self.levels, r)
