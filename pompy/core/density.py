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
from pompy.ops import Z, expand3, inside, levels, xm, ym, zm


DensOut = outputs("DensOut", "rhoo")
BaropgOut = outputs("BaropgOut", "rho drhox drhoy")


def dens(grav: float, rhoref: float, tbias: float, sbias: float, zz: Tensor,
         h: Tensor, fsm: Tensor, si: Tensor, ti: Tensor, rhoo: Tensor) -> DensOut:
    """pom2k dens: density anomaly (rho-1000)/rhoref from UNESCO with the
    pressure correction, masked by fsm.

    si, ti, rhoo at T points. Writes rhoo for k=1..kbm1 (all i, j);
    rhoo(:,:,kb) is returned as given.
    """
    kb = rhoo.size(Z)
    tr = ti + tbias
    sr = si + sbias
    tr2 = tr * tr
    tr3 = tr2 * tr
    tr4 = tr3 * tr
    # approximate pressure in bars
    p = grav * rhoref * (-levels(zz) * expand3(h)) * 1.e-5
    rhor = (-0.157406 + 6.793952e-2 * tr - 9.095290e-3 * tr2
            + 1.001685e-4 * tr3 - 1.120083e-6 * tr4 + 6.536332e-9 * tr4 * tr)
    rhor = (rhor + (0.824493 - 4.0899e-3 * tr + 7.6438e-5 * tr2
                    - 8.2467e-7 * tr3 + 5.3875e-9 * tr4) * sr
            + (-5.72466e-3 + 1.0227e-4 * tr - 1.6546e-6 * tr2) * abs_pow15(sr)
            + 4.8314e-4 * sr * sr)
    cr = 1449.1 + .0821 * p + 4.55 * tr - .045 * tr2 + 1.34 * (sr - 35.)
    rhor = rhor + 1.e5 * p / (cr * cr) * (1. - 2. * p / (cr * cr))
    return DensOut(rhoo=inside(rhor / rhoref * expand3(fsm), rest=rhoo, k=(1, kb - 1)))


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
    D, dx3, dy3 = expand3(dt), expand3(dx), expand3(dy)
    zzk = levels(zz)
    zzkm1 = zm(zzk)

    def integrate(back) -> Tensor:
        # back = xm for drhox (neighbour i-1), ym for drhoy (neighbour j-1)
        Dm = back(D)
        rm = back(rhom)
        rk1, rmk1 = zm(rhom), zm(rm)
        top = .5 * grav * (-zz[0]) * (D + Dm) * (rhom - rm)
        a = grav * .25 * (zzkm1 - zzk) * (D + Dm) * (rhom - rm + rk1 - rmk1)
        b = grav * .25 * (zzkm1 + zzk) * (D - Dm) * (rhom + rm - rk1 - rmk1)
        # k = 2..kbm1: the integral from the surface, in pom2k's order
        acc = top[..., 0]
        cols = [acc]
        for k in range(1, kbm1):
            acc = acc + a[..., k] + b[..., k]
            cols.append(acc)
        return torch.stack(cols, dim=Z)

    rows = (2, imm1), (2, jmm1), (1, kbm1)

    def finish(integral: Tensor, back, mask: Tensor, face: Tensor, old: Tensor) -> Tensor:
        full = .25 * (D + back(D))[..., :kbm1] * integral * expand3(mask) \
            * (face + back(face))
        full = torch.cat([full, old[..., kbm1:]], dim=Z)
        return inside(full, rest=old, i=rows[0], j=rows[1], k=rows[2])

    drhox_new = finish(integrate(xm), xm, dum, dy3, drhox)
    drhoy_new = finish(integrate(ym), ym, dvm, dx3, drhoy)
    return BaropgOut(rho=rhom + rmean, drhox=drhox_new, drhoy=drhoy_new)
