"""pom2k's main-program sections in torch (pompy.core.stepping, problems,
grid) against the oracle routines of the same names.

surface_forcing and vertical_averages take their arguments by name like the
physics routines; external_step and internal_step take the whole state and
are compared on every array the oracle writes, on random states drawn by
hypothesis (land, steep topography, both flow signs). Measured: all equal
to the oracle to the last bit, except where dens runs (internal_step with
T/S: dens's |s|**1.5, glibc's libmvec pow in the oracle, 1 ulp of rho, up
to 1.6e-16 of the fields after it) -- and with pompy.compat.fortran_math,
which gives dens the oracle's pow, that is exact too. The set-up
(initialize, seamount, box) takes log (cbc) and, for the seamount, sin (dx)
and exp (h, t), where libmvec and torch differ by an ulp (1.7e-16 box,
3.6e-16 seamount); with fortran_math it is exact too.
"""
import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_fields_close
from oracle_compare import compare_call
from pompy.compat import fortran_math
from pompy.config import load_config, parameters
from pompy.calls import call
from pompy.core import stepping
from pompy.core.external import checks, split
from pompy.core.problems import grid_coordinates
from pompy.oracle.driver import new_state
from strategies import pom_states, random_state, to_torch

CONFIGS = __import__("pathlib").Path(__file__).parents[1] / "configs"


def compare_state_call(fn, oracle, name, state, params, rtol, **extra):
    """A state-style torch section (fn(s, p) -> state) against the oracle
    routine ``name``: every array the oracle writes, and its scalar outputs."""
    want = oracle.call(name, state, dict(params, **extra))
    got = fn(to_torch(state), dict(params, **extra))
    got = {k: (v.detach().cpu().numpy() if torch.is_tensor(v) else v) for k, v in got.items()}
    arrays = {k for k, v in want.items() if isinstance(v, np.ndarray)}
    errors = assert_fields_close(got, want, rtol, names=arrays, label=f"torch {name}")
    for key in set(want) - arrays:
        assert float(got[key]) == pytest.approx(want[key], rel=rtol, abs=0), key
    return errors


@settings(max_examples=15, deadline=None)
@given(pom_states(), st.sampled_from([1, 2]))
def test_surface_forcing_matches_oracle(oracle, case, iproblem):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    errors = compare_call(stepping.surface_forcing, oracle, "surface_forcing", state,
                          dict(params, iproblem=iproblem), rtol=0.0)
    assert max(errors.values()) == 0.0


def test_float32_wind_stress_takes_the_taper_rounded_once():
    """In float32 the wind's taper cos(pi*(j-1)/jmm1) is pom2k's float64
    value rounded once (numpy's float64 cos here), then float32 arithmetic
    as pom2k's expression: so Inductor's float32 cos, which differs from
    ATen's by an ulp at a third of the j, does not enter a compiled step."""
    im, jm, kb = 17, 49, 5
    rng = np.random.default_rng(3)
    dvm = (rng.random((im, jm)) > 0.3).astype(np.float32)
    zeros2, zeros3 = torch.zeros(im, jm), torch.zeros(im, jm, kb)
    out = stepping.surface_forcing(
        iproblem=1, ramp=0.7, wind_factor=1.5, tbias=0.0, sbias=0.0, dvm=torch.from_numpy(dvm),
        t=zeros3, s=zeros3, tclim=zeros3, sclim=zeros3, wusurf=zeros2, wvsurf=zeros2,
        e_atmos=zeros2, vfluxf=zeros2, w=zeros3, wtsurf=zeros2, swrad=zeros2, wssurf=zeros2)
    pi = np.arctan(1.0) * 4.0
    cos = np.cos(pi * np.arange(jm, dtype=np.float64) / (jm - 1)).astype(np.float32)
    taper = np.float32(0.7 * 1.5) * (np.float32(1.e-4) * cos)
    I, J, Im, Jp = slice(1, im - 1), slice(1, jm - 1), slice(0, im - 2), slice(2, jm)
    corners = dvm[I, Jp] + dvm[Im, Jp] + dvm[Im, J] + dvm[I, J]
    want = np.zeros((im, jm), np.float32)
    want[I, J] = taper[None, J] * np.float32(.25) * corners
    assert out.wusurf.dtype == torch.float32
    assert out.wusurf.numpy().tobytes() == want.tobytes()


