"""pom2k's main program as callable pieces, as the oracle's stepping.f90:

    initialize         the set-up before the time loop
    surface_forcing    the surface conditions of each internal step
    vertical_averages  depth integrals of the 3-D terms for the 2-D mode
    external_step      one external (2-D) pass iext, with filter and shift
    internal_step      the internal (3-D) step with filters and shifts

Tensors are indexed (i, j, k) like the Fortran. surface_forcing and
vertical_averages take the oracle's arguments by name, as the routines of
the physics modules do. initialize, external_step and internal_step are
sections of pom2k's main program that touch most of the state, so they
take the state ``s`` (pom2k names -> tensors) and the parameters ``p``
(pom2k names -> numbers) and return the new state dict (external_step
adds its velocity check: vamax, imax, jmax); the input tensors are never
written. Inside them, the routine calls
are written as pom2k writes them (``"advq(q2b,q2,uf,a,c)"``) and bound to
the state by :func:`call`.
"""
from __future__ import annotations

import inspect
import math
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from pompy import compat
from pompy.calls import argument, bind, outputs
from pompy.core import advection, boundary, density, grid, problems, tracers, turbulence, vertical
from pompy.core.file2ic import file2ic
from pompy.core.viscosity import smagorinsky
from pompy.ops import X, Y, expand3, inside, over, shift, sqrt_rn
from pompy.utils.safety import safe_divide


def depth_sum(a: Tensor, dz: Tensor, kend: int) -> Tensor:
    """sum over k = 1..kend of a(:,:,k)*dz(k), accumulated in pom2k's order
    (from 0, k ascending) so that the rounding is the Fortran's."""
    acc = torch.zeros_like(a[:, :, 0])
    for k in range(kend):
        acc = acc + a[:, :, k] * dz[k]
    return acc


SurfaceForcingOut = outputs("SurfaceForcingOut", "wusurf wvsurf e_atmos vfluxf w wtsurf swrad wssurf")


def surface_forcing(iproblem, ramp, tbias, sbias, dvm, t, s, tclim, sclim, wusurf, wvsurf,
                    e_atmos, vfluxf, w, wtsurf, swrad, wssurf) -> SurfaceForcingOut:
    """pom2k's surface conditions of each internal step, at i=2..imm1,
    j=2..jmm1. Seamount (and file problems): an eastward-tapered wind
    stress ramp*1e-4*cos(pi*(j-1)/jmm1), no heat or freshwater flux. Box:
    no wind; its fixed e_atmos and vfluxf, the inflow at the basin's T, S.
    w(1) is the surface flow vfluxf."""
    im, jm = dvm.shape
    jmm1 = jm - 1
    rows = dict(i=(2, im - 1), j=(2, jmm1))
    pi = math.atan(1.0) * 4.0
    t1, s1 = t[:, :, 0], s[:, :, 0]
    if iproblem != 2:
        jj = torch.arange(jm, dtype=dvm.dtype, device=dvm.device)      # j-1
        taper = (ramp * (1.e-4 * torch.cos(pi * jj / jmm1))).unsqueeze(0)
        corners = (shift(dvm, Y, 1) + shift(shift(dvm, X, -1), Y, 1) + shift(dvm, X, -1) + dvm)
        wusurf = inside(taper * .25 * corners, wusurf, **rows)
        wvsurf, e_atmos, vfluxf = (inside(torch.zeros_like(a), a, **rows)
                                   for a in (wvsurf, e_atmos, vfluxf))
        tatm, satm = t1 + tbias, torch.zeros_like(s1)        # an approximation, as pom2k
    else:
        tatm, satm = tclim[:, :, 0] + tbias, sclim[:, :, 0] + sbias
    w1 = inside(vfluxf, w[:, :, 0], **rows)
    w = torch.cat([w1.unsqueeze(-1), w[:, :, 1:]], 2)
    swrad = inside(torch.zeros_like(swrad), swrad, **rows)
    wtsurf = inside(0. + vfluxf * (tatm - t1 - tbias), wtsurf, **rows)
    wssurf = inside(vfluxf * (satm - s1 - sbias), wssurf, **rows)
    return SurfaceForcingOut(wusurf, wvsurf, e_atmos, vfluxf, w, wtsurf, swrad, wssurf)


