"""pom2k's main program as callable pieces, as the oracle's stepping.f90:

    initialize         the set-up before the time loop
    surface_forcing    the surface conditions of each internal step
    vertical_averages  depth integrals of the 3-D terms for the 2-D mode
    internal_step      the internal (3-D) step with filters and shifts

(the external mode is a free-surface scheme of its own: pompy.core.external).
Tensors are indexed (i, j, k) like the Fortran. surface_forcing and
vertical_averages take the oracle's arguments by name, as the routines of
the physics modules do. initialize and internal_step are sections of
pom2k's main program that touch most of the state, so they take the state
``s`` (pom2k names -> tensors) and the parameters ``p`` (pom2k names ->
numbers) and return the new state dict; the input tensors are never
written. Inside them, the routine calls are written as pom2k writes them
(``"advq(q2b,q2,uf,a,c)"``) and bound to the state by pompy.calls.apply.
:data:`ROUTINES` is the table of every torch routine by pom2k name.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from pompy import compat, variables
from pompy.calls import apply, outputs
from pompy.core import advection, boundary, density, grid, problems, tracers, turbulence, vertical
from pompy.core.file2ic import file2ic
from pompy.core.viscosity import smagorinsky
from pompy.ops import inside, over, put, span, sqrt_rn, xm, yp
from pompy.utils.safety import safe_divide


def depth_sum(a: Tensor, dz: Tensor, kend: int) -> Tensor:
    """sum over k = 1..kend of a(:,:,k)*dz(k), accumulated in pom2k's order
    (from 0, k ascending) so that the rounding is the Fortran's."""
    acc = torch.zeros_like(a[:, :, 0])
    for layer in (a[:, :, :kend] * dz[:kend]).unbind(2):     # a(:,:,k)*dz(k), k = 1..kend
        acc = acc + layer
    return acc


SurfaceForcingOut = outputs("SurfaceForcingOut", "wusurf wvsurf e_atmos vfluxf w wtsurf swrad wssurf")


def surface_forcing(iproblem, ramp, wind_factor, tbias, sbias, dvm, t, s, tclim, sclim, wusurf,
                    wvsurf, e_atmos, vfluxf, w, wtsurf, swrad, wssurf) -> SurfaceForcingOut:
    """pom2k's surface conditions of each internal step, at i=2..imm1,
    j=2..jmm1. Seamount (and file problems): an eastward-tapered wind
    stress ramp*1e-4*cos(pi*(j-1)/jmm1), no heat or freshwater flux. Box:
    no wind; its fixed e_atmos and vfluxf, the inflow at the basin's T, S.
    w(1) is the surface flow vfluxf. wind_factor (pompy's, not pom2k's)
    scales the stress: 1.0 leaves pom2k's to the bit (ramp*1.0 is ramp)."""
    im, jm = dvm.shape
    jmm1 = jm - 1
    rows = dict(i=(2, im - 1), j=(2, jmm1))
    pi = math.atan(1.0) * 4.0
    t1, s1 = t[:, :, 0], s[:, :, 0]
    if iproblem != 2:
        # cos(pi*(j-1)/jmm1) in float64, as pom2k, then the core's dtype: in
        # float32 Inductor's cos and ATen's differ by an ulp at a third of the j
        jj = torch.arange(jm, dtype=torch.float64, device=dvm.device)   # j-1
        taper = (ramp * wind_factor * (1.e-4 * torch.cos(pi * jj / jmm1).to(dvm.dtype))).unsqueeze(0)
        corners = (yp(dvm) + yp(xm(dvm)) + xm(dvm) + dvm)
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


# ---------------------------------------------------------------- the routine table

# Every torch routine by pom2k name: what a core calls (through
# pompy.calls.apply) unless it is given compiled or checkpointed versions.
ROUTINES = {fn.__name__: fn for fn in (
    advection.advct, advection.advave, advection.advu, advection.advv, advection.advq,
    advection.vertvl, tracers.advt1, tracers.advt2, turbulence.profq, vertical.proft,
    vertical.profu, vertical.profv, boundary.bcond, density.dens, density.baropg,
    smagorinsky, surface_forcing, vertical_averages, grid.depth, grid.areas_masks, grid.slpmax,
    problems.seamount, problems.box, problems.grid_coordinates, file2ic)}


