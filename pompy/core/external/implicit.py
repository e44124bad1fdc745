"""A semi-implicit free surface: one implicit external step per internal step.

pom2k's internal mode is unchanged; its external mode (isplit explicit
passes of dte) is replaced by one theta step of dt = dti for the elevation
el (eta) and the face transports F (pom2k's fluxua, fluxva:
F_u = dy_u D_u ua with dy_u = (dy(i)+dy(i-1))/2, D_u = (d(i)+d(i-1))/2).
With G_u = .25 grav (dy(i)+dy(i-1)) (d(i)+d(i-1)) (pom2k's factor of the
elevation gradient), k_u = dt dy_u / aru and R_u every other term of
pom2k's uaf equation, explicit at time n as in pom2k (advection adx2d +
advua, Coriolis, baroclinic drx2d, wind and bottom stress, atmospheric
pressure):

    F_u* = F_u^n - k_u (R_u + (1-theta) G_u (eta_i - eta_i-1)^n)
    F_u^n+1 = F_u* - theta k_u G_u (eta_i - eta_i-1)^n+1                 (1)
    eta^n+1 = eta^n - dt/art [theta div F^n+1 + (1-theta) div F^n] - dt vfluxf   (2)

(likewise v). Putting (1) into (2) gives one equation for eta^n+1 on the
interior wet cells (i = 2..imm1, j = 2..jmm1, fsm = 1):

    art eta_i + sum over faces c_f (eta_i - eta_neighbour) + b_i eta_i = rhs_i,
    c_f = theta^2 dt k_f G_f   (faces between two such cells, dum/dvm = 1)

a symmetric positive definite five-point operator (pompy.core.external.cg);
land and the boundary ring are identity rows. The open-boundary faces
(i = 2 and im, j = 2 and jm) take pom2k's radiation condition (bcond 2),
ua = ramp (uabw - rfw sqrt(grav/h(2)) (el(2) - elw)) and its kin, with the
boundary cell's elevation at n+1 weighted by theta: its term b_i >= 0 on the
diagonal keeps the operator symmetric positive definite and absorbs
outgoing waves at any dt (explicit, the radiation condition is unstable
past dt sqrt(grav h)/dx = 2). The solved elevation only sets the transports
(1); eta^n+1 is then (2) itself, so continuity holds to round-off whatever
the solver's tolerance, and the internal mode gets exactly the transports
of (2): utf = (theta F^n+1 + (1-theta) F^n) / dy_u (pom2k's utf, the
step's mean of D_u ua),
its mean elevation egf = theta eta^n+1 + (1-theta) eta^n, its new elevation
etf = eta^n+1. The velocities are ua^n+1 = F^n+1 / (dy_u D_u^n+1).

theta (namelist ``theta``, 0.5..1) weights the gravity terms: for a
surface gravity wave the step is the theta method, amplification |lambda|
per step with |lambda|^2 = (1 + (1-theta)^2 x^2)/(1 + theta^2 x^2), x =
omega dt. 0.5 is neutral and, for these terms, second order, so waves a
long step cannot resolve (omega dt >> 1) ring undamped; 1 damps
everything, first order. The other terms (R_u: advection, Coriolis,
stresses) are forward Euler, as in pom2k's external step. The default
0.55 damps a wave of omega dt = 10 by a factor 0.82 per step while
resolved waves (omega dt < 0.3) lose under 0.5 % per step.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from pompy import compat
from pompy.calls import apply
from pompy.config import Config
from pompy.core.external import cg
from pompy.core.external.checks import (VELOCITY, as_float64, vel_check, velocity_failure,
                                        velocity_within)
from pompy.errors import ConfigError, NotConverged
from pompy.ops import X, Y, inside, over, put, span
from pompy.utils.safety import safe_divide, safe_sqrt


def _explicit_forces(s: dict, p: dict) -> tuple[Tensor, Tensor]:
    """R_u, R_v: pom2k's uaf, vaf right-hand sides without the elevation's
    gravity term, at time n, on the faces between interior cells: R_u on
    i = 3..imm1, j = 2..jmm1, R_v on i = 2..imm1, j = 3..jmm1."""
    d, cor, dx, dy, ua, va = (s[n] for n in ("d", "cor", "dx", "dy", "ua", "va"))
    grav, e_atmos = p["grav"], s["e_atmos"]
    im, jm = d.shape
    I, Ip = span(2, im - 1), span(2, im - 1, 1)
    J, Jp = span(2, jm - 1), span(2, jm - 1, 1)
    Iu, Ium = span(3, im - 1), span(3, im - 1, -1)
    Jv, Jvm = span(3, jm - 1), span(3, jm - 1, -1)
    aru, d_u, dm_u = s["aru"][Iu, J], d[Iu, J], d[Ium, J]
    r_u = (s["adx2d"][Iu, J] + s["advua"][Iu, J]
           - aru * .25 * (cor[Iu, J] * d_u * (va[Iu, Jp] + va[Iu, J])
                          + cor[Ium, J] * dm_u * (va[Ium, Jp] + va[Ium, J]))
           + .25 * grav * (dy[Iu, J] + dy[Ium, J]) * (d_u + dm_u)
           * (e_atmos[Iu, J] - e_atmos[Ium, J])
           + s["drx2d"][Iu, J] + aru * (s["wusurf"][Iu, J] - s["wubot"][Iu, J]))
    arv, d_v, dm_v = s["arv"][I, Jv], d[I, Jv], d[I, Jvm]
    r_v = (s["ady2d"][I, Jv] + s["advva"][I, Jv]
           + arv * .25 * (cor[I, Jv] * d_v * (ua[Ip, Jv] + ua[I, Jv])
                          + cor[I, Jvm] * dm_v * (ua[Ip, Jvm] + ua[I, Jvm]))
           + .25 * grav * (dx[I, Jv] + dx[I, Jvm]) * (d_v + dm_v)
           * (e_atmos[I, Jv] - e_atmos[I, Jvm])
           + s["dry2d"][I, Jv] + arv * (s["wvsurf"][I, Jv] - s["wvbot"][I, Jv]))
    return r_u, r_v


def _radiation(s: dict, p: dict) -> dict[str, tuple[Tensor, Tensor]]:
    """bcond 2's open-boundary transports as a + b eta (eta of the cell
    inside): {edge: (a, b)} on the edge's row of faces, j = 2..jmm1 east and
    west, i = 2..imm1 north and south, masked by dum, dvm."""
    h, d, dx, dy, grav, ramp = s["h"], s["d"], s["dx"], s["dy"], p["grav"], p["ramp"]
    im, jm = h.shape

    def face(width, depth, mask, boundary, el_out, rf, h_in, sign, span):
        """sign -1 (west, south): inflow positive; +1 (east, north)."""
        w = .25 * (width[0] + width[1]) * (depth[0] + depth[1]) * mask * ramp
        speed = rf * safe_sqrt(over(grav, h_in), layer="bcond")   # as bcond 2
        a, b = w * (boundary - sign * speed * el_out), w * sign * speed
        return inside(a, 0.0, i=span), inside(b, 0.0, i=span)

    rows, cols = (2, jm - 1), (2, im - 1)
    return {
        "w": face((dy[0], dy[1]), (d[0], d[1]), s["dum"][1], s["uabw"], s["elw"], p["rfw"],
                  h[1], -1.0, rows),
        "e": face((dy[im - 2], dy[im - 1]), (d[im - 2], d[im - 1]), s["dum"][im - 1], s["uabe"],
                  s["ele"], p["rfe"], h[im - 2], 1.0, rows),
        "s": face((dx[:, 0], dx[:, 1]), (d[:, 0], d[:, 1]), s["dvm"][:, 1], s["vabs"], s["els"],
                  p["rfs"], h[:, 1], -1.0, cols),
        "n": face((dx[:, jm - 2], dx[:, jm - 1]), (d[:, jm - 2], d[:, jm - 1]), s["dvm"][:, jm - 1],
                  s["vabn"], s["eln"], p["rfn"], h[:, jm - 2], 1.0, cols),
    }


def _edge_flux(rad: dict, eta: Tensor) -> dict[str, Tensor]:
    """The boundary transports (m3/s) for the elevation eta."""
    im, jm = eta.shape
    inner = {"w": eta[1], "e": eta[im - 2], "s": eta[:, 1], "n": eta[:, jm - 2]}
    return {edge: a + b * inner[edge] for edge, (a, b) in rad.items()}


def _faces(interior_u: Tensor, interior_v: Tensor, edges: dict[str, Tensor], im: int, jm: int
           ) -> tuple[Tensor, Tensor]:
    """Whole face fields: the interior faces' transports (given on i =
    3..imm1, j = 2..jmm1 for u and i = 2..imm1, j = 3..jmm1 for v), the
    boundary rows (i = 2, im; j = 2, jm) from ``edges``, 0 outside."""
    fu = torch.cat([torch.zeros_like(edges["w"][None]), edges["w"][None],
                    F.pad(interior_u, (1, 1)), edges["e"][None]], X)
    fv = torch.cat([torch.zeros_like(edges["s"][:, None]), edges["s"][:, None],
                    F.pad(interior_v, (0, 0, 1, 1)), edges["n"][:, None]], Y)
    return fu, fv


def _divergence(fu: Tensor, fv: Tensor) -> Tensor:
    """The faces' divergence on the interior i = 2..imm1, j = 2..jmm1."""
    im, jm = fu.shape
    I, J = span(2, im - 1), span(2, jm - 1)
    return fu[span(2, im - 1, 1), J] - fu[I, J] + fv[I, span(2, jm - 1, 1)] - fv[I, J]