VerticalAveragesOut = outputs("VerticalAveragesOut", "adx2d ady2d drx2d dry2d aam2d advua advva "
                                                     "fluxua fluxva wubot wvbot tps")


def vertical_averages(mode, dz, advx, advy, drhox, drhoy, aam, d, ua, va, uab, vab, cbc, dx,
                      dy, aru, arv, adx2d, ady2d, drx2d, dry2d, aam2d, advua, advva, fluxua,
                      fluxva, wubot, wvbot, tps) -> VerticalAveragesOut:
    """pom2k: vertical integrals of the 3-D advection, baroclinic and
    viscosity terms for the external mode, minus the 2-D advection (advave),
    so that adx2d, ady2d carry the 3-D correction."""
    kbm1 = advx.size(2) - 1
    adx2d, ady2d, drx2d, dry2d, aam2d = (depth_sum(a, dz, kbm1)
                                         for a in (advx, advy, drhox, drhoy, aam))
    ave = advection.advave(mode, d, ua, va, uab, vab, aam2d, cbc, dx, dy, aru, arv,
                           advua, advva, fluxua, fluxva, wubot, wvbot, tps)
    return VerticalAveragesOut(adx2d - ave.advua, ady2d - ave.advva, drx2d, dry2d, aam2d,
                               ave.advua, ave.advva, ave.fluxua, ave.fluxva, ave.wubot,
                               ave.wvbot, ave.curv2d)


# ---------------------------------------------------------------- binding

ROUTINES = {fn.__name__: fn for fn in (
    advection.advct, advection.advave, advection.advu, advection.advv, advection.advq,
    advection.vertvl, tracers.advt1, tracers.advt2, turbulence.profq, vertical.proft,
    vertical.profu, vertical.profv, boundary.bcond, density.dens, density.baropg,
    smagorinsky, surface_forcing, vertical_averages, grid.depth, grid.areas_masks, grid.slpmax,
    problems.seamount, problems.box, problems.grid_coordinates, file2ic)}


@lru_cache(maxsize=None)
def _bound(call_text: str):
    name, binding = bind(call_text)
    args = tuple((a, binding.get(a, a)) for a in inspect.signature(ROUTINES[name]).parameters)
    return name, args, binding


def call(call_text: str, s: dict, p: dict, routines: dict = ROUTINES) -> dict:
    """Run one torch routine as pom2k's main program calls it, e.g.
    ``call("advq(q2b,q2,uf,a,c)", s, p)``: each argument is bound to its
    actual (a literal, a state array, else a parameter); the result maps
    the actual names to what the routine wrote. ``routines`` maps names to
    the functions to run (e.g. torch.compile'd ones)."""
    name, args, binding = _bound(call_text)
    out = routines[name](**{arg: argument(call_text, arg, source, s, p) for arg, source in args})
    return {binding.get(f, f): v for f, v in zip(out._fields, out)}


def run(s: dict, p: dict, *calls: str, routines: dict = ROUTINES) -> None:
    """Apply pom2k calls in order to the local state dict ``s`` (rebinding, never
    writing a tensor in place)."""
    for text in calls:
        s.update(call(text, s, p, routines))


# ---------------------------------------------------------------- set-up

# what pom2k's set-up zeroes before the problem set-up ("for safety")
_ZEROED = ("uab vab elb etb e_atmos vfluxb vfluxf wusurf wvsurf wtsurf wssurf swrad "
           "drx2d dry2d").split()
_BOUNDARY = ("vabn vabs eln els tbn tbs sbn sbs uabe uabw ele elw tbe tbw sbe sbw").split()


