"""pom2k's Mellor-Yamada 2.5 turbulence closure: profq.

The q2 and q2l equations are tridiagonal in k; their sweeps are vertical
recursions and loop over k, everything else is vectorised over (i, j, k).
Tensors are (i, j, k), indexed like the Fortran.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import over, put, span
from pompy.core.vertical import by_level, levels_then
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
    K, Km, Kp = span(2, kbm1), span(2, kbm1, -1), span(2, kbm1, 1)

    dh = h + etf
    D = dh[:, :, None]
    # a, c at k = 2..kbm1 only (slabs of those levels): the sweeps read nothing else
    kqK = kq[:, :, K]
    dzzm = dzz[Km]                                 # dzz(k-1)
    a = safe_divide(-dti2 * (kq[:, :, Kp] + kqK + 2.0 * umol) * .5,
                    dzzm * dz[K] * D * D, layer="profq")
    c = safe_divide(-dti2 * (kq[:, :, Km] + kqK + 2.0 * umol) * .5,
                    dzzm * dz[Km] * D * D, layer="profq")

    # surface: wave-breaking energy (Craig & Banner 1994 variant) and length
    # scale (Stacey 1999), i = 1..imm1, j = 1..jmm1; zero on i = im, j = jm
    const1 = (16.6 ** (2.0 / 3.0)) * sef
    ij = dict(i=(1, imm1), j=(1, jmm1))
    I1, I1p, J1, J1p = span(1, imm1), span(1, imm1, 1), span(1, jmm1), span(1, jmm1, 1)
    utau2 = safe_sqrt((.5 * (wusurf[I1, J1] + wusurf[I1p, J1])) ** 2
                      + (.5 * (wvsurf[I1, J1] + wvsurf[I1, J1p])) ** 2, layer="profq")
    ee1 = torch.zeros_like(dh)
    gg1 = put(0.0, (15.8 * cbcnst) ** (2.0 / 3.0) * utau2, like=dh, **ij)
    l0 = put(0.0, surfl * utau2 / grav, like=dh, **ij)
    ufkb = put(uf[:, :, kbm1], safe_sqrt((.5 * (wubot[I1, J1] + wubot[I1p, J1])) ** 2
                                         + (.5 * (wvbot[I1, J1] + wvbot[I1, J1p])) ** 2,
                                         layer="profq") * const1, **ij)

    # speed of sound cc at k = 1..kbm1; pressure p in decibars
    tp = t[:, :, :kbm1] + tbias
    sp = s[:, :, :kbm1] + sbias
    p = grav * rhoref * (-zz[:kbm1] * h[:, :, None]) * 1.e-4
    cc = 1449.1 + .00821 * p + 4.55 * tp - .045 * tp ** 2 + 1.34 * (sp - 35.0)
    cc = cc / safe_sqrt((1.0 - .01642 * p / cc) * (1.0 - 0.40 * p / cc ** 2), layer="profq")

    # buoyancy gradient, k = 2..kbm1 (cc's k = 1..kbm1 are read by the same spans)
    q2bK = torch.abs(q2b[:, :, K])
    q2lbK = torch.abs(q2lb[:, :, K])
    q2b = put(q2b, q2bK, **inner)
    q2lb = put(q2lb, q2lbK, **inner)
    cc2 = cc ** 2
    boygr = (grav * (rho[:, :, Km] - rho[:, :, K]) / (dzzm * h[:, :, None])
             + over((grav ** 2) * 2.0, cc2[:, :, Km] + cc2[:, :, K]))

    kl0 = (kappa * l0)[:, :, None]
    lk = torch.abs(q2lbK / q2bK)
    lk = torch.where(z[K] > -0.5, torch.maximum(lk, kl0), lk)
    gh = torch.clamp((lk ** 2) * boygr / q2bK, max=.028)
    l = torch.cat([kl0, lk, torch.zeros_like(kl0)], 2)  # noqa: E741
    gh = put(0.0, gh, like=q2, **inner)

    # production of turbulent kinetic energy, i = 2..imm1, j = 2..jmm1
    # (as a k = 2..kbm1 slab, zero outside those i, j)
    I, Ip, J, Jp = span(2, imm1), span(2, imm1, 1), span(2, jmm1), span(2, jmm1, 1)
    shear = ((u[I, J, K] - u[I, J, Km] + u[Ip, J, K] - u[Ip, J, Km]) ** 2
             + (v[I, J, K] - v[I, J, Km] + v[I, Jp, K] - v[I, Jp, Km]) ** 2)
    kmK, boygrK = km[I, J, K], boygr[I, J]
    prod = (kmK * .25 * sef * shear / (dzzm * D[I, J]) ** 2 - shiw * kmK * boygrK)
    prod = prod + kh[I, J, K] * boygrK
    prod = put(0.0, prod, like=boygr, i=(2, imm1), j=(2, jmm1))

    # dissipation (stf = 1: no Richardson-number correction, as pom2k)
    stf = 1.0
    dtef = safe_sqrt(torch.abs(q2b), layer="profq") * stf / (b1 * l + small)

    # q2: dti2*(kq*q2')' - q2*(2.*dti2*dtef+1.) = -q2b, surface ee1, gg1;
    # the sweeps read level k's terms as contiguous planes (pompy.core.vertical);
    # torch.reciprocal(x) is torch's 1.0 / x (that is reciprocal(x) * 1.0)
    ak, ck = by_level(a), by_level(c)            # the deep freeze
    dk = by_level(2.0 * dti2 * dtef[:, :, K] + 1.0)
    sk = by_level(-2.0 * dti2 * prod)
    fk = by_level(uf[:, :, K])
    eel, ggl = [ee1], [gg1]
    for k in range(kbm1 - 1):                      # k = 2..kbm1
        g = torch.reciprocal(ak[k] + ck[k] * (1.0 - eel[-1]) - dk[k])
        eel.append(ak[k] * g)
        ggl.append((sk[k] + ck[k] * ggl[-1] - fk[k]) * g)
    eel, ggl = torch.stack(eel).unbind(), torch.stack(ggl).unbind()   # frozen, in one copy
    ufl = [ufkb]
    for ki in range(kbm1, 0, -1):                  # ki = kbm1..1
        ufl.insert(0, eel[ki - 1] * ufl[0] + ggl[ki - 1])

    # q2l: dti2*(kq*q2l')' - q2l*(dti2*dtef+1.) = -q2lb; the surface
    # values ee(1), gg(1) are those of the q2 equation
    zK = z[K]
    # 1/|z - z(1)| and 1/|z - z(kb)| at k = 2..kbm1 (infinite at the ends)
    wall = ((safe_reciprocal(torch.abs(zK - z[0]), layer="profq")
             + safe_reciprocal(torch.abs(zK - z[kb - 1]), layer="profq"))
            * lk / (D * kappa))
    dtefK = dtef[:, :, K] * (1.0 + e2 * wall ** 2)
    dtef = put(dtef, dtefK, **inner)
    dk = by_level(dti2 * dtefK + 1.0)
    sk = by_level(dti2 * (-prod * lk * e1))
    fk = by_level(vf[:, :, K])
    eel, ggl = [eel[0]], [ggl[0]]
    for k in range(kbm1 - 1):                      # k = 2..kbm1
        g = torch.reciprocal(ak[k] + ck[k] * (1.0 - eel[-1]) - dk[k])
        eel.append(ak[k] * g)
        ggl.append((sk[k] + ck[k] * ggl[-1] - fk[k]) * g)
    ee_, gg_ = torch.stack(eel), torch.stack(ggl)  # frozen, as (k, i, j) levels 1..kbm1
    eel, ggl = ee_.unbind(), gg_.unbind()
    vfl = [torch.zeros_like(ufkb)]
    for ki in range(kbm1, 1, -1):                  # ki = kbm1..2
        vfl.insert(0, eel[ki - 1] * vfl[0] + ggl[ki - 1])
    ee, gg = levels_then(ee_, ee), levels_then(gg_, gg)

    # against the ratio of two small numbers (l = q2l/q2) or either going
    # negative: pom2k's first option, k = 2..kbm1 (as (k, i, j) levels)
    ufK, vfK = torch.stack(ufl[1:kbm1]), torch.stack(vfl[:-1])
    bad = (ufK <= small) | (vfK <= small)
    uf = torch.cat([ufl[0][None], torch.where(bad, small, ufK), ufkb[None]])
    vf = torch.cat([vf[:, :, :1].permute(2, 0, 1), torch.where(bad, 0.1 * dt * small, vfK),
                    vfl[-1][None]])
    uf, vf = uf.permute(1, 2, 0).contiguous(), vf.permute(1, 2, 0).contiguous()

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