def implicit_step(s: dict, p: dict, routines: Mapping[str, Callable],
                  solver: Callable = cg.solve_auto) -> dict:
    """One semi-implicit external step of dt = dti (the module docstring):
    elf, uaf, vaf, the internal mode's etf, egf, utf, vtf, the time-level
    shift, and vamax (imax, jmax) of the velocity check; ``cg_residual``
    the solver's relative residual and ``cg_iterations`` its iterations.
    ``solver`` (a, b, tol, maxiter) -> (x, residual): solve_auto takes the
    namelist's ``preconditioner`` (cg.solve_with)."""
    s = dict(s)
    if p["mode"] == 2:                 # no vertical_averages in 2-D: advave here, as pom2k's loop
        apply(s, p, "advave(tps)", routines=routines)
    theta, dt, grav = p["theta"], p["dti"], p["grav"]
    im, jm = s["h"].shape
    d, dx, dy, art, el = s["d"], s["dx"], s["dy"], s["art"], s["el"]
    # the interior cells (I, J), the u faces between two of them (Iu, J),
    # the v faces (I, Jv); m/p: read at i-1/i+1, j-1/j+1
    I, Ip = span(2, im - 1), span(2, im - 1, 1)
    J, Jp = span(2, jm - 1), span(2, jm - 1, 1)
    Iu, Ium = span(3, im - 1), span(3, im - 1, -1)
    Jv, Jvm = span(3, jm - 1), span(3, jm - 1, -1)
    wet = s["fsm"][I, J] > 0
    interior = put(False, wet, i=(2, im - 1), j=(2, jm - 1), like=el)
    r_u, r_v = _explicit_forces(s, p)
    dy_u, d_u = dy[Iu, J] + dy[Ium, J], d[Iu, J] + d[Ium, J]
    dx_v, d_v = dx[I, Jv] + dx[I, Jvm], d[I, Jv] + d[I, Jvm]
    g_u = .25 * grav * dy_u * d_u
    g_v = .25 * grav * dx_v * d_v
    k_u = safe_divide(dt * .5 * dy_u, s["aru"][Iu, J], layer="external_step")
    k_v = safe_divide(dt * .5 * dx_v, s["arv"][I, Jv], layer="external_step")
    # faces between two unknowns
    open_u = interior[Iu, J] & interior[Ium, J] & (s["dum"][Iu, J] > 0)
    open_v = interior[I, Jv] & interior[I, Jvm] & (s["dvm"][I, Jv] > 0)
    f_u = torch.where(open_u, .25 * d_u * dy_u * s["ua"][Iu, J], 0.)
    f_v = torch.where(open_v, .25 * d_v * dx_v * s["va"][I, Jv], 0.)
    rad = _radiation(s, p)
    old_u, old_v = _faces(f_u, f_v, _edge_flux(rad, el), im, jm)
    star_u = torch.where(open_u, f_u - k_u * (r_u + (1 - theta) * g_u
                                              * (el[Iu, J] - el[Ium, J])), 0.)
    star_v = torch.where(open_v, f_v - k_v * (r_v + (1 - theta) * g_v
                                              * (el[I, Jv] - el[I, Jvm])), 0.)
    c_u = put(0., torch.where(open_u, theta * theta * dt * k_u * g_u, 0.), i=(3, im - 1),
              j=(2, jm - 1), like=el)
    c_v = put(0., torch.where(open_v, theta * theta * dt * k_v * g_v, 0.), i=(2, im - 1),
              j=(3, jm - 1), like=el)
    radiating = _edge_b(rad, im, jm, torch.zeros_like(el))
    art_i = art[I, J]
    diag = (art_i + c_u[I, J] + c_u[Ip, J] + c_v[I, J] + c_v[I, Jp]
            + theta * dt * radiating[I, J])
    edge_a = _edge_flux({e: (a, torch.zeros_like(b)) for e, (a, b) in rad.items()}, el)
    a_u, a_v = _faces(star_u, star_v, edge_a, im, jm)
    rhs = (art_i * el[I, J] - dt * (1 - theta) * _divergence(old_u, old_v)
           - dt * theta * _divergence(a_u, a_v) - dt * art_i * s["vfluxf"][I, J])
    rhs = put(0., torch.where(wet, rhs, 0.), i=(2, im - 1), j=(2, jm - 1), like=el)
    a = cg.FivePoint(put(1., torch.where(wet, diag, 1.), i=(2, im - 1), j=(2, jm - 1), like=el),
                     c_u, c_v, interior)
    solved, residual, iterations = cg.solve_with(solver, a, rhs, p)
    # the transports of the solved elevation, then continuity (2) itself
    new_u = torch.where(open_u, star_u - theta * k_u * g_u * (solved[Iu, J] - solved[Ium, J]), 0.)
    new_v = torch.where(open_v, star_v - theta * k_v * g_v * (solved[I, Jv] - solved[I, Jvm]), 0.)
    flux_u, flux_v = _faces(new_u, new_v, _edge_flux(rad, solved), im, jm)
    mean_u = theta * flux_u + (1 - theta) * old_u
    mean_v = theta * flux_v + (1 - theta) * old_v
    elf = el[I, J] - dt * (_divergence(mean_u, mean_v) / art_i + s["vfluxf"][I, J])
    s["elf"] = put(0., torch.where(wet, elf, 0.), i=(2, im - 1), j=(2, jm - 1), like=el)
    apply(s, p, "bcond(1)", routines=routines)
    elf = s["elf"]
    dn = s["h"] + elf
    # i = 2..im (j = 2..jm for v): bcond 2 copies uaf(1,j) = uaf(2,j), vaf(i,1) = vaf(i,2)
    dyu, dxv = .5 * (dy[1:] + dy[:-1]), .5 * (dx[:, 1:] + dx[:, :-1])
    uaf = safe_divide(flux_u[1:], dyu * .5 * (dn[1:] + dn[:-1]), layer="external_step")
    vaf = safe_divide(flux_v[:, 1:], dxv * .5 * (dn[:, 1:] + dn[:, :-1]), layer="external_step")
    uaf = torch.cat([uaf[:1], uaf], X)
    vaf = torch.cat([vaf[:, :1], vaf], Y)
    s["uaf"], s["vaf"] = uaf * s["dum"], vaf * s["dvm"]
    s["vamax"], s["imax"], s["jmax"] = vel_check(s["vaf"])
    s["utf"] = put(s["utf"], safe_divide(mean_u[1:], dyu, layer="external_step"), i=(2, im))
    s["vtf"] = put(s["vtf"], safe_divide(mean_v[:, 1:], dxv, layer="external_step"), j=(2, jm))
    s["egf"] = theta * elf + (1 - theta) * el
    s["etf"] = elf * s["fsm"]
    s["fluxua"], s["fluxva"] = flux_u, flux_v
    s["elb"], s["el"], s["d"] = el, elf, dn
    s["uab"], s["ua"], s["vab"], s["va"] = s["ua"], s["uaf"], s["va"], s["vaf"]
    s["cg_residual"], s["cg_iterations"] = residual, iterations
    return s