# ---------------------------------------------------------------- set-up

# what pom2k's set-up zeroes before the problem set-up ("for safety")
_ZEROED = ("uab vab elb etb e_atmos vfluxb vfluxf wusurf wvsurf wtsurf wssurf swrad "
           "drx2d dry2d").split()


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
    for name in _ZEROED + (variables.names("boundary") if iproblem != 3 else []):
        s[name] = torch.zeros_like(s[name])
    for name in ("ub", "vb"):
        s[name] = inside(torch.zeros_like(s[name]), s[name], k=(1, kbm1))
    if iproblem not in (1, 2, 3):
        raise ValueError(f"iproblem={iproblem}: 1 seamount, 2 box or 3 file2ic")
    apply(s, p, ("seamount", "box", "file2ic")[iproblem - 1], routines=ROUTINES)
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
    apply(s, p, "dens(s,t,rho)", "baropg", routines=ROUTINES)
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



# ---------------------------------------------------------------- internal mode

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
    s["u"], s["v"], s["tps"] = _to_transports(s["u"], s["v"], s["utb"] + s["utf"],
                                              s["vtb"] + s["vtf"], dt, dz)
    apply(s, p, "vertvl(a,c)", "bcond(5)", routines=routines)
    s["uf"], s["vf"] = torch.zeros_like(s["uf"]), torch.zeros_like(s["vf"])

    # turbulence: q2f in uf, q2lf in vf
    apply(s, p, "advq(q2b,q2,uf,a,c)", "advq(q2lb,q2l,vf,a,c)", "profq(a,c,tps,dtef)", "bcond(6)",
        routines=routines)
    q2 = _asselin(s["q2"], s["q2b"], s["uf"], smoth)
    q2l = _asselin(s["q2l"], s["q2lb"], s["vf"], smoth)
    s["q2b"], s["q2"], s["q2lb"], s["q2l"] = q2, s["uf"].clone(), q2l, s["vf"].clone()

    # temperature (tf in uf) and salinity (sf in vf)
    if p["mode"] != 4:
        if p["nadv"] == 1:
            apply(s, p, "advt1(tb,t,tclim,uf,a,c)", "advt1(sb,s,sclim,vf,a,c)",
                routines=routines)
        else:
            apply(s, p, "advt2(tb,t,tclim,uf,a,c,nitera,sw)", "advt2(sb,s,sclim,vf,a,c,nitera,sw)",
                routines=routines)
        apply(s, p, "proft(uf,wtsurf,tsurf,nbct,tps)", "proft(vf,wssurf,ssurf,nbcs,tps)",
            "bcond(4)", routines=routines)
        t = _asselin(s["t"], s["tb"], s["uf"], smoth)
        sal = _asselin(s["s"], s["sb"], s["vf"], smoth)
        s["tb"], s["t"], s["sb"], s["s"] = t, s["uf"].clone(), sal, s["vf"].clone()
        apply(s, p, "dens(s,t,rho)", routines=routines)

    # momentum (uf, vf)
    apply(s, p, "advu", "advv", "profu", "profv", "bcond(3)", routines=routines)
    for f, fb, ff in (("u", "ub", "uf"), ("v", "vb", "vf")):
        filtered, s["tps"] = _asselin_momentum(s[f], s[fb], s[ff], dz, smoth)
        s[fb], s[f] = filtered, s[ff].clone()
    return s


