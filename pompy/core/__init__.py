"""pompy's explicit torch core: one function per pom2k subroutine, same name
and arguments as the Fortran oracle's, indexed (i, j, k) like the Fortran.

Modules by physics area: density (dens, baropg), advection (advct, advave,
advu, advv, advq, vertvl), tracers (advt1, advt2, smol_adif), turbulence
(profq), vertical (proft, profu, profv), boundary (bcond), viscosity
(smagorinsky).
"""
from pompy.core.advection import advave, advct, advq, advu, advv, vertvl
from pompy.core.boundary import bcond
from pompy.core.density import baropg, dens
from pompy.core.tracers import advt1, advt2, smol_adif
from pompy.core.turbulence import profq
from pompy.core.vertical import proft, profu, profv
from pompy.core.viscosity import smagorinsky

__all__ = ["advave", "advct", "advq", "advt1", "advt2", "advu", "advv", "baropg", "bcond",
           "dens", "profq", "proft", "profu", "profv", "smagorinsky", "smol_adif", "vertvl"]
