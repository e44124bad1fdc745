"""The parity suite: every torch routine of :data:`pompy.core.stepping.ROUTINES`
(and smol_adif, and the main-program sections of the core's free surface
and internal_step) against the Fortran oracle on ``samples`` random but
physically valid states (pompy.verify.states) on the config's grid, or on
a window of it where it is larger (pompy.verify.states.window: why that
covers the grid is said there), each as pom2k's main program calls it
(pompy.calls); the set-up routines (seamount, box, file2ic with depth,
areas_masks, slpmax, grid_coordinates inside) through the set-up of each
problem on the whole grid. A routine of ROUTINES without a case fails the
"parity coverage" check.

Tolerances. float64: every routine and section 1e-12 of each field's max
magnitude (the design's bar; the tests measure 0 to 4e-16), the set-ups
1e-12 (measured 5.7e-16; 2.6e-14 for file2ic's dry2d, a depth sum of
baroclinic gradients). float32 against the oracle's float64: per routine
the bars of the tests' float32 measurements (tests/test_core_*.py, over
150 to 400 random states, each bar 4-8x the worst measured; :data:`F32`),
and for what the tests did not measure in float32 the bar is 5-15x what
this module measured over 20 random states on 8x7x5 and 12x10x6 grids
(noted at each entry).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from pompy import cores
from pompy.config import Config
from pompy.core.external.implicit import SemiImplicit
from pompy.core.external.split import SplitExplicit
from pompy.verify.checks import Check, WorstField, crashed, relative_error, reported
from pompy.verify.routines import section_forward, torch_routine
from pompy.verify.states import (as_numpy, as_tensors, coordinates_state, open_state, random_state,
                                 smol_parity_state, window)
from pompy.verify.twins import has_twin

F64_TOL = 1e-12          # routines, sections and set-ups against the oracle, float64

# float32 bars against the oracle's float64, relative to each field's max
# magnitude (":work" is the bar of the work arrays ee, gg where it differs).
F32 = {
    # tests/test_core_advection.py: flux divergences of O(1) terms, a few
    # float32 ulp (6e-8); measured <= 4.6e-7 over 150 states
    "advct": 2e-6, "advave": 2e-6, "advu": 2e-6, "advv": 2e-6, "advq": 2e-6, "vertvl": 2e-6,
    # tests/test_core_tracers.py: advt1, smol_adif sums of O(1) terms (4.4e-7);
    # advt2's diffusive fluxes are differences of S ~ 35 with anomalies ~ 0.3 (1.3e-5)
    "advt1": 2e-6, "advt2": 1e-4, "smol_adif": 2e-6,
    # tests/test_core_boundary.py: measured <= 2.1e-7
    "bcond": 1e-6,
    # tests/test_core_density.py: dens 2.3e-7; baropg 2.0e-5 (rho - rmean cancels)
    "dens": 1e-6, "baropg": 1e-4,
    # tests/test_core_turbulence.py: gh = l**2 boygr/q2b amplifies the cancellation
    # in boygr; sm, sh measured 9.8e-4
    "profq": 5e-3,
    # tests/test_core_vertical.py: proft 6.1e-5; profu/profv 2.2e-7, their
    # work arrays ee, gg 1.5e-3 (1 - ee loses digits where a, c are large)
    "proft": 3e-4, "profu": 1e-6, "profu:work": 1e-2, "profv": 1e-6, "profv:work": 1e-2,
    # tests/test_core_viscosity.py
    "smagorinsky": 2e-6,
    # measured here (20 random states, 8x7x5 and 12x10x6), bars 5-15x:
    # surface_forcing 7.1e-8 (products of O(1) terms), its box case 3.5e-6
    # (wssurf = vfluxf (sclim - s): S ~ 35 against an anomaly ~ 0.3, as in
    # advt2); vertical_averages 2.0e-7 (depth sums, advave's fluxes); depth
    # 2.4e-8 (the rounding of the levels); areas_masks 1.2e-7; slpmax
    # 2.7e-7; grid_coordinates 2.0e-7 (running sums of the spacings)
    "surface_forcing": 1e-6, "surface_forcing box": 3e-5, "vertical_averages": 2e-6,
    "depth": 1e-6, "areas_masks": 1e-6, "slpmax": 2e-6, "grid_coordinates": 2e-6,
    # the sections, measured here: external_step 2.7e-7; internal_step 4.7e-5
    # (profq's a, c; km, kh 2.7e-5), its work arrays ee, gg 1.9e-2 (profu's
    # and profv's sweeps, as above: scratch, not carried by the model);
    # implicit_step 5.4e-4 (el at dti 2000 s: the elevation change is
    # dt/art div F of fluxes F ~ D dy ua with D ~ 4500 m, whose float32
    # rounding the divergence does not cancel)
    "external_step": 2e-6, "internal_step": 5e-4, "internal_step:work": 1e-1,
    "implicit_step": 3e-3,
}
WORK_ARRAYS = ("ee", "gg")


@dataclasses.dataclass(frozen=True)
class ParityCase:
    """One pom2k call on random states: ``label`` names it in the table."""
    label: str
    call: str                      # as pom2k's main program writes it
    params: tuple = ()             # parameter overrides, as (name, value) pairs
    variant: str = "drawn"         # drawn, open, smol, coordinates, zero_levels

    @property
    def routine(self) -> str:
        from pompy.calls import bind
        return bind(self.call)[0]


def _case(label: str, call: str, variant: str = "drawn", **params) -> ParityCase:
    return ParityCase(label, call, tuple(params.items()), variant)


PARITY_CASES = [
    _case("advct", "advct(a,c,ee)"),
    _case("advave mode 3", "advave(tps)", mode=3),
    _case("advave mode 2", "advave(tps)", mode=2),
    _case("advu", "advu"),
    _case("advv", "advv"),
    _case("advq q2", "advq(q2b,q2,uf,a,c)"),
    _case("advq q2l", "advq(q2lb,q2l,vf,a,c)"),
    _case("vertvl", "vertvl(a,c)"),
    _case("advt1 t", "advt1(tb,t,tclim,uf,a,c)"),
    _case("advt1 s", "advt1(sb,s,sclim,vf,a,c)"),
    _case("advt2 t nitera 1 sw 0", "advt2(tb,t,tclim,uf,a,c,nitera,sw)", nitera=1, sw=0.0),
    _case("advt2 s nitera 1 sw 0", "advt2(sb,s,sclim,vf,a,c,nitera,sw)", nitera=1, sw=0.0),
    _case("advt2 t nitera 2 sw 0.5", "advt2(tb,t,tclim,uf,a,c,nitera,sw)", nitera=2, sw=0.5),
    _case("advt2 s nitera 2 sw 0.5", "advt2(sb,s,sclim,vf,a,c,nitera,sw)", nitera=2, sw=0.5),
    _case("advt2 t nitera 4 sw 1", "advt2(tb,t,tclim,uf,a,c,nitera,sw)", nitera=4, sw=1.0),
    _case("advt2 s nitera 4 sw 1", "advt2(sb,s,sclim,vf,a,c,nitera,sw)", nitera=4, sw=1.0),
    _case("smol_adif", "smol_adif", "smol", sw=0.7),
    _case("profq", "profq(a,c,tps,dtef)"),
    _case("proft t nbc 1", "proft(uf,wtsurf,tsurf,nbct,tps)", nbct=1),
    _case("proft s nbc 1", "proft(vf,wssurf,ssurf,nbcs,tps)", nbcs=1),
    _case("proft t nbc 2", "proft(uf,wtsurf,tsurf,nbct,tps)", nbct=2),
    _case("proft s nbc 2", "proft(vf,wssurf,ssurf,nbcs,tps)", nbcs=2),
    _case("proft t nbc 3", "proft(uf,wtsurf,tsurf,nbct,tps)", nbct=3),
    _case("proft s nbc 3", "proft(vf,wssurf,ssurf,nbcs,tps)", nbcs=3),
    _case("proft t nbc 4", "proft(uf,wtsurf,tsurf,nbct,tps)", nbct=4),
    _case("proft s nbc 4", "proft(vf,wssurf,ssurf,nbcs,tps)", nbcs=4),
    _case("profu", "profu"),
    _case("profv", "profv"),
    _case("bcond(1)", "bcond(1)"),
    _case("bcond(1) open", "bcond(1)", "open"),
    _case("bcond(2)", "bcond(2)"),
    _case("bcond(2) open", "bcond(2)", "open"),
    _case("bcond(3)", "bcond(3)"),
    _case("bcond(3) open", "bcond(3)", "open"),
    _case("bcond(4)", "bcond(4)"),
    _case("bcond(4) open", "bcond(4)", "open"),
    _case("bcond(5)", "bcond(5)"),
    _case("bcond(5) open", "bcond(5)", "open"),
    _case("bcond(6)", "bcond(6)"),
    _case("bcond(6) open", "bcond(6)", "open"),
    _case("dens rho", "dens(s,t,rho)"),
    _case("dens rmean", "dens(sclim,tclim,rmean)"),
    _case("baropg", "baropg"),
    _case("smagorinsky", "smagorinsky"),
    _case("surface_forcing seamount", "surface_forcing", iproblem=1),
    _case("surface_forcing box", "surface_forcing", iproblem=2),
    _case("vertical_averages mode 2", "vertical_averages", mode=2),
    _case("vertical_averages mode 3", "vertical_averages", mode=3),
    _case("depth", "depth", "zero_levels"),
    _case("areas_masks", "areas_masks"),
    _case("slpmax 0.1", "slpmax", slmax=0.1),
    _case("slpmax 0.4", "slpmax", slmax=0.4),
    _case("grid_coordinates", "grid_coordinates", "coordinates"),
]
# the set-up routines, compared through the set-up of each problem
SETUP_PROBLEMS = {"seamount": 1, "box": 2, "file2ic": 3}


class Section(NamedTuple):
    """A main-program section on random states: its label, the oracle
    routine and the parameter overrides, as (name, value) pairs."""
    label: str
    routine: str
    params: tuple


def _section(label: str, routine: str, **params) -> Section:
    return Section(label, routine, tuple(params.items()))


# the sections of each free surface (a core's free_surface, pompy.cores)
SECTIONS = {
    SplitExplicit: [
        _section("external_step iext 1 mode 3", "external_step", isplit=10, ispadv=5,
                 iext=1, mode=3),
        _section("external_step iext 5 mode 2", "external_step", isplit=10, ispadv=5,
                 iext=5, mode=2),
        _section("external_step iext 5 mode 3", "external_step", isplit=10, ispadv=5,
                 iext=5, mode=3),
        _section("external_step iext 9 mode 3", "external_step", isplit=10, ispadv=5,
                 iext=9, mode=3),
        _section("external_step iext 10 mode 3", "external_step", isplit=10, ispadv=5,
                 iext=10, mode=3),
    ],
    SemiImplicit: [
        _section("implicit_step mode 3 theta 0.55 dti 60", "implicit_step", mode=3, theta=0.55,
                 dti=60.0),
        _section("implicit_step mode 2 theta 1 dti 600", "implicit_step", mode=2, theta=1.0,
                 dti=600.0),
        _section("implicit_step mode 4 theta 0.5 dti 2000", "implicit_step", mode=4, theta=0.5,
                 dti=2000.0),
    ],
}
SECTIONS_INTERNAL = [
    _section("internal_step mode 3 nadv 1", "internal_step", mode=3, nadv=1),
    _section("internal_step mode 3 nadv 2", "internal_step", mode=3, nadv=2),
    _section("internal_step mode 4 nadv 1", "internal_step", mode=4, nadv=1),
    _section("internal_step mode 4 nadv 2", "internal_step", mode=4, nadv=2),
]


def _f32_tolerance(keys: tuple[str, ...], field: str) -> float:
    """The float32 bar of ``field``: the first of ``keys`` (a case's label,
    then its routine) with an entry, its work-array entry for ee, gg."""
    for key in keys:
        if field in WORK_ARRAYS and f"{key}:work" in F32:
            return F32[f"{key}:work"]
        if key in F32:
            return F32[key]
    raise KeyError(f"no float32 tolerance for {keys}")


def _zero_levels(state: dict, params: dict, seed: int) -> dict:
    """depth's in/output arrays, zero (it computes them)."""
    return {name: np.zeros_like(state[name]) for name in ("z", "zz", "dz", "dzz")}