@settings(max_examples=15, deadline=None)
@given(pom_states(), st.sampled_from([2, 3]))
def test_vertical_averages_matches_oracle(oracle, case, mode):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    compare_call(stepping.vertical_averages, oracle, "vertical_averages", state,
                 dict(params, mode=mode), rtol=2e-16)


def external_step_outside_autograd(s, p):
    """external_step as SplitExplicit steps it in a run (inference mode):
    the passes' constants computed once and given, the check read on the host."""
    with torch.inference_mode():
        return split.external_step(s, p, fixed=split.pass_constants(s, p))


EXTERNAL_STEPS = pytest.mark.parametrize(
    "step", [split.external_step, external_step_outside_autograd], ids=["recorded", "run"])


@EXTERNAL_STEPS
@settings(max_examples=20, deadline=None)
@given(pom_states(), st.sampled_from([1, 5, 8, 9, 10]), st.sampled_from([2, 3]))
def test_external_step_matches_oracle(oracle, step, case, iext, mode):
    """iext covers advave's ispadv passes (5, 10) and etf's last three (8, 9, 10)."""
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    params = dict(params, isplit=10, ispadv=5, mode=mode)
    compare_state_call(step, oracle, "external_step", state, params, rtol=0.0, iext=iext)


def test_the_passes_constants_are_refused_where_autograd_records(oracle):
    """Constants made outside autograd would cut a recorded pass's gradients
    through them: external_step refuses them there."""
    _, params, state = random_state(3, 8, 7, 5, oracle)
    s, p = to_torch(state), dict(params, iext=1)
    with torch.no_grad():
        fixed = split.pass_constants(s, p)
    with pytest.raises(ValueError, match="outside autograd"):
        split.external_step(s, p, fixed=fixed)


@EXTERNAL_STEPS
def test_external_step_skips_the_shift_when_vamax_exceeds_vmaxl(oracle, step):
    _, params, state = random_state(3, 8, 7, 5, oracle)
    params = dict(params, vmaxl=1e-3)          # every state breaks it
    errors = compare_state_call(step, oracle, "external_step", state, params, rtol=0.0, iext=1)
    assert max(errors.values()) == 0.0


@settings(max_examples=12, deadline=None)
@given(pom_states(), st.sampled_from([3, 4]), st.sampled_from([1, 2]))
def test_internal_step_matches_oracle(oracle, case, mode, nadv):
    seed, im, jm, kb = case
    _, params, state = random_state(seed, im, jm, kb, oracle)
    params = dict(params, mode=mode, nadv=nadv)
    # mode 3: dens's pow (libmvec in the oracle) moves rho by an ulp; the
    # measured worst over the fields written after it is 1.6e-16
    compare_state_call(stepping.internal_step, oracle, "internal_step", state, params,
                       rtol=0.0 if mode == 4 else 5e-15)
    with fortran_math():   # with the oracle's pow: the last bit
        compare_state_call(stepping.internal_step, oracle, "internal_step", state, params, rtol=0.0)


@pytest.mark.parametrize("config_name, rtol", [("box.nml", 2e-16), ("seamount.nml", 1e-15)])
def test_initialize_matches_oracle(oracle, config_name, rtol):
    """torch's log (cbc) and, for the seamount, sin (dx) and exp (h, t)
    differ from libmvec's by an ulp at some points: measured 1.7e-16 (box),
    3.6e-16 (seamount); with fortran_math, exact."""
    config = load_config(CONFIGS / config_name)
    want = new_state(config)
    zeros = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in want.items()}
    got = {k: v.numpy() for k, v in stepping.initialize(zeros, parameters(config)).items()}
    assert_fields_close(got, want, rtol, label=config_name)
    with fortran_math():
        got = {k: v.numpy() for k, v in stepping.initialize(zeros, parameters(config)).items()}
    errors = assert_fields_close(got, want, 0.0, label=config_name)
    assert max(errors.values()) == 0.0


def test_initialize_small_seamount_with_slope_limit(oracle):
    """slmax < 1 runs slpmax inside the seamount set-up."""
    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=21, jm=17, kb=11,
                                 kl2=9, slmax=0.1)
    want = new_state(config)
    zeros = {k: torch.zeros(v.shape, dtype=torch.float64) for k, v in want.items()}
    got = {k: v.numpy() for k, v in stepping.initialize(zeros, parameters(config)).items()}
    assert_fields_close(got, want, 1e-15, label="seamount slmax=0.1")
    assert not np.array_equal(want["h"], new_state(dataclasses.replace(config, slmax=2.0))["h"])