def _edge_b(rad: dict, im: int, jm: int, zero: Tensor) -> Tensor:
    """The radiation's diagonal term on the cells inside the open edges: the
    outflow per unit elevation (-b west and south, where b <= 0; b east and
    north), >= 0."""
    b = torch.cat([zero[:1], -rad["w"][1][None], zero[2:]], X)
    b = b + torch.cat([zero[:im - 2], rad["e"][1][None], zero[im - 1:]], X)
    b = b + torch.cat([zero[:, :1], -rad["s"][1][:, None], zero[:, 2:]], Y)
    return b + torch.cat([zero[:, :jm - 2], rad["n"][1][:, None], zero[:, jm - 1:]], Y)


# a core's solver -> the one its ensemble's members run, each member's solve its own
BATCHED = {cg.solve_auto: cg.solve_members, cg.solve: cg.solve}


class SemiImplicit:
    """The implicit free surface: one :func:`implicit_step` per internal
    step. Its stop checks (pompy.core.external.checks): the velocity check
    and the solver's relative residual ``cg_residual`` within cg_tol (or,
    where the solve stopped at its floating-point floor short of
    cg_maxiter, ``cg_iterations``, within cg.FLOOR_FACTOR x cg_tol). Its
    ``series``: what a core keeps of each step for the output records
    besides the state (the solve's iterations), carried with the checks."""

    checked_field = "vaf"
    checks = (*VELOCITY, "cg_residual", "cg_iterations")
    read = ("vamax", "cg_residual", "cg_iterations")
    series = ("cg_iterations",)

    def __init__(self, solver: Callable = cg.solve_auto):
        self.solver = solver

    def external_mode(self, s: dict, p: dict, routines: Mapping[str, Callable]) -> dict:
        return implicit_step(s, p, routines, self.solver)

    def within(self, config: Config, values: Mapping):
        return velocity_within(config, values) & converged(config, values["cg_residual"],
                                                           values["cg_iterations"])

    def batch_refusal(self) -> str | None:
        """A batch runs the core's own solve (the PCG, cg.solve_members, or
        the reference CG): a core built with another solver (a spy, the
        Fortran's) would not be its single run."""
        if self.solver not in BATCHED:
            return ("a core's elevation solver is neither cg.solve_auto nor cg.solve, "
                    "which a batch runs")
        return None

    def batched(self) -> SemiImplicit:
        """The part with the core's solve as a batch runs it (no host read
        inside vmap)."""
        return SemiImplicit(BATCHED[self.solver])

    def failure(self, iint: int, config: Config, values: Mapping):
        stop = velocity_failure(iint, config, values, self.checked_field)
        residual, iterations = (float(values[n]) for n in ("cg_residual", "cg_iterations"))
        if stop is None and not converged(config, residual, iterations):
            stop = NotConverged(iint, residual, config.cg_tol, config.cg_maxiter,
                                iterations=int(iterations) if math.isfinite(iterations) else None,
                                floor_factor=cg.FLOOR_FACTOR, preconditioner=self._preconditioner(
                                    config))
        return stop

    def _preconditioner(self, config: Config) -> str | None:
        """The PCG's preconditioner of this step's solve; None where the
        reference CG (fortran_math, cg.solve) or another solver ran."""
        if self.solver in (cg.solve_auto, cg.solve_members) and not compat.in_force():
            return config.preconditioner
        return None