# the state each ParityCase variant calls its routine on, from a drawn one
VARIANTS = {
    "drawn": lambda state, params, seed: state,
    "open": lambda state, params, seed: open_state(state, seed),
    "smol": smol_parity_state,
    "coordinates": lambda state, params, seed: coordinates_state(state, seed),
    "zero_levels": _zero_levels,
}


def compare_routine(case: ParityCase, oracle, state: dict, params: dict, dtype, device
                    ) -> dict[str, tuple[float, tuple]]:
    """{field: (error, where)} of the torch routine against the oracle's on
    one state; the torch routine must return the oracle's in/output
    arguments, in order (else ValueError)."""
    from pompy.calls import bind, invoke

    name = case.routine
    want = oracle.call(case.call, state, params)
    out, binding = invoke(torch_routine(name), case.call, as_tensors(state, dtype, device), params)
    sig = oracle.signature(bind(case.call)[0])
    inout = tuple(a for a in sig.args if a in sig.inout)
    if tuple(out._fields) != inout:
        raise ValueError(f"torch {name} returns {out._fields}, the oracle writes {inout}")
    got = {binding.get(a, a): as_numpy(getattr(out, a)) for a in inout}
    return {k: relative_error(got[k], want[k]) for k in want}


def compare_section(name: str, fn: Callable, oracle, state: dict, params: dict, dtype, device
                    ) -> dict[str, tuple[float, tuple]]:
    """A main-program section (fn(s, p) -> state) against the oracle
    routine ``name``: every array it writes, and its scalar outputs."""
    want = oracle.call(name, state, params)
    got = fn(as_tensors(state, dtype, device), dict(params))
    errors = {}
    if "cg_residual" in want:       # the solver's: each within its tolerance (tiny, not comparable)
        limit = params["cg_tol"] * (1 + 1e-9)
        ok = want.pop("cg_residual") <= limit and float(got["cg_residual"]) <= limit
        errors["cg_residual"] = (0.0 if ok else math.inf, ())
    for key, w in want.items():
        g = got.get(key)
        if g is None:
            if isinstance(w, np.ndarray):         # an array the torch section does not write
                errors[key] = (math.inf, ())
            continue                              # a scalar only the Fortran reports (a count)
        errors[key] = relative_error(np.asarray(as_numpy(g)), np.asarray(w))
    return errors


