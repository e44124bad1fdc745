"""Differentiation support: gradient policies at the guarded (⊥) points of
pompy's safe operations (:mod:`pompy.autodiff.policies`), gradient clipping
and monitoring (:mod:`pompy.autodiff.gradients`); both re-exported here."""
from pompy.autodiff import gradients, policies

__all__ = [*policies.__all__, "GRAD_CLIP_NORM", "clip_gradients", "gradient_norms",
           "log_gradient_norms"]
globals().update({name: getattr(policies, name) for name in policies.__all__})
globals().update({name: getattr(gradients, name) for name in __all__[len(policies.__all__):]})