def initialize(s: dict, p: dict) -> dict:
    """pom2k's main program up to the time loop: zero the arrays, set up the
    problem (1 seamount, 2 box, 3 file2ic), initial turbulence and
    viscosity, dens, baropg, the bottom friction coefficient cbc and the
    external CFL time step tps. For iproblem 3, ``s`` holds the IC file's
    arrays (pompy.icfile), its lateral boundary values included."""
    s = dict(s)
    kb = s["z"].size(0)
    kbm1 = kb - 1
    iproblem = p["iproblem"]
    for name in _ZEROED + (_BOUNDARY if iproblem != 3 else []):
        s[name] = torch.zeros_like(s[name])
    for name in ("ub", "vb"):
        s[name] = inside(torch.zeros_like(s[name]), s[name], k=(1, kbm1))
    if iproblem not in (1, 2, 3):
        raise ValueError(f"iproblem={iproblem}: 1 seamount, 2 box or 3 file2ic")
    run(s, p, ("seamount", "box", "file2ic")[iproblem - 1])
    s["ua"], s["va"], s["el"], s["et"] = (s[n].clone() for n in ("uab", "vab", "elb", "etb"))
    s["etf"] = s["et"].clone()
    s["d"] = s["h"] + s["el"]
    s["dt"] = s["h"] + s["et"]
    s["w"] = torch.cat([s["vfluxf"].unsqueeze(-1), s["w"][:, :, 1:]], 2)
    s["l"] = (0.1 * s["dt"]).unsqueeze(-1).expand_as(s["l"]).clone()
    s["q2b"] = torch.full_like(s["q2b"], p["small"])
    s["q2lb"] = s["l"] * s["q2b"]
    s["kh"] = s["l"] * sqrt_rn(s["q2b"])
    s["km"], s["kq"] = s["kh"].clone(), s["kh"].clone()
    s["aam"] = torch.full_like(s["aam"], p["aam_init"])
    for new, old in (("q2", "q2b"), ("q2l", "q2lb"), ("t", "tb"), ("s", "sb"), ("u", "ub"),
                     ("v", "vb")):
        s[new] = inside(s[old], s[new], k=(1, kbm1))
    run(s, p, "dens(s,t,rho)", "baropg")
    s["drx2d"] = depth_sum(s["drhox"], s["dz"], kbm1)
    s["dry2d"] = depth_sum(s["drhoy"], s["dz"], kbm1)
    # bottom friction coefficient (if cbcmax bites, z0b or the vertical spacing is wrong)
    cbc = over(p["kappa"], compat.cbc_log(s["zz"], s["h"], p["z0b"])) ** 2
    s["cbc"] = torch.clamp(torch.clamp(cbc, min=p["cbcmin"]), max=p["cbcmax"])
    # external (2-D) CFL time step
    dx, dy = s["dx"], s["dy"]
    s["tps"] = (over(0.5, sqrt_rn(over(1.0, dx ** 2) + over(1.0, dy ** 2)))
                / sqrt_rn(p["grav"] * (s["h"] + p["small"])) * s["fsm"])
    s["d"] = s["h"] + s["el"]
    s["dt"] = s["h"] + s["et"]
    return s


def set_up(config) -> dict:
    """pom2k's state at iint 0 for ``config``: every variable of
    pompy.variables as a float64 CPU tensor, from initialize on a zero state
    (for iproblem 3 with the IC file's arrays placed before it and its
    output-only coordinates after, as pompy.icfile describes)."""
    from pompy import icfile, variables
    from pompy.config import parameters

    state = {name: torch.zeros(variables.shape(name, config.im, config.jm, config.kb),
                               dtype=torch.float64)
             for name in (*variables.VARIABLES, *variables.WORK)}
    after = {}
    if config.iproblem == 3:
        ic, after = icfile.split_ic(config)
        state.update({name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in ic.items()})
    state = initialize(state, parameters(config))
    state.update({name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in after.items()})
    return state


# ---------------------------------------------------------------- time stepping

