"""The gradcheck suite: every routine's gradient cases (:data:`GRAD_CASES`),
the sections of the core's free surface and internal_step, and two whole
steps of the core, measured as pompy.verify.gradients does, in float64 on
the device (re-implemented from tests/test_gradcheck.py). The cases draw
their states on the config's grid or, where it is larger, on a window of
it (pompy.verify.states.window); the two whole steps run on the whole grid,
beyond the window as directional derivatives (:func:`_whole_steps_directional`). Inputs that move
a kink are checked to leave the branches in place under 100 times
gradcheck's step (a state where they do not is replaced by the next
seed's, up to STATE_TRIES); the whole steps in fast mode, input by input.
Gradients are checked in float64 only (a float32 finite difference at eps
1e-6 is noise): a float32 verification runs this suite in float64 on the
same device and says so.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import torch

from pompy import cores
from pompy.config import Config
from pompy.core.external.implicit import SemiImplicit
from pompy.core.external.split import SplitExplicit
from pompy.verify.checks import Check, crashed, reported
from pompy.verify.gradients import (GD, GRAD_EPS, check_gradients, directional_checks,
                                    gradient_check, scalar_objective)
from pompy.verify.routines import SECTIONS, routine_forward, section_forward
from pompy.verify.run import developed
from pompy.verify.states import as_tensors, random_state, window, windowed

SWITCH_REL = 1e-4        # kinks must stay put under 100x gradcheck's step
STATE_TRIES = 3          # seeds tried for a state whose kinks stay put


# ---- states for the gradient cases

def grad_state(oracle, config: Config, seed: int, land: float, device) -> tuple[dict, dict]:
    """random_state as float64 tensors on the device, the transports utb,
    utf (vtb, vtf) masked by dum (dvm) as the external mode leaves them."""
    params, s = random_state(seed, config, oracle, land=land)
    s = as_tensors(s, GD, device)
    for name, mask in (("utb", "dum"), ("utf", "dum"), ("vtb", "dvm"), ("vtf", "dvm")):
        s[name] = s[name] * s[mask]
    return s, params


def turbulence_state(oracle, config: Config, seed: int, land: float, device) -> tuple[dict, dict]:
    """A state for profq away from its kinks on any grid (after
    tests/test_gradcheck.py's, which is tuned to a 6x5x5 grid): at sea a
    smooth stable stratification (T = 5 + 15 exp(z/1000 m) +- 0.002, S =
    35 +- 0.0005), q2b, q2 in [1e-2, 1e-1] and lk = q2lb/q2b in [0.3,
    1.5] m; on land (h = 1 m) lk in [10, 50] m over a strongly stable rho
    (1e-3 per level); a weak wind stress, wusurf in [0.5, 1.5] 1e-6 and
    wvsurf in [-1, 1] 1e-6 (kappa l0 <= 0.02 m; the friction velocity's
    square root >= 7e-7, far from safe_sqrt's guard); uf, vf near q2b,
    q2lb.

    Why: gh = lk**2 boygr/q2b is clamped at .028. At sea the largest boygr
    is the compressibility term, 4.9e-5 s-2, so gh <= 1.5**2 4.9e-5/1e-2 =
    0.011; a perturbation of rho by 1e-5 of its magnitude moves boygr by up
    to grav 6e-7/(dzz h) = 1.6e-5 s-2 in the thinnest level (dzz 0.018 of
    h = 20 m at kb = 11), gh by 3.6e-3: still below the clamp. (Random T
    noise of 0.2 degC, as the tests', gives boygr ~ 2e-3 there at kb = 11
    and clamps gh at sea.) On land boygr >= 0.07 s-2 keeps gh >= 70, far
    beyond the clamp whatever the perturbation. The surface length
    kappa l0 stays far below lk, and the small-value guard far from q2."""
    from pompy.core import density

    s, p = grad_state(oracle, config, seed, land, device)
    gen = torch.Generator().manual_seed(seed)

    def uniform(lo, hi):
        return (lo + (hi - lo) * torch.rand(s["q2"].shape, generator=gen, dtype=GD)).to(device)

    fsm3 = s["fsm"].unsqueeze(-1)
    zz, h = s["zz"].view(1, 1, -1), s["h"].unsqueeze(-1)
    s["t"] = (5 + 15 * torch.exp(zz * h / 1000) + uniform(-0.002, 0.002)) * fsm3
    s["s"] = (35 + uniform(-0.0005, 0.0005)) * fsm3
    rho = density.dens(p["grav"], p["rhoref"], p["tbias"], p["sbias"], s["zz"], s["h"],
                       s["fsm"], s["s"], s["t"], s["rho"]).rhoo
    levels = torch.arange(rho.size(2), dtype=GD, device=device).view(1, 1, -1)
    s["rho"] = torch.where(fsm3 > 0, rho, 1e-3 * levels)
    s["q2b"], s["q2"] = uniform(1e-2, 1e-1), uniform(1e-2, 1e-1)
    s["q2lb"] = s["q2b"] * torch.where(fsm3 > 0, uniform(0.3, 1.5), uniform(10, 50))
    s["uf"], s["vf"] = s["q2b"] * uniform(0.9, 1.1), s["q2lb"] * uniform(0.9, 1.1)
    u2 = uniform(0.5, 1.5)[:, :, 0]                 # eastward: no two means cancel
    s["wusurf"], s["wvsurf"] = 1e-6 * u2, 1e-6 * (2 * uniform(0, 1)[:, :, 0] - 1)
    return s, p


def smol_grad_state(oracle, config: Config, seed: int, land: float, device) -> tuple[dict, dict]:
    """smol_adif's arguments as advt2 gives them: mass fluxes from u, v, w
    and the tracer ff = t."""
    from pompy.ops import X, Y, shift

    s, p = grad_state(oracle, config, seed, land, device)
    dt, dx, dy = s["dt"].unsqueeze(-1), s["dx"].unsqueeze(-1), s["dy"].unsqueeze(-1)
    s["xmassflux"] = 0.25 * (shift(dy, X, -1) + dy) * (shift(dt, X, -1) + dt) * s["u"]
    s["ymassflux"] = 0.25 * (shift(dx, Y, -1) + dx) * (shift(dt, Y, -1) + dt) * s["v"]
    s["zwflux"], s["ff"] = s["w"].clone(), s["t"].clone()
    return s, p


# ---- the kinks

def profq_switches(s, p, out):
    """profq's branches: gh at its clamp .028, the small-value guard, and
    the surface length scale max(lk, kappa*l0)."""
    a1, b1, a2, b2 = 0.92, 16.6, 0.74, 10.1
    coef1, coef2 = a2 * (1.0 - 6.0 * a1 / b1), 3.0 * a2 * b2 + 18.0 * a1 * a2
    gh = (1.0 - coef1 / out["c"]) / coef2
    return torch.cat([(gh > .028 - 1e-9).flatten(), (out["uf"] == p["small"]).flatten(),
                      (out["l"][..., 1:-1] == out["l"][..., :1]).flatten()])


def edge_upwind_switches(s, p=None, out=None):
    """bcond 4 and 6's upwind switches at the open east and west edges."""
    u = s["u"]
    return torch.cat([(u[-1, 1:-1] <= 0).flatten(), (u[1, 1:-1] >= 0).flatten()])


def smol_switches(s, p, out):
    """smol_adif's branches: a neighbour below value_min, and the
    second-order term beyond the first, along i, j and k."""
    from pompy.ops import X, Y, Z, shift

    dti2 = p["dti2"]
    ff = s["ff"] * s["fsm"].unsqueeze(-1)
    dt = s["dt"].unsqueeze(-1)
    dzz = shift(s["dzz"], 0, -1).view(1, 1, -1)
    x, y, z = s["xmassflux"], s["ymassflux"], s["zwflux"]
    second = (dti2 * x * x * 2. / (s["aru"].unsqueeze(-1) * (shift(dt, X, -1) + dt)),
              dti2 * y * y * 2. / (s["arv"].unsqueeze(-1) * (shift(dt, Y, -1) + dt)),
              dti2 * z * z / (dzz * dt))
    beyond = [(f.abs() < sec.abs()).flatten() for f, sec in zip((x, y, z), second)]
    below = [((ff < 1e-9) | (shift(ff, d, -1) < 1e-9)).flatten() for d in (X, Y, Z)]
    return torch.cat(beyond + below)


def adjusted_u_switches(s, p=None, out=None):
    """bcond's upwind switches inside internal_step, on u adjusted to the
    external transports."""
    from pompy.core import stepping
    from pompy.ops import X, shift

    kbm1 = s["u"].size(2) - 1
    mean = stepping.depth_sum(s["u"], s["dz"], kbm1).unsqueeze(-1)
    u = s["u"] - mean + ((s["utb"] + s["utf"]) / (s["dt"] + shift(s["dt"], X, -1))).unsqueeze(-1)
    return edge_upwind_switches({"u": u})


def switches_stable(forward, state: dict, params: dict, wrt, switches, rel: float, seed: int = 0
                    ) -> int:
    """How many branches flip when every element of every ``wrt`` input
    moves by +-rel of its magnitude (two random sign patterns and their
    opposites): 0 where the kinks stay put."""
    with torch.no_grad():
        base = switches(state, params, forward(dict(state), dict(params)))
        gen = torch.Generator().manual_seed(seed)
        flips = 0
        for _ in range(2):
            signs = {n: (torch.randint(0, 2, state[n].shape, generator=gen).to(GD) * 2 - 1
                         ).to(state[n].device) for n in wrt}
            for direction in (1.0, -1.0):
                s = dict(state)
                for n in wrt:
                    s[n] = state[n] + direction * rel * float(state[n].abs().max()) * signs[n]
                flips = max(flips, int((switches(s, params, forward(s, dict(params))) != base).sum()))
    return flips


@dataclasses.dataclass(frozen=True)
class GradCase:
    label: str
    routine: str
    call: str
    wrt: tuple
    outputs: tuple
    params: tuple = ()
    state: str = "plain"            # plain, turbulence, smol
    land: float = 0.2
    switches: str | None = None     # profq, edge, smol, adjusted_u: the kinks its inputs move
    rel: float = SWITCH_REL
    fast: bool | None = None        # gradcheck's fast_mode (None: by FULL_GRADCHECK_LIMIT)


def _case(label: str, routine: str, call: str, wrt: str, outputs: str, **kw) -> GradCase:
    """A GradCase with its inputs and outputs as space-separated names and
    its parameter overrides (``params``) as a dict."""
    if "params" in kw:
        kw["params"] = tuple(kw["params"].items())
    return GradCase(label, routine, call, tuple(wrt.split()), tuple(outputs.split()), **kw)


ADVT2 = "advt2(tb,t,tclim,uf,a,c,nitera,sw)"
PROFT = "proft(uf,wtsurf,tsurf,nbct,tps)"
GRAD_CASES = [
    _case("dens", "dens", "dens(s,t,rho)", "s t", "rho"),
    _case("baropg", "baropg", "baropg", "rho rmean dt", "drhox drhoy"),
    _case("advct", "advct", "advct(a,c,ee)", "u v ub", "advx advy ee"),
    _case("advct vb dt aam", "advct", "advct(a,c,ee)", "vb dt aam", "advx advy"),
    _case("advave mode 2", "advave", "advave(tps)", "ua uab vab d",
          "advua advva wubot wvbot fluxua fluxva", params=dict(mode=2)),
    _case("advave mode 3", "advave", "advave(tps)", "ua va aam2d dx", "advua advva fluxua fluxva",
          params=dict(mode=3)),
    _case("advu", "advu", "advu", "u v w ub egf etf", "uf"),
    _case("advv", "advv", "advv", "v u w vb egb etb", "vf"),
    _case("advq", "advq", "advq(q2b,q2,uf,a,c)", "q2b q2 u w", "uf a c"),
    _case("vertvl", "vertvl", "vertvl(a,c)", "u v etf etb", "w a c"),
    _case("advt1", "advt1", "advt1(tb,t,tclim,uf,a,c)", "t tb u w", "uf tb a c zflux"),
    _case("advt2 nitera 1", "advt2", ADVT2, "t tb u w", "uf tb a c zflux", params=dict(nitera=1)),
    _case("advt2 nitera 2", "advt2", ADVT2, "t tb u w", "uf tb a c zflux", params=dict(nitera=2)),
    _case("advt2 nitera 2 v aam tclim", "advt2", ADVT2, "v aam tclim", "uf",
          params=dict(nitera=2)),
    _case("smol_adif", "smol_adif", "smol_adif", "xmassflux ymassflux zwflux ff",
          "xmassflux ymassflux zwflux ff", state="smol", switches="smol"),
    # rho's switches at 10x gradcheck's step (on land 1e-4 of rho moves boygr 5x its value)
    _case("profq q2b q2lb rho", "profq", "profq(a,c,tps,dtef)", "q2b q2lb rho",
          "uf vf km kh kq l", state="turbulence", switches="profq", rel=1e-5),
    _case("profq u t q2 kq wusurf", "profq", "profq(a,c,tps,dtef)", "u t q2 kq wusurf",
          "uf vf km kh kq", state="turbulence", switches="profq"),
    _case("profq uf vf wubot etf", "profq", "profq(a,c,tps,dtef)", "uf vf wubot etf",
          "uf vf km kh kq", state="turbulence", switches="profq"),
    _case("proft nbc 1", "proft", PROFT, "uf kh wtsurf", "uf", params=dict(nbct=1)),
    _case("proft nbc 2", "proft", PROFT, "uf kh wtsurf swrad etf", "uf", params=dict(nbct=2)),
    _case("proft nbc 3", "proft", PROFT, "uf kh tsurf", "uf", params=dict(nbct=3)),
    _case("proft nbc 4", "proft", PROFT, "uf kh tsurf swrad etf", "uf", params=dict(nbct=4)),
    _case("profu", "profu", "profu", "uf km ub vb cbc wusurf", "uf wubot"),
    _case("profu sea", "profu", "profu", "ub vb cbc", "uf wubot tps", land=0.0),
    _case("profv", "profv", "profv", "vf km ub vb cbc wvsurf", "vf wvbot"),
    _case("profv sea", "profv", "profv", "ub vb cbc", "vf wvbot tps", land=0.0),
    _case("bcond(1)", "bcond", "bcond(1)", "elf", "elf"),
    _case("bcond(2)", "bcond", "bcond(2)", "uaf vaf el h", "uaf vaf"),
    _case("bcond(3)", "bcond", "bcond(3)", "u uf vf h", "uf vf"),
    _case("bcond(4)", "bcond", "bcond(4)", "t s w tbe sbn", "uf vf"),
    _case("bcond(4) u", "bcond", "bcond(4)", "u t", "uf vf", land=0.0, switches="edge"),
    _case("bcond(5)", "bcond", "bcond(5)", "w", "w"),
    _case("bcond(6)", "bcond", "bcond(6)", "q2 q2l", "uf vf"),
    _case("bcond(6) u", "bcond", "bcond(6)", "u q2", "uf vf", land=0.0, switches="edge"),
    # without land: a 2x2 block of dry cells has u = v = 0, a deformation of
    # exactly 0 (safe_sqrt's guard) where aam receives a gradient
    _case("smagorinsky", "smagorinsky", "smagorinsky", "u v horcon", "aam", land=0.0),
    _case("surface_forcing seamount", "surface_forcing", "surface_forcing", "t w wusurf ramp",
          "wusurf wtsurf w", params=dict(iproblem=1)),
    _case("surface_forcing box", "surface_forcing", "surface_forcing", "t s tclim sclim vfluxf",
          "wtsurf wssurf w", params=dict(iproblem=2)),
    _case("vertical_averages mode 2", "vertical_averages", "vertical_averages",
          "advx drhox aam ua uab vab", "adx2d ady2d drx2d aam2d wubot wvbot fluxua",
          params=dict(mode=2)),
    _case("vertical_averages mode 3", "vertical_averages", "vertical_averages",
          "advy drhoy ua va d", "adx2d ady2d dry2d fluxva", params=dict(mode=3)),
]

GRAD_STATES = {"plain": grad_state, "turbulence": turbulence_state, "smol": smol_grad_state}
SWITCHES = {"profq": profq_switches, "edge": edge_upwind_switches, "smol": smol_switches,
            "adjusted_u": adjusted_u_switches}
EXTERNAL_WRT = ("el", "elb", "ua", "va", "uab")
EXTERNAL_OUT = tuple("elf uaf vaf el elb ua va uab vab etf egf utf vtf fluxua".split())
INTERNAL_OUT = tuple("u v ub vb t s tb sb q2 q2l q2b q2lb rho w km kh aam".split())
IMPLICIT_OUT = tuple("el elb ua va uab vab etf egf utf vtf".split())


def _section(label: str, name: str, wrt: tuple, outputs: tuple, params: dict, **kw) -> GradCase:
    """A GradCase of a main-program section (its own call)."""
    return GradCase(label, name, name, wrt, outputs, tuple(params.items()), **kw)


# the sections of each free surface (a core's free_surface, pompy.cores)
GRAD_SECTIONS = {
    SplitExplicit: [
        _section("external_step iext 1 mode 3", "external_step", EXTERNAL_WRT, EXTERNAL_OUT,
                 dict(isplit=10, ispadv=5, iext=1, mode=3)),
        _section("external_step iext 5 mode 2", "external_step", EXTERNAL_WRT, EXTERNAL_OUT,
                 dict(isplit=10, ispadv=5, iext=5, mode=2)),
        _section("external_step iext 9 mode 3", "external_step", EXTERNAL_WRT, EXTERNAL_OUT,
                 dict(isplit=10, ispadv=5, iext=9, mode=3)),
        _section("external_step iext 10 mode 3", "external_step", EXTERNAL_WRT, EXTERNAL_OUT,
                 dict(isplit=10, ispadv=5, iext=10, mode=3)),
    ],
    SemiImplicit: [
        _section("implicit_step", "implicit_step", ("el", "ua", "va", "d"), IMPLICIT_OUT,
                 dict(theta=0.55, cg_tol=1e-14, cg_maxiter=200, mode=3, dti=90.0)),
    ],
}
# the internal step's inputs: with no land (u moves bcond's upwind switches at
# the open edges, where land would sit on them), with land, and every
# component w.r.t. two 2-D fields; (label, land, inputs, fast, kinks)
INTERNAL_WRT = [("sea u t q2b", 0.0, ("u", "t", "q2b"), True, "adjusted_u"),
                ("land t s q2lb etf", 0.2, ("t", "s", "q2lb", "etf"), True, None),
                ("land etf wusurf", 0.2, ("etf", "wusurf"), None, None)]
INTERNAL_MODES = ((3, 1), (3, 2), (4, 1), (4, 2))          # (mode, nadv)
INTERNAL_GRAD_CASES = [
    _section(f"internal_step mode {mode} nadv {nadv} {label}", "internal_step", wrt, INTERNAL_OUT,
             dict(mode=mode, nadv=nadv), land=land, switches=switches, fast=fast)
    for mode, nadv in INTERNAL_MODES for label, land, wrt, fast, switches in INTERNAL_WRT]
# two whole steps: the initial fields differentiated (elb: the split-explicit
# mode's alone) and the outputs of the objective
CORE_WRT = {SplitExplicit: ("el", "elb", "t", "tb", "u", "ub"),
            SemiImplicit: ("el", "t", "tb", "u", "ub")}
CORE_OUT = ("el", "u", "v", "t", "s", "q2", "w")


def _state_for(case_state, switches, forward, oracle, config, seed, land, params_extra, wrt,
               device, rel) -> tuple[dict, dict, int, int]:
    """A state (and params) for a gradient case whose kinks stay put under
    ``rel``: the first of STATE_TRIES seeds; (state, params, seed, flips)."""
    flips = 0
    for k in range(STATE_TRIES):
        state, params = case_state(oracle, config, seed + k, land, device)
        params = dict(params, **params_extra)
        if switches is None:
            return state, params, seed + k, 0
        flips = switches_stable(forward, state, params, [n for n in wrt if n in state], switches,
                                rel, seed)
        if flips == 0:
            return state, params, seed + k, 0
    return state, params, seed + STATE_TRIES - 1, flips


def _forward(case: GradCase) -> Callable:
    """(state, params) -> outputs of a gradient case: its routine as pom2k
    calls it, or a main-program section (routines looked up when run)."""
    if case.routine in SECTIONS:
        return section_forward(case.routine)
    return routine_forward(case.routine, case.call)


def gradient_cases(core: str) -> list[GradCase]:
    """Every routine's cases, then the core's sections: its free surface's
    (external_step passes, or implicit_step) and internal_step."""
    return [*GRAD_CASES, *GRAD_SECTIONS[cores.get(core).free_surface], *INTERNAL_GRAD_CASES]


WHOLE_STEPS = "gradcheck two whole steps"


def check_names(core: str) -> list[str]:
    """The names of the suite's checks for ``core``, in its order (from its
    own tables)."""
    return [*(f"gradcheck {case.label}" for case in gradient_cases(core)), WHOLE_STEPS]


def gradcheck_case(case: GradCase, config: Config, oracle, device, seed: int) -> Check:
    """One gradient case on the config's grid (float64, on the device)."""
    name = f"gradcheck {case.label}"
    started = time.perf_counter()
    forward = _forward(case)
    switches = SWITCHES.get(case.switches)
    try:
        state, params, used, flips = _state_for(GRAD_STATES[case.state], switches, forward,
                                                oracle, config, seed, case.land, dict(case.params),
                                                case.wrt, device, case.rel)
        if flips:
            return Check("gradcheck", name, math.inf, 1.0, False,
                         f"{flips} branches flip under a {case.rel:g} perturbation on "
                         f"{STATE_TRIES} random states", {"switch_flips": flips})
        f, x0 = scalar_objective(forward, state, params, case.wrt, case.outputs, used)
        check = gradient_check("gradcheck", name, check_gradients(f, x0, case.fast, used),
                               f"seed {used}")
        check.measured["seconds"] = round(time.perf_counter() - started, 3)
        return check
    except Exception as exc:
        return crashed("gradcheck", name, 1.0, exc)


def gradcheck_suite(config: Config, core: str, oracle, device, seed: int,
                    report: Callable[[Check], None]) -> list[Check]:
    """gradcheck of every routine, the core's sections and two whole steps,
    in float64 on the device (see the module docstring)."""
    grid = window(config)             # two whole steps run on the whole grid
    cases = reported((gradcheck_case(case, grid, oracle, device, seed)
                      for case in gradient_cases(core)), report)
    return cases + reported(whole_steps_gradcheck(config, core, device, seed), report)


def whole_steps_gradcheck(config: Config, core: str, device, seed: int) -> list[Check]:
    """gradcheck through steps 3 and 4 of the config (after 2 steps: the
    seamount's cold start has a uniform flow, a guarded point of
    Smagorinsky's) w.r.t. the initial fields of CORE_WRT (el, elb with the
    split-explicit mode, t, tb, u, ub: one random direction through all of
    them, then one through each) and the parameter horcon, a 0-d tensor in
    the core's params (its one component, differenced at HORCON_EPS: see
    there). A core that solves for the elevation solves with the config's
    own cg_tol and cg_maxiter and the solver training differentiates (the
    certificate's key holds them). On a grid beyond the window, from a
    stirred state (:func:`stirred`) and as directional derivatives
    (:func:`_whole_steps_directional`)."""
    spec = cores.get(core)
    wrt = CORE_WRT[spec.free_surface]
    name = WHOLE_STEPS
    try:
        core = developed(config, spec, device)
        if not windowed(config):
            f, x0 = core_objective(core, wrt, steps=2, seed=seed)
            return [_whole_steps_check(name, f, x0, wrt, seed)]
        f, x0 = core_objective(stirred(core, seed), wrt, steps=2, seed=seed)
        return [_whole_steps_directional(name, f, x0, wrt, seed)]
    except Exception as exc:
        return [crashed("gradcheck", name, 1.0, exc)]


STIR = 0.05      # m/s: the noise on u, v, ub, vb of a grid beyond the window


def stirred(core, seed: int):
    """``core`` with masked noise of STIR m/s on u, v, ub, vb. Two steps
    from the seamount's rest leave most of a basin larger than the window
    at rest, where Smagorinsky's deformation is exactly 0 and its square
    root has no derivative (measured at 360x240x25: the guard fired at 2.3
    million points receiving a gradient). Stirred, a point's deformation
    falls below the guard's 1e-8 s-1 with a chance of about (1e-8 dx /
    STIR)**3: at 1e-3 m/s that left 155 of the 2 million points guarded,
    at 0.05 m/s about 1e-9 of them (a Courant number of 0.003 at dti 240
    s on 4 km cells). The same noise at both time levels: noise between
    them is a leapfrog kick."""
    gen = torch.Generator().manual_seed(seed)
    state = dict(core.state)
    for now, before, mask in (("u", "ub", "dum"), ("v", "vb", "dvm")):
        # one noise at both time levels: a stirred flow, not a leapfrog kick
        noise = torch.randn(state[now].shape, generator=gen, dtype=GD)
        noise = (STIR * noise).to(state[now]) * state[mask].unsqueeze(-1)
        state[now], state[before] = state[now] + noise, state[before] + noise
    object.__setattr__(core, "state", state)
    return core


def _whole_steps_check(name: str, f: Callable, x0: tuple, wrt: tuple, seed: int) -> Check:
    """One direction through all the fields, then one through each input
    (fields and horcon): the worst directional error, every problem."""
    measured = {"all_fields": check_gradients(lambda *fields: f(*fields, x0[-1]), x0[:-1],
                                              fast=True, seed=seed)}
    for i, field in enumerate(wrt + ("horcon",)):
        def one(xi, i=i):
            return f(*x0[:i], xi, *x0[i + 1:])
        measured[field] = check_gradients(one, (x0[i],), fast=field != "horcon", seed=seed,
                                          eps=HORCON_EPS if field == "horcon" else GRAD_EPS)
    return _worst_of(name, measured)


WHOLE_GRID_DIRECTIONS = 2     # random directions through all the fields at once


def _whole_steps_directional(name: str, f: Callable, x0: tuple, wrt: tuple, seed: int) -> Check:
    """The whole steps on a grid beyond the window (gradcheck's own passes
    cost minutes each there): one backward, then forward mode, reverse mode
    and the central difference along WHOLE_GRID_DIRECTIONS random
    directions through all the fields and one through each input alone
    (horcon at HORCON_EPS); the worst, every problem."""
    gen = torch.Generator().manual_seed(seed + 1)

    def draw(x):
        return torch.randn(x.shape, generator=gen, dtype=GD).to(x.device)
    still = torch.zeros_like(x0[-1])          # horcon: its own direction
    directions = {f"all fields {n + 1}": (tuple(draw(x) for x in x0[:-1]) + (still,), GRAD_EPS)
                  for n in range(WHOLE_GRID_DIRECTIONS)}
    for i, field in enumerate(wrt + ("horcon",)):
        alone = tuple(draw(x) if k == i else torch.zeros_like(x) for k, x in enumerate(x0))
        directions[field] = (alone, HORCON_EPS if field == "horcon" else GRAD_EPS)
    return _worst_of(name, directional_checks(f, x0, directions))


def _worst_of(name: str, measured: dict[str, dict]) -> Check:
    """One check of several directions' figures: the worst directional
    error, every problem."""
    worst, problems = (-1.0, ""), []
    for label, m in measured.items():
        c = gradient_check("gradcheck", name, m)
        if m["directional"] > worst[0] or math.isnan(m["directional"]):
            worst = (m["directional"], label)
        if not c.passed:
            problems.append(f"{label}: {c.detail}")
    return Check("gradcheck", name, worst[0], 1.0, not problems,
                 "; ".join(problems) or f"worst: {worst[1]}",
                 {"inputs": {k: {kk: vv for kk, vv in v.items() if kk != "guard_layers"}
                             for k, v in measured.items()}})


# The objective's round-off after two steps is ~4e-11 absolute (measured on
# the 8x7x5 seamount: the central difference w.r.t. horcon, whose derivative
# is ~5e-3, moves by 2e-5 from eps 1e-6 to 1e-7, beyond gradcheck's atol):
# horcon is differenced at eps 1e-4, where round-off gives 2e-7 and the
# truncation error stays below 1e-6 (measured: -4.78877e-3 analytical,
# -4.78876e-3 at eps 1e-3, -4.78917e-3 at 1e-4).
HORCON_EPS = 1e-4


def core_objective(core, wrt: tuple, steps: int, seed: int):
    """(f, x0): f(*fields, horcon) runs ``steps`` internal steps of ``core``
    from its current state with those fields set (leaves requiring grad)
    and horcon a 0-d tensor in core.params; a weighted sum of the new el,
    u, v, t, s, q2, w, each over its magnitude. The core is left as it was."""
    base, iint0, time0 = dict(core.state), core.iint, core.time
    horcon0 = core.params["horcon"]

    def run(*x):
        object.__setattr__(core, "state", dict(base))
        core.iint, core.time = iint0, time0
        for name, value in zip(wrt, x):
            setattr(core, name, value)
        core.params["horcon"] = x[-1]
        core.iend = iint0 + steps
        try:
            core.run_time_loop()
            return dict(core.state)
        finally:
            core.params["horcon"] = horcon0
            object.__setattr__(core, "state", base)
            core.iint, core.time = iint0, time0

    x0 = tuple(base[n].detach().clone().requires_grad_(True) for n in wrt) + (
        torch.tensor(float(horcon0), dtype=GD, device=core.device, requires_grad=True),)
    with torch.no_grad():
        after = run(*(x.detach() for x in x0))
    gen = torch.Generator().manual_seed(seed)
    weights = {n: (torch.randn(after[n].shape, generator=gen, dtype=GD)
                   / float(after[n].abs().max())).to(core.device) for n in CORE_OUT}

    def f(*x):
        out = run(*x)
        return sum((weights[n] * out[n]).sum() for n in CORE_OUT)
    return f, x0


