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

from pompy.calls import apply
from pompy.config import Config
from pompy.core.external.checks import VELOCITY, vel_check, velocity_failure, velocity_within
from pompy.core.stepping import ROUTINES
from pompy.ops import put, span
from pompy.utils.safety import safe_divide


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
    # Each section reads pom2k's loop ranges as views (pompy.ops.span): I, J
    # the range, Im (Ip) the range read at i-1 (i+1), Jm, Jp likewise; a view
    # read more than once is named in capitals (D = d(i,j), Dm = d(i-1,j)).
    # the fluxes on the faces i = 2..im, j = 2..jm
    I, Im, J, Jm = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1)
    D = d[I, J]
    s["fluxua"] = put(s["fluxua"], .25 * (D + d[Im, J]) * (dy[I, J] + dy[Im, J]) * ua[I, J],
                      i=(2, im), j=(2, jm))
    s["fluxva"] = put(s["fluxva"], .25 * (D + d[I, Jm]) * (dx[I, J] + dx[I, Jm]) * va[I, J],
                      i=(2, im), j=(2, jm))
    fu, fv = s["fluxua"], s["fluxva"]
    # continuity, with the surface freshwater flux w(1) = vfluxf; i = 2..imm1, j = 2..jmm1
    I, Ip, J, Jp = span(2, imm1), span(2, imm1, 1), span(2, jmm1), span(2, jmm1, 1)
    elf = s["elb"][I, J] + p["dte2"] * (-(fu[Ip, J] - fu[I, J] + fv[I, Jp] - fv[I, J]) / art[I, J]
                                        - s["vfluxf"][I, J])
    s["elf"] = put(s["elf"], elf, i=(2, imm1), j=(2, jmm1))
    apply(s, p, "bcond(1)", routines=routines)
    if kind.advave:
        apply(s, p, "advave(tps)", routines=routines)
    el, elb, elf, e_atmos, cor, h = (s[n] for n in ("el", "elb", "elf", "e_atmos", "cor", "h"))
    # uaf on i = 2..im, j = 2..jmm1
    I, Im, J, Jp = span(2, im), span(2, im, -1), span(2, jmm1), span(2, jmm1, 1)
    aru, D, Dm, H, Hm = s["aru"][I, J], d[I, J], d[Im, J], h[I, J], h[Im, J]
    ELB, ELBm, ELF, ELFm = elb[I, J], elb[Im, J], elf[I, J], elf[Im, J]
    uaf = (s["adx2d"][I, J] + s["advua"][I, J]
           - aru * .25 * (cor[I, J] * D * (va[I, Jp] + va[I, J])
                          + cor[Im, J] * Dm * (va[Im, Jp] + va[Im, J]))
           + .25 * grav * (dy[I, J] + dy[Im, J]) * (D + Dm)
           * ((1.0 - 2.0 * alpha) * (el[I, J] - el[Im, J])
              + alpha * (ELB - ELBm + ELF - ELFm)
              + e_atmos[I, J] - e_atmos[Im, J])
           + s["drx2d"][I, J] + aru * (s["wusurf"][I, J] - s["wubot"][I, J]))
    uaf = safe_divide((H + ELB + Hm + ELBm) * aru * s["uab"][I, J] - 4.0 * dte * uaf,
                      (H + ELF + Hm + ELFm) * aru, layer="external_step")
    s["uaf"] = put(s["uaf"], uaf, i=(2, im), j=(2, jmm1))
    # vaf on i = 2..imm1, j = 2..jm
    I, Ip, J, Jm = span(2, imm1), span(2, imm1, 1), span(2, jm), span(2, jm, -1)
    arv, D, Dm, H, Hm = s["arv"][I, J], d[I, J], d[I, Jm], h[I, J], h[I, Jm]
    ELB, ELBm, ELF, ELFm = elb[I, J], elb[I, Jm], elf[I, J], elf[I, Jm]
    vaf = (s["ady2d"][I, J] + s["advva"][I, J]
           + arv * .25 * (cor[I, J] * D * (ua[Ip, J] + ua[I, J])
                          + cor[I, Jm] * Dm * (ua[Ip, Jm] + ua[I, Jm]))
           + .25 * grav * (dx[I, J] + dx[I, Jm]) * (D + Dm)
           * ((1.0 - 2.0 * alpha) * (el[I, J] - el[I, Jm])
              + alpha * (ELB - ELBm + ELF - ELFm)
              + e_atmos[I, J] - e_atmos[I, Jm])
           + s["dry2d"][I, J] + arv * (s["wvsurf"][I, J] - s["wvbot"][I, J]))
    vaf = safe_divide((H + ELB + Hm + ELBm) * s["vab"][I, J] * arv - 4.0 * dte * vaf,
                      (H + ELF + Hm + ELFm) * arv, layer="external_step")
    s["vaf"] = put(s["vaf"], vaf, i=(2, imm1), j=(2, jm))
    apply(s, p, "bcond(2)", routines=routines)
    # etf: the filtered elevation over the last three passes
    if kind.etf == 1:
        s["etf"] = .25 * smoth * s["elf"]
    elif kind.etf == 2:
        s["etf"] = s["etf"] + .5 * (1.0 - .5 * smoth) * s["elf"]
    elif kind.etf == 3:
        s["etf"] = (s["etf"] + .5 * s["elf"]) * s["fsm"]
    # velocity check (generally the CFL criterion)
    s["vamax"], s["imax"], s["jmax"] = vel_check(s["vaf"])
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
        I, Im, J, Jm = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1)
        new["utf"] = put(s["utf"], s["utf"][I] + uan[I] * (dn[I] + dn[Im]) * isp2i, i=(2, im))
        new["vtf"] = put(s["vtf"], s["vtf"][:, J] + van[:, J] * (dn[:, J] + dn[:, Jm]) * isp2i,
                         j=(2, jm))
    for name, value in new.items():
        s[name] = torch.where(ok, value, s[name])
    return s