def _vel_check(vaf: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """max |vaf| and pom2k's (imax, jmax): the last point, in Fortran order,
    where it is reached. Tensors: no host synchronisation."""
    a = vaf.detach().abs().t().reshape(-1)          # Fortran order: i fastest
    vamax = a.max()
    last = a.numel() - 1 - torch.argmax((torch.flip(a, (0,)) == vamax).to(torch.int32))
    im = vaf.size(0)
    return vamax, last % im + 1, last // im + 1


def external_step(s: dict, p: dict, routines: dict = ROUTINES) -> dict:
    """One pass ``p["iext"]`` of pom2k's external (2-D) mode: continuity
    (elf), momentum (uaf, vaf), the velocity check (vamax at imax, jmax),
    the time-split filter and time-level shift when vamax <= vmaxl, the
    sums egf, utf, vtf for the internal mode, and etf over the last three
    passes. The shift under the check is a select, not a Python branch,
    so no value leaves the device."""
    s = dict(s)
    iext, isplit, dte, grav, alpha, smoth = (p[n] for n in ("iext", "isplit", "dte", "grav",
                                                             "alpha", "smoth"))
    im, jm = s["h"].shape
    imm1, jmm1 = im - 1, jm - 1
    d, dx, dy, ua, va, art = s["d"], s["dx"], s["dy"], s["ua"], s["va"], s["art"]
    im1 = lambda a: shift(a, X, -1)  # noqa: E731  a(i-1)
    jm1 = lambda a: shift(a, Y, -1)  # noqa: E731  a(j-1)
    faces = dict(i=(2, im), j=(2, jm))
    s["fluxua"] = inside(.25 * (d + im1(d)) * (dy + im1(dy)) * ua, s["fluxua"], **faces)
    s["fluxva"] = inside(.25 * (d + jm1(d)) * (dx + jm1(dx)) * va, s["fluxva"], **faces)
    fu, fv = s["fluxua"], s["fluxva"]
    # continuity, with the surface freshwater flux w(1) = vfluxf
    elf = s["elb"] + p["dte2"] * (-(shift(fu, X, 1) - fu + shift(fv, Y, 1) - fv) / art
                                  - s["vfluxf"])
    s["elf"] = inside(elf, s["elf"], i=(2, imm1), j=(2, jmm1))
    run(s, p, "bcond(1)", routines=routines)
    if iext % p["ispadv"] == 0:
        run(s, p, "advave(tps)", routines=routines)
    el, elb, elf, e_atmos, cor, h = (s[n] for n in ("el", "elb", "elf", "e_atmos", "cor", "h"))
    uaf = (s["adx2d"] + s["advua"]
           - s["aru"] * .25 * (cor * d * (shift(va, Y, 1) + va)
                               + im1(cor) * im1(d) * (im1(shift(va, Y, 1)) + im1(va)))
           + .25 * grav * (dy + im1(dy)) * (d + im1(d))
           * ((1.0 - 2.0 * alpha) * (el - im1(el))
              + alpha * (elb - im1(elb) + elf - im1(elf))
              + e_atmos - im1(e_atmos))
           + s["drx2d"] + s["aru"] * (s["wusurf"] - s["wubot"]))
    uaf = safe_divide((h + elb + im1(h) + im1(elb)) * s["aru"] * s["uab"] - 4.0 * dte * uaf,
                      (h + elf + im1(h) + im1(elf)) * s["aru"], layer="external_step")
    s["uaf"] = inside(uaf, s["uaf"], i=(2, im), j=(2, jmm1))
    vaf = (s["ady2d"] + s["advva"]
           + s["arv"] * .25 * (cor * d * (shift(ua, X, 1) + ua)
                               + jm1(cor) * jm1(d) * (jm1(shift(ua, X, 1)) + jm1(ua)))
           + .25 * grav * (dx + jm1(dx)) * (d + jm1(d))
           * ((1.0 - 2.0 * alpha) * (el - jm1(el))
              + alpha * (elb - jm1(elb) + elf - jm1(elf))
              + e_atmos - jm1(e_atmos))
           + s["dry2d"] + s["arv"] * (s["wvsurf"] - s["wvbot"]))
    vaf = safe_divide((h + elb + jm1(h) + jm1(elb)) * s["vab"] * s["arv"] - 4.0 * dte * vaf,
                      (h + elf + jm1(h) + jm1(elf)) * s["arv"], layer="external_step")
    s["vaf"] = inside(vaf, s["vaf"], i=(2, imm1), j=(2, jm))
    run(s, p, "bcond(2)", routines=routines)
    # etf: the filtered elevation over the last three passes
    if iext == isplit - 2:
        s["etf"] = .25 * smoth * s["elf"]
    elif iext == isplit - 1:
        s["etf"] = s["etf"] + .5 * (1.0 - .5 * smoth) * s["elf"]
    elif iext == isplit:
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
    if iext != isplit:
        isp2i = 1.0 / (2.0 * float(isplit))
        dn, uan, van = new["d"], new["ua"], new["va"]
        new["egf"] = s["egf"] + new["el"] * (1.0 / float(isplit))
        new["utf"] = inside(s["utf"] + uan * (dn + im1(dn)) * isp2i, s["utf"], i=(2, im))
        new["vtf"] = inside(s["vtf"] + van * (dn + jm1(dn)) * isp2i, s["vtf"], j=(2, jm))
    for name, value in new.items():
        s[name] = torch.where(ok, value, s[name])
    return s


def _asselin(f: Tensor, fb: Tensor, ff: Tensor, smoth: float) -> Tensor:
    """pom2k's Asselin filter of level n: f + .5*smoth*(ff + fb - 2f)."""
    return f + .5 * smoth * (ff + fb - 2.0 * f)


def internal_step(s: dict, p: dict, routines: dict = ROUTINES) -> dict:
    """pom2k's internal (3-D) mode: adjust u, v to the external transports,
    w, turbulence (q2, q2l), temperature and salinity (unless mode 4),
    density and momentum, each with its Asselin filter and time shift."""
    s = dict(s)
    im, jm, kb = s["u"].shape
    kbm1 = kb - 1
    dz, dt, smoth = s["dz"], s["dt"], p["smoth"]
    # adjust u(z), v(z) so that their depth averages are the external ones
    tps = expand3(depth_sum(s["u"], dz, kbm1))
    u = (s["u"] - tps) + expand3(safe_divide(s["utb"] + s["utf"], dt + shift(dt, X, -1),
                                             layer="internal_step"))
    s["u"] = inside(u, s["u"], i=(2, im), k=(1, kbm1))
    tps = expand3(depth_sum(s["v"], dz, kbm1))
    v = (s["v"] - tps) + expand3(safe_divide(s["vtb"] + s["vtf"], dt + shift(dt, Y, -1),
                                             layer="internal_step"))
    s["v"] = inside(v, s["v"], j=(2, jm), k=(1, kbm1))
    s["tps"] = tps[:, :, 0]
    run(s, p, "vertvl(a,c)", "bcond(5)", routines=routines)
    s["uf"], s["vf"] = torch.zeros_like(s["uf"]), torch.zeros_like(s["vf"])

    # turbulence: q2f in uf, q2lf in vf
    run(s, p, "advq(q2b,q2,uf,a,c)", "advq(q2lb,q2l,vf,a,c)", "profq(a,c,tps,dtef)", "bcond(6)",
        routines=routines)
    q2 = _asselin(s["q2"], s["q2b"], s["uf"], smoth)
    q2l = _asselin(s["q2l"], s["q2lb"], s["vf"], smoth)
    s["q2b"], s["q2"], s["q2lb"], s["q2l"] = q2, s["uf"].clone(), q2l, s["vf"].clone()

    # temperature (tf in uf) and salinity (sf in vf)
    if p["mode"] != 4:
        if p["nadv"] == 1:
            run(s, p, "advt1(tb,t,tclim,uf,a,c)", "advt1(sb,s,sclim,vf,a,c)",
                routines=routines)
        else:
            run(s, p, "advt2(tb,t,tclim,uf,a,c,nitera,sw)", "advt2(sb,s,sclim,vf,a,c,nitera,sw)",
                routines=routines)
        run(s, p, "proft(uf,wtsurf,tsurf,nbct,tps)", "proft(vf,wssurf,ssurf,nbcs,tps)",
            "bcond(4)", routines=routines)
        t = _asselin(s["t"], s["tb"], s["uf"], smoth)
        sal = _asselin(s["s"], s["sb"], s["vf"], smoth)
        s["tb"], s["t"], s["sb"], s["s"] = t, s["uf"].clone(), sal, s["vf"].clone()
        run(s, p, "dens(s,t,rho)", routines=routines)

    # momentum (uf, vf)
    run(s, p, "advu", "advv", "profu", "profv", "bcond(3)", routines=routines)
    # filter with the depth mean of the filter increment removed
    for f, fb, ff in (("u", "ub", "uf"), ("v", "vb", "vf")):
        incr = s[ff] + s[fb] - 2.0 * s[f]
        tps = depth_sum(incr, dz, kbm1)
        filtered = inside(s[f] + .5 * smoth * (incr - expand3(tps)), s[f], k=(1, kbm1))
        s[fb], s[f] = filtered, s[ff].clone()
        s["tps"] = tps
    return s
