"""pompy's explicit torch core: one function per pom2k subroutine, same name
and arguments as the Fortran oracle's, indexed (i, j, k) like the Fortran.

Modules by physics area: density (dens, baropg), advection (advct, advave,
advu, advv, advq, vertvl), tracers (advt1, advt2, smol_adif), turbulence
(profq), vertical (proft, profu, profv), boundary (bcond), viscosity
(smagorinsky), grid (depth, areas_masks, slpmax), problems (seamount, box,
grid_coordinates), file2ic, and stepping (pom2k's main-program sections).
ExplicitCore (pompy.core.explicit) runs the main loop.
"""
from pompy.autodiff.policies import GradientPolicy, register_policy
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

from pompy.core.stepping import (external_step, initialize, internal_step, surface_forcing,
                                  vertical_averages)

# The layers of pompy's safe operations (pompy.utils.safety), named after
# the routines that guard a singular point. Their registered gradient
# policy is PROJECT: zero at the guarded points, exact everywhere else, so
# that gradients are the model's own (CLAMP, the global default, would
# clip every derivative to [-1, 1]).
PHYSICS_LAYERS = ("smagorinsky", "bottom_drag", "profq", "proft", "profu", "profv", "bcond", "dens",
                  "advu", "advv", "advq", "advt", "external_step", "internal_step")
for _layer in PHYSICS_LAYERS:
    register_policy(_layer, GradientPolicy.PROJECT)

__all__ = ["advave", "advct", "advq", "advt1", "advt2", "advu", "advv", "areas_masks", "baropg",
           "bcond", "box", "dens", "depth", "external_step", "file2ic", "grid_coordinates",
           "initialize", "internal_step", "profq", "proft", "profu", "profv", "seamount",
           "slpmax", "smagorinsky", "smol_adif", "surface_forcing", "vertical_averages", "vertvl"]
