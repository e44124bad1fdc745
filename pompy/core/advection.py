"""pom2k advection and horizontal diffusion: advct, advave, advu, advv, advq, vertvl.

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
pom2k's ``a(i,j,k)``. Each routine takes the oracle's arguments by name
(pom2k's dummy names) and returns its in/output arguments as new tensors in
a NamedTuple; where pom2k leaves part of an in/output array alone, the input
values come back there. Arithmetic keeps pom2k's grouping.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import Z, expand3, inside, levels, xm, xp, ym, yp, zm, zp
from pompy.utils.safety import safe_divide, safe_sqrt


def _sum4(a):
    """a(i,j) + a(i-1,j) + a(i,j-1) + a(i-1,j-1), pom2k's corner sum."""
    return a + xm(a) + ym(a) + xm(ym(a))


AdvctOut = outputs("AdvctOut", "advx advy xflux yflux curv")
AdvaveOut = outputs("AdvaveOut", "advua advva fluxua fluxva wubot wvbot curv2d")
AdvuOut = outputs("AdvuOut", "uf")
AdvvOut = outputs("AdvvOut", "vf")
AdvqOut = outputs("AdvqOut", "qf xflux yflux")
VertvlOut = outputs("VertvlOut", "w xflux yflux")


def advct(u: Tensor, v: Tensor, ub: Tensor, vb: Tensor, dt: Tensor, aam: Tensor,
          dx: Tensor, dy: Tensor, aru: Tensor, arv: Tensor, advx: Tensor, advy: Tensor,
          xflux: Tensor, yflux: Tensor, curv: Tensor) -> AdvctOut:
    """pom2k advct: horizontal advection and diffusion of 3-D momentum with
    curvature terms (called as advct(a,c,ee)).

    u, ub at U; v, vb at V; dt, aam at T. All outputs are zeroed first, then
    curv, advx, advy are written for i=2..imm1, j=2..jmm1, k=1..kbm1 (the
    curvature part of advx from i=3, of advy from j=3). xflux and yflux come
    back as the y-component's work fluxes, as pom2k leaves them.
    """
    im, jm, kb = u.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    D, dx3, dy3 = expand3(dt), expand3(dx), expand3(dy)
    aru3, arv3 = expand3(aru), expand3(arv)
    ks = (1, kbm1)

    curv_new = inside(.25 * ((yp(v) + v) * (xp(dy3) - xm(dy3))
                             - (xp(u) + u) * (yp(dx3) - ym(dx3))) / (dx3 * dy3),
                      i=(2, imm1), j=(2, jmm1), k=ks)
    # shear diffusion shared by both components, at the corner (i-1/2, j-1/2)
    dtaam = .25 * _sum4(D) * _sum4(aam)
    shear = dtaam * ((ub - ym(ub)) / _sum4(dy3) + (vb - xm(vb)) / _sum4(dx3))

    # x-component: advective fluxes (xflux spans j=1..jm, yflux i=2..im)
    xadv = inside(.125 * ((xp(D) + D) * xp(u) + (D + xm(D)) * u) * (xp(u) + u),
                  i=(2, imm1), k=ks)
    yadv = inside(.125 * ((D + ym(D)) * v + (xm(D) + xm(ym(D))) * xm(v)) * (u + ym(u)),
                  i=(2, im), j=(2, jm), k=ks)
    # diffusive fluxes and face lengths only on i=2..imm1, j=2..jm
    xfl = inside(dy3 * (xadv - D * aam * 2. * (xp(ub) - ub) / dx3),
                 rest=xadv, i=(2, imm1), j=(2, jm), k=ks)
    yfl = inside(.25 * _sum4(dx3) * (yadv - shear),
                 rest=yadv, i=(2, imm1), j=(2, jm), k=ks)
    div = xfl - xm(xfl) + yp(yfl) - yfl
    ax = div - aru3 * .25 * (curv_new * D * (yp(v) + v)
                             + xm(curv_new) * xm(D) * (xm(yp(v)) + xm(v)))
    # curvature from i=3: at i=2 only the flux divergence
    ax = inside(ax, rest=div, i=(3, imm1))
    advx_new = inside(ax, i=(2, imm1), j=(2, jmm1), k=ks)

    # y-component: advective fluxes (xflux on i=2..im, j=2..jm; yflux i=1..im, j=2..jmm1)
    xadv = inside(.125 * ((D + xm(D)) * u + (ym(D) + xm(ym(D))) * ym(u)) * (v + xm(v)),
                  i=(2, im), j=(2, jm), k=ks)
    yadv = inside(.125 * ((yp(D) + D) * yp(v) + (D + ym(D)) * v) * (yp(v) + v),
                  j=(2, jmm1), k=ks)
    # diffusive fluxes and face lengths only on i=2..im, j=2..jmm1
    xfl = inside(.25 * _sum4(dy3) * (xadv - shear),
                 rest=xadv, i=(2, im), j=(2, jmm1), k=ks)
    yfl = inside(dx3 * (yadv - D * aam * 2. * (yp(vb) - vb) / dy3),
                 rest=yadv, i=(2, im), j=(2, jmm1), k=ks)
    div = xp(xfl) - xfl + yfl - ym(yfl)
    ay = div + arv3 * .25 * (curv_new * D * (xp(u) + u)
                             + ym(curv_new) * ym(D) * (ym(xp(u)) + ym(u)))
    # curvature from j=3: at j=2 only the flux divergence
    ay = inside(ay, rest=div, j=(3, jmm1))
    advy_new = inside(ay, i=(2, imm1), j=(2, jmm1), k=ks)
    return AdvctOut(advx=advx_new, advy=advy_new, xflux=xfl, yflux=yfl, curv=curv_new)


