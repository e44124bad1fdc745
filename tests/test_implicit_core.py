"""The implicit core: its elevation operator, the two solvers
against scipy's direct solve, implicit differentiation against finite
differences, continuity and conservation, gradients through whole steps,
and the fast path. The comparison with its Fortran twin is in
tests/test_implicit_oracle.py; the long runs (10 days at dti = 600 s, one
day against the explicit core) in validation/implicit_core.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse.linalg as spla
import torch
from torch.autograd import forward_ad

from pompy import compat, variables
from pompy.config import load_config
from pompy.core import setup
from pompy.core.external import cg
from pompy.core.stepping import ROUTINES
from pompy.core.external import implicit as scheme
from pompy.core.implicit import ImplicitCore
from pompy.errors import ConfigError, NotConverged
from test_gradcheck import (CORE_OUT, CORE_WRT, check_gradients, core_objective, guards_watched,
                            section_forward, state_of)

CONFIGS = Path(__file__).parents[1] / "configs"
DT = torch.float64


def seamount(**changes):
    """An 8x7x5 seamount at dti = 90 s (dte 6, isplit 15; the implicit core
    takes one external step per dti)."""
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=8, jm=7, kb=5, kl1=2, kl2=3, isplit=15),
                                          **changes})


def developed(config=None, steps=2, **kw) -> ImplicitCore:
    core = ImplicitCore(config or seamount(), **kw)
    core.run_initialization()
    core.iend = steps
    core.run_time_loop()
    return core


def operator_of(core) -> tuple[cg.FivePoint, torch.Tensor]:
    """The elevation equation of the core's next step: (A, rhs)."""
    seen = {}

    def spy(a, b, tol, maxiter):
        seen["a"], seen["b"] = a, b
        return cg.solve(a, b, tol, maxiter)
    s = dict(core.state)
    scheme.implicit_step(s, dict(core.params), core.routines, solver=spy)
    return seen["a"], seen["b"]


# ------------------------------------------------------------------ the operator and solvers

def test_the_operator_is_symmetric_positive_definite_with_identity_land_rows():
    a, _ = operator_of(developed(seamount(im=12, jm=10)))
    m = cg.to_scipy(a)
    assert abs(m - m.T).max() == 0.0
    dense = m.toarray()
    assert np.linalg.eigvalsh(dense).min() > 0
    inactive = ~a.active.numpy().T.reshape(-1)        # i fastest, as to_scipy numbers cells
    assert np.array_equal(dense[inactive][:, inactive], np.eye(inactive.sum()))
    assert not dense[inactive][:, ~inactive].any()


@pytest.mark.parametrize("solver", ["reference", "pcg"])
def test_both_solvers_match_scipys_direct_solve(solver):
    """Measured: 1.0e-13 (reference) and 5.4e-14 (pcg, 40 iterations)
    relative to the solution, at cg_tol 1e-13."""
    a, b = operator_of(developed(seamount(im=12, jm=10)))
    want = spla.spsolve(cg.to_scipy(a).tocsc(), b.numpy().T.reshape(-1))
    want = torch.from_numpy(want.reshape(b.shape[::-1]).T.copy())
    if solver == "reference":
        x, res = cg.solve(a, b, 1e-13, 200)
    else:
        x, res, iterations = cg.pcg(a, b, 1e-13, 200)
        assert iterations < 200
    assert float(res) <= 1e-13
    assert float((x - want).abs().max() / want.abs().max()) < 1e-10


def test_pcg_and_reference_agree_within_tolerance():
    a, b = operator_of(developed(seamount(im=12, jm=10)))
    for tol in (1e-6, 1e-10):
        x1, _ = cg.solve(a, b, tol, 300)
        x2, _, _ = cg.pcg(a, b, tol, 300)
        assert float((x1 - x2).norm() / x1.norm()) <= 10 * tol


def test_reference_cg_gradients_match_finite_differences():
    """Implicit differentiation w.r.t. the right-hand side and the
    depth-dependent coefficients (diag, cx, cy), forward and reverse mode."""
    a, b = operator_of(developed(seamount(im=6, jm=5)))
    scale = float(a.diag[a.active].mean())

    def f(diag, cx, cy, rhs):       # everything in units of the mean diagonal: x is unchanged
        scaled = cg.FivePoint(diag * scale, cx * scale, cy * scale, a.active)
        x, _ = cg.solve(scaled, rhs * scale, 1e-12, 200)
        return x
    inputs = tuple((t / scale).detach().clone().requires_grad_(True)
                   for t in (a.diag, a.cx, a.cy, b))
    assert torch.autograd.gradcheck(f, inputs, eps=1e-7, atol=1e-7, check_forward_ad=True)


