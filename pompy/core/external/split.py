"""pom2k's mode split: the external (2-D) mode as isplit explicit passes of
dte per internal step (pom2k's main loop, "begin external (2-D) mode").

    external_step    one external pass iext, as the oracle's external_step
    SplitExplicit    the free-surface part of ExplicitCore: the sums for
                     the internal mode (egf, utf, vtf) and the iext loop
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from pompy.calls import apply
from pompy.config import Config
from pompy.core.external.checks import VELOCITY, vel_check, velocity_failure, velocity_within
from pompy.core.stepping import ROUTINES
from pompy.ops import host, on_host, put, span
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


class Transport(NamedTuple):
    """One transport equation's terms that no pass changes, on its range
    (uaf: i = 2..im, j = 2..jmm1; vaf: i = 2..imm1, j = 2..jm), read at the
    point and behind it (``_m``: i-1 for uaf, j-1 for vaf)."""
    ar: Tensor          # aru (arv)
    ar_cor: Tensor      # aru*.25: the Coriolis term's factor
    cor: Tensor
    cor_m: Tensor
    grav_ds: Tensor     # .25*grav*(dy(i,j)+dy(i-1,j)) (dx for vaf): the slope term's factor
    h: Tensor
    h_m: Tensor
    e_atmos: Tensor
    e_atmos_m: Tensor
    ad2d: Tensor        # adx2d (ady2d)
    dr2d: Tensor        # drx2d (dry2d)
    surf: Tensor        # wusurf (wvsurf); not wubot, which advave writes in mode 2


class PassConstants(NamedTuple):
    """What every external pass of one internal step reads unchanged (the
    grid, the surface forcing, the 3-D terms of the 2-D mode), each a view of
    pom2k's range or a subexpression pom2k evaluates before anything a pass
    changes: a pass given them computes each point by the same operations
    in the same order (the same bits)."""
    dy_u: Tensor        # dy(i,j)+dy(i-1,j), i = 2..im, j = 2..jm (fluxua)
    dx_v: Tensor        # dx(i,j)+dx(i,j-1) (fluxva)
    art: Tensor         # i = 2..imm1, j = 2..jmm1 (continuity)
    vfluxf: Tensor
    u: Transport
    v: Transport


def _transport(s: dict, grav: float, ds: Tensor, at: tuple, behind: tuple,
               ar: str, ad2d: str, dr2d: str, surf: str) -> Transport:
    area, cor, h, e_atmos = s[ar][at], s["cor"], s["h"], s["e_atmos"]
    return Transport(area, area * .25, cor[at], cor[behind], .25 * grav * (ds[at] + ds[behind]),
                     h[at], h[behind], e_atmos[at], e_atmos[behind], s[ad2d][at], s[dr2d][at],
                     s[surf][at])


def pass_constants(s: dict, p: dict) -> PassConstants:
    """The passes' constants (PassConstants) of the state ``s`` before them."""
    im, jm = s["h"].shape
    imm1, jmm1 = im - 1, jm - 1
    dx, dy = s["dx"], s["dy"]
    I, Im, J, Jm = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1)
    interior = span(2, imm1), span(2, jmm1)
    u = _transport(s, p["grav"], dy, (I, span(2, jmm1)), (Im, span(2, jmm1)),
                   "aru", "adx2d", "drx2d", "wusurf")
    v = _transport(s, p["grav"], dx, (span(2, imm1), J), (span(2, imm1), Jm),
                   "arv", "ady2d", "dry2d", "wvsurf")
    return PassConstants(dy[I, J] + dy[Im, J], dx[I, J] + dx[I, Jm], s["art"][interior],
                         s["vfluxf"][interior], u, v)