def advave(mode: int, d: Tensor, ua: Tensor, va: Tensor, uab: Tensor, vab: Tensor,
           aam2d: Tensor, cbc: Tensor, dx: Tensor, dy: Tensor, aru: Tensor, arv: Tensor,
           advua: Tensor, advva: Tensor, fluxua: Tensor, fluxva: Tensor, wubot: Tensor,
           wvbot: Tensor, curv2d: Tensor) -> AdvaveOut:
    """pom2k advave: advection and diffusion of depth-averaged momentum; in
    mode 2 also the bottom stress and curvature (called as advave(tps):
    curv2d doubles as pom2k's tps work array).

    ua, uab at U; va, vab at V; d, aam2d, cbc at T. advua and advva are
    zeroed and written for i=2..imm1, j=2..jmm1 (mode 2 curvature from
    i=3 / j=3). fluxua, fluxva, curv2d are written for i=2..im, j=2..jm as
    pom2k leaves them (fluxua(im,:) is the given value times dy; fluxva(:,jm)
    keeps the u-pass flux times dx); row i=1 and column j=1 come back as
    given. Mode 2 writes wubot, wvbot and curv2d on i=2..imm1, j=2..jmm1.
    """
    im, jm = d.shape
    imm1, jmm1 = im - 1, jm - 1
    inner = dict(i=(2, imm1), j=(2, jmm1))
    corner = dict(i=(2, im), j=(2, jm))

    # u-advection and diffusion
    fua = inside(.125 * ((xp(d) + d) * xp(ua) + (d + xm(d)) * ua) * (xp(ua) + ua),
                 rest=fluxua, i=(2, imm1), j=(2, jm))
    fva = inside(.125 * ((d + ym(d)) * va + (xm(d) + xm(ym(d))) * xm(va)) * (ua + ym(ua)),
                 rest=fluxva, **corner)
    fua = inside(fua - d * 2. * aam2d * (xp(uab) - uab) / dx, rest=fua, i=(2, imm1), j=(2, jm))
    tps = inside(.25 * _sum4(d) * (aam2d + ym(aam2d) + xm(aam2d) + xm(ym(aam2d)))
                 * ((uab - ym(uab)) / _sum4(dy) + (vab - xm(vab)) / _sum4(dx)),
                 rest=curv2d, **corner)
    fua = inside(fua * dy, rest=fua, **corner)
    fva = inside((fva - tps) * .25 * _sum4(dx), rest=fva, **corner)
    advua_new = inside(fua - xm(fua) + yp(fva) - fva, **inner)

    # v-advection and diffusion
    fua = inside(.125 * ((d + xm(d)) * ua + (ym(d) + xm(ym(d))) * ym(ua)) * (xm(va) + va),
                 rest=fua, **corner)
    fva = inside(.125 * ((yp(d) + d) * yp(va) + (d + ym(d)) * va) * (yp(va) + va),
                 rest=fva, i=(2, im), j=(2, jmm1))
    fva = inside(fva - d * 2. * aam2d * (yp(vab) - vab) / dy, rest=fva, i=(2, im), j=(2, jmm1))
    fva = inside(fva * dx, rest=fva, **corner)
    fua = inside((fua - tps) * .25 * _sum4(dy), rest=fua, **corner)
    advva_new = inside(xp(fua) - fua + fva - ym(fva), **inner)

    wubot_new, wvbot_new = wubot, wvbot
    if mode == 2:
        wubot_new = inside(-0.5 * (cbc + xm(cbc))
                           * safe_sqrt(uab ** 2 + (.25 * (vab + yp(vab) + xm(vab)
                                                          + xm(yp(vab)))) ** 2,
                                       layer="bottom_drag")
                           * uab, rest=wubot, **inner)
        wvbot_new = inside(-0.5 * (cbc + ym(cbc))
                           * safe_sqrt(vab ** 2 + (.25 * (uab + xp(uab) + ym(uab)
                                                          + xp(ym(uab)))) ** 2,
                                       layer="bottom_drag")
                           * vab, rest=wvbot, **inner)
        tps = inside(.25 * ((yp(va) + va) * (xp(dy) - xm(dy))
                            - (xp(ua) + ua) * (yp(dx) - ym(dx))) / (dx * dy),
                     rest=tps, **inner)
        advua_new = inside(advua_new - aru * .25
                           * (tps * d * (yp(va) + va)
                              + xm(tps) * xm(d) * (xm(yp(va)) + xm(va))),
                           rest=advua_new, i=(3, imm1), j=(2, jmm1))
        advva_new = inside(advva_new + arv * .25
                           * (tps * d * (xp(ua) + ua)
                              + ym(tps) * ym(d) * (ym(xp(ua)) + ym(ua))),
                           rest=advva_new, i=(2, imm1), j=(3, jmm1))
    return AdvaveOut(advua=advua_new, advva=advva_new, fluxua=fua, fluxva=fva,
                     wubot=wubot_new.clone(), wvbot=wvbot_new.clone(), curv2d=tps)


