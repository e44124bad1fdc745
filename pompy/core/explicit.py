"""ExplicitCore: pom2k's main program in torch, as the oracle's run_steps:
the scheme-independent Core (pompy.core.model) with pom2k's split-explicit
free surface (pompy.core.external.split).

    core = ExplicitCore(config, device="cpu", dtype=torch.float64)
    core.run_initialization()          # pom2k's set-up, iint = 0
    core.run_time_loop()               # iint = core.iint+1 .. core.iend
"""
from __future__ import annotations

import torch

from pompy.autodiff.policies import GradientPolicyConfig
from pompy.config import Config
from pompy.core.external.split import SplitExplicit
from pompy.core.model import Core


class ExplicitCore(Core):
    """pom2k, vectorised in torch: same routines, same order, same numbers."""

    def __init__(self, config: Config, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, compile: bool | str = False,
                 checkpoint: str | None = None, policies: GradientPolicyConfig | None = None,
                 check_every: int = 1):
        super().__init__(config, SplitExplicit(), device=device, dtype=dtype, compile=compile,
                         checkpoint=checkpoint, policies=policies, check_every=check_every)