def external_step(s: dict, p: dict, routines: Mapping[str, Callable] = ROUTINES,
                  kind: PassKind | None = None, fixed: PassConstants | None = None) -> dict:
    """One pass ``p["iext"]`` of pom2k's external (2-D) mode (or one of
    ``kind``, p's iext then unread): continuity (elf), momentum (uaf, vaf),
    the velocity check (vamax at imax, jmax), the time-split filter and
    time-level shift when vamax <= vmaxl, the sums egf, utf, vtf for the
    internal mode, and etf over the last three passes. ``fixed``: the
    passes' constants (pass_constants of the state before the first pass),
    else computed here. The shift under the check is a select, not a Python
    branch, so no value leaves the device (outside autograd on the CPU,
    pompy.ops.on_host, a passed check is read instead: one read, not ten
    selects)."""
    s = dict(s)
    isplit, dte, alpha, smoth = (p[n] for n in ("isplit", "dte", "alpha", "smoth"))
    if kind is None:
        kind = pass_kind(p["iext"], isplit, p["ispadv"])
    if fixed is None:
        fixed = pass_constants(s, p)
    elif torch.is_grad_enabled():       # they would cut the gradients through them
        raise ValueError("external_step: the passes' constants are for a step outside "
                         "autograd; a recorded pass computes its own")
    im, jm = s["h"].shape
    imm1, jmm1 = im - 1, jm - 1
    d, ua, va = s["d"], s["ua"], s["va"]
    # Each section reads pom2k's loop ranges as views (pompy.ops.span): I, J
    # the range, Im (Ip) the range read at i-1 (i+1), Jm, Jp likewise; a view
    # read more than once is named in capitals (D = d(i,j), Dm = d(i-1,j)).
    # the fluxes on the faces i = 2..im, j = 2..jm
    I, Im, J, Jm = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1)
    D = d[I, J]
    s["fluxua"] = put(s["fluxua"], .25 * (D + d[Im, J]) * fixed.dy_u * ua[I, J],
                      i=(2, im), j=(2, jm))
    s["fluxva"] = put(s["fluxva"], .25 * (D + d[I, Jm]) * fixed.dx_v * va[I, J],
                      i=(2, im), j=(2, jm))
    fu, fv = s["fluxua"], s["fluxva"]
    # continuity, with the surface freshwater flux w(1) = vfluxf; i = 2..imm1, j = 2..jmm1
    I, Ip, J, Jp = span(2, imm1), span(2, imm1, 1), span(2, jmm1), span(2, jmm1, 1)
    elf = s["elb"][I, J] + p["dte2"] * (-(fu[Ip, J] - fu[I, J] + fv[I, Jp] - fv[I, J]) / fixed.art
                                        - fixed.vfluxf)
    s["elf"] = put(s["elf"], elf, i=(2, imm1), j=(2, jmm1))
    apply(s, p, "bcond(1)", routines=routines)
    if kind.advave:
        apply(s, p, "advave(tps)", routines=routines)
    el, elb, elf = s["el"], s["elb"], s["elf"]
    # uaf on i = 2..im, j = 2..jmm1
    I, Im, J, Jp = span(2, im), span(2, im, -1), span(2, jmm1), span(2, jmm1, 1)
    c, D, Dm = fixed.u, d[I, J], d[Im, J]
    ELB, ELBm, ELF, ELFm = elb[I, J], elb[Im, J], elf[I, J], elf[Im, J]
    uaf = (c.ad2d + s["advua"][I, J]
           - c.ar_cor * (c.cor * D * (va[I, Jp] + va[I, J])
                         + c.cor_m * Dm * (va[Im, Jp] + va[Im, J]))
           + c.grav_ds * (D + Dm)
           * ((1.0 - 2.0 * alpha) * (el[I, J] - el[Im, J])
              + alpha * (ELB - ELBm + ELF - ELFm)
              + c.e_atmos - c.e_atmos_m)
           + c.dr2d + c.ar * (c.surf - s["wubot"][I, J]))
    uaf = safe_divide((c.h + ELB + c.h_m + ELBm) * c.ar * s["uab"][I, J] - 4.0 * dte * uaf,
                      (c.h + ELF + c.h_m + ELFm) * c.ar, layer="external_step")
    s["uaf"] = put(s["uaf"], uaf, i=(2, im), j=(2, jmm1))
    # vaf on i = 2..imm1, j = 2..jm
    I, Ip, J, Jm = span(2, imm1), span(2, imm1, 1), span(2, jm), span(2, jm, -1)
    c, D, Dm = fixed.v, d[I, J], d[I, Jm]
    ELB, ELBm, ELF, ELFm = elb[I, J], elb[I, Jm], elf[I, J], elf[I, Jm]
    vaf = (c.ad2d + s["advva"][I, J]
           + c.ar_cor * (c.cor * D * (ua[Ip, J] + ua[I, J])
                         + c.cor_m * Dm * (ua[Ip, Jm] + ua[I, Jm]))
           + c.grav_ds * (D + Dm)
           * ((1.0 - 2.0 * alpha) * (el[I, J] - el[I, Jm])
              + alpha * (ELB - ELBm + ELF - ELFm)
              + c.e_atmos - c.e_atmos_m)
           + c.dr2d + c.ar * (c.surf - s["wvbot"][I, J]))
    vaf = safe_divide((c.h + ELB + c.h_m + ELBm) * s["vab"][I, J] * c.ar - 4.0 * dte * vaf,
                      (c.h + ELF + c.h_m + ELFm) * c.ar, layer="external_step")
    s["vaf"] = put(s["vaf"], vaf, i=(2, imm1), j=(2, jm))
    apply(s, p, "bcond(2)", routines=routines)
    return _shift(s, p, kind)


