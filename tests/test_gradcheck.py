"""torch.autograd.gradcheck, float64, through every routine of the torch core.

Issue "Differentiable end to end": at valid, unguarded states the gradients
of every torch routine, with the registered default gradient policies
(importing pompy.core registers PROJECT for its physics layers: exact
derivatives away from guarded points), agree with central differences
(eps 1e-6, gradcheck's default tolerances atol 1e-5, rtol 1e-3).

How a case is built (:func:`check_gradients`):

- the state is ``strategies.random_state`` on a 6x5x5 grid (land and
  walls); a physics routine is called as pom2k calls it
  (``"advq(q2b,q2,uf,a,c)"``, bound to the state by pompy.calls, as
  pompy.core.stepping runs it), a main-program section (external_step,
  internal_step) on the whole state;
- a few inputs (``wrt``: state arrays, or scalar parameters as 0-d
  tensors) are differentiated, each in units of its own magnitude:
  gradcheck moves ``x / max|x|`` by 1e-6, i.e. every input by 1e-6 of its
  largest value (unscaled, q2 ~1e-4 would be moved by 1%, the depth by
  1e-9 of itself);
- the ``outputs`` are reduced to one scalar, each weighted by a fixed
  random field and divided by its magnitude, so that the tolerances mean
  the same for rho (1e-2) as for a flux (1e7) and one backward gives the
  whole gradient; gradcheck then compares every component of it with its
  central difference (``fast_mode``: one random directional derivative);
- "unguarded": one backward runs first with the safe ops' policy hook
  watched (:func:`guards_watched`), and the case fails if a guard of
  pompy.utils.safety fires at a point that receives a gradient. Guards
  that fire where nothing flows are fine: dz(kb) = 0 in advu, advv, advt,
  profq's a (levels not kept), |s|**1.5 at s = 0 on land in dens (rho is
  masked by fsm), the bottom-drag speed on land in advave (wubot is
  -speed*uab, uab = 0 there);
- kinks: an input whose change moves a switch is differentiated only
  where the switch is far, and :func:`assert_switches_stable` checks that
  the branches taken do not change when every differentiated input moves
  by 1e-4 of its magnitude (100 times gradcheck's step): profq's clamp of
  gh at .028, its small-value guard and max(lk, kappa*l0)
  (:func:`turbulence_state`), smol_adif's thresholds, bcond 4 and 6's
  upwind switches (the Courant numbers at the open edges: land there has
  u = 0 exactly, on the switch, so u is differentiated on states without
  land). abs at an exact 0 (advt2's upwind fluxes of masked velocities) is
  no trouble: torch's abs'(0) = 0 is the central difference there.

Forward mode: every case also computes one directional derivative with
torch.autograd.forward_ad and checks it against the reverse-mode gradient
(:func:`assert_forward_mode_matches`, 1e-10; measured <= 1e-14).

Whole steps (:func:`test_two_internal_steps_gradcheck`): ExplicitCore on
an 8x7x5 seamount, 2 internal steps with their external passes, w.r.t.
the initial el, elb, t, tb, u, ub set on the core as leaf tensors, and
w.r.t. the scalar parameter horcon, given as a 0-d tensor in
core.params["horcon"] (smagorinsky takes it from there).

Result (measured, torch 2.13 CPU, 2 threads): every case passes, at
these seeds and at seeds 2, 3, 4 too; the file runs in about 35 s.
:func:`test_smol_adif_gradient_where_neighbours_cancel` covers a NaN
gradient smol_adif had outside the valid T/S states (now guarded).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.autograd import forward_ad

from pompy.autodiff.policies import GradientPolicy, policy_override, selected_policy
from pompy import calls
from pompy.calls import bind
from pompy.core import (PHYSICS_LAYERS, advection, boundary, density, stepping, tracers,
                        turbulence, vertical)
from pompy.core.external import split
from pompy.core.viscosity import smagorinsky
from pompy.ops import X, Y, Z, shift
from strategies import random_state, to_torch
from pompy.verify.gradcheck import core_objective as verify_objective
from pompy.verify.gradients import guards_watched

CONFIGS = Path(__file__).parents[1] / "configs"
DT = torch.float64


# --------------------------------------------------------------------------- helpers

def routine_forward(fn, call: str):
    """(state, params) -> {actual name: output} for a physics routine called
    as pom2k's call string ``call`` binds it (e.g. ``"advq(q2b,q2,uf,a,c)"``:
    qb is the state's q2b, ...; other arguments by name from the state or
    the parameters): pompy.calls.call with ``fn`` as the routine."""
    routines = {bind(call)[0]: fn}
    return lambda s, p: calls.call(call, s, p, routines)


def section_forward(fn):
    """(state, params) -> new state, for a main-program section
    (split.external_step, stepping.internal_step)."""
    return lambda s, p: fn(s, p)


def scalar_objective(forward, state: dict, params: dict, wrt, outputs, seed: int = 0):
    """(f, x0) for gradcheck: f(*x) is the weighted, normalised sum of the
    ``outputs`` of ``forward`` with each input ``wrt[i]`` (a state array, or
    a scalar parameter as a 0-d tensor) set to ``x[i] * scale_i``; x0 the
    scaled inputs of the given state (leaf tensors requiring grad)."""
    values = {n: state[n] if n in state else torch.tensor(float(params[n]), dtype=DT)
              for n in wrt}
    scales = {n: float(v.abs().max()) or 1.0 for n, v in values.items()}
    with torch.no_grad():
        base = forward(dict(state), dict(params))
    gen = torch.Generator().manual_seed(seed)
    weights, norms = {}, {}
    for n in outputs:
        v = base[n]
        assert torch.isfinite(v).all(), f"output {n} is not finite at the base state"
        weights[n] = torch.randn(v.shape, generator=gen, dtype=DT)
        norms[n] = float(v.abs().max()) or 1.0

    def f(*x):
        s, p = dict(state), dict(params)
        for n, xi in zip(wrt, x):
            (s if n in state else p)[n] = xi * scales[n]
        out = forward(s, p)
        return sum((weights[n] * out[n]).sum() / norms[n] for n in outputs)

    x0 = tuple((values[n] / scales[n]).detach().clone().requires_grad_(True) for n in wrt)
    return f, x0


def check_gradients(forward, state: dict, params: dict, wrt, outputs, fast_mode: bool = False,
                    seed: int = 0):
    """gradcheck (float64, eps 1e-6, default tolerances) of ``outputs`` of
    ``forward`` w.r.t. ``wrt`` at ``state``, after checking that no guard
    fires where a gradient flows and that the gradient is finite."""
    f, x0 = scalar_objective(forward, state, params, wrt, outputs, seed)
    with guards_watched() as fired:
        grads = torch.autograd.grad(f(*x0), x0, allow_unused=True)
    assert not fired, f"guards fire where a gradient flows: {fired}"
    for n, g in zip(wrt, grads):
        assert g is not None, f"the outputs do not depend on {n}"
        assert torch.isfinite(g).all(), f"non-finite gradient w.r.t. {n}"
    assert_forward_mode_matches(f, x0, grads, seed)
    with torch.random.fork_rng():       # fast_mode's random directions, reproducibly
        torch.manual_seed(seed)
        assert torch.autograd.gradcheck(f, x0, eps=1e-6, fast_mode=fast_mode)


def assert_forward_mode_matches(f, x0, grads, seed: int = 0, rtol: float = 1e-10):
    """Forward mode (torch.autograd.forward_ad) gives the directional
    derivative along a random direction that the reverse-mode gradients
    GRADS give, to RTOL of the sum of the magnitudes of its terms (the
    issue's 1e-10; measured: <= 1e-14 on every case)."""
    gen = torch.Generator().manual_seed(seed + 1)
    directions = [torch.randn(x.shape, generator=gen, dtype=DT) for x in x0]
    terms = torch.cat([(g * d).reshape(-1) for g, d in zip(grads, directions)])
    reverse = float(terms.sum())
    with torch.no_grad(), forward_ad.dual_level():
        out = f(*(forward_ad.make_dual(x.detach(), d) for x, d in zip(x0, directions)))
        forward = float(forward_ad.unpack_dual(out).tangent)
    scale = float(terms.abs().sum())
    assert abs(forward - reverse) <= rtol * scale, (forward, reverse, scale)


def assert_switches_stable(forward, state: dict, params: dict, wrt, switches, rel=1e-4, seed=0):
    """The kinks stay put: ``switches(state, params, outputs)`` (a bool tensor: which
    branch of each clamp, threshold or upwind switch is taken) is the same
    when every element of every ``wrt`` input moves by +-rel of the input's
    magnitude (two random sign patterns and their opposites), 100 times
    gradcheck's perturbation."""
    with torch.no_grad():
        base = switches(state, params, forward(dict(state), dict(params)))
        gen = torch.Generator().manual_seed(seed)
        for _ in range(2):
            signs = {n: torch.randint(0, 2, state[n].shape, generator=gen).to(DT) * 2 - 1
                     for n in wrt}
            for direction in (1.0, -1.0):
                s = dict(state)
                for n in wrt:
                    s[n] = state[n] + direction * rel * float(state[n].abs().max()) * signs[n]
                moved = switches(s, params, forward(s, dict(params)))
                assert torch.equal(moved, base), (
                    f"{int((moved != base).sum())} switches flip under a {rel:g} perturbation "
                    f"of {wrt}")


def state_of(oracle, seed=1, im=6, jm=5, kb=5, land=0.2, **extra_params):
    """A random_state as float64 tensors and its parameters; the transports
    utb, utf (vtb, vtf) masked by dum (dvm), as the external mode leaves
    them (random_state draws them everywhere: internal_step's adjusted u
    would then be ~1e-8 instead of 0 on land, next to bcond's upwind switch)."""
    _, params, s = random_state(seed, im, jm, kb, oracle, land=land)
    s = to_torch(s)
    for name, mask in (("utb", "dum"), ("utf", "dum"), ("vtb", "dvm"), ("vtf", "dvm")):
        s[name] = s[name] * s[mask]
    return s, dict(params, **extra_params)


def turbulence_state(oracle, seed=1, land=0.2):
    """A state for profq away from its clamps: smooth stable stratification
    (T decaying with depth, S ~ 35, rho from dens), q2b in [1e-3, 1e-2],
    q2lb/q2b in [1, 5] m, and the advected q2, q2l (uf, vf) near q2b, q2lb.
    random_state's turbulence (q2 down to 1e-7, q2l/q2 up to 50, noisy
    T/S, uf and vf of both signs) puts 2/3 of the points at gh's clamp
    (.028) or under the small-value guard (uf <= small), where the
    derivative is zero. Measured here (seed 1, land 0.2): gh in
    [-0.2, -6.9e-4] at every sea point, clamped at every land point, no
    small-value guard anywhere (uf >= 1.2e-4, vf >= 8.2e-6 at k = 2..kbm1),
    and max(lk, kappa*l0) takes lk everywhere (:func:`profq_switches`)."""
    s, p = state_of(oracle, seed=seed, land=land)
    gen = torch.Generator().manual_seed(seed)

    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand(s["q2"].shape, generator=gen, dtype=DT)

    fsm3 = s["fsm"].unsqueeze(-1)
    zz, h = s["zz"].view(1, 1, -1), s["h"].unsqueeze(-1)
    s["t"] = (5 + 15 * torch.exp(zz * h / 1000) + uniform(-0.2, 0.2)) * fsm3
    s["s"] = (35 + uniform(-0.05, 0.05)) * fsm3
    s["rho"] = density.dens(p["grav"], p["rhoref"], p["tbias"], p["sbias"], s["zz"], s["h"],
                            s["fsm"], s["s"], s["t"], s["rho"]).rhoo
    s["q2b"], s["q2"] = uniform(1e-3, 1e-2), uniform(1e-3, 1e-2)
    # lk = q2lb/q2b: 1 to 5 m at sea; 10 to 50 m on land, where rho = 0 and
    # h = 1 leave only the compressibility term in boygr (4.9e-5 s-2):
    # there gh >= 100*4.9e-5/1e-2 = 0.49, far beyond the clamp
    s["q2lb"] = s["q2b"] * torch.where(fsm3 > 0, uniform(1, 5), uniform(10, 50))
    s["uf"], s["vf"] = s["q2b"] * uniform(0.9, 1.1), s["q2lb"] * uniform(0.9, 1.1)
    return s, p


def smol_state(oracle, seed=1, land=0.2):
    """random_state with smol_adif's arguments: the mass fluxes advt2 gives
    it (xmassflux, ymassflux from u, v; zwflux = w) and the tracer ff = t."""
    s, p = state_of(oracle, seed=seed, land=land)
    dt, dx, dy = s["dt"].unsqueeze(-1), s["dx"].unsqueeze(-1), s["dy"].unsqueeze(-1)
    s["xmassflux"] = 0.25 * (shift(dy, X, -1) + dy) * (shift(dt, X, -1) + dt) * s["u"]
    s["ymassflux"] = 0.25 * (shift(dx, Y, -1) + dx) * (shift(dt, Y, -1) + dt) * s["v"]
    s["zwflux"], s["ff"] = s["w"].clone(), s["t"].clone()
    return s, p


# --------------------------------------------------------------------------- kinks

def profq_switches(s, p, out):
    """profq's branches: gh at its clamp .028 (read back from sh = c =
    coef1/(1 - coef2*gh)), the small-value guard (uf set to small) and the
    surface length scale max(lk, kappa*l0) (l(k) = l(1) for k >= 2)."""
    a1, b1, a2, b2 = 0.92, 16.6, 0.74, 10.1
    coef1, coef2 = a2 * (1.0 - 6.0 * a1 / b1), 3.0 * a2 * b2 + 18.0 * a1 * a2
    gh = (1.0 - coef1 / out["c"]) / coef2
    return torch.cat([(gh > .028 - 1e-9).flatten(), (out["uf"] == p["small"]).flatten(),
                      (out["l"][..., 1:-1] == out["l"][..., :1]).flatten()])


def edge_upwind_switches(s, p=None, out=None):
    """bcond 4 and 6's upwind switches at the open east and west edges
    (u at i = im and i = 2, rows j = 2..jmm1: the rows j = 1, jm are
    overwritten by the north and south edges)."""
    u = s["u"]
    return torch.cat([(u[-1, 1:-1] <= 0).flatten(), (u[1, 1:-1] >= 0).flatten()])


def smol_switches(s, p, out):
    """smol_adif's branches, as it computes them: a neighbour of the face
    below value_min (1e-9), and the second-order term beyond the first
    (|flux| < |dti2*flux**2*2/(aru*(dt(i-1)+dt(i)))|, likewise along j and k)."""
    dti2 = p["dti2"]
    ff = s["ff"] * s["fsm"].unsqueeze(-1)
    dt = s["dt"].unsqueeze(-1)
    dzz = shift(s["dzz"], 0, -1).view(1, 1, -1)                 # dzz(k-1)
    x, y, z = s["xmassflux"], s["ymassflux"], s["zwflux"]
    second = (dti2 * x * x * 2. / (s["aru"].unsqueeze(-1) * (shift(dt, X, -1) + dt)),
              dti2 * y * y * 2. / (s["arv"].unsqueeze(-1) * (shift(dt, Y, -1) + dt)),
              dti2 * z * z / (dzz * dt))
    beyond = [(f.abs() < sec.abs()).flatten() for f, sec in zip((x, y, z), second)]
    below = [((ff < 1e-9) | (shift(ff, d, -1) < 1e-9)).flatten() for d in (X, Y, Z)]
    return torch.cat(beyond + below)


# --------------------------------------------------------------------------- routines

@dataclasses.dataclass
class Case:
    fn: object
    call: str
    wrt: tuple
    outputs: tuple
    params: dict = dataclasses.field(default_factory=dict)
    state: object = state_of            # state_of, turbulence_state or smol_state
    land: float = 0.2
    switches: object = None
    rel: float = 1e-4                   # the switches' perturbation
    fast: bool = False


def case(id, fn, call, wrt, outputs, marks=(), **kw):
    return pytest.param(Case(fn, call, tuple(wrt.split()), tuple(outputs.split()), **kw),
                        id=id, marks=marks)


A, B, T, V = advection, boundary, tracers, vertical
ADVT2 = "advt2(tb,t,tclim,uf,a,c,nitera,sw)"
PROFT = "proft(uf,wtsurf,tsurf,nbct,tps)"

ROUTINE_CASES = [
    case("dens", density.dens, "dens(s,t,rho)", "s t", "rho"),
    case("baropg", density.baropg, "baropg", "rho rmean dt", "drhox drhoy"),
    case("advct", A.advct, "advct(a,c,ee)", "u v ub", "advx advy ee"),
    case("advct-vb-dt-aam", A.advct, "advct(a,c,ee)", "vb dt aam", "advx advy"),
    case("advave-mode2", A.advave, "advave(tps)", "ua uab vab d",
         "advua advva wubot wvbot fluxua fluxva", params=dict(mode=2)),
    case("advave-mode3", A.advave, "advave(tps)", "ua va aam2d dx", "advua advva fluxua fluxva",
         params=dict(mode=3)),
    case("advu", A.advu, "advu", "u v w ub egf etf", "uf"),
    case("advv", A.advv, "advv", "v u w vb egb etb", "vf"),
    case("advq", A.advq, "advq(q2b,q2,uf,a,c)", "q2b q2 u w", "uf a c"),
    case("vertvl", A.vertvl, "vertvl(a,c)", "u v etf etb", "w a c"),
    case("advt1", T.advt1, "advt1(tb,t,tclim,uf,a,c)", "t tb u w", "uf tb a c zflux"),
    case("advt2-nitera1", T.advt2, ADVT2, "t tb u w", "uf tb a c zflux", params=dict(nitera=1)),
    case("advt2-nitera2", T.advt2, ADVT2, "t tb u w", "uf tb a c zflux", params=dict(nitera=2)),
    case("advt2-nitera2-v-aam", T.advt2, ADVT2, "v aam tclim", "uf", params=dict(nitera=2)),
    case("smol_adif", T.smol_adif, "smol_adif", "xmassflux ymassflux zwflux ff",
         "xmassflux ymassflux zwflux ff", state=smol_state, switches=smol_switches),
    # rho's switches checked at 10 times gradcheck's perturbation, not 100: on land
    # (h = 1 m) 1e-4 of rho's magnitude (3e-6) moves boygr by 2.4e-4, five times
    # its value there; gradcheck's 3e-8 moves gh there (>= 0.49) by 2.5%
    case("profq-q2b-q2lb-rho", turbulence.profq, "profq(a,c,tps,dtef)", "q2b q2lb rho",
         "uf vf km kh kq l", state=turbulence_state, switches=profq_switches, rel=1e-5),
    case("profq-u-t-q2-kq-wusurf", turbulence.profq, "profq(a,c,tps,dtef)", "u t q2 kq wusurf",
         "uf vf km kh kq", state=turbulence_state, switches=profq_switches),
    case("profq-uf-vf-wubot-etf", turbulence.profq, "profq(a,c,tps,dtef)", "uf vf wubot etf",
         "uf vf km kh kq", state=turbulence_state, switches=profq_switches),
    case("proft-nbc1", V.proft, PROFT, "uf kh wtsurf", "uf", params=dict(nbct=1)),
    case("proft-nbc2", V.proft, PROFT, "uf kh wtsurf swrad etf", "uf", params=dict(nbct=2)),
    case("proft-nbc3", V.proft, PROFT, "uf kh tsurf", "uf", params=dict(nbct=3)),
    case("proft-nbc4", V.proft, PROFT, "uf kh tsurf swrad etf", "uf", params=dict(nbct=4)),
    # the bottom speed is 0 on land (ub = vb = 0): a guarded point (safe_sqrt),
    # and tps = cbc*speed receives a gradient there; uf and wubot do not
    # (the land column is masked by dum)
    case("profu", V.profu, "profu", "uf km ub vb cbc wusurf", "uf wubot"),
    case("profu-sea", V.profu, "profu", "ub vb cbc", "uf wubot tps", land=0.0),
    case("profv", V.profv, "profv", "vf km ub vb cbc wvsurf", "vf wvbot"),
    case("profv-sea", V.profv, "profv", "ub vb cbc", "vf wvbot tps", land=0.0),
    case("bcond1", B.bcond, "bcond(1)", "elf", "elf"),
    case("bcond2", B.bcond, "bcond(2)", "uaf vaf el h", "uaf vaf"),
    case("bcond3", B.bcond, "bcond(3)", "u uf vf h", "uf vf"),
    case("bcond4", B.bcond, "bcond(4)", "t s w tbe sbn", "uf vf"),
    # u moves the Courant numbers of the east and west edges: no land there
    case("bcond4-u", B.bcond, "bcond(4)", "u t", "uf vf", land=0.0,
         switches=edge_upwind_switches),
    case("bcond5", B.bcond, "bcond(5)", "w", "w"),
    case("bcond6", B.bcond, "bcond(6)", "q2 q2l", "uf vf"),
    case("bcond6-u", B.bcond, "bcond(6)", "u q2", "uf vf", land=0.0,
         switches=edge_upwind_switches),
    case("smagorinsky", smagorinsky, "smagorinsky", "u v horcon", "aam"),
    case("surface_forcing-seamount", stepping.surface_forcing, "surface_forcing",
         "t w wusurf ramp", "wusurf wtsurf w", params=dict(iproblem=1)),
    case("surface_forcing-box", stepping.surface_forcing, "surface_forcing",
         "t s tclim sclim vfluxf", "wtsurf wssurf w", params=dict(iproblem=2)),
    case("vertical_averages-mode2", stepping.vertical_averages, "vertical_averages",
         "advx drhox aam ua uab vab", "adx2d ady2d drx2d aam2d wubot wvbot fluxua",
         params=dict(mode=2)),
    case("vertical_averages-mode3", stepping.vertical_averages, "vertical_averages",
         "advy drhoy ua va d", "adx2d ady2d dry2d fluxva", params=dict(mode=3)),
]


def test_physics_layers_get_exact_gradients():
    """The policies these checks run under: PROJECT for every physics layer
    (their built-in policy), no context override."""
    assert policy_override() is None
    for layer in PHYSICS_LAYERS:
        assert selected_policy(layer) is GradientPolicy.PROJECT, layer


@pytest.mark.parametrize("c", ROUTINE_CASES)
def test_routine_gradcheck(oracle, c):
    state, params = c.state(oracle, land=c.land)
    params = dict(params, **c.params)
    forward = routine_forward(c.fn, c.call)
    if c.switches is not None:
        assert_switches_stable(forward, state, params, [n for n in c.wrt if n in state],
                               c.switches, rel=c.rel)
    check_gradients(forward, state, params, c.wrt, c.outputs, fast_mode=c.fast)


def test_smol_adif_gradient_where_neighbours_cancel(oracle):
    """Outside the valid T/S states (there the denominator is >= 2e-9
    wherever the branch is taken); a tracer crossing 0 (a temperature below
    0 degC) reaches it where two neighbours cancel to -epsilon exactly.
    smol_adif's mol = (f1 - f0)/(f0 + f1 + epsilon) is then inf in the
    branch torch.where does not keep, and a plain division sent 0*inf = NaN
    back to both ff; with safe_divide the gradient is finite."""
    state, params = smol_state(oracle)
    if not (state["fsm"][2, 2] == 1 and state["fsm"][1, 2] == 1):
        pytest.fail("the face (3, 3, 2) must lie between two sea points")
    ff = state["ff"].clone()
    ff[1, 2, 1], ff[2, 2, 1] = 0.0, -1e-14          # f0 + f1 + epsilon == 0
    state["ff"] = ff.requires_grad_(True)
    out = routine_forward(tracers.smol_adif, "smol_adif")(state, params)
    if not all(torch.isfinite(v).all() for v in out.values()):
        pytest.fail("the forward is not finite")
    grad, = torch.autograd.grad(out["xmassflux"].sum(), state["ff"])
    assert torch.isfinite(grad).all(), "NaN gradient w.r.t. ff"


# --------------------------------------------------------------------------- main-program sections

EXTERNAL_OUT = "elf uaf vaf el elb ua va uab vab etf egf utf vtf fluxua"


@pytest.mark.parametrize("iext, mode", [(1, 3), (5, 2), (5, 3), (9, 3), (10, 3)])
def test_external_step_gradcheck(oracle, iext, mode):
    """One external pass (isplit 10, ispadv 5: advave runs at iext 5 and 10;
    etf is filtered over passes 8, 9, 10)."""
    state, params = state_of(oracle, isplit=10, ispadv=5, iext=iext, mode=mode)
    check_gradients(section_forward(split.external_step), state, params,
                    ("el", "elb", "ua", "va", "uab"), EXTERNAL_OUT.split())


INTERNAL_OUT = "u v ub vb t s tb sb q2 q2l q2b q2lb rho w km kh aam".split()


def adjusted_u_switches(s, p, out=None):
    """bcond 4 and 6's upwind switches inside internal_step, on u after its
    adjustment to the external transports (as internal_step computes it)."""
    kbm1 = s["u"].size(2) - 1
    mean = stepping.depth_sum(s["u"], s["dz"], kbm1).unsqueeze(-1)
    u = s["u"] - mean + ((s["utb"] + s["utf"]) / (s["dt"] + shift(s["dt"], X, -1))).unsqueeze(-1)
    return edge_upwind_switches({"u": u})


@pytest.mark.parametrize("nadv", [1, 2])
@pytest.mark.parametrize("mode", [3, 4])
@pytest.mark.parametrize("land, wrt, fast", [
    # u moves bcond's upwind switches at the open east and west edges:
    # differentiated with no land there (on land u = 0 sits on the switch)
    (0.0, ("u", "t", "q2b"), True),
    (0.2, ("t", "s", "q2lb", "etf"), True),
    # every component of the gradient w.r.t. two 2-D fields
    (0.2, ("etf", "wusurf"), False),
], ids=["sea-u-t-q2b-fast", "land-t-s-q2lb-etf-fast", "land-etf-wusurf"])
def test_internal_step_gradcheck(oracle, mode, nadv, land, wrt, fast):
    """The internal (3-D) step, its routines in pom2k's order; fast_mode
    (one random directional derivative) for the 3-D inputs."""
    state, params = state_of(oracle, land=land, mode=mode, nadv=nadv)
    forward = section_forward(stepping.internal_step)
    if "u" in wrt:
        assert_switches_stable(forward, state, params, ["u"], adjusted_u_switches)
    check_gradients(forward, state, params, wrt, INTERNAL_OUT, fast_mode=fast)


# --------------------------------------------------------------------------- whole steps

CORE_WRT = ("el", "elb", "t", "tb", "u", "ub")
CORE_OUT = ("el", "u", "v", "t", "s", "q2", "w")


@pytest.fixture(scope="module")
def warm_core():
    """ExplicitCore on an 8x7x5 seamount (isplit 4, ispadv 2: 24 s internal
    steps of 4 external passes), after 2 steps. The seamount starts from a
    uniform flow, where Smagorinsky's deformation is exactly 0 (a guarded
    point: aam is 0 inside after step 2, computed from step 1's flow; the
    cold start skips the internal mode at iint = 1); from step 2's
    non-uniform flow on it is not."""
    from pompy.config import load_config, validate
    from pompy.core.setup import check_external_cfl
    from pompy.core.explicit import ExplicitCore

    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                                 kl2=3, isplit=4, ispadv=2)
    validate(config)
    check_external_cfl(config)
    core = ExplicitCore(config, device="cpu", dtype=DT)
    core.run_initialization()
    core.iend = 2
    core.run_time_loop()
    return core


