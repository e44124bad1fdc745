"""Torch smagorinsky against the oracle on random states, and in float32;
inputs are never written."""
from hypothesis import given, settings

from core_checks import assert_inputs_not_written, float32_errors
from oracle_compare import compare_call
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
    # velocity differences of O(0.3) over O(5 km), squared and summed: float32
    # rounding of inputs and result, a few 1e-7 relative
    err = float32_errors(smagorinsky, oracle, "smagorinsky", state, params)["aam"]
    assert err < 2e-6, err


def test_smagorinsky_inputs_are_not_written(oracle):
    _, params, state = random_state(7, 7, 6, 5, oracle)
    assert_inputs_not_written(smagorinsky, oracle, "smagorinsky", state, params)
