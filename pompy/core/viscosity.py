"""Horizontal viscosity: pom2k's Smagorinsky formula (in pom2k's main loop)."""
from __future__ import annotations

from pompy.calls import outputs
from pompy.ops import put, span
from pompy.utils.safety import safe_sqrt


SmagorinskyOut = outputs("SmagorinskyOut", "aam")


def smagorinsky(horcon, dx, dy, u, v, aam) -> SmagorinskyOut:
    """pom2k's Smagorinsky lateral viscosity at t points:
    aam = horcon*dx*dy*sqrt(ux**2 + vy**2 + .5*(uy + vx)**2),
    written at i=2..imm1, j=2..jmm1, k=1..kbm1; aam is kept elsewhere."""
    im, jm, kb = u.shape
    I, Im, Ip = span(2, im - 1), span(2, im - 1, -1), span(2, im - 1, 1)
    J, Jm, Jp = span(2, jm - 1), span(2, jm - 1, -1), span(2, jm - 1, 1)
    K = span(1, kb - 1)
    dx3, dy3 = dx[I, J, None], dy[I, J, None]
    u0, up = u[I, J, K], u[Ip, J, K]           # u(i,j), u(i+1,j)
    v0, vp = v[I, J, K], v[I, Jp, K]           # v(i,j), v(i,j+1)
    uy = .25 * (u[I, Jp, K] + u[Ip, Jp, K] - u[I, Jm, K] - u[Ip, Jm, K]) / dy3
    vx = .25 * (v[Ip, J, K] + v[Ip, Jp, K] - v[Im, J, K] - v[Im, Jp, K]) / dx3
    # the deformation is exactly zero in a uniform flow (the seamount's start)
    new = horcon * dx3 * dy3 * safe_sqrt(((up - u0) / dx3) ** 2 + ((vp - v0) / dy3) ** 2
                                         + .5 * (uy + vx) ** 2, layer="smagorinsky")
    return SmagorinskyOut(put(aam, new, i=(2, im - 1), j=(2, jm - 1), k=(1, kb - 1)))
