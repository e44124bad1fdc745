"""pom2k's Mellor-Yamada 2.5 turbulence closure: profq.

The q2 and q2l equations are tridiagonal in k; their sweeps are vertical
recursions and loop over k, everything else is vectorised over (i, j, k).
Tensors are (i, j, k), indexed like the Fortran.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import inside, levels, over, xp, yp, zm, zp
from pompy.core.vertical import frozen
from pompy.utils.safety import safe_divide, safe_reciprocal, safe_sqrt


# l: pom2k's name (the turbulence length scale)
ProfqOut = outputs("ProfqOut", "q2b q2lb l km kh kq ee gg uf vf a c dh dtef")


def _edges_as_interior(k: Tensor, fsm: Tensor) -> Tensor:
    """pom2k's cosmetics: rows j = jm, 1 then columns i = im, 1 copy their
    inner neighbours, masked by fsm (columns after rows, as pom2k)."""
    f3 = fsm.unsqueeze(-1)
    k = torch.cat([k[:, 1:2] * f3[:, :1], k[:, 1:-1], k[:, -2:-1] * f3[:, -1:]], 1)
    return torch.cat([k[1:2] * f3[:1], k[1:-1], k[-2:-1] * f3[-1:]], 0)


def profq(dti2, umol, grav, rhoref, kappa, small, tbias, sbias, z, zz, dz, dzz, h, dt,
          etf, fsm, wusurf, wvsurf, wubot, wvbot, u, v, t, s, rho, q2, q2b, q2lb, l,
          km, kh, kq, ee, gg, uf, vf, a, c, dh, dtef) -> ProfqOut:
    """pom2k profq: vertical diffusion of q2 (into uf) and q2l (into vf) and
    the mixing coefficients km, kh, kq.

    Called in pom2k as profq(a,c,tps,dtef): the dummies sm, sh, cc alias the
    common a, c, dtef, so sm is written to a, sh to c and the sound speed cc
    to dtef, in pom2k's order. Writes, all (i, j): dh = h + etf; q2b, q2lb
    (absolute values) at k = 2..kbm1; l, km, kh, kq, a, c, dtef at every k
    (km, kh on the edges copied from inside, times fsm); ee, gg and uf at
    k = 1..kbm1, vf at k = 2..kb; uf(kb) for i = 1..imm1, j = 1..jmm1.
    """
    a1, b1, a2, b2, c1, e1, e2 = 0.92, 16.6, 0.74, 10.1, 0.08, 1.8, 1.33
    sef, cbcnst, surfl, shiw = 1.0, 100.0, 2.e5, 0.0
    im, jm, kb = q2.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    inner = dict(k=(2, kbm1))                      # pom2k's k = 2..kbm1 loops

    dh = h + etf
    d3 = dh.unsqueeze(-1)
    dz3, dzz3 = levels(dz), levels(dzz)
    dzzm = zm(dzz3)                      # dzz(k-1)
    a = inside(safe_divide(-dti2 * (zp(kq) + kq + 2.0 * umol) * .5,
                           dzzm * dz3 * d3 * d3, layer="profq"), a, **inner)   # dz(kb) = 0
    c = inside(safe_divide(-dti2 * (zm(kq) + kq + 2.0 * umol) * .5,
                           dzzm * zm(dz3) * d3 * d3, layer="profq"), c, **inner)

    # surface: wave-breaking energy (Craig & Banner 1994 variant) and length
    # scale (Stacey 1999), i = 1..imm1, j = 1..jmm1; zero on i = im, j = jm
    const1 = (16.6 ** (2.0 / 3.0)) * sef
    ij = dict(i=(1, imm1), j=(1, jmm1))
    utau2 = safe_sqrt((.5 * (wusurf + xp(wusurf))) ** 2
                      + (.5 * (wvsurf + yp(wvsurf))) ** 2, layer="profq")
    ee1 = torch.zeros_like(dh)
    gg1 = inside((15.8 * cbcnst) ** (2.0 / 3.0) * utau2, 0.0, **ij)
    l0 = inside(surfl * utau2 / grav, 0.0, **ij)
    ufkb = inside(safe_sqrt((.5 * (wubot + xp(wubot))) ** 2
                            + (.5 * (wvbot + yp(wvbot))) ** 2, layer="profq") * const1,
                  uf[:, :, kb - 1], **ij)

    # speed of sound cc (in dtef) at k = 1..kbm1; pressure p in decibars
    tp = t + tbias
    sp = s + sbias
    p = grav * rhoref * (-levels(zz) * h.unsqueeze(-1)) * 1.e-4
    cc = 1449.1 + .00821 * p + 4.55 * tp - .045 * tp ** 2 + 1.34 * (sp - 35.0)
    cc = cc / safe_sqrt((1.0 - .01642 * p / cc) * (1.0 - 0.40 * p / cc ** 2), layer="profq")
    cc = inside(cc, dtef, k=(1, kbm1))

    # buoyancy gradient
    q2b = inside(torch.abs(q2b), q2b, **inner)
    q2lb = inside(torch.abs(q2lb), q2lb, **inner)
    h3 = h.unsqueeze(-1)
    boygr = (grav * (zm(rho) - rho) / (dzzm * h3)
             + over((grav ** 2) * 2.0, zm(cc) ** 2 + cc ** 2))

    kl0 = (kappa * l0).unsqueeze(-1)
    lk = torch.abs(q2lb / q2b)
    lk = torch.where(levels(z) > -0.5, torch.maximum(lk, kl0), lk)
    gh = torch.clamp((lk ** 2) * boygr / q2b, max=.028)
    l = torch.cat([kl0, lk[:, :, 1:kbm1], torch.zeros_like(kl0)], 2)  # noqa: E741
    gh = inside(gh, 0.0, **inner)

    # production of turbulent kinetic energy, i = 2..imm1, j = 2..jmm1
    um, vm = zm(u), zm(v)     # u(k-1), v(k-1)
    shear = ((u - um + xp(u) - xp(um)) ** 2
             + (v - vm + yp(v) - yp(vm)) ** 2)
    prod = (km * .25 * sef * shear / (dzzm * d3) ** 2 - shiw * km * boygr)
    prod = prod + kh * boygr
    prod = inside(prod, 0.0, i=(2, imm1), j=(2, jmm1), **inner)

    # dissipation (stf = 1: no Richardson-number correction, as pom2k)
    stf = 1.0
    dtef = safe_sqrt(torch.abs(q2b), layer="profq") * stf / (b1 * l + small)

    # q2: dti2*(kq*q2')' - q2*(2.*dti2*dtef+1.) = -q2b, surface ee1, gg1
    a, c = frozen(a, c)                            # the deep freeze (pompy.core.vertical)
    eel, ggl = [ee1], [gg1]
    for k in range(1, kbm1):                       # k = 2..kbm1
        g = 1.0 / (a[:, :, k] + c[:, :, k] * (1.0 - eel[-1])
                   - (2.0 * dti2 * dtef[:, :, k] + 1.0))
        eel.append(a[:, :, k] * g)
        ggl.append((-2.0 * dti2 * prod[:, :, k] + c[:, :, k] * ggl[-1] - uf[:, :, k]) * g)
    eel, ggl = frozen(*eel), frozen(*ggl)
    ufl = [ufkb]
    for ki in range(kbm1, 0, -1):                  # ki = kbm1..1
        ufl.insert(0, eel[ki - 1] * ufl[0] + ggl[ki - 1])
    uf = torch.stack(ufl, 2)

    # q2l: dti2*(kq*q2l')' - q2l*(dti2*dtef+1.) = -q2lb; the surface
    # values ee(1), gg(1) are those of the q2 equation
    zl = levels(z)
    # 1/|z - z(1)| and 1/|z - z(kb)| are infinite at the ends (k = 1, kb), not kept
    wall = ((safe_reciprocal(torch.abs(zl - z[0]), layer="profq")
             + safe_reciprocal(torch.abs(zl - z[kb - 1]), layer="profq"))
            * l / (d3 * kappa))
    dtef = inside(dtef * (1.0 + e2 * wall ** 2), dtef, **inner)
    eel, ggl = eel[:1], ggl[:1]
    for k in range(1, kbm1):                       # k = 2..kbm1
        g = 1.0 / (a[:, :, k] + c[:, :, k] * (1.0 - eel[-1])
                   - (dti2 * dtef[:, :, k] + 1.0))
        eel.append(a[:, :, k] * g)
        ggl.append((dti2 * (-prod[:, :, k] * l[:, :, k] * e1) + c[:, :, k] * ggl[-1]
                    - vf[:, :, k]) * g)
    eel, ggl = frozen(*eel), frozen(*ggl)
    vfl = [torch.zeros_like(ufkb)]
    for ki in range(kbm1, 1, -1):                  # ki = kbm1..2
        vfl.insert(0, eel[ki - 1] * vfl[0] + ggl[ki - 1])
    vf = torch.cat([vf[:, :, :1], torch.stack(vfl, 2)], 2)
    ee = torch.cat([torch.stack(eel, 2), ee[:, :, kbm1:]], 2)
    gg = torch.cat([torch.stack(ggl, 2), gg[:, :, kbm1:]], 2)

    # against the ratio of two small numbers (l = q2l/q2) or either going
    # negative: pom2k's first option
    bad = inside((uf <= small) | (vf <= small), False, **inner)
    dt3 = dt.unsqueeze(-1)
    uf = torch.where(bad, small, uf)
    vf = torch.where(bad, 0.1 * dt3 * small, vf)

    # stability functions sm (in a) and sh (in c); they tend to infinity as
    # gh approaches 0.0288
    coef4 = 18.0 * a1 * a1 + 9.0 * a1 * a2
    coef5 = 9.0 * a1 * a2
    coef1 = a2 * (1.0 - 6.0 * a1 / b1 * stf)
    coef2 = 3.0 * a2 * b2 / stf + 18.0 * a1 * a2
    coef3 = a1 * (1.0 - 3.0 * c1 - 6.0 * a1 / b1 * stf)
    c = over(coef1, 1.0 - coef2 * gh)
    a = coef3 + c * coef4 * gh
    a = a / (1.0 - coef5 * gh)

    # kq after the first of pom2k's two options
    prod = l * safe_sqrt(torch.abs(q2), layer="profq")
    kq = (prod * .41 * c + kq) * .5
    km = (prod * a + km) * .5
    kh = (prod * c + kh) * .5
    km = _edges_as_interior(km, fsm)
    kh = _edges_as_interior(kh, fsm)
    return ProfqOut(q2b=q2b, q2lb=q2lb, l=l, km=km, kh=kh, kq=kq, ee=ee, gg=gg,
                    uf=uf, vf=vf, a=a, c=c, dh=dh, dtef=dtef)