def _shift(s: dict, p: dict, kind: PassKind) -> dict:
    """The end of a pass: etf, the velocity check, and where vamax <= vmaxl
    the filter against the time split, the time levels shifted and the
    internal mode's sums."""
    isplit, smoth = p["isplit"], p["smoth"]
    im, jm = s["h"].shape
    el, elb, elf, ua, va, h = (s[n] for n in ("el", "elb", "elf", "ua", "va", "h"))
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
    if host(s["vaf"]) or on_host(ok):
        if ok:
            s.update(new)   # ua is uaf's tensor now: shared, as nothing writes one in place
    else:
        for name, value in new.items():
            s[name] = torch.where(ok, value, s[name])
    return s


def pass_field(v) -> bool:
    """Whether ``v`` is a field an external pass reads or writes: a 1-D or
    2-D tensor (the 3-D ones it passes through)."""
    return torch.is_tensor(v) and 0 < v.dim() < 3


def to_host(s: Mapping) -> dict:
    """``s`` with its pass fields (pass_field) as numpy views
    (pompy.ops.host); the 3-D ones stay tensors."""
    return {n: v.numpy() if pass_field(v) else v for n, v in s.items()}


def from_host(s: Mapping, given: Mapping, views: Mapping) -> dict:
    """``s`` with its host arrays as tensors again: the tensor of ``given``
    where ``s`` holds its view from ``views`` (to_host's of ``given``: a
    field the passes left as it was, the grid's), else a new tensor on the
    array's memory."""
    kept = {id(v): given[n] for n, v in views.items() if host(v)}    # views keeps the ids live
    return {n: (kept[id(v)] if id(v) in kept else torch.from_numpy(v)) if host(v) else v
            for n, v in s.items()}


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
    # outside autograd on the CPU, the passes on numpy views of the 1-D and
    # 2-D fields (to_host): the same bits, in 0.6 of the time
    host_passes = True

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
        if not self.passes_on_host(s, p):
            return self._passes(s, p, routines)
        # numpy's scalars as Python's, as torch reads them (a numpy float64
        # would promote a float32 array)
        p = {k: v.item() if isinstance(v, np.generic) else v for k, v in p.items()}
        views = to_host(s)
        with np.errstate(all="ignore"):     # an overflow or a NaN, silent as torch's
            new = self._passes(views, p, routines)
        return from_host(new, s, views)

    def _passes(self, s: dict, p: dict, routines: Mapping[str, Callable]) -> dict:
        s = self.begin(s, p)
        # outside autograd the passes share their constants; under it each
        # pass records its own, as the graph whose gradients were verified
        fixed = None if torch.is_grad_enabled() else pass_constants(s, p)
        for kind in self.passes(p):
            s = self.step(s, p, routines, kind, fixed)
        return s

    def passes_on_host(self, s: Mapping, p: Mapping) -> bool:
        """Whether the passes run on host arrays: with ``host_passes``, for
        a state whose 1-D and 2-D fields may be read on the host
        (pompy.ops.on_host: a CPU step outside autograd), in float32 or
        float64, and parameters that hold numbers only."""
        return (self.host_passes and s["el"].dtype in (torch.float32, torch.float64)
                and not any(torch.is_tensor(v) or host(v) for v in p.values())
                and all(on_host(v) for v in s.values() if pass_field(v)))

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
