"""The run suite: a short whole run (``steps`` internal steps, default 12)
of the core against its Fortran twin (pompy.verify.twins), both from the
oracle's set-up; a core that solves for the elevation also gets its
self-checks (continuity to round-off, a symmetric positive definite
elevation operator, the reference CG against scipy's direct solve).

Tolerances: whole runs 1e-10 on every variable in float64 (the design's
bar for whole runs; torch's pow differs from libmvec's by an ulp in dens,
which 12 steps leave at 1.3e-12, in w), a solving core's run 1e-10 + 1e4
cg_tol (each side solves with its own CG: the solver's tolerance times a
condition number up to 1e4, tests/test_implicit_oracle.py); in float32
against the oracle's float64 2e-3 on the prognostic fields (the float32
test's bar over 120 steps of a small seamount, tests/test_explicit_core.py;
measured here 5.6e-5 after 12 steps). The self-checks run in float64
whatever the dtype.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

from pompy import cores, variables
from pompy.config import Config
from pompy.cores import CoreSpec
from pompy.verify.checks import Check, within, WorstField, crashed, relative_error, reported
from pompy.verify.twins import has_twin, oracle_model

RUN_F64_TOL = 1e-10      # whole runs, float64
RUN_F32_TOL = 2e-3       # whole runs, float32 against the oracle's float64
IMPLICIT_COND = 1e4      # condition-number bound of the elevation operator (test_implicit_oracle)
CONTINUITY_TOL = 1e-15   # of max h: about 4.5 ulp of the depth
CG_TOL = 1e-10           # the reference CG against scipy's direct solve
# the reference CG's budget there (twice the cells up to this): it runs every
# iteration of its budget (no early exit), and 2 x 86400 cost minutes at
# 360x240; it meets 1e-13 in far fewer (see _operator_checks)
SOLVER_MAXITER = 5000


def run_suite(config: Config, core: str, oracle, device, dtype, steps: int,
              report: Callable[[Check], None]) -> tuple[list[Check], str]:
    """The core against its Fortran twin for ``steps`` internal steps, both
    from the oracle's set-up (the set-up has its own parity check); a
    solving core with the reference CG (the solver gradients go through).
    float64: every variable of pompy.variables (work arrays aside); float32:
    the prognostic fields (the diagnostics' worst is recorded, not gated:
    w, the small residual of continuity, and the baroclinic gradients
    drhox, drhoy, differences of nearly equal densities, measured 3.5e-2
    and 1.2e-2 of their magnitude after 12 steps of the 8x7x5 seamount,
    against 5.6e-5 for the worst prognostic field, v).
    Returns the checks and what the run was compared with."""
    spec = cores.get(core)
    checks = []
    if not has_twin(oracle, spec):
        reference = "self-checks (the oracle has no implicit scheme)"
    else:
        reference = spec.twin_name
        checks += reported([_twin_check(config, spec, oracle, device, dtype, steps)], report)
    if spec.solver:
        checks += reported(implicit_self_checks(config, spec, device), report)
    return checks, reference


CONTINUITY = "implicit continuity"
OPERATOR = "implicit operator symmetric positive definite"
SOLVER = "implicit reference CG vs scipy"


def _twin_check_name(spec: CoreSpec) -> str:
    return f"run vs {spec.twin_name}"


def check_names(core: str) -> list[str]:
    """The names of the suite's checks for ``core``, in its order."""
    spec = cores.get(core)
    return [_twin_check_name(spec), *((CONTINUITY, OPERATOR, SOLVER) if spec.solver else ())]


def _twin_check(config: Config, spec: CoreSpec, oracle, device, dtype, steps: int) -> Check:
    """The run against the twin: the worst variable against its bar."""
    f32 = dtype == torch.float32
    tol = RUN_F32_TOL if f32 else RUN_F64_TOL + (IMPLICIT_COND * config.cg_tol
                                                if spec.solver else 0.0)
    name = _twin_check_name(spec)
    worst = WorstField()
    try:
        model = oracle_model(config, spec)
        torch_core = spec.core(config, device=device, dtype=dtype)
        if spec.solver:
            from pompy.core.external import cg
            torch_core.external = spec.free_surface(cg.solve)
        torch_core.load_state({k: v.copy() for k, v in model.state.items()}, iint=0)
        torch_core.iend = steps
        with torch.no_grad():
            torch_core.run_time_loop()
        model.advance(steps)
        got = torch_core.numpy_state()
        diagnostic = WorstField()
        for field in variables.VARIABLES:          # every model variable, work arrays aside
            err, where = relative_error(got[field], model.state[field])
            gated = not f32 or variables.VARIABLES[field].prognostic
            (worst if gated else diagnostic).add(err, tol, f"{field} at {where}, iint {steps}")
        measured = {} if not f32 else {"diagnostics": diagnostic.figure,
                                       "diagnostics_where": diagnostic.where}
        return worst.check("run", name, steps=steps, **measured)
    except Exception as exc:
        return crashed("run", name, tol, exc)


