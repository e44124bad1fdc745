"""Horizontal viscosity: pom2k's Smagorinsky formula (in pom2k's main loop)."""
from __future__ import annotations

from pompy.calls import outputs
from pompy.ops import expand3, inside, xm, xp, ym, yp
from pompy.utils.safety import safe_sqrt


SmagorinskyOut = outputs("SmagorinskyOut", "aam")


def smagorinsky(horcon, dx, dy, u, v, aam) -> SmagorinskyOut:
    """pom2k's Smagorinsky lateral viscosity at t points:
    aam = horcon*dx*dy*sqrt(ux**2 + vy**2 + .5*(uy + vx)**2),
    written at i=2..imm1, j=2..jmm1, k=1..kbm1; aam is kept elsewhere."""
    im, jm, kb = u.shape
    dx3, dy3 = expand3(dx), expand3(dy)
    up, vp = xp(u), yp(v)
    uy = .25 * (yp(u) + yp(up) - ym(u) - ym(up)) / dy3
    vx = .25 * (xp(v) + xp(vp) - xm(v) - xm(vp)) / dx3
    # the deformation is exactly zero in a uniform flow (the seamount's start)
    new = horcon * dx3 * dy3 * safe_sqrt(((up - u) / dx3) ** 2 + ((vp - v) / dy3) ** 2
                                         + .5 * (uy + vx) ** 2, layer="smagorinsky")
    return SmagorinskyOut(inside(new, aam, i=(2, im - 1), j=(2, jm - 1), k=(1, kb - 1)))
