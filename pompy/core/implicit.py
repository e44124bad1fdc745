"""ImplicitCore: pom2k's internal mode with a semi-implicit free surface
(pompy.core.external.implicit): one implicit external step of dti per
internal step, solved by conjugate gradients, so dti may exceed pom2k's
external CFL limit (the internal, advective one still holds).

    core = ImplicitCore(config, device="cpu", dtype=torch.float64)
    core.run_initialization()
    core.run_time_loop()
"""
from __future__ import annotations

import torch

from pompy.autodiff.policies import GradientPolicyConfig
from pompy.config import Config
from pompy.core.external.implicit import SemiImplicit, check_tolerance
from pompy.core.model import Core


class ImplicitCore(Core):
    """The scheme-independent core with the semi-implicit free surface."""

    def __init__(self, config: Config, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, compile: bool | str = False,
                 checkpoint: str | None = None, policies: GradientPolicyConfig | None = None,
                 check_every: int = 1):
        check_tolerance(config, dtype)
        super().__init__(config, SemiImplicit(), device=device, dtype=dtype, compile=compile,
                         checkpoint=checkpoint, policies=policies, check_every=check_every)