def test_grid_coordinates_match_oracle(oracle):
    rng = np.random.default_rng(4)
    state = {"dx": np.asfortranarray(rng.uniform(2e3, 9e3, (9, 7))),
             "dy": np.asfortranarray(rng.uniform(2e3, 9e3, (9, 7)))}
    for name in ("east_c", "north_c", "east_e", "north_e", "east_u", "north_u", "east_v",
                 "north_v", "rot"):
        state[name] = np.asfortranarray(rng.standard_normal((9, 7)))
    errors = compare_call(grid_coordinates, oracle, "grid_coordinates", state, {}, rtol=0.0)
    assert max(errors.values()) == 0.0


def test_call_binds_pom2k_call_strings():
    rho = torch.zeros(3, 3, 4)
    s = {"s": torch.full((3, 3, 4), 35.0), "t": torch.full((3, 3, 4), 10.0), "rho": rho,
         "zz": torch.tensor([-.1, -.3, -.6, -.9]), "h": torch.full((3, 3), 100.0),
         "fsm": torch.ones(3, 3)}
    p = dict(grav=9.806, rhoref=1025.0, tbias=0.0, sbias=0.0)
    out = call("dens(s,t,rho)", s, p, stepping.ROUTINES)
    assert set(out) == {"rho"} and out["rho"][0, 0, 0] > 0 and rho.abs().max() == 0
    with pytest.raises(KeyError, match="no value for argument 'grav'"):
        call("dens(s,t,rho)", s, {}, stepping.ROUTINES)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_finite_is_numpys_isfinite_of_every_prognostic_field(dtype):
    """stepping.finite (each field's least and largest values) against
    numpy's isfinite over every value: NaN, +-inf, the largest finite
    values and subnormals in one field or another, batched too."""
    from pompy import variables
    names = variables.names("prognostic")
    rng = np.random.default_rng(7)
    big = np.finfo(torch.empty(0, dtype=dtype).numpy().dtype)
    base = {n: rng.normal(size=(5, 4, 3)).astype(big.dtype) for n in names}
    cases = [{}, {"t": big.max}, {"u": -big.max}, {"q2": big.tiny / 4}, {"el": np.nan},
             {"s": np.inf}, {"v": -np.inf}, {names[-1]: np.nan}]
    for case in cases:
        fields = {n: a.copy() for n, a in base.items()}
        for n, value in case.items():
            fields[n].reshape(-1)[int(rng.integers(fields[n].size))] = value
        want = all(np.isfinite(a).all() for a in fields.values())
        got = stepping.finite({n: torch.from_numpy(a) for n, a in fields.items()})
        assert got.dtype == torch.bool and bool(got) == want, case
    both = {n: torch.stack([torch.from_numpy(base[n]), torch.from_numpy(base[n])]) for n in names}
    both["q2lb"] = both["q2lb"].clone()
    both["q2lb"][1, 0, 0, 0] = float("nan")
    assert torch.vmap(stepping.finite)(both).tolist() == [True, False]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_velocity_check_takes_pom2ks_last_maximum(dtype):
    """vamax and (imax, jmax) as pom2k's loop finds them (j outer, i inner,
    ``abs(vaf) >= vamax``: the last maximum in Fortran order), ties of
    either sign included, against that loop in Python; batched and on host
    arrays too."""
    rng = np.random.default_rng(11)
    cases = []
    for _ in range(20):
        vaf = rng.integers(-3, 4, size=(7, 5)).astype(np.float64)   # many ties
        cases.append(vaf)
    cases.append(np.zeros((7, 5)))
    wanted = []
    for vaf in cases:
        vamax, imax, jmax = 0.0, 1, 1
        for j in range(vaf.shape[1]):
            for i in range(vaf.shape[0]):
                if abs(vaf[i, j]) >= vamax:
                    vamax, imax, jmax = abs(vaf[i, j]), i + 1, j + 1
        wanted.append((vamax, imax, jmax))
        got = checks.vel_check(torch.tensor(vaf, dtype=dtype))
        assert (float(got[0]), int(got[1]), int(got[2])) == (vamax, imax, jmax)
        host = checks.vel_check(torch.tensor(vaf, dtype=dtype).numpy())    # the host passes'
        assert (float(host[0]), int(host[1]), int(host[2])) == (vamax, imax, jmax)
    together = torch.vmap(checks.vel_check)(torch.tensor(np.stack(cases[:4]), dtype=dtype))
    for m in range(4):
        assert (float(together[0][m]), int(together[1][m]), int(together[2][m])) == wanted[m]
