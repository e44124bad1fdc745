"""Torch smagorinsky against the oracle on random states, and in float32."""
import torch
from hypothesis import given, settings

from oracle_compare import compare_call, torch_call
from pompy.core.viscosity import smagorinsky
from strategies import pom_states, random_state


@settings(max_examples=25, deadline=None)
@given(pom_states())
def test_smagorinsky_matches_oracle(oracle, case):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    compare_call(smagorinsky, oracle, "smagorinsky", state, params, rtol=1e-12)


def test_smagorinsky_float32(oracle):
    _, params, state = random_state(5, 9, 8, 7, oracle)
    want = oracle.call("smagorinsky", state, params)["aam"]
    got = torch_call(smagorinsky, oracle, "smagorinsky", state, params, dtype=torch.float32)["aam"]
    assert got.dtype == torch.float32
    # velocity differences of O(0.3) over O(5 km), squared and summed: float32
    # rounding of inputs and result, a few 1e-7 relative
    err = (got.double().numpy() - want).__abs__().max() / abs(want).max()
    assert err < 2e-6, err
