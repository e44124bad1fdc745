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
from pompy.ops import X, Y, inside, xm, xp, ym, yp
from pompy.utils.safety import safe_divide, safe_sqrt

# irradiance after Paulson and Simpson; Jerlov types i, ia, ib, ii, iii
_R = (.58, .62, .67, .77, .78)
_AD1 = (.35, .60, 1.0, 1.5, 1.4)
_AD2 = (23., 20., 17., 14., 7.9)


ProftOut = outputs("ProftOut", "a c ee gg f dh")
ProfuOut = outputs("ProfuOut", "a c ee gg tps uf wubot")
ProfvOut = outputs("ProfvOut", "a c ee gg tps vf wvbot")


def _levels_then(new: list[Tensor], old: Tensor, first: int = 0) -> Tensor:
    """old[..., :first], the 2-D levels ``new``, then old beyond them."""
    last = first + len(new)
    return torch.cat([old[:, :, :first], torch.stack(new, 2), old[:, :, last:]], 2)


def _coefficients(kv: Tensor, umol: float, dti2: float, dz: Tensor, dzz: Tensor,
                  dh: Tensor, a: Tensor, c: Tensor, layer: str) -> tuple[Tensor, Tensor]:
    """pom2k's k = 2..kbm1 loop: a(k-1) and c(k) from the diffusivity kv(k)."""
    kb = a.size(2)
    kbm1, kbm2 = kb - 1, kb - 2
    d3 = dh.unsqueeze(-1)
    kk = kv[:, :, 1:kbm1] + umol
    a = torch.cat([safe_divide(-dti2 * kk, dz[:kbm2] * dzz[:kbm2] * d3 * d3, layer=layer),
                   a[:, :, kbm2:]], 2)
    c = torch.cat([c[:, :, :1], safe_divide(-dti2 * kk, dz[1:kbm1] * dzz[:kbm2] * d3 * d3, layer=layer),
                   c[:, :, kbm1:]], 2)
    return a, c


def frozen(*tensors: Tensor) -> list[Tensor]:
    """The seed's deep freeze of a tridiagonal solve: the sweeps read copies
    of their coefficients (a, c before the forward sweep, ee, gg before the
    back substitution) that nothing else holds, so the recursive graph can
    never see a later update of pom2k's shared work arrays. The values are
    unchanged."""
    return [t.clone() for t in tensors]


def _sweep(a: Tensor, c: Tensor, f: Tensor, ee1: Tensor, gg1: Tensor, kend: int,
           source=None) -> tuple[list[Tensor], list[Tensor]]:
    """Forward sweep k = 2..kend from the surface values ee1, gg1 (1-based k);
    ee, gg come back frozen for the back substitution."""
    a, c = frozen(a, c)
    ee, gg = [ee1], [gg1]
    for k in range(1, kend):                       # k = 2..kend
        g = 1.0 / (a[:, :, k] + c[:, :, k] * (1.0 - ee[-1]) - 1.0)
        ee.append(a[:, :, k] * g)
        rhs = c[:, :, k] * gg[-1] - f[:, :, k]
        if source is not None:
            rhs = rhs + source(k)
        gg.append(rhs * g)
    return frozen(*ee), frozen(*gg)


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
    a, c = _coefficients(kh, umol, dti2, dz, dzz, dh, a, c, layer="proft")
    d3 = dh.unsqueeze(-1)

    # penetrative radiation at k = 1..kbm1; what reaches the bottom stays there
    rad = torch.zeros_like(f)
    if nbc in (2, 4):
        r, ad1, ad2 = _R[ntp - 1], _AD1[ntp - 1], _AD2[ntp - 1]
        zk = z[:kbm1]
        top = swrad.unsqueeze(-1) * (r * torch.exp(zk * d3 / ad1)
                                     + (1.0 - r) * torch.exp(zk * d3 / ad2))
        rad = torch.cat([top, rad[:, :, kbm1:]], 2)

    a1, f1 = a[:, :, 0], f[:, :, 0]
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

    def source(k):                                 # radiation absorbed in layer k
        return safe_divide(dti2 * (rad[:, :, k] - rad[:, :, k + 1]), dh * dz[k], layer="proft")

    eel, ggl = _sweep(a, c, f, ee1, gg1, kbm2, source)
    # bottom adiabatic boundary condition
    fk = ((c[:, :, kbm1 - 1] * ggl[-1] - f[:, :, kbm1 - 1] + source(kbm1 - 1))
          / (c[:, :, kbm1 - 1] * (1.0 - eel[-1]) - 1.0))
    fl = [fk]
    for ki in range(kbm2, 0, -1):                  # ki = kbm2..1
        fl.insert(0, eel[ki - 1] * fl[0] + ggl[ki - 1])
    return ProftOut(a=a, c=c, ee=_levels_then(eel, ee), gg=_levels_then(ggl, gg),
                    f=_levels_then(fl, f), dh=dh)