def core_objective(core, steps: int = 2, seed: int = 0, wrt: tuple[str, ...] = CORE_WRT):
    """(f, x0): f(*wrt fields, horcon) runs ``steps`` internal steps of
    ``core`` from its current state: pompy verify's whole-step objective
    (a weighted sum of the new el, u, v, t, s, q2, w over their magnitudes),
    which gradcheck here measures against finite differences."""
    return verify_objective(core, wrt, steps, seed)


def test_two_internal_steps_gradcheck(warm_core):
    """gradcheck through steps 3 and 4 of the small seamount (2 internal
    steps, 8 external passes) w.r.t. the initial el, elb, t, tb, u, ub
    (fast_mode: one random direction through all of them, then one through
    each: the gradient w.r.t. t is 1e-5 of that w.r.t. u here, invisible in
    the joint direction) and, every component, the scalar parameter horcon
    (core.params["horcon"], a 0-d tensor)."""
    f, x0 = core_objective(warm_core)
    with guards_watched() as fired:
        grads = torch.autograd.grad(f(*x0), x0)
    assert not fired, f"guards fire where a gradient flows: {fired}"
    for name, g in zip(CORE_WRT + ("horcon",), grads):
        assert torch.isfinite(g).all() and g.abs().max() > 0, name
    with torch.random.fork_rng():
        torch.manual_seed(0)
        assert torch.autograd.gradcheck(f, x0, eps=1e-6, fast_mode=True)
        for i, name in enumerate(CORE_WRT):
            def one(xi, i=i):
                return f(*x0[:i], xi, *x0[i + 1:])
            assert torch.autograd.gradcheck(one, (x0[i],), eps=1e-6, fast_mode=True), name
    assert torch.autograd.gradcheck(lambda h: f(*x0[:-1], h), (x0[-1],), eps=1e-6)
    assert warm_core.iint == 2 and warm_core.params["horcon"] == 0.2
