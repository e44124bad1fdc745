"""pompy's torch cores: one function per pom2k subroutine, same name and
arguments as the Fortran oracle's, indexed (i, j, k) like the Fortran, and
the cores that run pom2k's main loop with them.

Physics routines by area: density (dens, baropg), advection (advct, advave,
advu, advv, advq, vertvl), tracers (advt1, advt2, smol_adif), turbulence
(profq), vertical (proft, profu, profv), boundary (bcond), viscosity
(smagorinsky), grid (depth, areas_masks, slpmax), problems (seamount, box,
grid_coordinates), file2ic; stepping (pom2k's main-program sections:
initialize, surface_forcing, vertical_averages, internal_step).
Above them: setup (the set-up of both drivers), external (free-surface
schemes: split), model (the scheme-independent Core) and explicit
(ExplicitCore). Importing this package changes no global state.
"""
from pompy.autodiff.layers import PHYSICS_LAYERS
from pompy.core.advection import advave, advct, advq, advu, advv, vertvl
from pompy.core.boundary import bcond
from pompy.core.density import baropg, dens
from pompy.core.file2ic import file2ic
from pompy.core.grid import areas_masks, depth, slpmax
from pompy.core.problems import box, grid_coordinates, seamount
from pompy.core.tracers import advt1, advt2, smol_adif
from pompy.core.turbulence import profq
from pompy.core.vertical import proft, profu, profv
from pompy.core.viscosity import smagorinsky

from pompy.core.stepping import (initialize, internal_step, surface_forcing,  # noqa: I001
                                 vertical_averages)
from pompy.core.external.split import external_step

__all__ = ["PHYSICS_LAYERS", "advave", "advct", "advq", "advt1", "advt2", "advu", "advv",
           "areas_masks", "baropg", "bcond", "box", "dens", "depth", "external_step", "file2ic",
           "grid_coordinates", "initialize", "internal_step", "profq", "proft", "profu", "profv",
           "seamount", "slpmax", "smagorinsky", "smol_adif", "surface_forcing",
           "vertical_averages", "vertvl"]