def test_reference_cg_memory_does_not_grow_with_iterations():
    """The graph keeps the same tensors for 10 or 400 iterations (implicit
    differentiation: nothing per iteration is saved)."""
    a, b = operator_of(developed(seamount(im=6, jm=5)))

    def saved(maxiter):
        count = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: count.append(t.numel()) or t,
                                                      lambda t: t):
            diag = a.diag.clone().requires_grad_(True)
            cg.solve(cg.FivePoint(diag, a.cx, a.cy, a.active), b, 1e-14, maxiter)
        return sum(count)
    assert saved(10) == saved(400) > 0


def test_with_gradients_the_pcg_is_differentiated_implicitly(monkeypatch):
    """Where a gradient flows (reverse mode; forward mode, under no_grad
    too) the core's solver is the PCG, differentiated implicitly: the
    reference CG's fixed budget is not run, and gradients flow."""
    core = developed()
    a, b = operator_of(developed())

    def refuse(*args, **kwargs):
        raise AssertionError("the reference CG ran outside fortran_math")
    monkeypatch.setattr(cg, "_cg", refuse)
    el0 = core.el.detach().clone().requires_grad_(True)
    core.el = el0
    core.iend = 4
    core.run_time_loop()
    (core.u.square().sum() + core.el.sum()).backward()
    assert torch.isfinite(el0.grad).all() and float(el0.grad.abs().max()) > 0
    with torch.no_grad(), forward_ad.dual_level():
        x, _ = cg.solve_auto(a, forward_ad.make_dual(b, torch.ones_like(b)), 1e-12, 200)
        assert forward_ad.unpack_dual(x).tangent is not None


def test_a_run_with_gradients_is_the_run_without_to_the_last_bit():
    """Training's batches (gradients on) and its test batches (off) solve
    alike: the same states to the last bit, so their loss floors agree."""
    with torch.no_grad():
        fast = developed(steps=6)
    slow = ImplicitCore(seamount())
    slow.run_initialization()
    slow.el = slow.el.clone().requires_grad_(True)
    slow.iend = 6
    slow.run_time_loop()
    assert slow.u.requires_grad
    for name in ("el", "ua", "u", "t"):
        assert torch.equal(fast.state[name], slow.state[name].detach()), name


def test_pcg_gives_the_reference_cgs_run_within_tolerance():
    with torch.no_grad():
        fast = developed(steps=6)
        with compat.fortran_math():
            slow = developed(steps=6)
    for name in ("el", "ua", "u", "t"):
        a, b = fast.state[name], slow.state[name]
        assert float((a - b).abs().max() / b.abs().max()) < 1e-9, name


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_a_derivative_solve_that_stops_short_is_refused(mode):
    """b = 0 converges at once (x = 0); the adjoint (or tangent) solve of a
    random right-hand side cannot in one iteration: NotConverged names it
    (it once went on silently with the unconverged lambda)."""
    a, b = operator_of(developed(seamount(im=6, jm=5)))
    zero = torch.zeros_like(b)
    weights = torch.rand(b.shape, generator=torch.Generator().manual_seed(0), dtype=b.dtype)
    if mode == "reverse":
        diag = a.diag.clone().requires_grad_(True)
        x, res = cg.solve_auto(cg.FivePoint(diag, a.cx, a.cy, a.active), zero, 1e-12, 1)
        assert float(res) == 0.0
        with pytest.raises(NotConverged, match=r"^the adjoint elevation solve \(backward pass\) "
                                               r"stopped at relative residual .* > cg_tol=1e-12 "
                                               r"after cg_maxiter=1"):
            (x * weights).sum().backward()
    else:
        with forward_ad.dual_level(), \
                pytest.raises(NotConverged, match=r"^the tangent elevation solve \(forward mode\)"):
            cg.solve_auto(a, forward_ad.make_dual(zero, weights), 1e-12, 1)