def _fortran_cg(oracle) -> Callable:
    """The oracle's cg_solve as a torch solver (on the operator's device and
    dtype): implicit_step with one solver shared is the step alone."""
    def solve(a, b, tol, maxiter):
        def f(t):
            return np.asfortranarray(as_numpy(t))
        x = np.zeros(tuple(b.shape), order="F")
        residual, _ = oracle.module.cg_solve(f(a.diag), f(a.cx), f(a.cy), f(a.active.double()),
                                             f(b), tol, maxiter, x)
        return (torch.as_tensor(x.copy(), dtype=b.dtype, device=b.device),
                torch.tensor(residual, dtype=b.dtype, device=b.device))
    return solve


def parity_suite(config: Config, core: str, oracle, device, dtype, samples: int, seed: int,
                 report: Callable[[Check], None]) -> list[Check]:
    """The coverage check, every routine's cases, the sections of ``core``
    (its free surface's where the oracle has its twin, and internal_step)
    and the set-ups, on ``samples`` random states from ``seed``."""
    spec = cores.get(core)
    grid = window(config)             # the set-ups run on the whole grid
    states = [(s,) + random_state(s, grid, oracle) for s in range(seed, seed + samples)]
    sections = list(SECTIONS[spec.free_surface] if has_twin(oracle, spec) else [])
    return reported(_parity_checks(config, oracle, states, sections, device, dtype, seed, samples),
                    report)


