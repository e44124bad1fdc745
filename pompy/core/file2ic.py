"""pom2k's file2ic (iproblem 3): the set-up of a grid and initial state
read from pompy's IC file (pompy.icfile), as the oracle's file2ic.

Tensors are indexed (i, j, k) like the Fortran. The routine takes the
oracle's arguments by name and returns its in/output arguments, in the
oracle's order, as new tensors in a NamedTuple; inputs are never written.
"""
from __future__ import annotations

import torch

from pompy.core.density import dens
from pompy.calls import outputs
from pompy.core.grid import AREAS_MASKS, LEVELS, areas_masks, depth, slpmax
from pompy.core.problems import COORDINATES, grid_coordinates
from pompy.ops import above_kb, expand3, inside


File2icOut = outputs("File2icOut", f"{LEVELS} {COORDINATES} h {AREAS_MASKS} tb sb tclim sclim ub vb "
                                   "uab vab elb etb dt aam2d rho tbe tbw sbe sbw tbn tbs sbn sbs")


def file2ic(kl1, kl2, slmax, grav, rhoref, tbias, sbias, aam, e_atmos, t, s, u, v, ua, va,
            el, dx, dy, z, zz, dz, dzz, east_c, north_c, east_e, north_e, east_u, north_u,
            east_v, north_v, rot, h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim,
            ub, vb, uab, vab, elb, etb, dt, aam2d, rho, tbe, tbw, sbe, sbw, tbn, tbs, sbn,
            sbs) -> File2icOut:
    """pom2k file2ic: finish the set-up of a grid and initial state read
    from a file, as seamount finishes its own.

    In: dx, dy, h from the file; t, s, tclim, sclim and the boundary
    values tbe ... sbs as actual temperatures and salinities; the
    velocities u, v (U, V points, 3-D), ua, va (2-D); the elevation el.
    Out: the sigma levels (depth), the post-processing coordinates
    (grid_coordinates), h with land (h < 1) set to 1, areas and masks,
    h limited by slpmax when slmax < 1; tb = t - tbias, sb = s - sbias,
    tclim, sclim and tbe ... sbs less the biases, ub = u*dum, vb = v*dvm
    (k = 1..kbm1; level kb as given); uab = ua*dum, vab = va*dvm;
    elb = etb = el*fsm - e_atmos, dt = h + etb, aam2d = aam(:,:,1), and
    rho from dens."""
    levels = depth(kl1, kl2, z, zz, dz, dzz)
    coords = grid_coordinates(dx, dy, east_c, north_c, east_e, north_e, east_u, north_u,
                              east_v, north_v, rot)
    h = torch.where(h < 1.0, torch.ones_like(h), h)
    masks = areas_masks(dx, dy, h, art, aru, arv, fsm, dum, dvm)
    if slmax < 1.0:
        h = slpmax(slmax, masks.fsm, h).h
    kb = t.size(2)
    below = dict(k=(1, kb - 1))
    tb = inside(t - tbias, tb, **below)
    sb = inside(s - sbias, sb, **below)
    tclim = inside(tclim - tbias, tclim, **below)
    sclim = inside(sclim - sbias, sclim, **below)
    ub = inside(u * expand3(masks.dum), ub, **below)
    vb = inside(v * expand3(masks.dvm), vb, **below)
    uab = ua * masks.dum
    vab = va * masks.dvm
    elb = el * masks.fsm - e_atmos
    etb = elb.clone()
    dt = h + etb
    aam2d = aam[:, :, 0].clone()
    rho = dens(grav, rhoref, tbias, sbias, levels.zz, h, masks.fsm, sb, tb, rho).rhoo
    boundary = {name: above_kb(value - bias, value)
                for name, value, bias in (("tbe", tbe, tbias), ("tbw", tbw, tbias),
                                          ("sbe", sbe, sbias), ("sbw", sbw, sbias),
                                          ("tbn", tbn, tbias), ("tbs", tbs, tbias),
                                          ("sbn", sbn, sbias), ("sbs", sbs, sbias))}
    return File2icOut(*levels, *coords, h, *masks, tb, sb, tclim, sclim, ub, vb, uab, vab,
                      elb, etb, dt, aam2d, rho, **boundary)