def test_a_tolerance_below_the_arithmetics_floor_is_refused_and_the_true_residual_checked():
    """cg_tol under 10 eps of the dtype: refused at once, naming the floor.
    Above it but out of reach (1e-15 in float64 here): the step stops on
    the true residual |b - A x|/|b|, which the recurrence's (7e-18 at cg_tol
    1e-17 before) no longer hides."""
    with pytest.raises(ConfigError, match=r"cg_tol=1e-17 is below what float64 arithmetic "
                                          r"reaches: .* at least 2.2e-15 in float64"):
        ImplicitCore(seamount(cg_tol=1e-17))
    with pytest.raises(ConfigError, match=r"cg_tol=1e-12 is below what float32 .* 1.2e-06"):
        ImplicitCore(seamount(cg_tol=1e-12), dtype=torch.float32)
    a, b = operator_of(developed())
    x, res = cg.solve(a, b, 2.3e-15, 2000)
    true = float(torch.linalg.vector_norm(b - cg.apply(a, x)) / torch.linalg.vector_norm(b))
    assert float(res) == pytest.approx(true, rel=1e-6)
    x, res, _ = cg.pcg(a, b, 2.3e-15, 2000)
    assert float(res) == pytest.approx(
        float(torch.linalg.vector_norm(b - cg.apply(a, x)) / torch.linalg.vector_norm(b)), rel=1e-6)


# ------------------------------------------------------------------ continuity and conservation

def test_continuity_holds_to_round_off_with_the_internal_modes_transports():
    """el(n+1) - el(n) = -dti (div(dy utf, dx vtf) / art + vfluxf) on the
    interior wet cells: the transports the internal mode adjusts to are those
    of the elevation's continuity, to round-off (not to the solver's
    tolerance: cg_tol is set loose here)."""
    core = developed(seamount(cg_tol=1e-4))
    s0 = dict(core.state)
    s = scheme.implicit_step(s0, dict(core.params), core.routines)
    dy, dx, art, dti = s0["dy"], s0["dx"], s0["art"], core.config.dti
    fu = s["utf"] * .5 * (dy + torch.roll(dy, 1, 0))
    fv = s["vtf"] * .5 * (dx + torch.roll(dx, 1, 1))
    div = (torch.roll(fu, -1, 0) - fu + torch.roll(fv, -1, 1) - fv)
    change = s["el"] - s0["el"]
    interior = torch.zeros_like(change, dtype=torch.bool)
    interior[1:-1, 1:-1] = True
    interior &= s0["fsm"] > 0
    want = -dti * (div / art + s0["vfluxf"])
    assert float((change - want)[interior].abs().max()) <= 1e-15 * float(s0["h"].max())


@pytest.mark.parametrize("inflow", [False, True])
def test_box_volume_is_conserved_or_rises_at_the_inflow_rate(inflow):
    """The closed box for 48 steps: measured volume change 0 (to the last
    bit) without inflow, bar 1e-12 relative per day; with vfluxf = -1e-5
    m/s the mean surface rises by 1e-5 m/s, also exactly (bar 1e-12)."""
    config = load_config(CONFIGS / "box.nml")
    core = ImplicitCore(config)
    core.run_initialization()
    if not inflow:
        core.vfluxf = torch.zeros_like(core.vfluxf)
    wet = (core.fsm * core.art)

    def volume(c):
        return float(((c.h + c.el) * wet).sum())
    v0 = volume(core)
    with torch.no_grad():
        core.iend = 48
        core.run_time_loop()
    elapsed = 48 * config.dti
    if inflow:
        rise = (volume(core) - v0) / float(wet.sum())
        assert rise == pytest.approx(1e-5 * elapsed, rel=1e-12)
    else:
        assert abs(volume(core) - v0) / v0 / (elapsed / 86400) < 1e-12


def test_no_water_crosses_a_coast_inside_the_domain():
    """An island in the closed box (a found defect: the solved transports
    were not masked by dum/dvm, so the faces of an interior land cell
    carried water): every land face's transport is 0, utf and vtf too, and
    the volume is kept to the last bit."""
    core = ImplicitCore(load_config(CONFIGS / "box.nml"))
    core.run_initialization()
    i, j = 10, 10                                     # 0-based: pom2k's (11, 11)
    for name, cells in (("fsm", [(i, j)]), ("dum", [(i, j), (i + 1, j)]),
                        ("dvm", [(i, j), (i, j + 1)])):
        mask = core.state[name].clone()
        for c in cells:
            mask[c] = 0.0
        core.state[name] = mask
    core.vfluxf = torch.zeros_like(core.vfluxf)
    core.el = (core.el + 0.01 * torch.rand(core.el.shape, generator=torch.Generator().manual_seed(1),
                                           dtype=DT)) * core.fsm
    wet = core.fsm * core.art
    v0 = float(((core.h + core.el) * wet).sum())
    with torch.no_grad():
        core.iend = 5
        core.run_time_loop()
    for name, faces in (("fluxua", [(i, j), (i + 1, j)]), ("utf", [(i, j), (i + 1, j)]),
                        ("fluxva", [(i, j), (i, j + 1)]), ("vtf", [(i, j), (i, j + 1)])):
        assert all(float(core.state[name][f]) == 0.0 for f in faces), name
    assert float(((core.h + core.el) * wet).sum()) == pytest.approx(v0, rel=1e-15)


