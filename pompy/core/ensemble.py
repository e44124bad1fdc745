"""An ensemble: B independent members of one core, stepped together.

    core = ExplicitCore(config)            # or ImplicitCore
    core.run_initialization()
    ens = Ensemble(core, members=8)        # B copies of the core's state
    ens.load_member(3, arrays)             # e.g. a perturbed initial state
    ens.advance(240)                       # steps iint+1 .. 240
    ens.member(3)["t"]                     # member 3's fields, pom2k order

Every field that evolves has a leading member dimension (B, im, jm[, kb]);
the grid (pompy.variables' "grid" kind) is held once. A step is the core's
own pass (Core.external_pass, Core.internal_pass) under torch.vmap, so
every routine runs batched and each member equals its own single run to
the last bit (tests/test_ensemble.py). What a step reads on the host
(vamax, the solver's residual, whether every field is finite) is read once
for all members; a stop names the first failing member and keeps the last
good state of all (``last_good``).

The implicit core's elevation solve is the reference CG here (the PCG's
early exit reads its residual on the host, which vmap cannot batch; the
core given is switched to it); it converges to the same cg_tol. Every
member runs with the core's params: members whose parameters differ
(e.g. a wind factor each) are single runs. pompy.compat.fortran_math, which hands
arrays to the Fortran, cannot run batched either: run members singly for
that. Gradients flow through an ensemble's steps as through a core's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from pompy import compat, variables
from pompy.autodiff.policies import policies_in_force
from pompy.core.external import cg
from pompy.core.model import Core, _SLACK, first_non_finite
from pompy.errors import CFLViolation, ModelStop, NonFiniteState, NotConverged

GRID = frozenset(variables.names(kind="grid"))


class Ensemble:
    """``members`` copies of ``core``'s current state (a core set up by
    run_initialization, load_state or restore), stepped together."""

    def __init__(self, core: Core, members: int):
        if not core.state:
            raise RuntimeError("Ensemble needs a core with a state: run_initialization() first")
        if int(members) != members or members < 1:
            raise ValueError(f"members={members!r}: a whole number >= 1")
        self.core, self.members = core, int(members)
        if getattr(core.external, "solver", None) is not None:
            core.external.solver = cg.solve        # no host reads inside vmap
        self.grid = {n: v for n, v in core.state.items() if n in GRID}
        self.state = {n: v.unsqueeze(0).repeat(members, *([1] * v.dim()))
                      for n, v in core.state.items() if n not in GRID}
        self.iint, self.time0 = core.iint, core.time0
        self.last_good: dict | None = None
        self.vamax = torch.zeros(members)

    # ------------------------------------------------------------ members
    def load_member(self, m: int, arrays: Mapping) -> None:
        """Member m's fields from ``arrays`` (pom2k order; any subset of the
        evolving fields; the grid is shared and cannot differ)."""
        for name, value in arrays.items():
            if name in GRID:
                raise KeyError(f"load_member: {name!r} is a grid field, shared by every member")
            if name not in self.state:
                raise KeyError(f"load_member: {name!r} is not a pompy variable")
            new = self.state[name].clone()
            new[m] = torch.as_tensor(value, dtype=new.dtype, device=new.device)
            self.state[name] = new

    def member(self, m: int) -> dict[str, torch.Tensor]:
        """Member m's whole state (views), as a single core holds it."""
        return {**self.grid, **{n: v[m] for n, v in self.state.items()}}

    # ------------------------------------------------------------ stepping
    def step(self, iint: int) -> None:
        """Internal step iint of every member; raises the stop of the first
        failing member (``exc.member``) with ``last_good`` set."""
        if compat.in_force():
            raise RuntimeError("pompy.compat.fortran_math cannot run batched: step members singly")
        core, good = self.core, self.state
        p, routines, time0, policies = core._fixed(iint)
        grid = self.grid

        def one(s: dict) -> dict:
            s = core.external_pass({**grid, **s}, p, routines)
            checks = {n: s.pop(n) for n in ("vamax", "imax", "jmax", "cg_residual") if n in s}
            s = core.internal_pass(s, iint, p, routines, time0)
            finite = torch.stack([torch.isfinite(s[n]).all() for n in s if n not in grid]).all()
            return {**{n: v for n, v in s.items() if n not in grid}, **checks, "finite": finite}

        with policies_in_force(policies):
            out = torch.vmap(one)(good)
        checks = {n: out.pop(n) for n in ("vamax", "imax", "jmax", "cg_residual", "finite")
                  if n in out}
        self.state, self.iint = out, iint
        self.vamax = checks["vamax"]
        self._check(iint, good, checks)

    def _check(self, iint: int, good: dict, checks: dict) -> None:
        """One host read of every member's vamax, residual and finiteness."""
        c = self.core.config
        residual = checks.get("cg_residual", torch.zeros_like(checks["vamax"]))
        vamax, res, finite = torch.stack([checks["vamax"].to(residual.dtype), residual,
                                          checks["finite"].to(residual.dtype)]).tolist()
        for m in range(self.members):
            if vamax[m] <= c.vmaxl and res[m] <= c.cg_tol * _SLACK and finite[m] == 1.0:
                continue
            self.last_good = good
            if not vamax[m] <= c.vmaxl:
                exc: ModelStop = CFLViolation(iint, vamax[m], int(checks["imax"][m]),
                                              int(checks["jmax"][m]), c.vmaxl,
                                              field=self.core.external.checked_field)
            elif not res[m] <= c.cg_tol * _SLACK:
                exc = NotConverged(iint, res[m], c.cg_tol, c.cg_maxiter)
            else:
                arrays = {n: v.detach().cpu().numpy() for n, v in self.member(m).items()}
                exc = NonFiniteState(iint, *first_non_finite(arrays))
            exc.member = m
            raise exc

    def advance(self, last: int, on_step: Callable[[int, torch.Tensor], None] | None = None) -> None:
        """Steps iint+1 .. last; ``on_step(iint, vamax)`` after each (vamax
        of every member, (B,))."""
        for iint in range(self.iint + 1, last + 1):
            self.step(iint)
            if on_step is not None:
                on_step(iint, self.vamax)

    def numpy_member(self, m: int) -> dict[str, np.ndarray]:
        return {n: v.detach().cpu().numpy() for n, v in self.member(m).items()}

    def snapshot(self, m: int) -> dict:
        """Member m's :meth:`Core.snapshot` record (detached copies)."""
        names = [n for n in variables.names("snapshot") if n not in GRID]
        return {**{n: self.state[n][m].detach().clone() for n in names}, "iint": self.iint,
                "time0": self.time0, "time": self.core.config.dti * self.iint / 86400.0 + self.time0}
