"""pom2k's mode split: the external (2-D) mode as isplit explicit passes of
dte per internal step (pom2k's main loop, "begin external (2-D) mode").

    external_step    one external pass iext, as the oracle's external_step
    SplitExplicit    the free-surface part of ExplicitCore: the sums for
                     the internal mode (egf, utf, vtf) and the iext loop
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from torch import Tensor

from pompy.calls import apply
from pompy.core.stepping import ROUTINES
from pompy.ops import inside, xm, xp, ym, yp
from pompy.utils.safety import safe_divide


def _vel_check(vaf: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """max |vaf| and pom2k's (imax, jmax): the last point, in Fortran order,
    where it is reached. Tensors: no host synchronisation."""
    a = vaf.detach().abs().t().reshape(-1)          # Fortran order: i fastest
    vamax = a.max()
    last = a.numel() - 1 - torch.argmax((torch.flip(a, (0,)) == vamax).to(torch.int32))
    im = vaf.size(0)
    return vamax, last % im + 1, last // im + 1


class PassKind(NamedTuple):
    """What pom2k's external pass iext does besides the common work: all a
    pass decides in Python, so a compiled pass has one graph per kind
    (pompy.core.compiled), not one per iext."""
    advave: bool       # iext % ispadv == 0: the external advection terms anew
    etf: int           # 1, 2, 3 for the last three passes (etf's sum), else 0
    last: bool         # iext == isplit: no sums for the internal mode


def pass_kind(iext: int, isplit: int, ispadv: int) -> PassKind:
    return PassKind(advave=iext % ispadv == 0, etf=max(iext - isplit + 3, 0),
                    last=iext == isplit)


def external_step(s: dict, p: dict, routines: Mapping[str, Callable] = ROUTINES,
                  kind: PassKind | None = None) -> dict:
    """One pass ``p["iext"]`` of pom2k's external (2-D) mode (or one of
    ``kind``, p's iext then unread): continuity (elf), momentum (uaf, vaf),
    the velocity check (vamax at imax, jmax), the time-split filter and
    time-level shift when vamax <= vmaxl, the sums egf, utf, vtf for the
    internal mode, and etf over the last three passes. The shift under the
    check is a select, not a Python branch, so no value leaves the device."""
    s = dict(s)
    isplit, dte, grav, alpha, smoth = (p[n] for n in ("isplit", "dte", "grav", "alpha", "smoth"))
    if kind is None:
        kind = pass_kind(p["iext"], isplit, p["ispadv"])
    im, jm = s["h"].shape
    imm1, jmm1 = im - 1, jm - 1
    d, dx, dy, ua, va, art = s["d"], s["dx"], s["dy"], s["ua"], s["va"], s["art"]
    faces = dict(i=(2, im), j=(2, jm))
    s["fluxua"] = inside(.25 * (d + xm(d)) * (dy + xm(dy)) * ua, s["fluxua"], **faces)
    s["fluxva"] = inside(.25 * (d + ym(d)) * (dx + ym(dx)) * va, s["fluxva"], **faces)
    fu, fv = s["fluxua"], s["fluxva"]
    # continuity, with the surface freshwater flux w(1) = vfluxf
    elf = s["elb"] + p["dte2"] * (-(xp(fu) - fu + yp(fv) - fv) / art
                                  - s["vfluxf"])
    s["elf"] = inside(elf, s["elf"], i=(2, imm1), j=(2, jmm1))
    apply(s, p, "bcond(1)", routines=routines)
    if kind.advave:
        apply(s, p, "advave(tps)", routines=routines)
    el, elb, elf, e_atmos, cor, h = (s[n] for n in ("el", "elb", "elf", "e_atmos", "cor", "h"))
    uaf = (s["adx2d"] + s["advua"]
           - s["aru"] * .25 * (cor * d * (yp(va) + va)
                               + xm(cor) * xm(d) * (xm(yp(va)) + xm(va)))
           + .25 * grav * (dy + xm(dy)) * (d + xm(d))
           * ((1.0 - 2.0 * alpha) * (el - xm(el))
              + alpha * (elb - xm(elb) + elf - xm(elf))
              + e_atmos - xm(e_atmos))
           + s["drx2d"] + s["aru"] * (s["wusurf"] - s["wubot"]))
    uaf = safe_divide((h + elb + xm(h) + xm(elb)) * s["aru"] * s["uab"] - 4.0 * dte * uaf,
                      (h + elf + xm(h) + xm(elf)) * s["aru"], layer="external_step")
    s["uaf"] = inside(uaf, s["uaf"], i=(2, im), j=(2, jmm1))
    vaf = (s["ady2d"] + s["advva"]
           + s["arv"] * .25 * (cor * d * (xp(ua) + ua)
                               + ym(cor) * ym(d) * (ym(xp(ua)) + ym(ua)))
           + .25 * grav * (dx + ym(dx)) * (d + ym(d))
           * ((1.0 - 2.0 * alpha) * (el - ym(el))
              + alpha * (elb - ym(elb) + elf - ym(elf))
              + e_atmos - ym(e_atmos))
           + s["dry2d"] + s["arv"] * (s["wvsurf"] - s["wvbot"]))
    vaf = safe_divide((h + elb + ym(h) + ym(elb)) * s["vab"] * s["arv"] - 4.0 * dte * vaf,
                      (h + elf + ym(h) + ym(elf)) * s["arv"], layer="external_step")
    s["vaf"] = inside(vaf, s["vaf"], i=(2, imm1), j=(2, jm))
    apply(s, p, "bcond(2)", routines=routines)
    # etf: the filtered elevation over the last three passes
    if kind.etf == 1:
        s["etf"] = .25 * smoth * s["elf"]
    elif kind.etf == 2:
        s["etf"] = s["etf"] + .5 * (1.0 - .5 * smoth) * s["elf"]
    elif kind.etf == 3:
        s["etf"] = (s["etf"] + .5 * s["elf"]) * s["fsm"]
    # velocity check (generally the CFL criterion)
    s["vamax"], s["imax"], s["jmax"] = _vel_check(s["vaf"])
    ok = s["vamax"] <= p["vmaxl"]
    # filter to remove the time split, then shift the time levels
    new = {}
    new["ua"] = ua + .5 * smoth * (s["uab"] - 2.0 * ua + s["uaf"])
    new["va"] = va + .5 * smoth * (s["vab"] - 2.0 * va + s["vaf"])
    el_filtered = el + .5 * smoth * (elb - 2.0 * el + elf)
    new["elb"], new["el"] = el_filtered, elf
    new["d"] = h + elf
    new["uab"], new["vab"] = new.pop("ua"), new.pop("va")
    new["ua"], new["va"] = s["uaf"], s["vaf"]
    if not kind.last:
        isp2i = 1.0 / (2.0 * float(isplit))
        dn, uan, van = new["d"], new["ua"], new["va"]
        new["egf"] = s["egf"] + new["el"] * (1.0 / float(isplit))
        new["utf"] = inside(s["utf"] + uan * (dn + xm(dn)) * isp2i, s["utf"], i=(2, im))
        new["vtf"] = inside(s["vtf"] + van * (dn + ym(dn)) * isp2i, s["vtf"], j=(2, jm))
    for name, value in new.items():
        s[name] = torch.where(ok, value, s[name])
    return s


class SplitExplicit:
    """pom2k's split-explicit free surface: ``isplit`` passes of
    :func:`external_step` per internal step, the internal mode's elevation
    etf filtered over the last three, its transports utf, vtf and mean
    elevation egf summed over the passes."""

    core_name = "explicit"
    checked_field = "vaf"
    step = staticmethod(external_step)

    def begin(self, s: dict, p: dict) -> dict:
        """The sums before the first pass: egf, utf, vtf from time level n."""
        s = dict(s)
        isplit = p["isplit"]
        im, jm = s["h"].shape
        d, ua, va = s["d"], s["ua"], s["va"]
        isp2i = 1.0 / (2.0 * float(isplit))
        s["egf"] = s["el"] * (1.0 / float(isplit))
        s["utf"] = inside(ua * (d + xm(d)) * isp2i, s["utf"], i=(2, im))
        s["vtf"] = inside(va * (d + ym(d)) * isp2i, s["vtf"], j=(2, jm))
        return s

    def passes(self, p: dict) -> list[PassKind]:
        """The kind of each pass iext = 1..isplit."""
        return [pass_kind(iext, p["isplit"], p["ispadv"]) for iext in range(1, p["isplit"] + 1)]

    def external_mode(self, s: dict, p: dict, routines: Mapping[str, Callable]) -> dict:
        s = self.begin(s, p)
        for kind in self.passes(p):
            s = self.step(s, p, routines, kind)
        return s
