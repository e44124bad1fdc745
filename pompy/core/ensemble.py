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
(vamax, the solver's residual, whether the prognostic fields are finite)
is read once for all members; a failing member's step is taken again by a
single core from its last good state, so the stop is the one its single
run gives (``exc.member`` names it), and the ensemble keeps the last good
state of all.

The implicit core's members solve with its own solver: the PCG runs for
all of them at once (pompy.core.external.cg.pcg_members, its residuals
read on the host together, a converged member frozen where its own solve
stops), so each member's solution and iterations are its single run's. Every
member runs with the core's params but for its own numbers of
config.MEMBER_PARAMS (``set_member_params``, e.g. a wind factor each; a
float64 core), which vmap hands each member. pompy.compat.fortran_math, which hands
arrays to the Fortran, cannot run batched either: run members singly for
that; nor can a checkpointed core (refused). Gradients flow through an
ensemble's steps as through a core's.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import torch

from pompy import compat, variables
from pompy.config import MEMBER_PARAMS
from pompy.autodiff.policies import policies_in_force
from pompy.core import stepping
from pompy.core.model import Core, detached_copies, ordinary
from pompy.errors import ModelStop

GRID = frozenset(variables.names(kind="grid"))


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def mismatch(cores: list[Core]) -> str | None:
    """Why ``cores`` cannot be the members of one ensemble whose steps are
    theirs to the last bit (None: they can): cores of one kind, config,
    device, dtype, routines and policies, none checkpointed or compiled, at
    one step, with the same parameters (the same objects for tensors; in float64 the
    numbers of config.MEMBER_PARAMS may differ, each member running with
    its own), the same grid fields and a solver, if any, that a batch runs
    too (the core's PCG or the reference CG: batch_refusal). None learned (a
    parameter or grid field that requires grad): the members would share
    it, and its gradient would sum their parts in another order than their
    single runs' backward does (measured: the last bits of a learned
    horcon's gradient through three members differ). Start
    times (time0) may differ where a step does not read them: without the
    forcing ramp (lramp) and with all or none at a cold start (time0 = 0:
    no internal mode on the first step); the ensemble takes the first
    core's."""
    if not cores:
        return "no cores"
    first = cores[0]
    refused = next((why for core in cores if (why := core.external.batch_refusal())), None)
    if refused:
        return refused
    if any(core.checkpoint is not None for core in cores):
        return "a checkpointed core cannot run under torch.vmap"
    if any(core.graphs is not None for core in cores):
        return "a compiled core runs its own graphs, which torch.vmap would not"
    learned = [n for n, v in first.params.items() if torch.is_tensor(v) and v.requires_grad]
    learned += [n for n in sorted(GRID & first.state.keys()) if first.state[n].requires_grad]
    if learned:
        return (f"learned {', '.join(learned)}: the members' gradients would sum "
                "in another order than their single runs'")
    for core in cores[1:]:
        if not (type(core) is type(first) and core.config == first.config
                and (core.device, core.dtype) == (first.device, first.dtype)
                and core.routines == first.routines and core.policies == first.policies
                and core.iint == first.iint):
            return "the cores differ in kind, config, device, dtype, routines, policies or step"
        if not (core.time0 == first.time0 or not first.config.lramp
                and (core.time0 == 0.0) == (first.time0 == 0.0)):
            return "the cores' start times differ where a step reads them (ramp, cold start)"
        if core.params.keys() != first.params.keys() or any(
                not (a is b or _numbers(a, b) and (a == b or k in MEMBER_PARAMS
                                                   and first.dtype == torch.float64))
                for k, a, b in ((k, core.params[k], first.params[k]) for k in first.params)):
            return ("the cores' parameters differ (members may differ in "
                    f"{', '.join(MEMBER_PARAMS)} alone, in float64)")
        if core.state.keys() != first.state.keys() or not all(
                a is b or not (a.requires_grad or b.requires_grad) and torch.equal(a, b)
                for a, b in ((core.state[n], first.state[n]) for n in first.state if n in GRID)):
            return "the cores' grids differ"
    return None


class Ensemble:
    """``members`` copies of ``core``'s current state (a core set up by
    run_initialization, load_state or restore), stepped together. The core
    is the members' template (config, params, routines, policies); it is
    left as it was."""

    def __init__(self, core: Core, members: int):
        if not core.state:
            raise RuntimeError("Ensemble needs a core with a state: run_initialization() first")
        if int(members) != members or members < 1:
            raise ValueError(f"members={members!r}: a whole number >= 1")
        if core.checkpoint is not None:
            raise ValueError(f"Ensemble: a core with checkpoint={core.checkpoint!r} cannot run "
                             "under torch.vmap; give it one with checkpoint=None")
        self._hold(core, {n: v.unsqueeze(0).repeat(members, *([1] * v.dim()))
                          for n, v in core.state.items() if n not in GRID})

    def _hold(self, core: Core, state: dict) -> None:
        self.core, self.members = core, len(next(iter(state.values())))
        self.grid = {n: v for n, v in core.state.items() if n in GRID}
        self.state = state
        # parameters of config.MEMBER_PARAMS that differ between members:
        # float64 (members,), a number each inside the step
        self.member_params: dict[str, torch.Tensor] = {}
        self.iint, self.time0 = core.iint, core.time0
        self.last_good: dict | None = None
        self.vamax = torch.zeros(self.members)

    @classmethod
    def of(cls, cores: list[Core]) -> Ensemble:
        """The cores' current states as the members of one ensemble (stacked:
        autograd flows from them), the first core the template; refused
        (ValueError) unless :func:`mismatch` finds nothing."""
        reason = mismatch(cores)
        if reason is not None:
            raise ValueError(f"Ensemble.of: {reason}")
        ens = cls.__new__(cls)
        ens._hold(cores[0], {n: torch.stack([c.state[n] for c in cores])
                             for n in cores[0].state if n not in GRID})
        for name in MEMBER_PARAMS:         # where they differ (mismatch: float64 only)
            values = [float(c.params[name]) for c in cores]
            if len(set(values)) > 1:
                ens.member_params[name] = torch.tensor(values, dtype=torch.float64,
                                                       device=ens.core.device)
        return ens

    def set_member_params(self, m: int, **values: float) -> None:
        """Member m's own run parameters (config.MEMBER_PARAMS, e.g. its
        wind_factor); the others keep the core's unless given theirs. Each
        member equals its single run with those parameters to the last bit
        (float64: the single run's Python number and the member's float64
        one multiply alike; a float32 core's would not, and is refused)."""
        if self.core.dtype != torch.float64:
            raise ValueError("Ensemble: members' own parameters need a float64 core")
        for name, value in values.items():
            if name not in MEMBER_PARAMS:
                raise KeyError(f"set_member_params: {name!r} is not one of {MEMBER_PARAMS}")
            column = self.member_params.get(name)
            if column is None:
                column = torch.full((self.members,), float(self.core.params[name]),
                                    dtype=torch.float64, device=self.core.device)
            column = column.clone()
            column[m] = float(value)
            self.member_params[name] = column

    @contextlib.contextmanager
    def _batchable(self, core: Core):
        """``core`` with its free-surface part as a batch runs it
        (``batched()``: no host read inside vmap) for the block."""
        external = core.external
        core.external = external.batched()
        try:
            yield core
        finally:
            core.external = external

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

    def member(self, m: int, state: Mapping | None = None) -> dict[str, torch.Tensor]:
        """Member m's whole state (views), as a single core holds it; of the
        batched ``state`` if given (e.g. last_good)."""
        state = self.state if state is None else state
        return {**self.grid, **{n: v[m] for n, v in state.items()}}

    # ------------------------------------------------------------ stepping
    def step(self, iint: int) -> None:
        """Internal step iint of every member. If a member fails a check,
        its single run is stepped again from its last good state, which
        raises the stop a core would (``exc.member`` set); the ensemble then
        holds the last good state (also in ``last_good``)."""
        good = self.state
        out, checks = self._batched(iint)
        self.vamax = checks["vamax"]
        failed = self._failed(checks)
        if failed is None:
            self.state, self.iint = out, iint
            return
        self.last_good = good
        raise self._stop(failed, iint)

    def _batched(self, iint: int) -> tuple[dict, dict]:
        """Every member's step iint from the current state: the new state
        and the checks' tensors (the free-surface part's, finite; nothing
        read)."""
        if compat.in_force():
            raise RuntimeError("pompy.compat.fortran_math cannot run batched: step members singly")
        self.state, self.grid, self.member_params = (   # what a forward_only() run left
            ordinary(self.state), ordinary(self.grid), ordinary(self.member_params))
        good, grid = self.state, self.grid
        with self._batchable(self.core) as core:
            p, routines, time0, policies = core._fixed(iint)

            def one(s: dict, own: dict) -> dict:
                q = {**p, **own}
                s = core.external_pass({**grid, **s}, q, routines)
                checks = {n: s.pop(n) for n in core.external.checks}
                s = core.internal_pass(s, iint, q, routines, time0)
                finite = stepping.finite(s)
                return {**{n: v for n, v in s.items() if n not in grid}, **checks,
                        "finite": finite}

            with policies_in_force(policies):
                out = torch.vmap(one)(good, self.member_params)
        checks = {n: out.pop(n) for n in (*self.core.external.checks, "finite")}
        return out, checks

    def _passed(self, checks: dict) -> torch.Tensor:
        """Whether each member's step passes a core's checks, (B,) bool (no read)."""
        return self.core.external.within(self.core.config, checks) & checks["finite"]

    def _failed(self, checks: dict) -> int | None:
        """The first member whose step fails a core's checks (one host read
        for all), or None."""
        passed = self._passed(checks).tolist()
        return next((m for m in range(self.members) if not passed[m]), None)

    def _stop(self, m: int, iint: int) -> ModelStop:
        """Member m's stop at step iint as its single run gives it: a core of
        the same kind, loaded with the member's last good state, steps
        again (so the kind of stop, its place and its message are a
        core's)."""
        core = self.core
        twin = type(core)(core.config, device=core.device, dtype=core.dtype,
                          policies=core.policies)
        twin.params = dict(core.params, **{n: float(v[m]) for n, v in self.member_params.items()})
        twin.routines = dict(core.routines)
        twin.load_state({n: v.detach() for n, v in self.member(m, self.last_good).items()},
                        iint=iint - 1, time0=self.time0)
        with self._batchable(twin), torch.no_grad():
            try:
                twin.step(iint)
            except ModelStop as exc:
                exc.member = m
                return exc
        raise RuntimeError(f"pompy: member {m} of the ensemble failed step {iint}, its single run "
                           "did not: a bug, please report it")

    def advance(self, last: int, on_step: Callable[[int, torch.Tensor], None] | None = None) -> None:
        """Steps iint+1 .. last; ``on_step(iint, vamax)`` after each checked
        step (vamax of every member, (B,)): each step, or every
        ``check_every`` steps as the core's (:meth:`Core._block`)."""
        every = self.core.check_every
        while self.iint < last:
            if every == 1:
                self.step(self.iint + 1)
            else:
                self._block(self.iint + 1, min(self.iint + every, last))
            if on_step is not None:
                on_step(self.iint, self.vamax)

    def _block(self, first: int, last: int) -> None:
        """Steps first..last with one host read for their checks; if a
        member failed one, the steps again from the block's start, each
        checked (so the stop is the one :meth:`step` gives)."""
        good, passed = self.state, None
        for iint in range(first, last + 1):
            self.state, checks = self._batched(iint)
            self.iint, self.vamax = iint, checks["vamax"]
            ok = self._passed(checks).all()
            passed = ok if passed is None else passed & ok
        if bool(passed):
            return
        self.state, self.iint = good, first - 1
        for iint in range(first, last + 1):
            self.step(iint)

    def snapshot(self, m: int) -> dict:
        """Member m's :meth:`Core.snapshot` record (detached copies)."""
        names = [n for n in variables.names("snapshot") if n not in GRID]
        return {**detached_copies({n: self.state[n][m] for n in names}), "iint": self.iint,
                "time0": self.time0, "time": self.core.config.dti * self.iint / 86400.0 + self.time0}