def implicit_self_checks(config: Config, spec: CoreSpec, device) -> list[Check]:
    """The solving core's own properties (tests/test_implicit_core.py), in
    float64 on the device, on the config after 2 steps:

    - continuity: el(n+1) - el(n) = -dti (div(dy utf, dx vtf)/art + vfluxf)
      on the interior wet cells to round-off (bar 1e-15 max h, about 4.5
      ulp of the depth; cg_tol set loose, 1e-4: continuity holds whatever
      the solver's tolerance);
    - the elevation operator is symmetric (exactly) and positive definite
      (smallest eigenvalue > 0, dense, up to 4000 cells), land rows identity;
    - the reference CG (cg.solve, tol 1e-13) against scipy's direct solve:
      1e-10 relative (measured 1.0e-13 on a 12x10 seamount).
    """
    checks = [_continuity_check(config, spec, device)]
    try:
        for check in _operator_checks(developed(config, spec, device)):
            checks.append(check)          # kept should the next one raise
    except Exception as exc:
        checks.append(crashed("run", "implicit operator and solver", 0.0, exc))
    return checks


def developed(config: Config, spec: CoreSpec, device):
    """``spec``'s core on ``config`` after 2 steps (float64, on the device)."""
    core = spec.make(config, device=device, dtype=torch.float64)
    core.run_initialization()
    core.iend = 2
    with torch.no_grad():
        core.run_time_loop()
    return core


def _continuity_check(config: Config, spec: CoreSpec, device) -> Check:
    """The elevation's change against the transports' divergence."""
    from pompy.core.external import implicit as scheme
    from pompy.ops import xp, yp

    name = CONTINUITY
    try:
        core = developed(dataclasses.replace(config, cg_tol=1e-4), spec, device)
        s0 = dict(core.state)
        with torch.no_grad():
            s = scheme.implicit_step(s0, dict(core.params), core.routines)
        dy, dx, art = s0["dy"], s0["dx"], s0["art"]
        fu = s["utf"] * .5 * (dy + torch.cat([dy[:1], dy[:-1]], 0))
        fv = s["vtf"] * .5 * (dx + torch.cat([dx[:, :1], dx[:, :-1]], 1))
        change = s["el"] - s0["el"]
        want = -config.dti * ((xp(fu) - fu + yp(fv) - fv) / art + s0["vfluxf"])
        interior = torch.zeros_like(change, dtype=torch.bool)
        interior[1:-1, 1:-1] = True
        interior &= s0["fsm"] > 0
        figure = float((change - want)[interior].abs().max() / s0["h"].max())
        return Check("run", name, figure, CONTINUITY_TOL, within(figure, CONTINUITY_TOL),
                     "max |el change - continuity| / max h, interior wet cells")
    except Exception as exc:
        return crashed("run", name, CONTINUITY_TOL, exc)


def _operator_checks(core) -> Iterator[Check]:
    """The elevation operator of the core's next step (symmetric positive
    definite) and the reference CG against scipy's direct solve on it."""
    import scipy.sparse.linalg as spla

    from pompy.core.external import cg
    from pompy.core.external import implicit as scheme

    seen = {}

    def spy(a, b, tol, maxiter):
        seen["a"], seen["b"] = a, b
        return cg.solve(a, b, tol, maxiter)
    with torch.no_grad():
        scheme.implicit_step(dict(core.state), dict(core.params), core.routines, solver=spy)
    a = cg.FivePoint(*(t.cpu() for t in seen["a"]))
    b = seen["b"].cpu()
    m = cg.to_scipy(a)
    asym = float(abs(m - m.T).max()) if m.nnz else 0.0
    detail = "max |A - A^T|"
    if m.shape[0] <= 4000:
        eig = float(np.linalg.eigvalsh(m.toarray()).min())
        detail += f"; smallest eigenvalue {eig:.3g}"
        ok = asym == 0.0 and eig > 0
    else:
        eig, ok = math.nan, asym == 0.0
    yield Check("run", OPERATOR, asym, 0.0, ok, detail,
                {"smallest_eigenvalue": eig})
    want = spla.spsolve(m.tocsc(), b.numpy().T.reshape(-1))
    want = torch.from_numpy(want.reshape(tuple(b.shape)[::-1]).T.copy())
    x, res = cg.solve(a, b, 1e-13, max(200, min(int(a.active.sum()) * 2, SOLVER_MAXITER)))
    figure = float((x - want).abs().max() / want.abs().max())
    yield Check("run", SOLVER, figure, CG_TOL, within(figure, CG_TOL),
                f"relative residual {float(res):.2e}", {"residual": float(res)})
