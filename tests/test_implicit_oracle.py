"""The implicit free surface's Fortran twin (reference_fortran/implicit.f90)
against the torch code (pompy.core.external.implicit, .cg, ImplicitCore).

- cg_dot adds in the order of torch's CPU sum (ATen's cascade sum on
  4-wide vectors), so the Fortran CG reproduces the reference CG
  (cg.solve) to the last bit; measured: equal on every grid size up to
  torch's parallel threshold (32768 cells; above it torch splits the sum
  across threads and the last bits differ).
- implicit_step on random states (land, steep topography, open edges,
  modes 2, 3, 4, theta in [0.5, 1], dti from 60 s to 2000 s), each with
  its own solver at the default cg_tol = 1e-12: every output within 1e-12
  of its magnitude; measured: equal to the last bit. With a sequential
  dot product instead (one accumulator), the two CGs stop on different
  rounding and the steps differed by up to 4.7e-10 (dti = 600 s) at
  cg_tol = 1e-12, 5.6e-12 at cg_tol = 1e-14: the solver's tolerance times
  the condition number (c/art up to ~1e4 at dti = 2000 s), not the step.
  With one solver shared (the Fortran's, called from torch) the step is
  bit for bit whatever the platform.
- whole runs: a 21x17x11 seamount, 36 steps, torch ImplicitCore with the
  reference CG and pompy.compat.fortran_math against OracleModel(config,
  core="implicit"): every variable equal to the last bit. The 65x49x21
  seamount over 240 steps is validation/implicit_oracle.py (the torch core
  takes minutes there).
- the box (configs/box.nml, a day), the Fortran run: without inflow
  (vfluxf = 0 after the set-up, which surface_forcing keeps) the volume
  changes by 6.7e-22 of itself per day (bar 1e-12); with the box's inflow
  vfluxf = -1e-5 m/s the mean surface rises at the inflow rate to
  1.3e-16 relative (bar 1e-12). (The torch core gives the same box run
  to the last bit: validation/implicit_oracle.py.)
- the driver: chunks continue bit for bit, NotConverged and CFLViolation
  stop the run with the last good state.
"""
from __future__ import annotations

import dataclasses
import platform
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_fields_close
from pompy import variables
from pompy.compat import fortran_math
from pompy.config import load_config
from pompy.core.external import cg
from pompy.core.external import implicit as scheme
from pompy.core.external.implicit import SemiImplicit
from pompy.core.implicit import ImplicitCore
from pompy.core.stepping import ROUTINES
from pompy.errors import CFLViolation, NotConverged
from pompy.oracle.driver import OracleModel, main_loop, new_state, run_steps
from strategies import pom_states, random_state, to_torch

CONFIGS = Path(__file__).parents[1] / "configs"
SCALARS = ("vamax", "imax", "jmax", "cg_residual")


def _f(t: torch.Tensor) -> np.ndarray:
    return np.asfortranarray(t.detach().cpu().numpy().astype(np.float64))


def fortran_cg(oracle):
    """The oracle's cg_solve as a torch solver (x, relative residual)."""
    def solve(a, b, tol, maxiter):
        x = np.zeros(tuple(b.shape), order="F")
        residual, _ = oracle.module.cg_solve(_f(a.diag), _f(a.cx), _f(a.cy),
                                             _f(a.active.double()), _f(b), tol, maxiter, x)
        return torch.from_numpy(x.copy()), torch.tensor(residual, dtype=torch.float64)
    return solve


def torch_sums_like_cg_dot(oracle) -> bool:
    """Whether this torch's CPU sum adds in cg_dot's order (ATen's x86
    kernel; other platforms may vectorise differently)."""
    rng = np.random.default_rng(0)
    for shape in ((7, 5), (65, 49), (33, 31)):
        a, b = rng.standard_normal(shape) * 10 ** rng.uniform(-6, 6, shape), rng.standard_normal(shape)
        if float((torch.from_numpy(a) * torch.from_numpy(b)).sum()) != \
                oracle.module.cg_dot(np.asfortranarray(a), np.asfortranarray(b)):
            return False
    return True


def implicit_state(oracle, seed, im, jm, kb, land, **params):
    config, p, s = random_state(seed, im, jm, kb, oracle, land=land)
    return s, dict(p, **params)


def compare_step(oracle, state, params, solver, rtol):
    """implicit_step of torch (with ``solver``) and of the oracle on one
    state: every array the oracle writes, and its scalar outputs."""
    want = oracle.call("implicit_step", state, params)
    got = scheme.implicit_step(to_torch(state), params, ROUTINES, solver=solver)
    got = {k: (v.detach().numpy() if torch.is_tensor(v) else v) for k, v in got.items()}
    arrays = [k for k, v in want.items() if isinstance(v, np.ndarray)]
    errors = assert_fields_close(got, want, rtol, names=arrays, label="implicit_step")
    for name in SCALARS:
        assert float(got[name]) == pytest.approx(want[name], rel=rtol, abs=0), name
    return errors, want


