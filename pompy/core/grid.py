"""pom2k's grid routines: depth (sigma levels), areas_masks, slpmax.

Tensors are indexed (i, j) like the Fortran: ``a[i-1, j-1]`` is ``a(i,j)``.
Each routine takes the oracle's arguments by name and returns its
in/output arguments as new tensors in a NamedTuple.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import X, Y, inside, xm, ym

# pom2k depth's log spacing: 1, 1, 2, 4, ..., 1024
KDZ = (1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

LEVELS = "z zz dz dzz"
AREAS_MASKS = "art aru arv fsm dum dvm"
DepthOut = outputs("DepthOut", LEVELS)
AreasMasksOut = outputs("AreasMasksOut", AREAS_MASKS)
SlpmaxOut = outputs("SlpmaxOut", "h")


def depth(kl1: int, kl2: int, z: Tensor, zz: Tensor, dz: Tensor, dzz: Tensor) -> DepthOut:
    """pom2k depth: sigma levels z (w points, 0 to -1) and zz (t points),
    log-spaced over the top kl1 and the bottom kb-kl2 levels, uniform
    between; dz(k) = z(k)-z(k+1), dzz(k) = zz(k)-zz(k+1), dz(kb) = dzz(kb) = 0.

    Only the shapes, dtype and device of the inputs are used. The levels
    are sums of small integers, built exactly in float64 as in the Fortran."""
    kb = z.shape[0]
    if not (2 <= kl1 < kl2 <= kb and kb - kl2 <= len(KDZ) and kl1 <= len(KDZ) + 1):
        raise ValueError(f"depth: kl1={kl1}, kl2={kl2} do not fit kb={kb} "
                         f"(2 <= kl1 <= 13, kl1 < kl2 <= kb, kb-kl2 <= 12)")
    # a recursion over k, as pom2k's; 1-D and set-up only
    zk = [0.0]
    for k in range(2, kl1 + 1):
        zk.append(zk[-1] + KDZ[k - 2])
    delz = zk[kl1 - 1] - zk[kl1 - 2]
    for k in range(kl1 + 1, kl2 + 1):
        zk.append(zk[-1] + delz)
    for k in range(kl2 + 1, kb + 1):
        zk.append(zk[-1] + float(KDZ[kb - k]) * delz / float(KDZ[kb - kl2 - 1]))
    z64 = torch.tensor(zk, dtype=torch.float64)
    z64 = -z64 / z64[-1]
    zz64 = torch.empty_like(z64)
    zz64[:-1] = 0.5 * (z64[:-1] + z64[1:])
    zz64[-1] = 2.0 * zz64[-2] - zz64[-3]
    dz64, dzz64 = torch.zeros_like(z64), torch.zeros_like(z64)
    dz64[:-1] = z64[:-1] - z64[1:]
    dzz64[:-1] = zz64[:-1] - zz64[1:]
    like = dict(dtype=z.dtype, device=z.device)
    return DepthOut(*(a.to(**like) for a in (z64, zz64, dz64, dzz64)))


def areas_masks(dx: Tensor, dy: Tensor, h: Tensor, art: Tensor, aru: Tensor, arv: Tensor,
                fsm: Tensor, dum: Tensor, dvm: Tensor) -> AreasMasksOut:
    """pom2k areas_masks: cell areas at t, u and v points and the masks.

    art = dx*dy; aru, arv the mean-spacing products for i, j >= 2, copied
    to i=1 then j=1; fsm = 1 where h > 1 m; dum, dvm the products of fsm
    across the u and v faces (0 on the first column and row)."""
    im, jm = h.shape
    art = dx * dy
    aru = .25 * (dx + xm(dx)) * (dy + xm(dy))
    arv = .25 * (dx + ym(dx)) * (dy + ym(dy))
    # pom2k copies i=2 into i=1 (all j), then j=2 into j=1 (all i)
    aru = torch.cat([aru[1:2], aru[1:]], 0)
    arv = torch.cat([arv[1:2], arv[1:]], 0)
    aru = torch.cat([aru[:, 1:2], aru[:, 1:]], 1)
    arv = torch.cat([arv[:, 1:2], arv[:, 1:]], 1)
    fsm = (h > 1.0).to(h.dtype)
    dum = inside(fsm * xm(fsm), 0.0, i=(2, im), j=(2, jm))
    dvm = inside(fsm * ym(fsm), 0.0, i=(2, im), j=(2, jm))
    return AreasMasksOut(art, aru, arv, fsm, dum, dvm)


def _limit_pairs(h: Tensor, fsm: Tensor, slmax: float, dim: int, order) -> Tensor:
    """One pom2k slpmax sweep along ``dim``: for each n in ``order`` the pair
    (n, n+1) (0-based) is pulled to the slope slmax if it is steeper. The
    pairs of a sweep depend on each other in order, so this is a recursion
    along ``dim``, vectorised across the other dimension."""
    h = h.movedim(dim, 0).clone()
    wet = (fsm.movedim(dim, 0) != 0)
    lo, hi = 1, h.shape[1] - 2            # the other index runs 2..n-1
    for n in order:
        a, b = h[n, lo:hi + 1], h[n + 1, lo:hi + 1]
        steep = wet[n, lo:hi + 1] & wet[n + 1, lo:hi + 1] & (torch.abs(b - a) / (a + b) >= slmax)
        mean = (b + a) / 2.0
        # Fortran sign(slmax, b-a), in h's dtype (torch.where of two Python
        # numbers would give a float32 slmax)
        delta = torch.copysign(torch.full_like(b, slmax), b - a)
        h[n + 1, lo:hi + 1] = torch.where(steep, mean * (1.0 + delta), b)
        h[n, lo:hi + 1] = torch.where(steep, mean * (1.0 - delta), a)
    return h.movedim(0, dim)


def slpmax(slmax: float, fsm: Tensor, h: Tensor) -> SlpmaxOut:
    """pom2k slpmax: limit the slope parameter |dh|/(h1+h2) between wet
    neighbours to slmax by ten rounds of sweeps right, left (each row
    j=2..jmm1), then up, down (each column i=2..imm1), in pom2k's order.

    pom2k runs the right and left sweeps of a row before the next row;
    rows do not interact, so all rows sweep together here (likewise columns).
    Set-up only: the sweeps are sequential, as in the Fortran."""
    im, jm = h.shape
    for _ in range(10):
        h = _limit_pairs(h, fsm, slmax, X, range(1, im - 1))
        h = _limit_pairs(h, fsm, slmax, X, range(im - 2, 0, -1))
        h = _limit_pairs(h, fsm, slmax, Y, range(1, jm - 1))
        h = _limit_pairs(h, fsm, slmax, Y, range(jm - 2, 0, -1))
    return SlpmaxOut(h)
