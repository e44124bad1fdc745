"""Differentiation support: gradient policies at the guarded (⊥) points of
pompy's safe operations (:mod:`pompy.autodiff.policies`, re-exported here),
gradient clipping and monitoring (:mod:`pompy.autodiff.gradients`)."""
from pompy.autodiff import policies
from pompy.autodiff.policies import *  # noqa: F401,F403  (the public API)

__all__ = policies.__all__
