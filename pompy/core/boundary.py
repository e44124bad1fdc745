"""pom2k lateral boundary conditions: bcond(idx), cases 1 to 6.

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
``a(i,j,k)``. Boundary rows are assembled with ``torch.cat`` (a new tensor)
and the upstream switches become ``torch.where``; no input is written.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import X, Y, expand3, inside, over, ym, yp, zm, zp
from pompy.utils.safety import safe_sqrt


BcondOut = outputs("BcondOut", "elf uaf vaf uf vf w")


def _edges(a: Tensor, dim: int, first: Tensor, last: Tensor) -> Tensor:
    """``a`` with its first and last slabs along ``dim`` replaced."""
    n = a.size(dim)
    return torch.cat([first.unsqueeze(dim), a.narrow(dim, 1, n - 2), last.unsqueeze(dim)], dim)


def _upstream(f: Tensor, old: Tensor, courant, inflow, vadv=(0., 0., 0., 0.)) -> Tensor:
    """pom2k's upstream edges (bcond 4 and 6): ``old`` with the edges i = 1,
    im (all j), then j = 1, jm (all i, overriding the corners) from ``f``.

    courant, inflow and vadv are (east, west, north, south) slabs: the
    Courant number u1, the boundary value inflow relaxes to, and the
    vertical advection outflow subtracts. Inflow is u1 <= 0 east and north,
    u1 >= 0 west and south; outflow takes the upstream difference."""
    (ue, uw, un, us), (be, bw, bn, bs), (ve, vw, vn, vs) = courant, inflow, vadv
    fe, fi = f[-1], f[-2]
    east = torch.where(ue <= 0., fe - ue * (be - fe), fe - ue * (fe - fi) - ve)
    fw, fi = f[0], f[1]
    west = torch.where(uw >= 0., fw - uw * (fw - bw), fw - uw * (fi - fw) - vw)
    a = _edges(old, X, west, east)
    fn, fi = f[:, -1], f[:, -2]
    north = torch.where(un <= 0., fn - un * (bn - fn), fn - un * (fn - fi) - vn)
    fs, fi = f[:, 0], f[:, 1]
    south = torch.where(us >= 0., fs - us * (fs - bs), fs - us * (fi - fs) - vs)
    return _edges(a, Y, south, north)


def bcond(idx, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs,
          zz, h, dx, dy, dt, fsm, dum, dvm, el, u, v, t, s, q2, q2l,
          ele, elw, eln, els, uabe, uabw, vabn, vabs,
          tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs,
          elf, uaf, vaf, uf, vf, w) -> BcondOut:
    """pom2k bcond(idx): open and closed lateral boundary conditions.

    1  elf: zero gradient on all four edges, then masked by fsm (all i, j).
    2  uaf, vaf: radiation at i=1,2,im (j=2..jmm1) and j=1,2,jm
       (i=2..imm1), scaled by ramp, then masked by dum, dvm (all i, j).
    3  uf, vf: depth-weighted smoothing at i=1,2,im (j=2..jmm1,
       k=1..kbm1), then masked by dum, dvm (all i, j, k=1..kbm1).
    4  uf (from t), vf (from s): upstream at i=1,im (all j) then j=1,jm
       (all i, overriding the corners), k=1..kbm1; inflow relaxes to
       tb*/sb*, outflow adds vertical advection on k=2..kbm1-1; masked by
       fsm (k=1..kbm1).
    5  w: masked by fsm (k=1..kbm1).
    6  uf (from q2), vf (from q2l): upstream like 4 with inflow value
       ``small``, k=1..kb, then uf*fsm + 1e-10 (all i, j, k).
    Arrays the case does not write are returned as given (the input
    tensors: nothing in pompy writes a tensor in place, and a copy of the
    3-D uf, vf, w in each of the external mode's 60 calls a step was most
    of a compiled pass's time).
    """
    im, jm = h.shape
    kb = zz.shape[0]
    kbm1 = kb - 1
    if idx == 1:
        e = _edges(elf, X, elf[1], elf[im - 2])
        e = _edges(e, Y, e[:, 1], e[:, jm - 2])
        elf = e * fsm

    elif idx == 2:
        def wave_speed(depth):     # sqrt(grav/h), the radiation condition's
            return safe_sqrt(over(grav, depth), layer="bcond")

        ua_e = ramp * (uabe + rfe * wave_speed(h[im - 2]) * (el[im - 2] - ele))
        ua_w = ramp * (uabw - rfw * wave_speed(h[1]) * (el[1] - elw))
        va_n = ramp * (vabn + rfn * wave_speed(h[:, jm - 2]) * (el[:, jm - 2] - eln))
        va_s = ramp * (vabs - rfs * wave_speed(h[:, 1]) * (el[:, 1] - els))
        # east and west (i = 1, 2, im), j = 2..jmm1
        ua1 = torch.cat([ua_w[None], ua_w[None], uaf[2:im - 1], ua_e[None]])
        uaf1 = inside(ua1, rest=uaf, j=(2, jm - 1))
        vaf1 = inside(_edges(vaf, X, torch.zeros_like(ua_e), torch.zeros_like(ua_e)),
                      rest=vaf, j=(2, jm - 1))
        # north and south (j = 1, 2, jm), i = 2..imm1
        va2 = torch.cat([va_s[:, None], va_s[:, None], vaf1[:, 2:jm - 1], va_n[:, None]], 1)
        vaf2 = inside(va2, rest=vaf1, i=(2, im - 1))
        uaf2 = inside(_edges(uaf1, Y, torch.zeros_like(va_n), torch.zeros_like(va_n)),
                      rest=uaf1, i=(2, im - 1))
        uaf = uaf2 * dum
        vaf = vaf2 * dvm

    elif idx == 3:
        def smooth(a):  # .25*a(j-1) + .5*a(j) + .25*a(j+1), along j
            return .25 * ym(a) + .5 * a + .25 * yp(a)

        us = smooth(u)
        ga = safe_sqrt(h / hmax, layer="bcond")
        ga_e = ga[im - 1][:, None]
        ga_w = ga[0][:, None]
        uf_e = ga_e * us[im - 2] + (1. - ga_e) * us[im - 1]
        uf_w = ga_w * us[2] + (1. - ga_w) * us[1]
        zero = torch.zeros_like(uf_e)
        # written for j = 2..jmm1, k = 1..kbm1
        uf_b = torch.cat([uf_w[None], uf_w[None], uf[2:im - 1], uf_e[None]])
        vf_b = _edges(vf, X, zero, zero)
        uf_b = inside(uf_b, rest=uf, j=(2, jm - 1))
        vf_b = inside(vf_b, rest=vf, j=(2, jm - 1))
        uf = inside(uf_b * expand3(dum), rest=uf, k=(1, kbm1))
        vf = inside(vf_b * expand3(dvm), rest=vf, k=(1, kbm1))

    elif idx == 5:
        w = inside(w * expand3(fsm), rest=w, k=(1, kbm1))

    elif idx in (4, 6):
        # Courant numbers u1 at the east, west, north and south edges
        courant = (2. * u[im - 1] * dti / (dx[im - 1] + dx[im - 2])[:, None],
                   2. * u[1] * dti / (dx[0] + dx[1])[:, None],
                   2. * v[:, jm - 1] * dti / (dy[:, jm - 1] + dy[:, jm - 2])[:, None],
                   2. * v[:, 1] * dti / (dy[:, 0] + dy[:, 1])[:, None])
        if idx == 4:
            # outflow subtracts vertical advection on k = 2..kbm1-1 only,
            # wm*(f(k-1) - f(k+1)) from the point one inside the edge
            vert = torch.zeros(kb, dtype=torch.bool, device=zz.device)
            vert[1:kbm1 - 1] = True
            dzz2 = zm(zz) - zp(zz)  # zz(k-1) - zz(k+1)
            wm = [.5 * (w2 + zp(w2)) * dti / (dzz2 * dt2[:, None])
                  for w2, dt2 in ((w[im - 2], dt[im - 2]), (w[1], dt[1]),
                                  (w[:, jm - 2], dt[:, jm - 2]), (w[:, 1], dt[:, 1]))]

            def vadv(f):
                inner = (f[im - 2], f[1], f[:, jm - 2], f[:, 1])
                return [torch.where(vert, m * (zm(g) - zp(g)), 0.)
                        for m, g in zip(wm, inner)]

            # inflow relaxes to tb*/sb*; masked by fsm on k = 1..kbm1
            uf, vf = [inside(_upstream(f, old, courant, fb, vadv(f)) * expand3(fsm),
                             rest=old, k=(1, kbm1))
                      for f, old, fb in ((t, uf, (tbe, tbw, tbn, tbs)),
                                         (s, vf, (sbe, sbw, sbn, sbs)))]
        else:
            # inflow relaxes to small, all k; then f*fsm + 1e-10
            uf, vf = [_upstream(f, old, courant, (small,) * 4) * expand3(fsm) + 1.e-10
                      for f, old in ((q2, uf), (q2l, vf))]

    return BcondOut(elf, uaf, vaf, uf, vf, w)
