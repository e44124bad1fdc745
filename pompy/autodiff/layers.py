"""pompy's gradient layers. A leaf module.

The safe operations (pompy.utils.safety) name the layer of the routine that
guards a singular point; a safe op called without a layer belongs to
:data:`SAFETY_LAYER`. These layers have a built-in policy, PROJECT (zero at
the guarded points, exact everywhere else, so that gradients are the
model's own; CLAMP, the last fallback of pompy.autodiff.policies'
precedence for a layer with no default, would clip every derivative to
[-1, 1]). It is a constant of pompy.autodiff.policies, not a
registration: ``register_policy`` of the same layer takes precedence, and
importing pompy registers nothing.
"""
PHYSICS_LAYERS = ("smagorinsky", "bottom_drag", "profq", "proft", "profu", "profv", "bcond", "dens",
                  "advu", "advv", "advq", "advt", "external_step", "internal_step")
SAFETY_LAYER = "safety"
