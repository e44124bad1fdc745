"""Random but physically valid pom2k states for torch-vs-oracle tests.

``random_state(seed, im, jm, kb)`` draws a grid with steep random
topography and land (h=1 where dry, walls on the north and south edges),
noisy spacings, masks from the oracle's own areas_masks, the sigma levels
from its depth, a stratified T/S, density from dens, flows of both signs
masked by dum/dvm, positive turbulence fields, and random work arrays.
``pom_states()`` is the hypothesis strategy over seeds and small sizes.
Arrays are Fortran-ordered numpy float64, indexed (i, j, k) like pom2k.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from hypothesis import strategies as st

from pompy.config import Config
from pompy.verify import states

def small_config(im: int, jm: int, kb: int, **overrides) -> Config:
    kl1 = min(6, kb - 3)
    return dataclasses.replace(Config(), im=im, jm=jm, kb=kb, kl1=max(kl1, 2),
                               kl2=kb - 2, **overrides)


def random_state(seed: int, im: int, jm: int, kb: int, oracle, land: float = 0.2):
    """(config, params, state): pompy.verify.states' random valid state on the
    small config of an im x jm x kb grid (one copy, for verify and tests)."""
    config = small_config(im, jm, kb)
    params, s = states.random_state(seed, config, oracle, land)
    return config, params, s


def pom_states(min_size: int = 5, max_size: int = 9):
    """Hypothesis strategy: (seed, im, jm, kb) for random_state."""
    return st.tuples(st.integers(0, 2**31 - 1), st.integers(min_size, max_size),
                     st.integers(min_size, max_size), st.integers(5, 8))


def to_torch(state: dict, dtype=torch.float64, device="cpu") -> dict:
    return {k: torch.as_tensor(np.ascontiguousarray(v), dtype=dtype, device=device)
            for k, v in state.items() if isinstance(v, np.ndarray)}
