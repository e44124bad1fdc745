"""pom2k's problem set-ups: seamount (iproblem 1) and box (iproblem 2),
with the post-processing coordinates (grid_coordinates).

Tensors are indexed (i, j, k) like the Fortran. Each routine takes the
oracle's arguments by name and returns its in/output arguments, in the
oracle's order, as new tensors in a NamedTuple. The set-up is computed
once; pompy runs it on the CPU in float64 (see ExplicitCore).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pompy import compat
from pompy.calls import outputs
from pompy.core.density import dens
from pompy.core.grid import AREAS_MASKS, LEVELS, areas_masks, depth, slpmax
from pompy.ops import above_kb, between, expand3, inside

# the post-processing coordinates grid_coordinates writes
COORDINATES = "east_c north_c east_e north_e east_u north_u east_v north_v rot"

GridCoordinatesOut = outputs("GridCoordinatesOut", COORDINATES)
_SET_UP = f"{LEVELS} dx dy cor {COORDINATES} h {AREAS_MASKS} tb sb tclim sclim"
SeamountOut = outputs("SeamountOut", f"{_SET_UP} ub uab elb etb dt aam2d rho rmean uabe uabw ele elw "
                                     "tbe tbw sbe sbw tbn tbs sbn sbs")
BoxOut = outputs("BoxOut", f"{_SET_UP} elb etb dt aam2d rho rmean e_atmos vfluxf")


def _running_sum(a: Tensor, dim: int) -> Tensor:
    """0 at index 1, then c(n) = c(n-1) + a(n-1) along ``dim``, in order."""
    first = torch.zeros_like(a.narrow(dim, 0, 1))
    return torch.cat([first, torch.cumsum(a.narrow(dim, 0, a.size(dim) - 1), dim)], dim)


def _extrapolate_last(a: Tensor, ref: Tensor, dim: int) -> Tensor:
    """a with its last slab along ``dim`` set to a(n-1) + (ref(n) - ref(n-1))."""
    n = a.size(dim)
    last = a.select(dim, n - 2) + (ref.select(dim, n - 1) - ref.select(dim, n - 2))
    return torch.cat([a.narrow(dim, 0, n - 1), last.unsqueeze(dim)], dim)


def _centres(c: Tensor) -> Tensor:
    """Cell-centre values of the corner coordinate c: the four-corner mean,
    then the last row and column extrapolated by one spacing of c."""
    e = (c[:-1, :-1] + c[1:, :-1] + c[:-1, 1:] + c[1:, 1:]) / 4.0
    e = _extrapolate_last(torch.cat([e, e[:, -1:]], 1), c[:-1], 1)     # j = jm, i < im
    e = _extrapolate_last(torch.cat([e, e[-1:]], 0), c, 0)             # i = im, all j
    corner = ((2.0 * e[-2, -1] - e[-3, -1]) + (2.0 * e[-1, -2] - e[-1, -3])) / 2.0
    return torch.cat([e[:, :-1], torch.cat([e[:-1, -1], corner.view(1)]).unsqueeze(1)], 1)


def grid_coordinates(dx, dy, east_c, north_c, east_e, north_e, east_u, north_u,
                     east_v, north_v, rot) -> GridCoordinatesOut:
    """Cell corner (c), centre (e), u- and v-point coordinates from dx, dy,
    for post-processing only (the model never reads them). The last row and
    column are extrapolated by one spacing; the centre corner (im, jm) is
    the mean of the linear extrapolations along i and along j."""
    east_c = _running_sum(dx, 0)
    north_c = _running_sum(dy, 1)

    east_e, north_e = _centres(east_c), _centres(north_c)
    east_u = _extrapolate_last(torch.cat([.5 * (east_c[:, :-1] + east_c[:, 1:]), east_c[:, -1:]], 1),
                               east_c, 1)
    north_u = _extrapolate_last(torch.cat([.5 * (north_c[:, :-1] + north_c[:, 1:]), north_c[:, -1:]], 1),
                                north_c, 1)
    east_v = _extrapolate_last(torch.cat([.5 * (east_c[:-1] + east_c[1:]), east_c[-1:]], 0), east_c, 0)
    north_v = _extrapolate_last(torch.cat([.5 * (north_c[:-1] + north_c[1:]), north_c[-1:]], 0),
                                north_c, 0)
    return GridCoordinatesOut(east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v,
                              torch.zeros_like(rot))


def _initial_elevation_and_density(grav, rhoref, tbias, sbias, s: dict) -> dict:
    """The set-up both problems share once h is final: initial level n-1
    elevations, aam2d, dens and rmean (the initial density: it depends on
    z only in both problems, so it is its own horizontal average)."""
    s["elb"] = -s["e_atmos"]
    s["etb"] = -s["e_atmos"]
    s["dt"] = s["h"] - s["e_atmos"]
    s["aam2d"] = s["aam"][:, :, 0].clone()
    s["rho"] = dens(grav, rhoref, tbias, sbias, s["zz"], s["h"], s["fsm"], s["sb"], s["tb"],
                    s["rho"]).rhoo
    kb = s["rho"].size(2)
    s["rmean"] = inside(s["rho"], s["rmean"], k=(1, kb - 1))
    return s


def _levels_and_coordinates(kl1, kl2, s: dict) -> dict:
    """The sigma levels (depth) and the coordinates of the spacings s["dx"], s["dy"]."""
    s.update(depth(kl1, kl2, s["z"], s["zz"], s["dz"], s["dzz"])._asdict())
    s.update(grid_coordinates(**{n: s[n] for n in GridCoordinatesOut._fields + ("dx", "dy")})._asdict())
    return s


def _initial_ts(t0: Tensor, s0: float, tbias, sbias, s: dict) -> dict:
    kb = s["tb"].size(2)
    s["tb"] = inside(t0 - tbias, s["tb"], k=(1, kb - 1))
    s["sb"] = inside(torch.full_like(t0, s0) - sbias, s["sb"], k=(1, kb - 1))
    s["tclim"] = inside(s["tb"], s["tclim"], k=(1, kb - 1))
    s["sclim"] = inside(s["sb"], s["sclim"], k=(1, kb - 1))
    return s


# the seamount's uniform initial salinity
SEAMOUNT_SALINITY = 35.0


def seamount_temperature(zz: Tensor, h: Tensor, strat_amplitude) -> Tensor:
    """The seamount's initial T: 5 + strat_amplitude exp(z/1000 m) at z = zz h."""
    return 5.0 + strat_amplitude * compat.seamount_texp(zz, h)


