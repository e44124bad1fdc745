"""Differentiation support: gradient policies at the guarded (⊥) points of
pompy's safe operations (:mod:`pompy.autodiff.policies`)."""
from pompy.autodiff.policies import (POLICY_REGISTRY, GradientPolicy, GradientPolicyConfig,
                                     apply_policy, gradient_policy, policy_override,
                                     policy_registry_snapshot, register_policy, rejection_loss,
                                     restore_policy_registry, selected_policy)

__all__ = [
    "GradientPolicy",
    "GradientPolicyConfig",
    "POLICY_REGISTRY",
    "apply_policy",
    "gradient_policy",
    "policy_override",
    "policy_registry_snapshot",
    "register_policy",
    "rejection_loss",
    "restore_policy_registry",
    "selected_policy",
]