def advu(grav: float, dti2: float, dz: Tensor, u: Tensor, v: Tensor, w: Tensor, ub: Tensor,
         advx: Tensor, drhox: Tensor, dt: Tensor, h: Tensor, etb: Tensor, etf: Tensor,
         egf: Tensor, egb: Tensor, e_atmos: Tensor, cor: Tensor, dy: Tensor, aru: Tensor,
         uf: Tensor) -> AdvuOut:
    """pom2k advu: vertical advection, Coriolis, surface slope and baroclinic
    terms, then the leapfrog step of u into uf.

    u, ub, uf, advx, drhox at U. uf is zeroed, holds the vertical flux
    on i=2..im, k=2..kbm1 (all j; pom2k leaves it there outside the interior)
    and the new u on i=2..imm1, j=2..jmm1, k=1..kbm1.
    """
    im, jm, kb = u.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    D, H, ETB, ETF = (expand3(a) for a in (dt, h, etb, etf))
    EGF, EGB, EA, COR, DY, ARU = (expand3(a) for a in (egf, egb, e_atmos, cor, dy, aru))
    zflux = inside(.25 * (w + xm(w)) * (u + zm(u)), i=(2, im), k=(2, kbm1))
    # dz(kb) = 0: the level kb is not kept, but its quotient must stay finite
    rhs = (advx + safe_divide((zflux - zp(zflux)) * ARU, levels(dz), layer="advu")
           - ARU * .25 * (COR * D * (yp(v) + v) + xm(COR) * xm(D) * (xm(yp(v)) + xm(v)))
           + grav * .125 * (D + xm(D))
           * (EGF - xm(EGF) + EGB - xm(EGB) + (EA - xm(EA)) * 2.)
           * (DY + xm(DY))
           + drhox)
    new = safe_divide((H + ETB + xm(H) + xm(ETB)) * ARU * ub - 2. * dti2 * rhs,
                      (H + ETF + xm(H) + xm(ETF)) * ARU, layer="advu")
    return AdvuOut(uf=inside(new, rest=zflux, i=(2, imm1), j=(2, jmm1), k=(1, kbm1)))


def advv(grav: float, dti2: float, dz: Tensor, u: Tensor, v: Tensor, w: Tensor, vb: Tensor,
         advy: Tensor, drhoy: Tensor, dt: Tensor, h: Tensor, etb: Tensor, etf: Tensor,
         egf: Tensor, egb: Tensor, e_atmos: Tensor, cor: Tensor, dx: Tensor, arv: Tensor,
         vf: Tensor) -> AdvvOut:
    """pom2k advv: as advu for the v component, into vf.

    v, vb, vf, advy, drhoy at V. vf is zeroed, holds the vertical flux
    on j=2..jm, k=2..kbm1 (all i) and the new v on i=2..imm1, j=2..jmm1,
    k=1..kbm1.
    """
    im, jm, kb = v.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    D, H, ETB, ETF = (expand3(a) for a in (dt, h, etb, etf))
    EGF, EGB, EA, COR, DX, ARV = (expand3(a) for a in (egf, egb, e_atmos, cor, dx, arv))
    zflux = inside(.25 * (w + ym(w)) * (v + zm(v)), j=(2, jm), k=(2, kbm1))
    rhs = (advy + safe_divide((zflux - zp(zflux)) * ARV, levels(dz), layer="advv")
           + ARV * .25 * (COR * D * (xp(u) + u) + ym(COR) * ym(D) * (ym(xp(u)) + ym(u)))
           + grav * .125 * (D + ym(D))
           * (EGF - ym(EGF) + EGB - ym(EGB) + (EA - ym(EA)) * 2.)
           * (DX + ym(DX))
           + drhoy)
    new = safe_divide((H + ETB + ym(H) + ym(ETB)) * ARV * vb - 2. * dti2 * rhs,
                      (H + ETF + ym(H) + ym(ETF)) * ARV, layer="advv")
    return AdvvOut(vf=inside(new, rest=zflux, i=(2, imm1), j=(2, jmm1), k=(1, kbm1)))