def seamount(kl1, kl2, hmax, slmax, inflow, strat_amplitude, seamount_height, grav, rhoref,
             tbias, sbias, aam, e_atmos, z, zz, dz, dzz, dx, dy, cor, east_c, north_c, east_e,
             north_e, east_u, north_u, east_v, north_v, rot, h, art, aru, arv, fsm, dum, dvm,
             tb, sb, tclim, sclim, ub, uab, elb, etb, dt, aam2d, rho, rmean, uabe, uabw, ele,
             elw, tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs) -> SeamountOut:
    """pom2k seamount: a Gaussian seamount (depth hmax*(1 - .9 exp(-r2/ra2)),
    ra = 25 km) in an east-west channel closed at j=1 and jm, spacing
    8 km shrinking to 4 km mid-basin, a uniform 0.2 m/s inflow, T = 5 +
    15 exp(z/1000 m), S = 35; east and west open with geostrophically
    balanced boundary elevations, zero mid-channel. pompy's case parameters
    ``inflow`` (0.2), ``strat_amplitude`` (15) and ``seamount_height``
    (.9, pom2k's delh) change those constants (pom2k's by default)."""
    s = dict(locals())
    im, jm, kb = tb.shape
    delh, delx, ra, vel = seamount_height, 8000.0, 25000.0, inflow
    sin_i, sin_j = compat.seamount_sin(im, jm, dx)        # sin(pi*i/im), sin(pi*j/jm)
    s["dx"] = delx - delx * sin_i / 2.0
    s["dy"] = delx - delx * sin_j / 2.0
    s["cor"] = torch.full_like(cor, 1.e-4)
    s = _levels_and_coordinates(kl1, kl2, s)
    hh = hmax * (1.0 - delh * compat.seamount_exp(s["east_c"], s["north_c"], ra))
    hh = torch.where(hh < 1.0, 1.0, hh)
    hh = inside(hh, 1.0, j=(2, jm - 1))               # the channel walls
    s["h"] = hh
    s.update(areas_masks(s["dx"], s["dy"], hh, art, aru, arv, fsm, dum, dvm)._asdict())
    if slmax < 1.0:
        s["h"] = slpmax(slmax, s["fsm"], s["h"]).h
    s = _initial_ts(seamount_temperature(s["zz"], s["h"], strat_amplitude), SEAMOUNT_SALINITY,
                    tbias, sbias, s)
    dum3 = expand3(s["dum"]).expand(im, jm, kb)
    s["ub"] = inside(vel * dum3, ub, k=(1, kb - 1))
    s["uab"] = vel * s["dum"]
    s = _initial_elevation_and_density(grav, rhoref, tbias, sbias, s)
    # open east and west boundaries: geostrophically balanced elevations,
    # a running sum along j (pom2k's recursion), zero mid-channel
    ua_set, cor_set, dy_set, fsm_set = s["uab"], s["cor"], s["dy"], s["fsm"]
    s["uabw"] = between(ua_set[1], uabw, 2, jm - 1)           # j = 2..jmm1
    s["uabe"] = between(ua_set[im - 2], uabe, 2, jm - 1)

    def elevation(i: int, el_edge: Tensor) -> Tensor:
        # el(j) = el(j-1) - cor*uab/grav*dy(j-1) at column i, j = 2..jmm1
        slope = -cor_set[i, 1:jm - 1] * ua_set[i, 1:jm - 1] / grav * dy_set[i, 0:jm - 2]
        return torch.cat([torch.cumsum(torch.cat([el_edge[:1], slope]), 0), el_edge[jm - 1:]])

    e_run, w_run = elevation(im - 2, ele), elevation(1, elw)
    jmid = (jm - 1) // 2 - 1                                   # pom2k's jmm1/2
    s["ele"] = between((e_run - e_run[jmid]) * fsm_set[im - 1], ele, 2, jm - 1)
    s["elw"] = between((w_run - w_run[jmid]) * fsm_set[1], elw, 2, jm - 1)
    s = _boundary_ts(s, tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs)
    return SeamountOut(**{n: s[n] for n in SeamountOut._fields})