steps_drawn = st.tuples(pom_states(), st.floats(0.0, 0.3), st.sampled_from([2, 3, 4]),
                        st.floats(0.5, 1.0), st.sampled_from([60.0, 180.0, 600.0, 2000.0]))


# ------------------------------------------------------------------ the solver

@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="cg_dot follows ATen's x86 CPU sum")
def test_cg_dot_adds_in_torchs_order(oracle):
    rng = np.random.default_rng(1)
    for im in range(3, 70, 5):
        for jm in range(3, 70, 7):
            a = rng.standard_normal((im, jm)) * 10 ** rng.uniform(-6, 6, (im, jm))
            b = rng.standard_normal((im, jm))
            want = float((torch.from_numpy(a) * torch.from_numpy(b)).sum())
            assert oracle.module.cg_dot(np.asfortranarray(a), np.asfortranarray(b)) == want, (im, jm)


def test_cg_solve_is_the_reference_cg(oracle):
    """On the elevation equations of random implicit steps: the Fortran CG
    and cg.solve give the same solution and residual (to the last bit
    where torch sums as cg_dot), both within cg_tol."""
    exact = torch_sums_like_cg_dot(oracle)
    for seed in range(6):
        state, params = implicit_state(oracle, seed, 9, 8, 5, 0.2, dti=600.0, cg_tol=1e-12)
        seen = {}

        def spy(a, b, tol, maxiter):
            seen["a"], seen["b"] = a, b
            return cg.solve(a, b, tol, maxiter)
        scheme.implicit_step(to_torch(state), params, ROUTINES, solver=spy)
        a, b = seen["a"], seen["b"]
        x, res = cg.solve(a, b, 1e-12, 500)
        y, res_f = fortran_cg(oracle)(a, b, 1e-12, 500)
        assert float(res) <= 1e-12 and float(res_f) <= 1e-12
        if exact:
            assert torch.equal(x, y) and float(res) == float(res_f)
        else:
            assert float((x - y).abs().max() / x.abs().max()) < 1e-9


# ------------------------------------------------------------------ one step

@settings(max_examples=20, deadline=None)
@given(steps_drawn)
def test_implicit_step_with_one_solver_is_bit_for_bit(oracle, drawn):
    """The step itself, the solver shared (the oracle's CG called from
    torch): every output equal to the last bit, on any platform."""
    (seed, im, jm, kb), land, mode, theta, dti = drawn
    state, params = implicit_state(oracle, seed, im, jm, kb, land, mode=mode, theta=theta,
                                   dti=dti)
    errors, _ = compare_step(oracle, state, params, fortran_cg(oracle), rtol=0.0)
    assert max(errors.values()) == 0.0


@settings(max_examples=20, deadline=None)
@given(steps_drawn)
def test_implicit_step_matches_torch_with_the_reference_solver(oracle, drawn):
    """Each with its own CG (torch: cg.solve) at the default cg_tol: every
    output within 1e-12 of its magnitude (measured: equal to the last bit)."""
    if not torch_sums_like_cg_dot(oracle):
        pytest.skip("this torch sums in another order than cg_dot (see the module docstring)")
    (seed, im, jm, kb), land, mode, theta, dti = drawn
    state, params = implicit_state(oracle, seed, im, jm, kb, land, mode=mode, theta=theta,
                                   dti=dti)
    errors, want = compare_step(oracle, state, params, cg.solve, rtol=1e-12)
    assert want["cg_residual"] <= params["cg_tol"] * (1 + 1e-9)


def test_implicit_step_carries_nothing_through_land(oracle):
    """Faces to a dry cell carry no transport (the operator has no such
    faces; neither have the fluxes continuity uses), so the new elevation
    is exactly the continuity of the transports the internal mode gets."""
    state, params = implicit_state(oracle, 3, 9, 8, 5, 0.3, dti=600.0)
    out = oracle.call("implicit_step", state, params)
    dum, dvm = state["dum"], state["dvm"]
    assert np.abs(out["fluxua"][dum == 0]).max() == 0.0
    assert np.abs(out["fluxva"][dvm == 0]).max() == 0.0
    assert np.abs(out["utf"][1:][dum[1:] == 0]).max() == 0.0
    assert np.abs(out["vtf"][:, 1:][dvm[:, 1:] == 0]).max() == 0.0


# ------------------------------------------------------------------ whole runs

def small_seamount(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=21, jm=17, kb=11, kl1=4, kl2=9), **changes})


def torch_run(config, steps: int, solver=None) -> dict:
    """``steps`` of the torch implicit core with pom2k's elementary
    functions and ``solver`` (default: the core's own choice, which is the
    reference CG inside fortran_math)."""
    with fortran_math():
        core = ImplicitCore(config)
        if solver is not None:
            core.external = SemiImplicit(solver)
        core.run_initialization()
        core.iend = steps
        core.run_time_loop()
    return core.numpy_state()