# ------------------------------------------------------------------ gradients through steps

def test_implicit_step_gradcheck(oracle):
    state, params = state_of(oracle, theta=0.55, cg_tol=1e-14, cg_maxiter=200, mode=3)
    params.update(dti=90.0)
    check_gradients(section_forward(lambda s, p: scheme.implicit_step(s, p, ROUTINES)),
                    state, params, ("el", "ua", "va", "d"),
                    "el elb ua va uab vab etf egf utf vtf".split())


def test_two_whole_implicit_steps_gradcheck():
    core = developed(seamount(cg_tol=1e-14, cg_maxiter=200))
    wrt = tuple(n for n in CORE_WRT if n != "elb")      # a two-level scheme: elb is not read
    f, x0 = core_objective(core, wrt=wrt)
    with guards_watched() as fired:
        grads = torch.autograd.grad(f(*x0), x0)
    assert not fired, fired
    for name, g in zip(wrt + ("horcon",), grads):
        assert torch.isfinite(g).all() and g.abs().max() > 0, name
    with torch.random.fork_rng():
        torch.manual_seed(0)
        assert torch.autograd.gradcheck(f, x0, eps=1e-6, fast_mode=True)
    assert set(CORE_OUT) <= set(variables.ALL)


# ------------------------------------------------------------------ the run

def test_a_step_far_past_the_external_cfl_limit_runs():
    """dti = 570 s (dte 19, isplit 30): 79 times the 8x7x5 seamount's
    external limit of 7.2 s per pass, inside its internal limit (595 s)."""
    config = seamount(dte=19.0, isplit=30)
    setup.check_internal_cfl(config)
    with pytest.raises(ConfigError, match="external CFL limit"):
        setup.check_external_cfl(config)
    core = developed(config, steps=20)
    assert core.vamax < 1.0 and torch.isfinite(core.el).all()


def test_not_converging_stops_the_run():
    core = ImplicitCore(seamount(cg_maxiter=1, cg_tol=1e-14))
    core.run_initialization()
    core.iend = 3
    with pytest.raises(NotConverged, match=r"step iint=1: the elevation solver stopped at relative "
                                           r"residual .* > cg_tol=1e-14 after cg_maxiter=1"):
        core.run_time_loop()
    assert core.last_good is not None


def test_generation_day_is_a_normal_run_bit_for_bit():
    """run_generation_day on the implicit core: without gradients the PCG
    is used, so the reference run here is also without gradients."""
    core = ImplicitCore(seamount())
    core.run_initialization()
    records = core.run_generation_day(4, capture_interval=2)
    with torch.no_grad():
        reference = developed(steps=4)
    for name in ("el", "u", "t", "q2"):
        assert torch.equal(records[-1][name], reference.state[name]), name


# ------------------------------------------------------------ the internal CFL limit

def test_first_mode_speed_is_the_discrete_and_the_continuous_one():
    """Uniform N in L equal layers of a column H deep: the discrete first
    mode's speed is exactly N dz / (2 sin(pi / 2L)) (the second difference's
    smallest eigenvalue), which tends to N H / pi."""
    n2, depth = 1e-5, 4000.0
    for layers in (4, 20, 200):
        dz = depth / layers
        c1 = setup.first_mode_speed(np.full((1, layers - 1), n2), np.full((1, layers - 1), dz),
                                    np.full((1, layers), dz))[0]
        exact = np.sqrt(n2) * dz / (2 * np.sin(np.pi / (2 * layers)))
        assert abs(c1 - exact) <= 1e-12 * exact, layers
    assert abs(c1 - np.sqrt(n2) * depth / np.pi) <= 1e-4 * c1      # 200 layers: 2.1e-5
    # unstable or neutral layers carry no wave
    assert setup.first_mode_speed(-np.ones((1, 5)), np.ones((1, 5)), np.ones((1, 6)))[0] == 0.0