def check_names(core: str) -> list[str]:
    """The names of the suite's checks for ``core``, in its order (from its
    own tables)."""
    sections = SECTIONS[cores.get(core).free_surface] + SECTIONS_INTERNAL
    return [COVERAGE, *(f"parity {case.label}" for case in PARITY_CASES),
            *(f"parity {section.label}" for section in sections),
            *(_setup_name(problem) for problem in SETUP_PROBLEMS)]


def _parity_checks(config, oracle, states, sections, device, dtype, seed, samples
                   ) -> Iterator[Check]:
    """The suite's checks, each as soon as it is measured."""
    yield _coverage()
    for case in PARITY_CASES:
        yield _routine_check(case, oracle, states, dtype, device)
    for section in sections + SECTIONS_INTERNAL:
        yield _section_check(section, oracle, states, dtype, device)
    yield from setup_parity(config, oracle, seed, samples)


COVERAGE = "parity coverage"


def _setup_name(problem: str) -> str:
    return f"parity set-up {problem}"


def _coverage() -> Check:
    """Fails naming the routines of ROUTINES that have no case."""
    from pompy.core import stepping

    covered = {case.routine for case in PARITY_CASES} | set(SETUP_PROBLEMS)
    missing = sorted(set(stepping.ROUTINES) - covered)
    return Check("parity", COVERAGE, float(len(missing)), 0.0, not missing,
                 "routines without a case: " + ", ".join(missing) if missing else
                 f"{len(stepping.ROUTINES)} routines of ROUTINES, smol_adif, sections")


