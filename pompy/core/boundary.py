"""pom2k lateral boundary conditions: bcond(idx), cases 1 to 6.

Tensors are indexed (i, j, k) like the Fortran: ``a[i-1, j-1, k-1]`` is
``a(i,j,k)``. Boundary values are computed on pom2k's index ranges only
(views, :func:`pompy.ops.span`) and written into new tensors with
``torch.cat``, ``torch.where`` (:func:`pompy.ops.inside`) or
:func:`pompy.ops.put` (:func:`pompy.ops.puts`: several edges, one copy);
the upstream switches become ``torch.where``; no input is written. Cases
1 and 2 (the external passes) take host arrays too (pompy.ops.host).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pompy.calls import outputs
from pompy.ops import X, Y, cat, expand3, inside, over, put, puts, span
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
    imm1, jmm1 = im - 1, jm - 1
    if idx == 1:
        # i = 1, im from i = 2, imm1; then j = 1, jm from j = 2, jmm1
        e = cat([elf[span(2, 2)], elf[span(2, imm1)], elf[span(imm1, imm1)]])
        e = cat([e[:, span(2, 2)], e[:, span(2, jmm1)], e[:, span(jmm1, jmm1)]], 1)
        elf = e * fsm

    elif idx == 2:
        # the radiation condition's wave speeds sqrt(grav/h) one point inside
        # the east, west, north and south edges, in one pass
        c = safe_sqrt(over(grav, cat([h[im - 2], h[1], h[:, jm - 2], h[:, 1]])), layer="bcond")
        c_e, c_w, c_n, c_s = c[:jm], c[jm:2 * jm], c[2 * jm:2 * jm + im], c[2 * jm + im:]
        ua_e = ramp * (uabe + rfe * c_e * (el[im - 2] - ele))
        ua_w = ramp * (uabw - rfw * c_w * (el[1] - elw))
        va_n = ramp * (vabn + rfn * c_n * (el[:, jm - 2] - eln))
        va_s = ramp * (vabs - rfs * c_s * (el[:, 1] - els))
        J, I = span(2, jmm1), span(2, imm1)
        # east and west (i = 1, 2, im), j = 2..jmm1, and uaf zero at j = 1, jm
        # (i = 2..imm1); then north and south (j = 1, 2, jm), i = 2..imm1,
        # and vaf zero at i = 1, im (j = 2..jmm1): no point written twice
        uaf = puts(uaf, (ua_w[J], dict(i=(1, 2), j=(2, jmm1))),
                   (ua_e[J], dict(i=(im, im), j=(2, jmm1))),
                   (0., dict(i=(2, imm1), j=(1, 1))), (0., dict(i=(2, imm1), j=(jm, jm))))
        vaf = puts(vaf, (va_s[I, None], dict(i=(2, imm1), j=(1, 2))),
                   (va_n[I, None], dict(i=(2, imm1), j=(jm, jm))),
                   (0., dict(i=(1, 1), j=(2, jmm1))), (0., dict(i=(im, im), j=(2, jmm1))))
        uaf = uaf * dum
        vaf = vaf * dvm

    elif idx == 3:
        J, K = span(2, jmm1), span(1, kbm1)
        Jm, Jp = span(2, jmm1, -1), span(2, jmm1, 1)

        def smooth(i):  # .25*u(i,j-1) + .5*u(i,j) + .25*u(i,j+1), j = 2..jmm1, k = 1..kbm1
            return .25 * u[i - 1, Jm, K] + .5 * u[i - 1, J, K] + .25 * u[i - 1, Jp, K]

        ga_e = safe_sqrt(h[im - 1, J, None] / hmax, layer="bcond")   # i = im, as (j, 1)
        ga_w = safe_sqrt(h[0, J, None] / hmax, layer="bcond")        # i = 1
        uf_e = ga_e * smooth(imm1) + (1. - ga_e) * smooth(im)
        uf_w = ga_w * smooth(3) + (1. - ga_w) * smooth(2)
        # written for j = 2..jmm1, k = 1..kbm1, then masked on k = 1..kbm1
        uf_b = put(uf, uf_w, i=(1, 2), j=(2, jmm1), k=(1, kbm1))
        uf_b = put(uf_b, uf_e, i=(im, im), j=(2, jmm1), k=(1, kbm1))
        vf_b = put(vf, 0., i=(1, 1), j=(2, jmm1), k=(1, kbm1))
        vf_b = put(vf_b, 0., i=(im, im), j=(2, jmm1), k=(1, kbm1))
        uf = put(uf, uf_b[:, :, K] * dum[:, :, None], k=(1, kbm1))
        vf = put(vf, vf_b[:, :, K] * dvm[:, :, None], k=(1, kbm1))

    elif idx == 5:
        w = put(w, w[:, :, span(1, kbm1)] * fsm[:, :, None], k=(1, kbm1))

    elif idx in (4, 6):
        # Courant numbers u1 at the east, west, north and south edges
        courant = (2. * u[im - 1] * dti / (dx[im - 1] + dx[im - 2])[:, None],
                   2. * u[1] * dti / (dx[0] + dx[1])[:, None],
                   2. * v[:, jm - 1] * dti / (dy[:, jm - 1] + dy[:, jm - 2])[:, None],
                   2. * v[:, 1] * dti / (dy[:, 0] + dy[:, 1])[:, None])
        if idx == 4:
            # outflow subtracts vertical advection on k = 2..kbm1-1 only,
            # wm*(f(k-1) - f(k+1)) from the point one inside the edge
            K, Km, Kp = span(2, kbm1 - 1), span(2, kbm1 - 1, -1), span(2, kbm1 - 1, 1)
            dzz2 = zz[Km] - zz[Kp]  # zz(k-1) - zz(k+1)
            wm = [.5 * (w2[:, K] + w2[:, Kp]) * dti / (dzz2 * dt2[:, None])
                  for w2, dt2 in ((w[im - 2], dt[im - 2]), (w[1], dt[1]),
                                  (w[:, jm - 2], dt[:, jm - 2]), (w[:, 1], dt[:, 1]))]

            def vadv(f):  # on k = 2..kbm1-1, zero at k = 1, kbm1, kb
                inner = (f[im - 2], f[1], f[:, jm - 2], f[:, 1])
                return [F.pad(m * (g[:, Km] - g[:, Kp]), (1, 2)) for m, g in zip(wm, inner)]

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