def _to_transports(u: Tensor, v: Tensor, ut2: Tensor, vt2: Tensor, dt: Tensor, dz: Tensor
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """u(z), v(z) adjusted so that their depth averages are the external
    mode's (``ut2``: utb + utf, the transports of the step's two ends), as
    the internal step adjusts them first; and v's depth sum (tps)."""
    im, jm, kb = u.shape
    kbm1 = kb - 1
    I, Im, J, Jm, K = span(2, im), span(2, im, -1), span(2, jm), span(2, jm, -1), span(1, kbm1)
    tps = depth_sum(u, dz, kbm1)[I, :, None]
    adjusted = (u[I, :, K] - tps) + safe_divide(ut2[I], dt[I] + dt[Im],
                                                layer="internal_step")[..., None]
    u = put(u, adjusted, i=(2, im), k=(1, kbm1))
    tps = depth_sum(v, dz, kbm1)
    adjusted = (v[:, J, K] - tps[:, J, None]) + safe_divide(vt2[:, J], dt[:, J] + dt[:, Jm],
                                                            layer="internal_step")[..., None]
    return u, put(v, adjusted, j=(2, jm), k=(1, kbm1)), tps


def _asselin_momentum(f: Tensor, fb: Tensor, ff: Tensor, dz: Tensor, smoth: float
                      ) -> tuple[Tensor, Tensor]:
    """u's or v's Asselin filter of level n, the depth mean of the filter
    increment removed (pom2k's, so that the external mode's transports
    stay), and that depth mean."""
    kbm1 = f.shape[-1] - 1
    K = span(1, kbm1)
    now = f[..., K]
    incr = ff[..., K] + fb[..., K] - 2.0 * now
    tps = depth_sum(incr, dz, kbm1)
    return put(f, now + .5 * smoth * (incr - tps[..., None]), k=(1, kbm1)), tps


# the internal mode's leapfrog pairs (level, its filtered previous level)
LEAPFROG = (("q2", "q2b"), ("q2l", "q2lb"), ("t", "tb"), ("s", "sb"), ("u", "ub"), ("v", "vb"))


def leapfrog_b_levels(before2: Mapping, before: Mapping, now: Mapping, dz: Tensor, smoth: float,
                      mode: int) -> dict[str, Tensor]:
    """The previous levels a leapfrog of step d keeps at time T (ub, vb, tb,
    sb, q2b, q2lb), from a trajectory's states at T - 2d, T - d and T:
    level T - d filtered as internal_step filters it (u and v first
    adjusted to the transports utb of T - d and of T, as the step from T -
    d adjusts them), with the unfiltered state at T - 2d for its own
    filtered previous level (a difference of (smoth/2)**2 times the second
    difference). Mode 4 steps no t or s: theirs stay ``now``'s."""
    out = {}
    adjusted = dict(zip("uv", _to_transports(before["u"], before["v"],
                                             before["utb"] + now["utb"],
                                             before["vtb"] + now["vtb"], before["dt"], dz)))
    for f, fb in LEAPFROG:
        if mode == 4 and f in ("t", "s"):
            out[fb] = now[fb]
        elif f in ("u", "v"):
            out[fb] = _asselin_momentum(adjusted[f], before2[f], now[f], dz, smoth)[0]
        else:
            out[fb] = _asselin(before[f], before2[f], now[f], smoth)
    return out


def finite(s: Mapping) -> Tensor:
    """Whether every prognostic field of ``s`` is finite, as a tensor (no
    read from the device): a field's least and largest values are finite
    exactly where all its values are (a NaN makes both NaN), one reduction
    a field where ``isfinite(x).all()`` takes five whole-array operations
    (25 against 173 us a 65x49x21 float64 field)."""
    ends = [torch.stack(torch.aminmax(s[n].detach())) for n in variables.names("prognostic")]
    return torch.isfinite(torch.cat(ends)).all()


def end_of_step(s: dict) -> dict:
    """pom2k's time-level shifts at the end of an internal step: the
    external mode's averages become the previous step's (egb, utb, vtb),
    its filtered elevation etf the internal mode's et."""
    s = dict(s)
    s["egb"], s["etb"], s["et"] = s["egf"].clone(), s["et"].clone(), s["etf"].clone()
    s["dt"] = s["h"] + s["et"]
    s["utb"], s["vtb"], s["vfluxb"] = s["utf"].clone(), s["vtf"].clone(), s["vfluxf"].clone()
    return s
