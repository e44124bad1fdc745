"""Torch advt1, advt2, smol_adif against the Fortran oracle.

(1) random valid states (hypothesis), rtol 1e-12: advt1 and advt2 with
pom2k's call strings for T and S, advt2 with nitera 1..4 and sw 0, a random
value and 1; smol_adif called directly on inputs drawn so that each of its
three outcomes (a neighbour below value_min, second-order term larger,
plain antidiffusion) occurs; (2) every golden pom2k call of advt1/advt2
(seamount_calls), rtol 1e-13; (3) float32 runs against the oracle within a
measured tolerance; inputs are never written.
"""

import numpy as np
import pytest
from hypothesis import given, settings

from conftest import assert_fields_close
from core_checks import assert_inputs_not_written, float32_errors
from oracle_compare import compare_call, torch_call
from pompy.core.tracers import advt1, advt2, smol_adif
from strategies import pom_states, random_state

ROUTINES = {"advt1": advt1, "advt2": advt2, "smol_adif": smol_adif}
ADVT1 = ["advt1(tb,t,tclim,uf,a,c)", "advt1(sb,s,sclim,vf,a,c)"]
ADVT2 = ["advt2(tb,t,tclim,uf,a,c,nitera,sw)", "advt2(sb,s,sclim,vf,a,c,nitera,sw)"]
VALUE_MIN = 1e-9


def _prev(a, axis):
    """a(i-1) along ``axis`` (the first slab repeated; never in a written range)."""
    return np.concatenate([a.take([0], axis), a.take(range(a.shape[axis] - 1), axis)], axis)


def smol_state(state: dict, params: dict, seed: int) -> dict:
    """Inputs for a direct smol_adif call: ff positive with about a quarter
    of the points below value_min (negative, zero or tiny), and mass fluxes
    of both signs whose magnitude is the point's threshold |u2dt| = |udx|
    times 10**U(-2, 2), so both sides of the second-order test occur."""
    rng = np.random.default_rng(seed)
    im, jm, kb = state["t"].shape
    shape = (im, jm, kb)
    ff = rng.uniform(0.5, 30, shape)
    low = rng.random(shape) < 0.25
    ff[low] = rng.choice([-1e-3, 0.0, 3e-10], size=int(low.sum()))
    dti2, dt = params["dti2"], state["dt"][:, :, None]
    thr_x = state["aru"][:, :, None] * (_prev(dt, 0) + dt) / (2 * dti2)
    thr_y = state["arv"][:, :, None] * (_prev(dt, 1) + dt) / (2 * dti2)
    thr_z = _prev(state["dzz"], 0)[None, None, :] * dt / dti2

    def flux(thr):
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return np.asfortranarray(sign * thr * 10 ** rng.uniform(-2, 2, shape))

    return dict(state, ff=np.asfortranarray(ff), xmassflux=flux(thr_x),
                ymassflux=flux(thr_y), zwflux=flux(thr_z))


def _smol_params(params, rng):
    return dict(params, sw=float(rng.uniform(0, 1)))


@settings(max_examples=25, deadline=None)
@given(pom_states())
def test_matches_oracle_on_random_states(oracle, case):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    rng = np.random.default_rng(seed)
    for call in ADVT1:
        compare_call(advt1, oracle, call, state, params, rtol=1e-12)
    for nitera in range(1, 5):
        for sw in (0.0, float(rng.uniform(0, 1)), 1.0):
            p = dict(params, nitera=nitera, sw=sw)
            for call in ADVT2:
                compare_call(advt2, oracle, call, state, p, rtol=1e-12)
    compare_call(smol_adif, oracle, "smol_adif", smol_state(state, params, seed),
                 _smol_params(params, rng), rtol=1e-12)