# the smallest cg_tol a core accepts, in units of its dtype's epsilon: the
# true residual |b - A x|/|b| stalls at a floor of some eps (measured in
# float64 6e-14 to 1.7e-13 with Jacobi, 1.4e-14 to 3.1e-14 with multigrid
# on seamount grids from 65x49 to 720x480 at dti 600 s; 2e-7 to 4e-5 in
# float32); above it a solve stopped at its floor passes within
# cg.FLOOR_FACTOR x cg_tol, or the step's NotConverged says to raise cg_tol
TOLERANCE_FLOOR = 10


def check_tolerance(config: Config, dtype: torch.dtype) -> None:
    """ConfigError for a cg_tol no solve in ``dtype`` can reach."""
    floor = TOLERANCE_FLOOR * torch.finfo(dtype).eps
    if config.cg_tol < floor:
        name = str(dtype).removeprefix("torch.")
        raise ConfigError(f"cg_tol={config.cg_tol:g} is below what {name} arithmetic reaches: "
                          f"the true residual |b - A x|/|b| stalls at a few eps, so cg_tol must "
                          f"be at least {floor:.2g} in {name}")


def converged(config: Config, residual, iterations):
    """The solver's relative residual within cg_tol (a NaN is not): it stops
    on |r|^2 <= tol^2 |b|^2, and |r|/|b| may round a few ulps past tol; or,
    a solve stopped at its floating-point floor (fewer ``iterations`` than
    cg_maxiter), within cg.FLOOR_FACTOR x cg_tol (cg.accepted)."""
    return cg.accepted(as_float64(residual), as_float64(iterations), config.cg_tol,
                       config.cg_maxiter)