def test_internal_wave_speed_of_the_seamount_agrees_with_n2_from_derivatives():
    """c1 from N**2 = -grav (drho/dT dT/dz + drho/dS dS/dz) (autograd of dens at
    the t levels, averaged to the w levels): the same speed within 2e-4
    (measured 9.0e-5 relative at most on the 65x49x21 seamount; 3.2 m/s in
    deep water, 0.76 m/s on the seamount's top)."""
    from pompy.config import parameters
    from pompy.core.density import dens

    config = load_config(CONFIGS / "seamount.nml")
    state = setup.set_up(config)
    c1 = setup.internal_wave_speed(config, state)
    p, kb = parameters(config), config.kb
    t, s = state["t"].clone().requires_grad_(), state["s"].clone().requires_grad_()
    rho = dens(p["grav"], p["rhoref"], p["tbias"], p["sbias"], state["zz"], state["h"],
               state["fsm"], s, t, state["rho"]).rhoo
    rho_t, rho_s = (g.numpy() for g in torch.autograd.grad(rho.sum(), [t, s]))
    mid = lambda a: .5 * (a[:, :, :kb - 2] + a[:, :, 1:kb - 1])      # noqa: E731
    up_minus_down = lambda a: a[:, :, :kb - 2] - a[:, :, 1:kb - 1]   # noqa: E731
    h = state["h"].numpy()[:, :, None]
    gap = h * state["dzz"].numpy()[:kb - 2]
    n2 = -p["grav"] * (mid(rho_t) * up_minus_down(t.detach().numpy())
                       + mid(rho_s) * up_minus_down(s.detach().numpy())) / gap
    wet = state["fsm"].numpy() > 0
    want = setup.first_mode_speed(n2[wet], gap[wet], (h * state["dz"].numpy()[:kb - 1])[wet])
    assert (np.abs(c1[wet] - want) / want).max() <= 2e-4
    assert 3.1 < c1.max() < 3.3 and (c1[~wet] == 0).all()


def test_the_internal_cfl_check_reads_the_stratification():
    """The 65x49x21 seamount: c1 = 3.14 m/s where the limit is smallest,
    limit 407 s; pom2k's own split-explicit core and the implicit core both
    blow up at dti = 540 and 600 s (validation/implicit_core.py --only
    limit). With t and s held (mode 4) no internal wave runs and 600 s
    passes; the box (uniform t, s) has none either."""
    config = load_config(CONFIGS / "seamount.nml")
    state = setup.set_up(config)
    setup.check_internal_cfl(dataclasses.replace(config, dte=13.0, isplit=30), state)   # 390 s
    with pytest.raises(ConfigError, match=r"^dti=420.0 s breaks the internal CFL limit: dti must be "
                                          r"< 407.276 s, .* at \(i=23, j=24\) .* c1=3.14 m/s"):
        setup.check_internal_cfl(dataclasses.replace(config, dte=14.0, isplit=30), state)
    setup.check_internal_cfl(dataclasses.replace(config, dte=20.0, isplit=30, mode=4), state)
    box = load_config(CONFIGS / "box.nml")
    assert (setup.internal_wave_speed(box, setup.set_up(box)) == 0).all()


def test_forward_mode_agrees_with_reverse_mode_at_the_configs_cg_tol():
    """<J v, w> by a tangent against <v, J^T w> by a gradient through one
    step of train_tiny (cg_tol 1e-12, its own settings): both solve to
    cg_tol, so they agree to its order times the operator's conditioning.
    Measured 6.3e-11 (seed 0; 1e-12 to 1.1e-11 for seeds 1-5; 2.2e-12
    through 4 steps): asserted below 1e-10."""
    config = load_config(CONFIGS / "train_tiny.nml")
    start = developed(config)
    state0 = {k: v.clone() for k, v in start.state.items()}
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(state0["el"].shape, generator=gen, dtype=torch.float64) * .01 * state0["fsm"]
    w = {n: torch.randn(state0[n].shape, generator=gen, dtype=torch.float64) / state0[n].abs().max()
         for n in ("el", "u", "t")}

    def objective(el):
        core = ImplicitCore(config)
        core.load_state({k: t.numpy() for k, t in state0.items()}, iint=2)
        core.el = el
        core.iend = 3
        core.run_time_loop()
        return sum((w[n] * core.state[n]).sum() for n in w)
    el = state0["el"].clone().requires_grad_(True)
    reverse = float((torch.autograd.grad(objective(el), el)[0] * v).sum())
    with forward_ad.dual_level():
        forward = float(forward_ad.unpack_dual(objective(forward_ad.make_dual(state0["el"], v))
                                               ).tangent)
    assert abs(forward - reverse) / abs(reverse) < 1e-10, (forward, reverse)