class SplitExplicit:
    """pom2k's split-explicit free surface: ``isplit`` passes of
    :func:`external_step` per internal step, the internal mode's elevation
    etf filtered over the last three, its transports utf, vtf and mean
    elevation egf summed over the passes."""

    checked_field = "vaf"
    checks = VELOCITY                   # its stop checks (pompy.core.external.checks)
    read = ("vamax",)                   # read each checked step
    step = staticmethod(external_step)
    # the same outputs whether autograd records a pass or not (Core._unrecorded)
    same_unrecorded = True

    def begin(self, s: dict, p: dict) -> dict:
        """The sums before the first pass: egf, utf, vtf from time level n."""
        s = dict(s)
        isplit = p["isplit"]
        im, jm = s["h"].shape
        d, ua, va = s["d"], s["ua"], s["va"]
        isp2i = 1.0 / (2.0 * float(isplit))
        s["egf"] = s["el"] * (1.0 / float(isplit))
        I, Im, J, Jm = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1)
        s["utf"] = put(s["utf"], ua[I] * (d[I] + d[Im]) * isp2i, i=(2, im))
        s["vtf"] = put(s["vtf"], va[:, J] * (d[:, J] + d[:, Jm]) * isp2i, j=(2, jm))
        return s

    def passes(self, p: dict) -> list[PassKind]:
        """The kind of each pass iext = 1..isplit."""
        return [pass_kind(iext, p["isplit"], p["ispadv"]) for iext in range(1, p["isplit"] + 1)]

    def external_mode(self, s: dict, p: dict, routines: Mapping[str, Callable]) -> dict:
        s = self.begin(s, p)
        for kind in self.passes(p):
            s = self.step(s, p, routines, kind)
        return s

    def within(self, config: Config, values: Mapping):
        return velocity_within(config, values)

    def batch_refusal(self) -> str | None:
        """Why members cannot run batched (pompy.core.ensemble), or None."""
        return None

    def batched(self) -> SplitExplicit:
        """The part as a batch runs it: itself (it reads nothing on the host)."""
        return self

    def failure(self, iint: int, config: Config, values: Mapping):
        return velocity_failure(iint, config, values, self.checked_field)