def _boundary_ts(s, tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs) -> dict:
    """Lateral T, S boundary values: the initial state at the edges, k=1..kbm1."""
    for name, value, old in (("tbe", s["tb"][-1], tbe), ("tbw", s["tb"][0], tbw),
                             ("sbe", s["sb"][-1], sbe), ("sbw", s["sb"][0], sbw),
                             ("tbn", s["tb"][:, -1], tbn), ("tbs", s["tb"][:, 0], tbs),
                             ("sbn", s["sb"][:, -1], sbn), ("sbs", s["sb"][:, 0], sbs)):
        s[name] = above_kb(value, old)
    return s


def box(kl1, kl2, grav, rhoref, tbias, sbias, aam, z, zz, dz, dzz, dx, dy, cor,
        east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot,
        h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, elb, etb, dt, aam2d, rho,
        rmean, e_atmos, vfluxf) -> BoxOut:
    """pompy's box: a 4500 m flat basin with walls on all four sides,
    uniform T = 20, S = 35, a steady freshwater inflow vfluxf = -1e-5 m/s
    carrying the basin's T and S, and an atmospheric pressure tilt of 1e-6
    (m per m east) balanced initially by the elevation."""
    s = dict(locals())
    im, jm, kb = tb.shape
    depth_box, delx, tilt, vflux_box = 4500.0, 8000.0, 1.e-6, -1.e-5
    s["dx"] = torch.full_like(dx, delx)
    s["dy"] = torch.full_like(dy, delx)
    s["cor"] = torch.full_like(cor, 1.e-4)
    s = _levels_and_coordinates(kl1, kl2, s)
    s["h"] = inside(torch.full_like(h, depth_box), 1.0, i=(2, im - 1), j=(2, jm - 1))
    s.update(areas_masks(s["dx"], s["dy"], s["h"], art, aru, arv, fsm, dum, dvm)._asdict())
    s = _initial_ts(torch.full_like(tb, 20.0), 35.0, tbias, sbias, s)
    ee = s["east_e"]
    s["e_atmos"] = tilt * (ee - ee[(im + 1) // 2 - 1]) * s["fsm"]
    s["vfluxf"] = vflux_box * s["fsm"]
    s = _initial_elevation_and_density(grav, rhoref, tbias, sbias, s)
    return BoxOut(**{n: s[n] for n in BoxOut._fields})