def _profuv(dim, dti2, umol, dz, dzz, h, etf, km, cbc, mask, wsurf, speed, a, c,
            ee, gg, tps, vel, wbot):
    """profu (dim X) or profv (dim Y): everything but the bottom speed's
    stencil; returns (a, c, ee, gg, tps, vel, wbot) as pom2k leaves them."""
    im, jm, kb = vel.shape
    kbm1, kbm2 = kb - 1, kb - 2
    back = xm if dim == X else ym                  # a(i-1) for profu, a(j-1) for profv
    # dh at the velocity point, i = 2..im, j = 2..jm; 1 elsewhere
    dh = inside((h + etf + back(h) + back(etf)) * .5, 1.0,
                i=(2, im), j=(2, jm))
    c = inside((km + back(km)) * .5, c, i=(2, im), j=(2, jm))
    layer = "profu" if dim == X else "profv"
    a, c = _coefficients(c, umol, dti2, dz, dzz, dh, a, c, layer)
    a1 = a[:, :, 0]
    ee1 = a1 / (a1 - 1.0)
    gg1 = (safe_divide(-dti2 * wsurf, -dz[0] * dh, layer=layer) - vel[:, :, 0]) / (a1 - 1.0)
    eel, ggl = _sweep(a, c, vel, ee1, gg1, kbm2)

    # quadratic bottom drag; i = 2..imm1, j = 2..jmm1 from here on
    ij = dict(i=(2, im - 1), j=(2, jm - 1))
    tps = inside(0.5 * (cbc + back(cbc)) * speed, tps, **ij)
    ck = c[:, :, kbm1 - 1]
    bottom = ((ck * ggl[-1] - vel[:, :, kbm1 - 1])
              / (safe_divide(tps * dti2, -dz[kbm1 - 1] * dh, layer=layer) - 1.0
                 - (eel[-1] - 1.0) * ck))
    vl = [inside(bottom * mask, vel[:, :, kbm1 - 1], **ij)]
    for ki in range(kbm2, 0, -1):                  # ki = kbm2..1
        vl.insert(0, inside((eel[ki - 1] * vl[0] + ggl[ki - 1]) * mask,
                            vel[:, :, ki - 1], **ij))
    return (a, c, _levels_then(eel, ee), _levels_then(ggl, gg), tps, _levels_then(vl, vel),
            inside(-tps * vl[-1], wbot, **ij))


def profu(dti2, umol, dz, dzz, h, etf, km, cbc, dum, wusurf, ub, vb, a, c, ee, gg,
          tps, uf, wubot) -> ProfuOut:
    """pom2k profu: implicit vertical diffusion of uf with surface stress wusurf
    and quadratic bottom drag (cbc); sets tps (drag coefficient times speed)
    and wubot.

    Writes a at k = 1..kbm2 and c at k = 2..kbm1 (all i, j), c at k = 1 and kb
    for i, j >= 2, ee and gg at k = 1..kbm2 (all i, j); tps, wubot and uf at
    k = 1..kbm1 for i = 2..imm1, j = 2..jmm1.
    """
    kbm1 = uf.size(2) - 1
    u, v = ub[:, :, kbm1 - 1], vb[:, :, kbm1 - 1]
    vi = xm(v)
    speed = safe_sqrt(u ** 2 + (.25 * (v + yp(v) + vi + yp(vi))) ** 2,
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
    kbm1 = vf.size(2) - 1
    u, v = ub[:, :, kbm1 - 1], vb[:, :, kbm1 - 1]
    uj = ym(u)
    speed = safe_sqrt((.25 * (u + xp(u) + uj + xp(uj))) ** 2 + v ** 2,
                      layer="bottom_drag")
    return ProfvOut(*_profuv(Y, dti2, umol, dz, dzz, h, etf, km, cbc, dvm, wvsurf, speed,
                             a, c, ee, gg, tps, vf, wvbot))
