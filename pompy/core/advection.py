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
from pompy.ops import Z, cat, clone, put, span
from pompy.utils.safety import safe_divide, safe_sqrt


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
    # pom2k's ranges: I, J = 2..imm1, 2..jmm1 (advx, advy, curv); I2, J2 =
    # 2..im, 2..jm (the corners); Ip/Im, Jp/Jm read at +-1; K = 1..kbm1
    I, Ip, Im = span(2, imm1), span(2, imm1, 1), span(2, imm1, -1)
    J, Jp, Jm = span(2, jmm1), span(2, jmm1, 1), span(2, jmm1, -1)
    I2, I2m = span(2, im), span(2, im, -1)
    J2, J2m = span(2, jm), span(2, jm, -1)
    K = span(1, kbm1)
    inner = dict(i=(2, imm1), j=(2, jmm1), k=(1, kbm1), like=u)

    D, uI, vI, vIJp = dt[I, J, None], u[I, J, K], v[I, J, K], v[I, Jp, K]
    curv_new = (.25 * ((vIJp + vI) * (dy[Ip, J, None] - dy[Im, J, None])
                       - (u[Ip, J, K] + uI) * (dx[I, Jp, None] - dx[I, Jm, None]))
                / (dx[I, J, None] * dy[I, J, None]))
    # shear diffusion shared by both components, at the corners (i-1/2, j-1/2)
    Dc, Dcx, Dcy, Dcxy = dt[I2, J2, None], dt[I2m, J2, None], dt[I2, J2m, None], dt[I2m, J2m, None]
    sdx = dx[I2, J2, None] + dx[I2m, J2, None] + dx[I2, J2m, None] + dx[I2m, J2m, None]
    sdy = dy[I2, J2, None] + dy[I2m, J2, None] + dy[I2, J2m, None] + dy[I2m, J2m, None]
    dtaam = (.25 * (Dc + Dcx + Dcy + Dcxy)
             * (aam[I2, J2, K] + aam[I2m, J2, K] + aam[I2, J2m, K] + aam[I2m, J2m, K]))
    shear = dtaam * ((ub[I2, J2, K] - ub[I2, J2m, K]) / sdy
                     + (vb[I2, J2, K] - vb[I2m, J2, K]) / sdx)
    uc, ucy, vc, vcx = u[I2, J2, K], u[I2, J2m, K], v[I2, J2, K], v[I2m, J2, K]

    # x-component: xflux on i=2..imm1 (read on j=2..jmm1; 0 at i=1), yflux
    # on i=2..imm1, j=2..jm
    DIp, uIp = dt[Ip, J, None], u[Ip, J, K]
    xfl = dy[I, J, None] * (.125 * ((DIp + D) * uIp + (D + dt[Im, J, None]) * uI) * (uIp + uI)
                            - D * aam[I, J, K] * 2. * (ub[Ip, J, K] - ub[I, J, K]) / dx[I, J, None])
    yfl = (.25 * sdx[:-1]
           * (.125 * ((Dc + Dcy) * vc + (Dcx + Dcxy) * vcx) * (uc + ucy) - shear)[:-1])
    div = torch.cat([xfl[:1], xfl[1:] - xfl[:-1]]) + yfl[:, 1:] - yfl[:, :-1]
    # curvature from i=3: at i=2 only the flux divergence
    advx_new = torch.cat([div[:1], div[1:] - aru[span(3, imm1), J, None] * .25
                          * (curv_new[1:] * D[1:] * (vIJp[1:] + vI[1:])
                             + curv_new[:-1] * D[:-1] * (vIJp[:-1] + vI[:-1]))])

    # y-component: xflux on i=2..im, j=2..jm (j=jm without diffusion), yflux
    # on i=1..im, j=2..jmm1 (i=1 without diffusion; 0 at j=1)
    xadv = .125 * ((Dc + Dcx) * uc + (Dcy + Dcxy) * ucy) * (vc + vcx)
    xfl = torch.cat([.25 * sdy[:, :-1] * (xadv - shear)[:, :-1], xadv[:, -1:]], 1)
    DJ, DJp, vJ, vJp = dt[:, J, None], dt[:, Jp, None], v[:, J, K], v[:, Jp, K]
    yadv = .125 * ((DJp + DJ) * vJp + (DJ + dt[:, Jm, None]) * vJ) * (vJp + vJ)
    yfl = torch.cat([yadv[:1], dx[I2, J, None] * (yadv[1:] - DJ[1:] * aam[I2, J, K] * 2.
                                                  * (vb[I2, Jp, K] - vb[I2, J, K])
                                                  / dy[I2, J, None])])
    yflI = yfl[1:-1]
    div = xfl[1:, :-1] - xfl[:-1, :-1] + yflI
    div = torch.cat([div[:, :1], div[:, 1:] - yflI[:, :-1]], 1)
    # curvature from j=3: at j=2 only the flux divergence
    advy_new = torch.cat([div[:, :1], div[:, 1:] + arv[I, span(3, jmm1), None] * .25
                          * (curv_new[:, 1:] * D[:, 1:] * (uIp[:, 1:] + uI[:, 1:])
                             + curv_new[:, :-1] * D[:, :-1] * (uIp[:, :-1] + uI[:, :-1]))], 1)
    return AdvctOut(advx=put(0., advx_new, **inner), advy=put(0., advy_new, **inner),
                    xflux=put(0., xfl, i=(2, im), j=(2, jm), k=(1, kbm1), like=u),
                    yflux=put(0., yfl, i=(1, im), j=(2, jmm1), k=(1, kbm1), like=u),
                    curv=put(0., curv_new, **inner))


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
    Takes host arrays too (pompy.ops.host), as the external passes do.
    """
    im, jm = d.shape
    imm1, jmm1 = im - 1, jm - 1
    # pom2k's ranges: I, J = 2..imm1, 2..jmm1 (advua, advva); I2, J2 = 2..im,
    # 2..jm (the corner points of tps, the fluxes); Ip/Im, Jp/Jm read at +-1
    I, Ip, Im = span(2, imm1), span(2, imm1, 1), span(2, imm1, -1)
    J, Jp, Jm = span(2, jmm1), span(2, jmm1, 1), span(2, jmm1, -1)
    I2, I2m = span(2, im), span(2, im, -1)
    J2, J2m = span(2, jm), span(2, jm, -1)
    corner = dict(i=(2, im), j=(2, jm))

    # at the corners (i=2..im, j=2..jm): d, dx, dy and their corner sums
    dc, dcx, dcy, dcxy = d[I2, J2], d[I2m, J2], d[I2, J2m], d[I2m, J2m]
    uac, uacy, vac, vacx, dxc = ua[I2, J2], ua[I2, J2m], va[I2, J2], va[I2m, J2], dx[I2, J2]
    sdx = dxc + dx[I2m, J2] + dx[I2, J2m] + dx[I2m, J2m]
    sdy = dy[I2, J2] + dy[I2m, J2] + dy[I2, J2m] + dy[I2m, J2m]
    tps = (.25 * (dc + dcx + dcy + dcxy)
           * (aam2d[I2, J2] + aam2d[I2, J2m] + aam2d[I2m, J2] + aam2d[I2m, J2m])
           * ((uab[I2, J2] - uab[I2, J2m]) / sdy + (vab[I2, J2] - vab[I2m, J2]) / sdx))

    # u-advection and diffusion: fluxua on i=2..imm1 (read on j=2..jmm1),
    # fluxva on the corners
    dI, uaI, uaIp = d[I, J], ua[I, J], ua[Ip, J]
    fua = ((.125 * ((d[Ip, J] + dI) * uaIp + (dI + d[Im, J]) * uaI) * (uaIp + uaI)
            - dI * 2. * aam2d[I, J] * (uab[Ip, J] - uab[I, J]) / dx[I, J]) * dy[I, J])
    fva = ((.125 * ((dc + dcy) * vac + (dcx + dcxy) * vacx) * (uac + uacy) - tps)
           * .25 * sdx)
    # at i-1: fluxua(1,j) is the given value
    advua_new = (fua - cat([fluxua[:1, J], fua[:-1]])
                 + fva[:-1, 1:] - fva[:-1, :-1])

    # v-advection and diffusion: fluxua on the corners, fluxva on j=2..jmm1
    # (fluxva(:,jm) keeps the u-pass flux), both times their face length
    fua = ((.125 * ((dc + dcx) * uac + (dcy + dcxy) * uacy) * (vacx + vac) - tps)
           * .25 * sdy)
    dJ, vaJ, vaJp = d[I2, J], va[I2, J], va[I2, Jp]
    fvb = (.125 * ((d[I2, Jp] + dJ) * vaJp + (dJ + d[I2, Jm]) * vaJ) * (vaJp + vaJ)
           - dJ * 2. * aam2d[I2, J] * (vab[I2, Jp] - vab[I2, J]) / dy[I2, J])
    fva = cat([fvb, fva[:, -1:]], 1) * dxc
    # at j-1: fluxva(i,1) is the given value
    advva_new = (fua[1:, :-1] - fua[:-1, :-1] + fva[:-1, :-1]
                 - cat([fluxva[I, :1], fva[:-1, :-2]], 1))

    fluxua_new = put(fluxua, fua, **corner)
    fluxva_new = put(fluxva, fva, **corner)
    curv2d_new = put(curv2d, tps, **corner)
    if mode == 2:
        uabI, vabI = uab[I, J], vab[I, J]
        wubot_new = put(wubot, -0.5 * (cbc[I, J] + cbc[Im, J])
                        * safe_sqrt(uabI ** 2 + (.25 * (vabI + vab[I, Jp] + vab[Im, J]
                                                        + vab[Im, Jp])) ** 2,
                                    layer="bottom_drag")
                        * uabI, i=(2, imm1), j=(2, jmm1))
        wvbot_new = put(wvbot, -0.5 * (cbc[I, J] + cbc[I, Jm])
                        * safe_sqrt(vabI ** 2 + (.25 * (uabI + uab[Ip, J] + uab[I, Jm]
                                                        + uab[Ip, Jm])) ** 2,
                                    layer="bottom_drag")
                        * vabI, i=(2, imm1), j=(2, jmm1))
        # the curvature (pom2k's tps) on i=2..imm1, j=2..jmm1
        vaI, vaIJp = va[I, J], va[I, Jp]
        tps = (.25 * ((vaIJp + vaI) * (dy[Ip, J] - dy[Im, J])
                      - (uaIp + uaI) * (dx[I, Jp] - dx[I, Jm])) / (dx[I, J] * dy[I, J]))
        curv2d_new = put(curv2d_new, tps, i=(2, imm1), j=(2, jmm1))
        # from i=3 (advua) and j=3 (advva): at 2 only the flux divergence
        advua_new = cat([advua_new[:1], advua_new[1:] - aru[span(3, imm1), J] * .25
                               * (tps[1:] * dI[1:] * (vaIJp[1:] + vaI[1:])
                                  + tps[:-1] * dI[:-1] * (vaIJp[:-1] + vaI[:-1]))])
        advva_new = cat([advva_new[:, :1], advva_new[:, 1:] + arv[I, span(3, jmm1)] * .25
                               * (tps[:, 1:] * dI[:, 1:] * (uaIp[:, 1:] + uaI[:, 1:])
                                  + tps[:, :-1] * dI[:, :-1] * (uaIp[:, :-1] + uaI[:, :-1]))], 1)
    else:
        wubot_new, wvbot_new = clone(wubot), clone(wvbot)
    inner = dict(i=(2, imm1), j=(2, jmm1), like=d)
    return AdvaveOut(advua=put(0., advua_new, **inner), advva=put(0., advva_new, **inner),
                     fluxua=fluxua_new, fluxva=fluxva_new,
                     wubot=wubot_new, wvbot=wvbot_new, curv2d=curv2d_new)


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
    I, Im = span(2, imm1), span(2, imm1, -1)
    J, Jp = span(2, jmm1), span(2, jmm1, 1)
    K, Kp = span(1, kbm1), span(1, kbm1, 1)
    I2, I2m = span(2, im), span(2, im, -1)
    Kz, Kzm = span(2, kbm1), span(2, kbm1, -1)
    # the vertical flux on i=2..im, k=2..kbm1 (0 at k=1 and kb)
    zflux = put(0., .25 * (w[I2, :, Kz] + w[I2m, :, Kz]) * (u[I2, :, Kz] + u[I2, :, Kzm]),
                i=(2, im), k=(2, kbm1), like=u)
    D, Dm, COR, ARU = dt[I, J, None], dt[Im, J, None], cor[I, J, None], aru[I, J, None]
    rhs = (advx[I, J, K] + safe_divide((zflux[I, J, K] - zflux[I, J, Kp]) * ARU, dz[K],
                                       layer="advu")
           - ARU * .25 * (COR * D * (v[I, Jp, K] + v[I, J, K])
                          + cor[Im, J, None] * Dm * (v[Im, Jp, K] + v[Im, J, K]))
           + grav * .125 * (D + Dm)
           * (egf[I, J, None] - egf[Im, J, None] + egb[I, J, None] - egb[Im, J, None]
              + (e_atmos[I, J, None] - e_atmos[Im, J, None]) * 2.)
           * (dy[I, J, None] + dy[Im, J, None])
           + drhox[I, J, K])
    HI, HIm = h[I, J, None], h[Im, J, None]
    new = safe_divide((HI + etb[I, J, None] + HIm + etb[Im, J, None]) * ARU * ub[I, J, K]
                      - 2. * dti2 * rhs,
                      (HI + etf[I, J, None] + HIm + etf[Im, J, None]) * ARU, layer="advu")
    return AdvuOut(uf=put(zflux, new, i=(2, imm1), j=(2, jmm1), k=(1, kbm1)))


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
    I, Ip = span(2, imm1), span(2, imm1, 1)
    J, Jm = span(2, jmm1), span(2, jmm1, -1)
    K, Kp = span(1, kbm1), span(1, kbm1, 1)
    J2, J2m = span(2, jm), span(2, jm, -1)
    Kz, Kzm = span(2, kbm1), span(2, kbm1, -1)
    # the vertical flux on j=2..jm, k=2..kbm1 (0 at k=1 and kb)
    zflux = put(0., .25 * (w[:, J2, Kz] + w[:, J2m, Kz]) * (v[:, J2, Kz] + v[:, J2, Kzm]),
                j=(2, jm), k=(2, kbm1), like=v)
    D, Dm, COR, ARV = dt[I, J, None], dt[I, Jm, None], cor[I, J, None], arv[I, J, None]
    rhs = (advy[I, J, K] + safe_divide((zflux[I, J, K] - zflux[I, J, Kp]) * ARV, dz[K],
                                       layer="advv")
           + ARV * .25 * (COR * D * (u[Ip, J, K] + u[I, J, K])
                          + cor[I, Jm, None] * Dm * (u[Ip, Jm, K] + u[I, Jm, K]))
           + grav * .125 * (D + Dm)
           * (egf[I, J, None] - egf[I, Jm, None] + egb[I, J, None] - egb[I, Jm, None]
              + (e_atmos[I, J, None] - e_atmos[I, Jm, None]) * 2.)
           * (dx[I, J, None] + dx[I, Jm, None])
           + drhoy[I, J, K])
    HJ, HJm = h[I, J, None], h[I, Jm, None]
    new = safe_divide((HJ + etb[I, J, None] + HJm + etb[I, Jm, None]) * ARV * vb[I, J, K]
                      - 2. * dti2 * rhs,
                      (HJ + etf[I, J, None] + HJm + etf[I, Jm, None]) * ARV, layer="advv")
    return AdvvOut(vf=put(zflux, new, i=(2, imm1), j=(2, jmm1), k=(1, kbm1)))


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
    # the faces: i=2..im, j=2..jm, k=2..kbm1 (I2, J2, K; I2m, J2m at -1, Km at k-1)
    I2, I2m = span(2, im), span(2, im, -1)
    J2, J2m = span(2, jm), span(2, jm, -1)
    K, Km, Kp = span(2, kbm1), span(2, kbm1, -1), span(2, kbm1, 1)
    qc, Dc, Hc = q[I2, J2, K], dt[I2, J2, None], h[I2, J2, None]
    aamc, aamk = aam[I2, J2, K], aam[I2, J2, Km]
    xfl = .125 * (qc + q[I2m, J2, K]) * (Dc + dt[I2m, J2, None]) * (u[I2, J2, K] + u[I2, J2, Km])
    yfl = .125 * (qc + q[I2, J2m, K]) * (Dc + dt[I2, J2m, None]) * (v[I2, J2, K] + v[I2, J2, Km])
    qbc = qb[I2, J2, K]
    dxc, dyc = dx[I2, J2, None], dy[I2, J2, None]
    dxx, dyx, dxy, dyy = dx[I2m, J2, None], dy[I2m, J2, None], dx[I2, J2m, None], dy[I2, J2m, None]
    xfl = (xfl - .25 * (aamc + aam[I2m, J2, K] + aamk + aam[I2m, J2, Km])
           * (Hc + h[I2m, J2, None]) * (qbc - qb[I2m, J2, K]) * dum[I2, J2, None] / (dxc + dxx))
    yfl = (yfl - .25 * (aamc + aam[I2, J2m, K] + aamk + aam[I2, J2m, Km])
           * (Hc + h[I2, J2m, None]) * (qbc - qb[I2, J2m, K]) * dvm[I2, J2, None] / (dyc + dyy))
    xfl = .5 * (dyc + dyx) * xfl
    yfl = .5 * (dxc + dxy) * yfl
    # qf on i=2..imm1, j=2..jmm1, k=2..kbm1: the faces' inner part
    I, J = span(2, imm1), span(2, jmm1)
    ART, HI = art[I, J, None], h[I, J, None]
    xflI, yflI = xfl[:, :-1], yfl[:-1]
    rhs = ((w[I, J, Km] * q[I, J, Km] - w[I, J, Kp] * q[I, J, Kp]) * ART / (dz[K] + dz[Km])
           + xflI[1:] - xflI[:-1] + yflI[:, 1:] - yflI[:, :-1])
    new = safe_divide((HI + etb[I, J, None]) * ART * qb[I, J, K] - dti2 * rhs,
                      (HI + etf[I, J, None]) * ART, layer="advq")
    faces = dict(i=(2, im), j=(2, jm), k=(2, kbm1))
    return AdvqOut(qf=put(qf, new, i=(2, imm1), j=(2, jmm1), k=(2, kbm1)),
                   xflux=put(xflux, xfl, **faces), yflux=put(yflux, yfl, **faces))


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
    I2, I2m = span(2, im), span(2, im, -1)
    J2, J2m = span(2, jm), span(2, jm, -1)
    K = span(1, kbm1)
    Dc = dt[I2, J2, None]
    xfl = .25 * (dy[I2, J2, None] + dy[I2m, J2, None]) * (Dc + dt[I2m, J2, None]) * u[I2, J2, K]
    yfl = .25 * (dx[I2, J2, None] + dx[I2, J2m, None]) * (Dc + dt[I2, J2m, None]) * v[I2, J2, K]
    # per-layer divergence on i=2..imm1, j=2..jmm1
    I, J = span(2, imm1), span(2, jmm1)
    xflI, yflI = xfl[:, :-1], yfl[:-1]
    inc = dz[K] * ((xflI[1:] - xflI[:-1] + yflI[:, 1:] - yflI[:, :-1])
                   / (dx[I, J, None] * dy[I, J, None]) + (etf[I, J, None] - etb[I, J, None]) / dti2)
    # the integral from the surface, in pom2k's order
    acc = 0.5 * (vfluxb[I, J] + vfluxf[I, J])
    cols = [acc]
    for inc_k in inc.unbind(Z):          # k = 1..kbm1
        acc = acc + inc_k
        cols.append(acc)
    faces = dict(i=(2, im), j=(2, jm), k=(1, kbm1))
    return VertvlOut(w=put(w, torch.stack(cols, dim=Z), i=(2, imm1), j=(2, jmm1)),
                     xflux=put(xflux, xfl, **faces), yflux=put(yflux, yfl, **faces))