def test_smol_adif_takes_every_branch(oracle):
    """On a fixed input each flux has points in all three outcomes, and the
    torch result matches the oracle."""
    _, params, state = random_state(3, 9, 8, 7, oracle)
    s = smol_state(state, params, 3)
    ff = s["ff"] * state["fsm"][:, :, None]
    dti2 = params["dti2"]
    dt = state["dt"][:, :, None]
    im, jm, kb = ff.shape
    x, y, z = s["xmassflux"], s["ymassflux"], s["zwflux"]
    cases = {
        # (below value_min, |first| < |second order|) over the written range
        "x": ((ff < VALUE_MIN) | (_prev(ff, 0) < VALUE_MIN),
              np.abs(x) < np.abs(dti2 * x * x * 2 / (state["aru"][:, :, None] * (_prev(dt, 0) + dt))),
              (slice(1, im), slice(1, jm - 1), slice(0, kb - 1))),
        "y": ((ff < VALUE_MIN) | (_prev(ff, 1) < VALUE_MIN),
              np.abs(y) < np.abs(dti2 * y * y * 2 / (state["arv"][:, :, None] * (_prev(dt, 1) + dt))),
              (slice(1, im - 1), slice(1, jm), slice(0, kb - 1))),
        "z": ((ff < VALUE_MIN) | (_prev(ff, 2) < VALUE_MIN),
              np.abs(z) < np.abs(dti2 * z * z / (_prev(state["dzz"], 0)[None, None, :] * dt)),
              (slice(1, im - 1), slice(1, jm - 1), slice(1, kb - 1))),
    }
    for name, (below, reverse, rng_) in cases.items():
        below, reverse = below[rng_], reverse[rng_]
        assert below.any(), name
        assert (~below & reverse).any(), name
        assert (~below & ~reverse).any(), name
    p = dict(params, sw=0.7)
    want = oracle.call("smol_adif", s, p)
    got = {k: v.numpy() for k, v in torch_call(smol_adif, oracle, "smol_adif", s, p).items()}
    assert_fields_close(got, want, 1e-12, label="torch smol_adif")
    # the antidiffusion survives somewhere, so the comparison is not all zeros
    for name in ("xmassflux", "ymassflux", "zwflux"):
        assert (want[name] != 0).any(), name


# float32 against the oracle, relative to each field's max magnitude. Measured
# over 400 random states (sizes 5..9; advt2 with nitera 1..4 and random sw),
# worst field per routine: advt1 4.4e-7 (T and S), smol_adif 5.9e-8,
# advt2 1.3e-5 (T: zflux; S: the diffusive fluxes a, c 1.1e-5, zflux 6.8e-6).
# advt1 and smol_adif are sums of O(1) terms: a few float32 ulp (6e-8);
# bar 2e-6 (4x). advt2's returned xflux/yflux are the diffusive fluxes
# alone, differences of fb - fclim: S ~ 35 with anomalies ~ 0.3, so the
# float32 rounding of the inputs alone is 35 * 6e-8 / 0.3 ~ 7e-6 of the
# anomaly; its zflux after the first pass is the antidiffusive flux, built
# on vertical differences of ff (the same cancellation, ff ~ 35); bar 1e-4
# (8x).
F32_TOL = {"advt1": 2e-6, "advt2": 1e-4, "smol_adif": 2e-6}

F32_CALLS = ADVT1 + [f"{c}#{n}" for c in ADVT2 for n in (1, 4)] + ["smol_adif"]


@pytest.mark.parametrize("entry", F32_CALLS)
@pytest.mark.parametrize("seed", [1, 2])
def test_float32_close_to_oracle(oracle, entry, seed):
    call, _, nitera = entry.partition("#")
    _, params, state = random_state(seed, 9, 8, 7, oracle)
    params = dict(params, nitera=int(nitera or 2), sw=0.5)
    if call == "smol_adif":
        state = smol_state(state, params, seed)
    fn = ROUTINES[call.split("(")[0]]
    for name, err in float32_errors(fn, oracle, call, state, params).items():
        assert err < F32_TOL[fn.__name__], f"{entry} {name}: float32 error {err:.2e}"


@pytest.mark.parametrize("call", ADVT1 + ADVT2 + ["smol_adif"])
def test_inputs_are_not_written(oracle, call):
    _, params, state = random_state(7, 7, 6, 5, oracle)
    state = smol_state(state, params, 7)
    assert_inputs_not_written(ROUTINES[call.split("(")[0]], oracle, call, state, params)
