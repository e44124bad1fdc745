"""pom2k's implicit vertical diffusion: proft (tracers), profu and profv (momentum).

Each routine solves pom2k's tridiagonal system with the forward sweep
(ee, gg from the surface down) and the back substitution (from the bottom
up). Both are vertical recursions, so they loop over k; everything else is
vectorised over (i, j). Tensors are (i, j, k), indexed like the Fortran.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import X, Y, put, span
from pompy.utils.safety import safe_divide, safe_sqrt

# irradiance after Paulson and Simpson; Jerlov types i, ia, ib, ii, iii
_R = (.58, .62, .67, .77, .78)
_AD1 = (.35, .60, 1.0, 1.5, 1.4)
_AD2 = (23., 20., 17., 14., 7.9)


ProftOut = outputs("ProftOut", "a c ee gg f dh")
ProfuOut = outputs("ProfuOut", "a c ee gg tps uf wubot")
ProfvOut = outputs("ProfvOut", "a c ee gg tps vf wvbot")


def levels_then(new: list[Tensor] | Tensor, old: Tensor, first: int = 0) -> Tensor:
    """old[..., :first], the 2-D levels ``new`` (a list, or stacked along
    dim 0), then old beyond them: a contiguous (i, j, k) tensor, assembled
    k first (a copy along k, then one transpose, beats a stack along k)."""
    last = first + len(new)
    if isinstance(new, (list, tuple)):
        new = torch.stack(new)
    return torch.cat([old[:, :, :first].permute(2, 0, 1), new,
                      old[:, :, last:].permute(2, 0, 1)]).permute(1, 2, 0).contiguous()


def _coefficients(kv: Tensor, umol: float, dti2: float, dz: Tensor, dzz: Tensor, dh: Tensor,
                  a: Tensor, c: Tensor, layer: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """pom2k's k = 2..kbm1 loop: a(k-1) and c(k) from the diffusivity kv(k);
    (a, c, a's levels 1..kbm2, c's levels 2..kbm1)."""
    kb = a.size(2)
    kbm1, kbm2 = kb - 1, kb - 2
    D = dh[:, :, None]
    kk = -dti2 * (kv[:, :, 1:kbm1] + umol)
    dzzk = dzz[:kbm2]
    ak = safe_divide(kk, dz[:kbm2] * dzzk * D * D, layer=layer)
    ck = safe_divide(kk, dz[1:kbm1] * dzzk * D * D, layer=layer)
    a = torch.cat([ak, a[:, :, kbm2:]], 2)
    c = torch.cat([c[:, :, :1], ck, c[:, :, kbm1:]], 2)
    return a, c, ak, ck


def by_level(x: Tensor) -> tuple[Tensor, ...]:
    """The levels of an (i, j, k) slab as contiguous (i, j) planes of a copy
    made k first (so that the sweeps' operations read contiguous memory).

    The copy is the tridiagonal solve's deep freeze: the sweeps
    read copies of their coefficients (a, c before the forward sweep, ee, gg
    before the back substitution) that nothing else holds, so the recursive
    graph can never see a later update of pom2k's shared work arrays. The
    values are unchanged."""
    if torch.compiler.is_compiling():   # Inductor keeps a stack (a cat) as a buffer, but folds
        return torch.stack(x.unbind(2)).unbind()   # a clone into the sweep, read at stride kb
    return x.permute(2, 0, 1).clone(memory_format=torch.contiguous_format).unbind()


def _sweep(a: Tensor, c: Tensor, f: Tensor, ee1: Tensor, gg1: Tensor, kend: int,
           source: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Forward sweep k = 2..kend from the surface values ee1, gg1 (1-based k);
    a holds levels 1.., c, f and source levels 2.. of their coefficients.
    ee, gg come back frozen for the back substitution, as (k, i, j) levels
    1..kend (stacked: a copy nothing else holds)."""
    ak, ck = (by_level(x) for x in (a[:, :, 1:kend], c[:, :, :kend - 1]))
    fk = by_level(f)
    sk = by_level(source) if source is not None else None
    ee, gg = [ee1], [gg1]
    for k in range(kend - 1):                      # k = 2..kend; torch's 1.0 / x is
        g = torch.reciprocal(ak[k] + ck[k] * (1.0 - ee[-1]) - 1.0)   # reciprocal(x) * 1.0
        ee.append(ak[k] * g)
        rhs = ck[k] * gg[-1] - fk[k]
        if sk is not None:
            rhs = rhs + sk[k]
        gg.append(rhs * g)
    return torch.stack(ee), torch.stack(gg)


def proft(dti2, umol, ntp, z, dz, dzz, h, etf, swrad, kh, a, c, ee, gg, f,
          wfsurf, fsurf, nbc, dh) -> ProftOut:
    """pom2k proft: implicit vertical diffusion of the tracer f.

    Surface condition nbc: 1 flux wfsurf, 2 flux + shortwave swrad (Jerlov
    type ntp), 3 value fsurf, 4 value + shortwave; adiabatic bottom. All
    (i, j): writes dh = h + etf, a at k = 1..kbm2, c at k = 2..kbm1,
    ee and gg at k = 1..kbm2, f at k = 1..kbm1.
    """
    kb = f.size(2)
    kbm1, kbm2 = kb - 1, kb - 2
    dh = h + etf
    a, c, ak, ck = _coefficients(kh, umol, dti2, dz, dzz, dh, a, c, layer="proft")
    D = dh[:, :, None]

    # penetrative radiation at k = 1..kbm1; what reaches the bottom stays there
    rad = torch.zeros_like(f)
    if nbc in (2, 4):
        r, ad1, ad2 = _R[ntp - 1], _AD1[ntp - 1], _AD2[ntp - 1]
        zk = z[:kbm1]
        top = swrad[:, :, None] * (r * torch.exp(zk * D / ad1)
                                   + (1.0 - r) * torch.exp(zk * D / ad2))
        rad = torch.cat([top, rad[:, :, kbm1:]], 2)

    a1, f1 = ak[:, :, 0], f[:, :, 0]
    if nbc == 1:
        ee1 = a1 / (a1 - 1.0)
        gg1 = (safe_divide(-dti2 * wfsurf, -dz[0] * dh, layer="proft") - f1) / (a1 - 1.0)
    elif nbc == 2:
        ee1 = a1 / (a1 - 1.0)
        gg1 = (safe_divide(dti2 * (wfsurf + rad[:, :, 0] - rad[:, :, 1]), dz[0] * dh, layer="proft")
               - f1) / (a1 - 1.0)
    elif nbc in (3, 4):
        ee1 = torch.zeros_like(a1)
        gg1 = fsurf.clone()
    else:                                          # pom2k leaves level 1 as it was
        ee1, gg1 = ee[:, :, 0], gg[:, :, 0]

    # radiation absorbed in layer k, k = 2..kbm1
    source = safe_divide(dti2 * (rad[:, :, 1:kbm1] - rad[:, :, 2:kb]), D * dz[1:kbm1],
                         layer="proft")
    fk = f[:, :, 1:kbm1]
    eeS, ggS = _sweep(ak, ck, fk, ee1, gg1, kbm2, source)
    eel, ggl = eeS.unbind(), ggS.unbind()
    # bottom adiabatic boundary condition
    cb = ck[:, :, kbm2 - 1]                        # c(kbm1)
    fb = ((cb * ggl[-1] - f[:, :, kbm1 - 1] + source[:, :, kbm2 - 1])
          / (cb * (1.0 - eel[-1]) - 1.0))
    fl = [fb]
    for ki in range(kbm2, 0, -1):                  # ki = kbm2..1
        fl.insert(0, eel[ki - 1] * fl[0] + ggl[ki - 1])
    return ProftOut(a=a, c=c, ee=levels_then(eeS, ee), gg=levels_then(ggS, gg),
                    f=levels_then(fl, f), dh=dh)


def _profuv(dim, dti2, umol, dz, dzz, h, etf, km, cbc, mask, wsurf, speed, a, c,
            ee, gg, tps, vel, wbot):
    """profu (dim X) or profv (dim Y): everything but the bottom speed's
    stencil (``speed`` at i = 2..imm1, j = 2..jmm1); returns (a, c, ee, gg,
    tps, vel, wbot) as pom2k leaves them."""
    im, jm, kb = vel.shape
    kbm1, kbm2 = kb - 1, kb - 2
    # a(i-1) for profu, a(j-1) for profv
    I, J = span(2, im), span(2, jm)
    Ib, Jb = (span(2, im, -1), J) if dim == X else (I, span(2, jm, -1))
    # dh at the velocity point, i = 2..im, j = 2..jm; 1 elsewhere
    dh = put(1.0, (h[I, J] + etf[I, J] + h[Ib, Jb] + etf[Ib, Jb]) * .5, like=h,
             i=(2, im), j=(2, jm))
    c = put(c, (km[I, J] + km[Ib, Jb]) * .5, i=(2, im), j=(2, jm))
    layer = "profu" if dim == X else "profv"
    a, c, ak, ck = _coefficients(c, umol, dti2, dz, dzz, dh, a, c, layer)
    a1 = ak[:, :, 0]
    ee1 = a1 / (a1 - 1.0)
    gg1 = (safe_divide(-dti2 * wsurf, -dz[0] * dh, layer=layer) - vel[:, :, 0]) / (a1 - 1.0)
    eeS, ggS = _sweep(ak, ck, vel[:, :, 1:kbm1], ee1, gg1, kbm2)

    # quadratic bottom drag; i = 2..imm1, j = 2..jmm1 from here on
    ij = dict(i=(2, im - 1), j=(2, jm - 1))
    I, J = span(2, im - 1), span(2, jm - 1)
    Ib, Jb = (span(2, im - 1, -1), J) if dim == X else (I, span(2, jm - 1, -1))
    tpsI = 0.5 * (cbc[I, J] + cbc[Ib, Jb]) * speed
    tps = put(tps, tpsI, **ij)
    eel, ggl = eeS[:, I, J].unbind(), ggS[:, I, J].unbind()
    cb = ck[I, J, kbm2 - 1]                        # c(kbm1)
    m = mask[I, J]
    bottom = ((cb * ggl[-1] - vel[I, J, kbm1 - 1])
              / (safe_divide(tpsI * dti2, -dz[kbm1 - 1] * dh[I, J], layer=layer) - 1.0
                 - (eel[-1] - 1.0) * cb))
    vl = [bottom * m]
    for ki in range(kbm2, 0, -1):                  # ki = kbm2..1
        vl.insert(0, (eel[ki - 1] * vl[0] + ggl[ki - 1]) * m)
    return (a, c, levels_then(eeS, ee), levels_then(ggS, gg), tps,
            put(vel, torch.stack(vl).permute(1, 2, 0), k=(1, kbm1), **ij),
            put(wbot, -tpsI * vl[-1], **ij))


def profu(dti2, umol, dz, dzz, h, etf, km, cbc, dum, wusurf, ub, vb, a, c, ee, gg,
          tps, uf, wubot) -> ProfuOut:
    """pom2k profu: implicit vertical diffusion of uf with surface stress wusurf
    and quadratic bottom drag (cbc); sets tps (drag coefficient times speed)
    and wubot.

    Writes a at k = 1..kbm2 and c at k = 2..kbm1 (all i, j), c at k = 1 and kb
    for i, j >= 2, ee and gg at k = 1..kbm2 (all i, j); tps, wubot and uf at
    k = 1..kbm1 for i = 2..imm1, j = 2..jmm1.
    """
    im, jm, kb = uf.shape
    # the speed at i = 2..imm1, j = 2..jmm1, level kbm1
    I, Im, J, Jp = span(2, im - 1), span(2, im - 1, -1), span(2, jm - 1), span(2, jm - 1, 1)
    k = kb - 2                                     # kbm1, 0-based
    speed = safe_sqrt(ub[I, J, k] ** 2
                      + (.25 * (vb[I, J, k] + vb[I, Jp, k] + vb[Im, J, k] + vb[Im, Jp, k])) ** 2,
                      layer="bottom_drag")
    return ProfuOut(*_profuv(X, dti2, umol, dz, dzz, h, etf, km, cbc, dum, wusurf, speed,
                             a, c, ee, gg, tps, uf, wubot))


def profv(dti2, umol, dz, dzz, h, etf, km, cbc, dvm, wvsurf, ub, vb, a, c, ee, gg,
          tps, vf, wvbot) -> ProfvOut:
    """pom2k profv: as profu for vf, with wvsurf; sets tps and wvbot.

    Writes a at k = 1..kbm2 and c at k = 2..kbm1 (all i, j), c at k = 1 and kb
    for i, j >= 2, ee and gg at k = 1..kbm2 (all i, j); tps, wvbot and vf at
    k = 1..kbm1 for i = 2..imm1, j = 2..jmm1.
    """
    im, jm, kb = vf.shape
    # the speed at i = 2..imm1, j = 2..jmm1, level kbm1
    I, Ip, J, Jm = span(2, im - 1), span(2, im - 1, 1), span(2, jm - 1), span(2, jm - 1, -1)
    k = kb - 2                                     # kbm1, 0-based
    speed = safe_sqrt((.25 * (ub[I, J, k] + ub[Ip, J, k] + ub[I, Jm, k] + ub[Ip, Jm, k])) ** 2
                      + vb[I, J, k] ** 2, layer="bottom_drag")
    return ProfvOut(*_profuv(Y, dti2, umol, dz, dzz, h, etf, km, cbc, dvm, wvsurf, speed,
                             a, c, ee, gg, tps, vf, wvbot))
