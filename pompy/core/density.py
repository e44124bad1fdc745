"""pom2k equation of state (dens) and baroclinic pressure gradient (baropg).

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
pom2k's ``a(i,j,k)``. Each routine takes the oracle's arguments by name and
returns its in/output arguments as new tensors in a NamedTuple.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.compat import abs_pow15
from pompy.ops import Z, put, span


DensOut = outputs("DensOut", "rhoo")
BaropgOut = outputs("BaropgOut", "rho drhox drhoy")


def dens(grav: float, rhoref: float, tbias: float, sbias: float, zz: Tensor,
         h: Tensor, fsm: Tensor, si: Tensor, ti: Tensor, rhoo: Tensor) -> DensOut:
    """pom2k dens: density anomaly (rho-1000)/rhoref from UNESCO with the
    pressure correction, masked by fsm.

    si, ti, rhoo at T points. Writes rhoo for k=1..kbm1 (all i, j);
    rhoo(:,:,kb) is returned as given.
    """
    kbm1 = rhoo.size(Z) - 1
    K = span(1, kbm1)
    tr = ti[:, :, K] + tbias
    sr = si + sbias                 # abs_pow15 takes every k (fortran_math: the whole array)
    tr2 = tr * tr
    tr3 = tr2 * tr
    tr4 = tr3 * tr
    # approximate pressure in bars
    p = grav * rhoref * (-zz[None, None, K] * h[:, :, None]) * 1.e-5
    rhor = (-0.157406 + 6.793952e-2 * tr - 9.095290e-3 * tr2
            + 1.001685e-4 * tr3 - 1.120083e-6 * tr4 + 6.536332e-9 * tr4 * tr)
    srK = sr[:, :, K]
    rhor = (rhor + (0.824493 - 4.0899e-3 * tr + 7.6438e-5 * tr2
                    - 8.2467e-7 * tr3 + 5.3875e-9 * tr4) * srK
            + (-5.72466e-3 + 1.0227e-4 * tr - 1.6546e-6 * tr2) * abs_pow15(sr)[:, :, K]
            + 4.8314e-4 * srK * srK)
    cr = 1449.1 + .0821 * p + 4.55 * tr - .045 * tr2 + 1.34 * (srK - 35.)
    rhor = rhor + 1.e5 * p / (cr * cr) * (1. - 2. * p / (cr * cr))
    return DensOut(rhoo=put(rhoo, rhor / rhoref * fsm[:, :, None], k=(1, kbm1)))


def baropg(grav: float, zz: Tensor, dx: Tensor, dy: Tensor, dt: Tensor, dum: Tensor,
           dvm: Tensor, rmean: Tensor, rho: Tensor, drhox: Tensor,
           drhoy: Tensor) -> BaropgOut:
    """pom2k baropg: baroclinic pressure gradient of rho-rmean, integrated
    from the surface, times the cell face (dt*dy at U, dt*dx at V).

    drhox at U, drhoy at V; writes both for i=2..imm1, j=2..jmm1,
    k=1..kbm1. rho is returned as pom2k leaves it, (rho-rmean)+rmean,
    which can differ from the input by an ulp.
    """
    im, jm, kb = rho.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    rhom = rho - rmean
    I, J = span(2, imm1), span(2, jmm1)
    K, Km = span(2, kbm1), span(2, kbm1, -1)
    D = dt[I, J]
    rIJ = rhom[I, J]
    zzk, zzkm1 = zz[K], zz[Km]
    dzk, szk = zzkm1 - zzk, zzkm1 + zzk
    top0 = .5 * grav * (-zz[0])

    def integrate(Dm: Tensor, rm: Tensor, mask: Tensor, face: Tensor, facem: Tensor) -> Tensor:
        # Dm = dt, rm = rhom at the neighbour (i-1 for drhox, j-1 for drhoy),
        # on i=2..imm1, j=2..jmm1
        DDm = D + Dm
        top = top0 * DDm * (rIJ[:, :, 0] - rm[:, :, 0])
        DDm3 = DDm[:, :, None]
        r, rk1, rmk, rmk1 = rIJ[:, :, K], rIJ[:, :, Km], rm[:, :, K], rm[:, :, Km]
        a = grav * .25 * dzk * DDm3 * (r - rmk + rk1 - rmk1)
        b = grav * .25 * szk * (D - Dm)[:, :, None] * (r + rmk - rk1 - rmk1)
        # k = 2..kbm1: the integral from the surface, in pom2k's order
        acc = top
        cols = [acc]
        for k in range(kbm1 - 1):
            acc = acc + a[..., k] + b[..., k]
            cols.append(acc)
        integral = torch.stack(cols, dim=Z)
        return .25 * DDm3 * integral * mask[I, J, None] * (face[I, J, None] + facem)

    Im, Jm = span(2, imm1, -1), span(2, jmm1, -1)
    drhox_new = integrate(dt[Im, J], rhom[Im, J], dum, dy, dy[Im, J, None])
    drhoy_new = integrate(dt[I, Jm], rhom[I, Jm], dvm, dx, dx[I, Jm, None])
    rows = dict(i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
    return BaropgOut(rho=rhom + rmean, drhox=put(drhox, drhox_new, **rows),
                     drhoy=put(drhoy, drhoy_new, **rows))