def advq(dti2: float, dz: Tensor, u: Tensor, v: Tensor, w: Tensor, aam: Tensor, dt: Tensor,
         h: Tensor, etb: Tensor, etf: Tensor, dx: Tensor, dy: Tensor, art: Tensor,
         dum: Tensor, dvm: Tensor, qb: Tensor, q: Tensor, qf: Tensor, xflux: Tensor,
         yflux: Tensor) -> AdvqOut:
    """pom2k advq: advection and diffusion of q2 or q2l at w levels, leapfrog
    step into qf (called as advq(q2b,q2,uf,a,c) and advq(q2lb,q2l,vf,a,c)).

    q, qb, qf at T/W. Writes xflux, yflux for i=2..im, j=2..jm, k=2..kbm1
    and qf for i=2..imm1, j=2..jmm1, k=2..kbm1; the rest comes back as given.
    """
    im, jm, kb = q.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    D, H, ETB, ETF = (expand3(a) for a in (dt, h, etb, etf))
    DX, DY, ART, DUM, DVM = (expand3(a) for a in (dx, dy, art, dum, dvm))
    xfl = .125 * (q + xm(q)) * (D + xm(D)) * (u + zm(u))
    yfl = .125 * (q + ym(q)) * (D + ym(D)) * (v + zm(v))
    xfl = (xfl - .25 * (aam + xm(aam) + zm(aam) + xm(zm(aam)))
           * (H + xm(H)) * (qb - xm(qb)) * DUM / (DX + xm(DX)))
    yfl = (yfl - .25 * (aam + ym(aam) + zm(aam) + ym(zm(aam)))
           * (H + ym(H)) * (qb - ym(qb)) * DVM / (DY + ym(DY)))
    faces = dict(i=(2, im), j=(2, jm), k=(2, kbm1))
    xfl = inside(.5 * (DY + xm(DY)) * xfl, rest=xflux, **faces)
    yfl = inside(.5 * (DX + ym(DX)) * yfl, rest=yflux, **faces)
    dzs = levels(dz)
    rhs = ((zm(w) * zm(q) - zp(w) * zp(q)) * ART / (dzs + zm(dzs))
           + xp(xfl) - xfl + yp(yfl) - yfl)
    new = safe_divide((H + ETB) * ART * qb - dti2 * rhs, (H + ETF) * ART, layer="advq")
    qf_new = inside(new, rest=qf, i=(2, imm1), j=(2, jmm1), k=(2, kbm1))
    return AdvqOut(qf=qf_new, xflux=xfl, yflux=yfl)


def vertvl(dti2: float, dz: Tensor, u: Tensor, v: Tensor, dt: Tensor, dx: Tensor,
           dy: Tensor, etf: Tensor, etb: Tensor, vfluxb: Tensor, vfluxf: Tensor,
           w: Tensor, xflux: Tensor, yflux: Tensor) -> VertvlOut:
    """pom2k vertvl: vertical velocity from continuity, w(1) from the surface
    freshwater flux (called as vertvl(a,c)).

    Writes xflux, yflux (volume fluxes at U, V) for i=2..im, j=2..jm,
    k=1..kbm1 and w for i=2..imm1, j=2..jmm1, k=1..kb; the rest comes back
    as given.
    """
    im, jm, kb = u.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    D, DX, DY = expand3(dt), expand3(dx), expand3(dy)
    faces = dict(i=(2, im), j=(2, jm), k=(1, kbm1))
    xfl = inside(.25 * (DY + xm(DY)) * (D + xm(D)) * u, rest=xflux, **faces)
    yfl = inside(.25 * (DX + ym(DX)) * (D + ym(D)) * v, rest=yflux, **faces)
    # per-layer divergence; zero-thickness slab at kb is never used
    inc = levels(dz) * ((xp(xfl) - xfl + yp(yfl) - yfl) / (DX * DY)
                        + expand3((etf - etb) / dti2))
    # the integral from the surface, in pom2k's order
    acc = 0.5 * (vfluxb + vfluxf)
    cols = [acc]
    for k in range(kbm1):
        acc = acc + inc[..., k]
        cols.append(acc)
    w_new = inside(torch.stack(cols, dim=Z), rest=w, i=(2, imm1), j=(2, jmm1))
    return VertvlOut(w=w_new, xflux=xfl, yflux=yfl)
