"""pom2k tracer advection: advt1 (centred), advt2 (Smolarkiewicz), smol_adif.

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
``a(i,j,k)``. Every routine returns new tensors; ranges pom2k leaves
untouched keep the input values. Each reads pom2k's loop ranges as views
(pompy.ops.span) and writes them with pompy.ops.put.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import put, span
from pompy.utils.safety import safe_divide


Advt1Out = outputs("Advt1Out", "fb f ff xflux yflux zflux")
Advt2Out = outputs("Advt2Out", "fb ff xflux yflux zflux")
SmolAdifOut = outputs("SmolAdifOut", "xmassflux ymassflux zwflux ff")


def _bottom_copy(a: Tensor) -> Tensor:
    """``a`` with a(:,:,kb) = a(:,:,kbm1)."""
    return torch.cat([a[..., :-1], a[..., -2:-1]], dim=2)


def _leapfrog(xflux, yflux, zflux, dz, fb, h, etb, etf, art, dti2):
    """The flux divergence and leapfrog step pom2k's advt1/advt2 share, at
    i=2..imm1, j=2..jmm1, k=1..kbm1 (the values there, shaped like that
    range), from the fluxes on the ranges it reads: xflux at i=2..im,
    j=2..jmm1, k=1..kbm1; yflux at i=2..imm1, j=2..jm, k=1..kbm1; zflux at
    i=2..imm1, j=2..jmm1, all k."""
    im, jm, kb = fb.shape
    I, J, K = span(2, im - 1), span(2, jm - 1), span(1, kb - 1)
    H, ART = h[I, J, None], art[I, J, None]
    ff = (xflux[1:] - xflux[:-1] + yflux[:, 1:] - yflux[:, :-1]
          + safe_divide(zflux[..., :-1] - zflux[..., 1:], dz[K], layer="advt"))
    return safe_divide(fb[I, J, K] * (H + etb[I, J, None]) * ART - dti2 * ff,
                       (H + etf[I, J, None]) * ART, layer="advt")


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
    f = _bottom_copy(f)
    fb = _bottom_copy(fb)
    # i=2..im, j=2..jm, k=1..kbm1
    I, Im = span(2, im), span(2, im, -1)
    J, Jm = span(2, jm), span(2, jm, -1)
    K = span(1, kbm1)
    D, H, DX, DY = dt[I, J, None], h[I, J, None], dx[I, J, None], dy[I, J, None]
    fIJ = f[I, J, K]
    # advective fluxes
    xadv = .25 * ((D + dt[Im, J, None]) * (fIJ + f[Im, J, K]) * u[I, J, K])
    yadv = .25 * ((D + dt[I, Jm, None]) * (fIJ + f[I, Jm, K]) * v[I, J, K])
    # diffusive fluxes, of fb - fclim
    fbc = fb - fclim
    fbcIJ, aIJ = fbc[I, J, K], aam[I, J, K]
    xdif = (xadv - .5 * (aIJ + aam[Im, J, K]) * (H + h[Im, J, None]) * tprni
            * (fbcIJ - fbc[Im, J, K]) * dum[I, J, None] / (DX + dx[Im, J, None]))
    ydif = (yadv - .5 * (aIJ + aam[I, Jm, K]) * (H + h[I, Jm, None]) * tprni
            * (fbcIJ - fbc[I, Jm, K]) * dvm[I, J, None] / (DY + dy[I, Jm, None]))
    xflux = put(xflux, .5 * (DY + dy[Im, J, None]) * xdif, i=(2, im), j=(2, jm), k=(1, kbm1))
    yflux = put(yflux, .5 * (DX + dx[I, Jm, None]) * ydif, i=(2, im), j=(2, jm), k=(1, kbm1))
    fb = fbc + fclim
    # vertical advection at i=2..imm1, j=2..jmm1: w(1)*f(1) at the surface,
    # .5*(f(k-1)+f(k))*w(k) at k=2..kbm1, zero at the bottom
    I, J = span(2, imm1), span(2, jmm1)
    K, Km = span(2, kbm1), span(2, kbm1, -1)
    ART = art[I, J, None]
    zsurf = f[I, J, :1] * w[I, J, :1] * ART
    zint = .5 * (f[I, J, Km] + f[I, J, K]) * w[I, J, K] * ART
    zcol = torch.cat([zsurf, zint, torch.zeros_like(zsurf)], dim=2)
    zflux = put(zflux, zcol, i=(2, imm1), j=(2, jmm1))
    K = span(1, kbm1)
    ff = put(ff, _leapfrog(xflux[span(2, im), J, K], yflux[I, span(2, jm), K], zcol,
                           dz, fb, h, etb, etf, art, dti2),
             i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
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
    I, Im = span(2, im), span(2, im, -1)
    J, Jm = span(2, jm), span(2, jm, -1)
    K = span(1, kbm1)
    Ii, Ji = span(2, imm1), span(2, jmm1)           # the interior
    Ki, Kim = span(2, kbm1), span(2, kbm1, -1)
    # zero outside their ranges
    xmassflux = put(0., 0.25 * (dy[Im, Ji, None] + dy[I, Ji, None])
                    * (dt[Im, Ji, None] + dt[I, Ji, None]) * u[I, Ji, K],
                    like=u, i=(2, im), j=(2, jmm1), k=(1, kbm1))
    ymassflux = put(0., 0.25 * (dx[Ii, Jm, None] + dx[Ii, J, None])
                    * (dt[Ii, Jm, None] + dt[Ii, J, None]) * v[Ii, J, K],
                    like=v, i=(2, imm1), j=(2, jm), k=(1, kbm1))
    fb = _bottom_copy(fb)
    eta = etb
    zwflux = w
    fbmem = fb
    ARTi = art[Ii, Ji, None]
    zcol = None
    for itera in range(1, nitera + 1):
        # upwind advection: xflux at i=2..im, j=2..jmm1; yflux at i=2..imm1,
        # j=2..jm (what the leapfrog reads; pom2k writes both at i=2..im,
        # j=2..jm, and the diffusive fluxes replace them after the passes)
        xmf, ymf = xmassflux[I, Ji, K], ymassflux[Ii, J, K]
        xabs, yabs = xmf.abs(), ymf.abs()
        xup = 0.5 * ((xmf + xabs) * fbmem[Im, Ji, K] + (xmf - xabs) * fbmem[I, Ji, K])
        yup = 0.5 * ((ymf + yabs) * fbmem[Ii, Jm, K] + (ymf - yabs) * fbmem[Ii, J, K])
        # vertical, at i=2..imm1, j=2..jmm1: w(1)*f(1) at the surface on
        # the first pass (zero after), upwind at k=2..kbm1, zero at kb
        zw = zwflux[Ii, Ji, Ki]
        zabs = zw.abs()
        zint = 0.5 * ((zw + zabs) * fbmem[Ii, Ji, Ki] + (zw - zabs) * fbmem[Ii, Ji, Kim])
        if itera == 1:
            zsurf = w[Ii, Ji, :1] * f[Ii, Ji, :1] * ARTi
            zbottom = torch.zeros_like(zsurf)
        else:
            zsurf = zbottom
        zcol = torch.cat([zsurf, zint * ARTi, zbottom], dim=2)
        ff = put(ff, _leapfrog(xup, yup, zcol, dz, fbmem, h, eta, etf, art, dti2),
                 i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
        xmassflux, ymassflux, zwflux, ff = smol_adif(
            dti2=dti2, dzz=dzz, dt=dt, aru=aru, arv=arv, fsm=fsm, xmassflux=xmassflux,
            ymassflux=ymassflux, zwflux=zwflux, ff=ff, sw=sw)
        eta = etf
        fbmem = ff
    # zflux: the last pass's
    zflux = zflux.clone() if zcol is None else put(zflux, zcol, i=(2, imm1), j=(2, jmm1))
    # horizontal diffusion, of fb - fclim, at i=2..im, j=2..jm
    fbc = fb - fclim
    H, DX, DY = h[I, J, None], dx[I, J, None], dy[I, J, None]
    fbcIJ, aIJ = fbc[I, J, K], aam[I, J, K]
    xmassflux = 0.5 * (aIJ + aam[Im, J, K])
    ymassflux = 0.5 * (aIJ + aam[I, Jm, K])
    xdif = (-xmassflux * (H + h[Im, J, None]) * tprni * (fbcIJ - fbc[Im, J, K]) * dum[I, J, None]
            * (DY + dy[Im, J, None]) * 0.5 / (DX + dx[Im, J, None]))
    ydif = (-ymassflux * (H + h[I, Jm, None]) * tprni * (fbcIJ - fbc[I, Jm, K]) * dvm[I, J, None]
            * (DX + dx[I, Jm, None]) * 0.5 / (DY + dy[I, Jm, None]))
    xflux = put(xflux, xdif, i=(2, im), j=(2, jm), k=(1, kbm1))
    yflux = put(yflux, ydif, i=(2, im), j=(2, jm), k=(1, kbm1))
    fb = fbc + fclim
    # i=2..imm1, j=2..jmm1, k=1..kbm1
    Ip, Jp = span(2, imm1, 1), span(2, jmm1, 1)
    fdif = ff[Ii, Ji, K] - safe_divide(
        dti2 * (xflux[Ip, Ji, K] - xflux[Ii, Ji, K] + yflux[Ii, Jp, K] - yflux[Ii, Ji, K]),
        (h[Ii, Ji, None] + etf[Ii, Ji, None]) * ARTi, layer="advt")
    ff = put(ff, fdif, i=(2, imm1), j=(2, jmm1), k=(1, kbm1))
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
    ff = ff * fsm[:, :, None]

    def antidiffusion(flux, f0, f1, second_order):
        # f0, f1 the two neighbours: mol = (f1 - f0) / (f0 + f1 + epsilon)
        below = (f1 < value_min) | (f0 < value_min)
        first = flux.abs()
        # f0 + f1 = -epsilon (a tracer crossing 0) would put inf in the branch not kept
        mol = safe_divide(f1 - f0, f0 + f1 + epsilon, layer="advt")
        anti = (first - second_order) * mol * sw
        anti = torch.where(first < second_order.abs(), 0., anti)
        return torch.where(below, 0., anti)

    # i=2..im, j=2..jmm1, k=1..kbm1
    I, Im, J, K = span(2, im), span(2, im, -1), span(2, jmm1), span(1, kbm1)
    flux = xmassflux[I, J, K]
    u2dt = dti2 * flux * flux * 2. / (aru[I, J, None] * (dt[Im, J, None] + dt[I, J, None]))
    xnew = antidiffusion(flux, ff[Im, J, K], ff[I, J, K], u2dt)
    xmassflux = put(xmassflux, xnew, i=(2, im), j=(2, jmm1), k=(1, kbm1))

    # i=2..imm1, j=2..jm, k=1..kbm1
    I, J, Jm = span(2, imm1), span(2, jm), span(2, jm, -1)
    flux = ymassflux[I, J, K]
    v2dt = dti2 * flux * flux * 2. / (arv[I, J, None] * (dt[I, Jm, None] + dt[I, J, None]))
    ynew = antidiffusion(flux, ff[I, Jm, K], ff[I, J, K], v2dt)
    ymassflux = put(ymassflux, ynew, i=(2, imm1), j=(2, jm), k=(1, kbm1))

    # vertical, i=2..imm1, j=2..jmm1, k=2..kbm1:
    # mol = (ff(k-1) - ff(k)) / (ff(k) + ff(k-1) + epsilon)
    J, K, Km = span(2, jmm1), span(2, kbm1), span(2, kbm1, -1)
    flux = zwflux[I, J, K]
    w2dt = dti2 * flux * flux / (dzz[Km] * dt[I, J, None])
    znew = antidiffusion(flux, ff[I, J, K], ff[I, J, Km], w2dt)
    zwflux = put(zwflux, znew, i=(2, imm1), j=(2, jmm1), k=(2, kbm1))
    return SmolAdifOut(xmassflux, ymassflux, zwflux, ff)