def _routine_check(case: ParityCase, oracle, states: list, dtype, device) -> Check:
    """One case on every state: its worst field against its bar."""
    f32 = dtype == torch.float32
    worst = WorstField()
    try:
        for sample, params, state in states:
            p = dict(params, **dict(case.params))
            s = VARIANTS[case.variant](state, p, sample)
            for field, (err, where) in compare_routine(case, oracle, s, p, dtype, device).items():
                tol = _f32_tolerance((case.label, case.routine), field) if f32 else F64_TOL
                worst.add(err, tol, f"{field} at {where}, seed {sample}")
        return worst.check("parity", f"parity {case.label}", call=case.call)
    except Exception as exc:           # a routine that fails to run fails its check
        return crashed("parity", f"parity {case.label}", F64_TOL, exc, {"call": case.call})


def _section_check(section: Section, oracle, states: list, dtype, device) -> Check:
    """One section on every state: its worst field against its bar."""
    f32 = dtype == torch.float32
    label, name, overrides = section
    fn = section_forward(name, solver=_fortran_cg(oracle))
    worst = WorstField()
    try:
        for sample, params, state in states:
            s = state
            if name == "internal_step":      # transports masked, as the external mode leaves them
                s = dict(state, utb=state["utb"] * state["dum"], utf=state["utf"] * state["dum"],
                         vtb=state["vtb"] * state["dvm"], vtf=state["vtf"] * state["dvm"])
            p = dict(params, **dict(overrides))
            for field, (err, where) in compare_section(name, fn, oracle, s, p, dtype,
                                                       device).items():
                tol = _f32_tolerance((name,), field) if f32 else F64_TOL
                worst.add(err, tol, f"{field} at {where}, seed {sample}")
        return worst.check("parity", f"parity {label}")
    except Exception as exc:
        return crashed("parity", f"parity {label}", F64_TOL, exc)


def _ic_file(config: Config, seed: int, folder: Path) -> Path:
    """An IC file for iproblem 3: the oracle's seamount set-up on the
    config's grid with random noise on el, t, s (masked)."""
    from pompy.icfile import write_ic_from_state
    from pompy.oracle.driver import new_state

    seamount = dataclasses.replace(config, iproblem=1)
    state = new_state(seamount)
    rng = np.random.default_rng(seed)
    fsm = state["fsm"]
    state = dict(state, el=state["el"] + 0.05 * rng.standard_normal(fsm.shape) * fsm,
                 t=state["t"] + 0.2 * rng.standard_normal(state["t"].shape) * fsm[..., None],
                 s=state["s"] + 0.05 * rng.standard_normal(state["s"].shape) * fsm[..., None])
    return write_ic_from_state(folder / f"ic_{seed}.nc", state, seamount)


def setup_parity(config: Config, oracle, seed: int, samples: int) -> list[Check]:
    """The torch set-up (pompy.core.setup.set_up: float64 on the CPU, as
    every core computes it before moving it to its device and dtype)
    against the oracle's, for the seamount, the box and an IC file
    (file2ic; ``samples`` random files): every variable."""
    with tempfile.TemporaryDirectory(prefix="pompy-verify-") as folder:
        return [_setup_check(config, problem, iproblem, seed, samples, Path(folder))
                for problem, iproblem in SETUP_PROBLEMS.items()]


def _setup_check(config: Config, problem: str, iproblem: int, seed: int, samples: int,
                 folder: Path) -> Check:
    """One problem's set-up, every variable (``samples`` IC files for file2ic)."""
    from pompy.core import setup
    from pompy.oracle.driver import new_state

    worst = WorstField()
    try:
        runs = range(seed, seed + samples) if iproblem == 3 else [None]
        for sample in runs:
            ic = {} if sample is None else {"icfile": str(_ic_file(config, sample, folder))}
            c = dataclasses.replace(config, iproblem=iproblem, **ic)
            want = new_state(c)
            got = setup.set_up(c)
            for name in want:
                err, where = relative_error(as_numpy(got[name]), want[name])
                worst.add(err, F64_TOL, f"{name} at {where}"
                          + ("" if sample is None else f", seed {sample}"))
        return worst.check("parity", _setup_name(problem),
                           note="CPU float64: every core sets up there")
    except Exception as exc:
        return crashed("parity", _setup_name(problem), F64_TOL, exc)
