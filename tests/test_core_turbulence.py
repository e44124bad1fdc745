"""Torch profq against the Fortran oracle.

(1) random valid states (hypothesis), rtol 1e-12, for pom2k's call
profq(a,c,tps,dtef); (2) the golden pom2k call (seamount_calls), rtol 1e-13;
(3) float32 runs against float64 within a measured tolerance.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from conftest import relative_error
from oracle_compare import compare_call, torch_call
from pompy.core.turbulence import profq
from strategies import pom_states, random_state

CALL = "profq(a,c,tps,dtef)"


@settings(max_examples=25, deadline=None)
@given(pom_states())
def test_matches_oracle_on_random_states(oracle, case):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    compare_call(profq, oracle, CALL, state, params, rtol=1e-12)


def test_random_states_reach_both_sides_of_each_switch(oracle):
    """The states above exercise the small-value guard and the surface
    length-scale floor (z > -0.5) on both sides."""
    _, params, state = random_state(4, 9, 8, 7, oracle)
    out = torch_call(profq, oracle, CALL, state, params)
    uf = out["uf"].numpy()[:, :, 1:-1]
    guarded = uf == params["small"]
    assert guarded.any() and (~guarded).any()
    z = state["z"][1:-1]
    assert (z > -0.5).any() and (z <= -0.5).any()


# float32 against float64, relative to each field's max magnitude. Measured
# over 200 random states (sizes 5..9, kb 5..8): sm, sh (a, c) 9.8e-4,
# km, kh, kq 4.0e-4, vf 3.1e-5, every other field within 1e-5. boygr is the
# difference of the stratification and sound-speed terms, which can cancel
# to 1e-4 of either, so gh = l**2*boygr/q2b carries float32 rounding
# magnified that much, and sh = coef1/(1 - coef2*gh) grows it further as gh
# nears its cap 0.028. The bar leaves 5x.
F32_TOL = 5e-3
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [1, 2, 3, 20])
def test_float32_close_to_float64(oracle, seed, device):
    _, params, state = random_state(seed, 9, 8, 7, oracle)
    want = torch_call(profq, oracle, CALL, state, params)
    fn = profq
    if device == "cuda":
        def fn(**kw):
            out = profq(**{k: v.cuda() if isinstance(v, torch.Tensor) else v
                           for k, v in kw.items()})
            assert all(t.is_cuda for t in out)
            return out
    got = torch_call(fn, oracle, CALL, state, params, dtype=torch.float32)
    for name, w in want.items():
        assert got[name].dtype == torch.float32
        err = relative_error(got[name].double().cpu().numpy(), w.numpy())
        assert np.isfinite(err) and err < F32_TOL, f"{CALL} {name}: float32 error {err:.2e}"