def test_a_seamount_run_equals_the_torch_core_bit_for_bit(oracle):
    """36 steps (dti = 90 s here: dte 6, isplit 15) of a 21x17x11 seamount;
    the torch core with pom2k's elementary functions and its own choice of
    solver (the reference CG inside fortran_math).
    Every variable of pompy.variables equal to the last bit."""
    if not torch_sums_like_cg_dot(oracle):
        pytest.skip("this torch sums in another order than cg_dot (see the module docstring)")
    config = small_seamount(isplit=15)
    model = OracleModel(config, core="implicit")
    model.advance(36)
    got = torch_run(config, 36)
    assert_fields_close(got, model.state, 0.0, names=variables.ALL, label="seamount 36 steps")


def test_the_driver_continues_bit_for_bit_and_across_chunks(oracle):
    config = small_seamount()
    whole = new_state(config)
    out = main_loop(whole, config, 1, 12, core="implicit")
    assert out["iint_done"] == 12 and out["cg_residual"] <= config.cg_tol
    assert out["cg_iters"] > 0 and out["cg_iters_total"] > 11 * out["cg_iters"] // 2
    model = OracleModel(config, core="implicit")
    assert model.name == "oracle_implicit" and OracleModel(config).name == "oracle"
    model.chunk = 5
    steps = []
    model.advance(12, on_step=lambda iint, vamax: steps.append((iint, vamax)))
    # told of each chunk by its last step, with that step's vamax (the others' are not kept)
    assert [iint for iint, _ in steps] == [5, 10, 12]
    assert steps[-1][1] == float(np.abs(model.state["vaf"]).max())
    for name in variables.names("restart"):
        np.testing.assert_array_equal(model.state[name], whole[name], err_msg=name)
    # the explicit scheme is another run
    explicit = new_state(config)
    run_steps(explicit, config, 1, 12)
    assert not np.array_equal(explicit["el"], whole["el"])


def test_a_solver_that_cannot_converge_stops_the_run(oracle):
    config = small_seamount(cg_maxiter=2)
    model = OracleModel(config, core="implicit")
    with pytest.raises(NotConverged, match=r"step iint=1: the elevation solver stopped at "
                                           r"relative residual .* after cg_maxiter=2") as stop:
        model.advance(3)
    assert stop.value.iint == 1 and model.iint == 0
    for name in ("el", "ua", "t"):
        np.testing.assert_array_equal(stop.value.last_good[name], new_state(config)[name])


def test_a_velocity_past_vmaxl_stops_the_run_with_the_last_good_state(oracle):
    config = small_seamount()
    reference = new_state(config)
    main_loop(reference, config, 1, 6, core="implicit")
    vamax = float(np.abs(reference["vaf"]).max())
    model = OracleModel(dataclasses.replace(config, vmaxl=vamax * 0.999), core="implicit")
    with pytest.raises(CFLViolation) as stop:
        model.advance(10)
    assert stop.value.iint <= 6
    good = new_state(config)
    if stop.value.iint > 1:
        main_loop(good, config, 1, stop.value.iint - 1, core="implicit")
    for name in ("el", "ua", "u", "t"):
        np.testing.assert_array_equal(stop.value.last_good[name], good[name], err_msg=name)


# ------------------------------------------------------------------ the box

def box_day(inflow: bool):
    config = load_config(CONFIGS / "box.nml")
    state = new_state(config)
    if not inflow:
        state["vfluxf"][...] = 0.0        # the box keeps vfluxf from its set-up
    before = {k: v.copy() for k, v in state.items()}
    main_loop(state, config, 1, config.iend, core="implicit")
    return config, before, state


def volume(state) -> float:
    return float(((state["h"] + state["el"]) * state["art"] * state["fsm"]).sum())


def volume_change(before, after) -> float:
    """The change of volume, summed from the change of elevation (exact to
    round-off, not lost against the basin's 4500 m)."""
    return float(((after["el"] - before["el"]) * before["art"] * before["fsm"]).sum())


def test_the_closed_box_conserves_volume(oracle):
    config, before, after = box_day(inflow=False)
    days = config.iend * config.dti / 86400
    assert abs(volume_change(before, after)) / volume(before) / days < 1e-12
    assert np.abs(after["u"]).max() < 1e-10 and np.abs(after["v"]).max() < 1e-10


def test_the_box_rises_at_the_inflow_rate(oracle):
    config, before, after = box_day(inflow=True)
    wet = before["fsm"] > 0
    vfluxf = np.unique(after["vfluxf"][wet])
    assert vfluxf.size == 1 and vfluxf[0] < 0
    area = float((before["art"] * before["fsm"]).sum())
    rise = volume_change(before, after) / area
    assert rise == pytest.approx(-vfluxf[0] * config.iend * config.dti, rel=1e-12)
