"""Torch depth, areas_masks and slpmax against the Fortran oracle.

depth: every (kb, kl1, kl2) the config allows for kb = 3..14, exact. areas_masks
and slpmax: random grids with land and steep random topography (hypothesis),
slmax in 0.05..0.5, exact (measured: 0, bit for bit; the bar is 1e-12). Inputs
are never written.

slpmax once took slmax as float32 (torch.where of two Python numbers) and was
off by 1e-7..1e-6 relative wherever it limited a slope; these tests pin it.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core_checks import assert_inputs_not_written
from oracle_compare import compare_call
from pompy.core.grid import areas_masks, depth, slpmax


def _depth_cases():
    for kb in range(3, 15):
        for kl1 in range(2, kb - 1):
            for kl2 in range(kl1 + 1, kb):
                yield kb, kl1, kl2
    # the longest log layers pom2k's 12 spacings allow: kl1 = 13, kb-kl2 = 12
    yield 16, 13, 14
    yield 20, 3, 8
    yield 30, 13, 18


@pytest.mark.parametrize("kb, kl1, kl2", list(_depth_cases()))
def test_depth_matches_oracle(oracle, kb, kl1, kl2):
    state = {name: np.zeros(kb) for name in ("z", "zz", "dz", "dzz")}
    errors = compare_call(depth, oracle, "depth", state, dict(kl1=kl1, kl2=kl2), rtol=1e-12)
    assert max(errors.values()) == 0.0


@pytest.mark.parametrize("kb, kl1, kl2", [(16, 14, 15), (21, 3, 8)])
def test_depth_beyond_the_spacings_is_refused(kb, kl1, kl2):
    z = torch.zeros(kb, dtype=torch.float64)
    with pytest.raises(ValueError, match="do not fit"):
        depth(kl1, kl2, z, z, z, z)


def test_depth_levels_by_hand():
    z = torch.zeros(7, dtype=torch.float64)
    got = depth(4, 5, z, z, z, z)
    # kdz steps 1, 1, 2 to kl1 = 4, then delz = 2 to kl2 = 5, then kdz(2)*2/kdz(2) twice
    want_z = -torch.tensor([0., 1., 2., 4., 6., 8., 10.], dtype=torch.float64) / 10.
    torch.testing.assert_close(got.z, want_z, rtol=0, atol=1e-15)
    torch.testing.assert_close(got.zz[:-1], (want_z[:-1] + want_z[1:]) / 2, rtol=0, atol=1e-15)
    assert got.dz[-1] == 0 and got.dzz[-1] == 0
    assert got.dz[:-1].sum().item() == pytest.approx(1.0, abs=1e-15)


def test_depth_rejects_levels_that_do_not_fit():
    z = torch.zeros(5, dtype=torch.float64)
    with pytest.raises(ValueError, match="kl1=4, kl2=3"):
        depth(4, 3, z, z, z, z)


def random_grid(seed: int, im: int, jm: int):
    """Spacings, a steep random bottom with land (h = 1) and walls, and its masks."""
    rng = np.random.default_rng(seed)
    h = rng.uniform(2.0, 4500.0, (im, jm)) ** rng.uniform(0.6, 1.0)   # slopes up to ~1
    h[rng.random((im, jm)) < 0.2] = 1.0
    h[:, 0] = h[:, -1] = 1.0
    state = {"dx": rng.uniform(3000, 9000, (im, jm)), "dy": rng.uniform(3000, 9000, (im, jm)),
             "h": h}
    state = {k: np.asfortranarray(v) for k, v in state.items()}
    state["fsm"] = np.asfortranarray((h > 1.0).astype(float))
    return state


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(3, 10), st.integers(3, 10))
def test_areas_masks_match_oracle(oracle, seed, im, jm):
    state = random_grid(seed, im, jm)
    for name in ("art", "aru", "arv", "fsm", "dum", "dvm"):
        state[name] = np.zeros((im, jm), order="F")
    compare_call(areas_masks, oracle, "areas_masks", state, {}, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(3, 10), st.integers(3, 10),
       st.floats(0.05, 0.5))
def test_slpmax_matches_oracle(oracle, seed, im, jm, slmax):
    state = random_grid(seed, im, jm)
    errors = compare_call(slpmax, oracle, "slpmax", state, dict(slmax=slmax), rtol=1e-12)
    assert errors["h"] == 0.0


def test_slpmax_limits_the_slopes(oracle):
    """On a steep grid the limiter does change h, and leaves every wet pair
    within a few sweeps' worth of slmax (pom2k stops after ten rounds)."""
    state = random_grid(3, 10, 9)
    slmax = 0.1
    got = slpmax(slmax, torch.tensor(state["fsm"]), torch.tensor(state["h"])).h.numpy()
    assert np.abs(got - state["h"]).max() > 100.0
    wet = state["fsm"] > 0
    h = got
    pairs = wet[1:-2, 1:-1] & wet[2:-1, 1:-1]
    slope = np.abs(h[2:-1, 1:-1] - h[1:-2, 1:-1]) / (h[2:-1, 1:-1] + h[1:-2, 1:-1])
    before = np.abs(state["h"][2:-1, 1:-1] - state["h"][1:-2, 1:-1]) / (
        state["h"][2:-1, 1:-1] + state["h"][1:-2, 1:-1])
    assert slope[pairs].max() < before[pairs].max()
    land = ~wet
    np.testing.assert_array_equal(got[land], state["h"][land])   # land is never touched


@pytest.mark.parametrize("call, params", [("slpmax", dict(slmax=0.1)), ("areas_masks", {})])
def test_inputs_are_not_written(oracle, call, params):
    state = random_grid(5, 7, 6)
    for name in ("art", "aru", "arv", "dum", "dvm"):
        state[name] = np.zeros((7, 6), order="F")
    fn = {"slpmax": slpmax, "areas_masks": areas_masks}[call]
    assert_inputs_not_written(fn, oracle, call, state, params)
