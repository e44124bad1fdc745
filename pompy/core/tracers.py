"""pom2k tracer advection: advt1 (centred), advt2 (Smolarkiewicz), smol_adif.

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
``a(i,j,k)``. Every routine returns new tensors; ranges pom2k leaves
untouched keep the input values.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import expand3, inside, levels, xm, xp, ym, yp, zm, zp
from pompy.utils.safety import safe_divide


Advt1Out = outputs("Advt1Out", "fb f ff xflux yflux zflux")
Advt2Out = outputs("Advt2Out", "fb ff xflux yflux zflux")
SmolAdifOut = outputs("SmolAdifOut", "xmassflux ymassflux zwflux ff")


def _bottom_copy(a: Tensor) -> Tensor:
    """``a`` with a(:,:,kb) = a(:,:,kbm1)."""
    return torch.cat([a[..., :-1], a[..., -2:-1]], dim=2)


def _leapfrog(xflux, yflux, zflux, dz, fb, h, etb, etf, art, dti2):
    """The flux divergence and leapfrog step pom2k's advt1/advt2 share
    (values for every point; the callers keep i=2..imm1, j=2..jmm1, k=1..kbm1)."""
    H, ETB, ETF, ART = (expand3(a) for a in (h, etb, etf, art))
    ff = (xp(xflux) - xflux + yp(yflux) - yflux
          + safe_divide(zflux - zp(zflux), levels(dz), layer="advt"))   # dz(kb) = 0
    return safe_divide(fb * (H + ETB) * ART - dti2 * ff, (H + ETF) * ART, layer="advt")


def advt1(dti2, tprni, dz, u, v, w, aam, dt, h, etb, etf,
          dx, dy, art, dum, dvm, fb, f, fclim, ff, xflux, yflux, zflux) -> Advt1Out:
    """pom2k advt1: centred advection and horizontal diffusion (of fb-fclim)
    of a tracer, leapfrog step into ff. Called as advt1(tb,t,tclim,uf,a,c).

    Writes f, fb at k=kb (copied from kbm1; fb also passes through
    (fb-fclim)+fclim everywhere, as pom2k does); xflux, yflux at
    i=2..im, j=2..jm, k=1..kbm1; zflux at i=2..imm1, j=2..jmm1, all k;
    ff at i=2..imm1, j=2..jmm1, k=1..kbm1.
    """
    im, jm, kb = f.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    DT, H, DX, DY, ART, DUM, DVM = (expand3(a) for a in (dt, h, dx, dy, art, dum, dvm))
    f = _bottom_copy(f)
    fb = _bottom_copy(fb)
    # advective fluxes
    xadv = .25 * ((DT + xm(DT)) * (f + xm(f)) * u)
    yadv = .25 * ((DT + ym(DT)) * (f + ym(f)) * v)
    # diffusive fluxes, of fb - fclim
    fbc = fb - fclim
    xdif = (xadv - .5 * (aam + xm(aam)) * (H + xm(H)) * tprni
            * (fbc - xm(fbc)) * DUM / (DX + xm(DX)))
    ydif = (yadv - .5 * (aam + ym(aam)) * (H + ym(H)) * tprni
            * (fbc - ym(fbc)) * DVM / (DY + ym(DY)))
    xflux = inside(.5 * (DY + xm(DY)) * xdif, rest=xflux, i=(2, im), j=(2, jm), k=(1, kbm1))
    yflux = inside(.5 * (DX + ym(DX)) * ydif, rest=yflux, i=(2, im), j=(2, jm), k=(1, kbm1))
    fb = fbc + fclim
    # vertical advection: w(1)*f(1) at the surface, zero at the bottom
    zint = .5 * (zm(f) + f) * w * ART
    zsurf = f * w * ART
    zcol = inside(inside(zint, rest=zsurf, k=(2, kb)), rest=0., k=(1, kbm1))
    zflux = inside(zcol, rest=zflux, i=(2, imm1), j=(2, jmm1))
    ff = inside(_leapfrog(xflux, yflux, zflux, dz, fb, h, etb, etf, art, dti2),
                rest=ff, i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
    return Advt1Out(fb, f, ff, xflux, yflux, zflux)


def advt2(dti2, tprni, dz, dzz, u, v, w, aam, dt, h, etb, etf,
          dx, dy, art, aru, arv, fsm, dum, dvm, fb, f, fclim, ff,
          xflux, yflux, zflux, nitera, sw) -> Advt2Out:
    """pom2k advt2: Smolarkiewicz iterative upstream advection (nitera
    passes, antidiffusive velocities from smol_adif scaled by sw) plus
    horizontal diffusion of fb-fclim. Called as
    advt2(tb,t,tclim,uf,a,c,nitera,sw).

    Writes fb at k=kb (copied from kbm1; and (fb-fclim)+fclim everywhere);
    xflux, yflux at i=2..im, j=2..jm, k=1..kbm1 (the diffusive fluxes);
    zflux at i=2..imm1, j=2..jmm1, all k (the last pass); ff masked by
    fsm everywhere on each pass (smol_adif), then advected and diffused at
    i=2..imm1, j=2..jmm1, k=1..kbm1.
    """
    im, jm, kb = f.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    DT, H, DX, DY, ART, DUM, DVM = (expand3(a) for a in (dt, h, dx, dy, art, dum, dvm))
    xmassflux = inside(0.25 * (xm(DY) + DY) * (xm(DT) + DT) * u,
                       i=(2, im), j=(2, jmm1), k=(1, kbm1))
    ymassflux = inside(0.25 * (ym(DX) + DX) * (ym(DT) + DT) * v,
                       i=(2, imm1), j=(2, jm), k=(1, kbm1))
    fb = _bottom_copy(fb)
    eta = etb
    zflux = zflux.clone()  # returned as is when nitera is 0
    zwflux = w
    fbmem = fb
    for itera in range(1, nitera + 1):
        # upwind advection
        xup = 0.5 * ((xmassflux + xmassflux.abs()) * xm(fbmem)
                     + (xmassflux - xmassflux.abs()) * fbmem)
        yup = 0.5 * ((ymassflux + ymassflux.abs()) * ym(fbmem)
                     + (ymassflux - ymassflux.abs()) * fbmem)
        xflux = inside(xup, rest=xflux, i=(2, im), j=(2, jm), k=(1, kbm1))
        yflux = inside(yup, rest=yflux, i=(2, im), j=(2, jm), k=(1, kbm1))
        zsurf = w * f * ART if itera == 1 else torch.zeros_like(w)
        zint = 0.5 * ((zwflux + zwflux.abs()) * fbmem
                      + (zwflux - zwflux.abs()) * zm(fbmem))
        zcol = inside(inside(zint * ART, rest=zsurf, k=(2, kb)), rest=0., k=(1, kbm1))
        zflux = inside(zcol, rest=zflux, i=(2, imm1), j=(2, jmm1))
        ff = inside(_leapfrog(xflux, yflux, zflux, dz, fbmem, h, eta, etf, art, dti2),
                    rest=ff, i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
        xmassflux, ymassflux, zwflux, ff = smol_adif(
            dti2=dti2, dzz=dzz, dt=dt, aru=aru, arv=arv, fsm=fsm, xmassflux=xmassflux,
            ymassflux=ymassflux, zwflux=zwflux, ff=ff, sw=sw)
        eta = etf
        fbmem = ff
    # horizontal diffusion, of fb - fclim
    fbc = fb - fclim
    xmassflux = 0.5 * (aam + xm(aam))
    ymassflux = 0.5 * (aam + ym(aam))
    xdif = (-xmassflux * (H + xm(H)) * tprni * (fbc - xm(fbc)) * DUM
            * (DY + xm(DY)) * 0.5 / (DX + xm(DX)))
    ydif = (-ymassflux * (H + ym(H)) * tprni * (fbc - ym(fbc)) * DVM
            * (DX + ym(DX)) * 0.5 / (DY + ym(DY)))
    xflux = inside(xdif, rest=xflux, i=(2, im), j=(2, jm), k=(1, kbm1))
    yflux = inside(ydif, rest=yflux, i=(2, im), j=(2, jm), k=(1, kbm1))
    fb = fbc + fclim
    ETF = expand3(etf)
    fdif = ff - safe_divide(dti2 * (xp(xflux) - xflux + yp(yflux) - yflux),
                            (H + ETF) * ART, layer="advt")
    ff = inside(fdif, rest=ff, i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
    return Advt2Out(fb, ff, xflux, yflux, zflux)


def smol_adif(dti2, dzz, dt, aru, arv, fsm, xmassflux, ymassflux, zwflux, ff, sw) -> SmolAdifOut:
    """pom2k smol_adif: Smolarkiewicz antidiffusive velocities, scaled by sw.

    Writes ff*fsm everywhere; xmassflux at i=2..im, j=2..jmm1, k=1..kbm1;
    ymassflux at i=2..imm1, j=2..jm, k=1..kbm1; zwflux at i=2..imm1,
    j=2..jmm1, k=2..kbm1. Each is zero where either neighbouring ff is
    below value_min or where the second-order term exceeds the first
    (the antidiffusion would reverse the flux).
    """
    value_min, epsilon = 1.e-9, 1.0e-14
    im, jm, kb = ff.shape
    imm1, jmm1, kbm1 = im - 1, jm - 1, kb - 1
    DT, ARU, ARV = (expand3(a) for a in (dt, aru, arv))
    ff = ff * expand3(fsm)
    zero = torch.zeros_like(ff)

    def antidiffusion(flux, f0, f1, second_order):
        # f0, f1 the two neighbours: mol = (f1 - f0) / (f0 + f1 + epsilon)
        below = (f1 < value_min) | (f0 < value_min)
        first = flux.abs()
        # f0 + f1 = -epsilon (a tracer crossing 0) would put inf in the branch not kept
        mol = safe_divide(f1 - f0, f0 + f1 + epsilon, layer="advt")
        anti = (first - second_order) * mol * sw
        anti = torch.where(first < second_order.abs(), zero, anti)
        return torch.where(below, zero, anti)

    ffm_x = xm(ff)
    u2dt = dti2 * xmassflux * xmassflux * 2. / (ARU * (xm(DT) + DT))
    xnew = antidiffusion(xmassflux, ffm_x, ff, u2dt)
    xmassflux = inside(xnew, rest=xmassflux, i=(2, im), j=(2, jmm1), k=(1, kbm1))

    ffm_y = ym(ff)
    v2dt = dti2 * ymassflux * ymassflux * 2. / (ARV * (ym(DT) + DT))
    ynew = antidiffusion(ymassflux, ffm_y, ff, v2dt)
    ymassflux = inside(ynew, rest=ymassflux, i=(2, imm1), j=(2, jm), k=(1, kbm1))

    # vertical: mol = (ff(k-1) - ff(k)) / (ff(k) + ff(k-1) + epsilon)
    w2dt = dti2 * zwflux * zwflux / (levels(zm(dzz)) * DT)
    znew = antidiffusion(zwflux, ff, zm(ff), w2dt)
    zwflux = inside(znew, rest=zwflux, i=(2, imm1), j=(2, jmm1), k=(2, kbm1))
    return SmolAdifOut(xmassflux, ymassflux, zwflux, ff)
