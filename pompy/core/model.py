"""The scheme-independent core: pom2k's main loop around a free-surface part.

    core = Core(config, SplitExplicit(), device="cpu", dtype=torch.float64)
    core.run_initialization()          # pom2k's set-up, iint = 0
    core.iend = 120
    core.run_time_loop()               # iint = core.iint+1 .. core.iend

The core owns what does not depend on how the external (free-surface) mode
is stepped: the state (every variable of pompy.variables is an attribute,
``core.u``, and an entry of ``core.state``), the set-up, load/capture/
restore/inject of state, loop-entry cloning, checkpointing, the generation
fast path with its snapshots, the stop checks and the one ``advance`` that
drivers call. The free-surface scheme is a part it is given
(pompy.core.external): split-explicit (pom2k's mode split) or implicit.

One internal step, in pom2k's order (``Core._advance``)::

    surface_forcing                                    wind, heat, freshwater
    advct, baropg, smagorinsky, vertical_averages      3-D terms for the 2-D mode (mode != 2)
    external.external_mode                             el, ua, va; egf, etf, utf, vtf; vamax
    ---- stop if the part's checks fail (vamax > vmaxl, ...: read 1) ----
    internal_step                                      u, v, w, q2, q2l, t, s, rho (mode 3, 4)
    end_of_step                                        et, etb, egb, utb, vtb, vfluxb, dt
    ---- stop if a prognostic field is not finite (value read 2) ----

With ``check_every`` N > 1 the two reads are made once every N steps (the
checks stay on the device in between; ``Core._block``); a block that
failed runs again from its start checked step by step, so a stop is the
one N = 1 gives.

The set-up is computed on the CPU in float64, then moved to the core's
device and dtype, so a float32 or CUDA run starts from the same initial
state as the float64 CPU run. A stop raises the part's (CFLViolation, or
a solver's NotConverged: pompy.core.external.checks) or NonFiniteState
(pompy.errors); ``last_good`` then holds the state of the
step before, which the time loop never writes in place.

checkpoint="steps" (gradients through long windows) runs steps and
segments of steps as recomputed checkpoints: pompy.core.recompute.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Mapping

import numpy as np
import torch

from pompy import compat, variables
from pompy.autodiff.policies import (GradientPolicyConfig, captured_policies, layer_policies,
                                     policies_in_force)
from pompy.calls import apply
from pompy.config import Config, nint, parameters
from pompy.core import recompute, setup, stepping
from pompy.core.compiled import FINITE, StepGraphs
from pompy.errors import ModelStop, NonFiniteState

# what a checkpointed step keeps and passes on: every field but the work
# arrays (tests/test_checkpoint.py: zero work arrays at a step's entry
# change no later step)
CARRIED = tuple(n for n in variables.ALL if n not in set(variables.names("work")))

# checkpoint= choices: none, the heavy routines (turbulence, tracers,
# momentum), or whole internal steps
CHECKPOINTS = (None, "routines", "steps")
HEAVY = ("advq", "profq", "advt1", "advt2", "proft", "advu", "advv", "profu", "profv")
# compile= choices: none, whole-step graphs (True), each routine on its own
COMPILES = (False, True, "routines")
# the routines of the time loop that torch.compile fuses (compile="routines")
COMPILED = ("advct", "advave", "advu", "advv", "advq", "vertvl", "advt1", "advt2", "profq",
            "proft", "profu", "profv", "bcond", "dens", "baropg", "smagorinsky",
            "surface_forcing", "vertical_averages")


def forward_only(model=None):
    """The context of a run that keeps no graph (``pompy run``, generation):
    torch.inference_mode, which skips the version counter and autograd
    metadata that every op still keeps under no_grad (measured at
    65x49x21 float64 eager, one thread: 75 against 85-100 ms a step, the
    states equal to the bit). Its tensors cannot be saved for a backward
    pass: a gradient run makes them ordinary first (Core.run_time_loop),
    snapshots are ordinary copies. A compiled core (compile=True or
    "routines") runs under no_grad instead: its graphs guard on each
    input's dispatch keys, which differ between inference and ordinary
    tensors, so a state turning into inference tensors field by field
    recompiled them step after step (2.6 s a step at 65x49x21), and
    inference mode gains a compiled step nothing (35.2 against 36.2 ms)."""
    if getattr(model, "compile", False):
        return torch.no_grad()
    return torch.inference_mode()


def ordinary(tensors: Mapping) -> dict:
    """``tensors`` with each inference tensor (what a forward_only() run
    left) an ordinary copy, which autograd can save and ops may write;
    as given inside inference mode."""
    if torch.is_inference_mode_enabled():
        return dict(tensors)
    return {n: v.clone() if torch.is_tensor(v) and v.is_inference() else v
            for n, v in tensors.items()}


def detached_copies(tensors: Mapping) -> dict:
    """Detached copies of ``tensors``, ordinary ones also of a
    forward_only() run's (a record may go into a gradient pass)."""
    with torch.inference_mode(False):
        return {name: t.detach().clone() for name, t in tensors.items()}


def _recording(state: Mapping, p: Mapping) -> bool:
    """Whether autograd records this step: gradients on and a field or a
    parameter (--learn's) requiring one."""
    return torch.is_grad_enabled() and any(
        torch.is_tensor(t) and t.requires_grad for t in (*state.values(), *p.values()))


def to_numpy(state: Mapping) -> dict[str, np.ndarray]:
    """Tensors as float64 numpy arrays in pom2k (Fortran) order."""
    return {name: np.asfortranarray(t.detach().to("cpu", torch.float64).numpy())
            for name, t in state.items()}


def first_non_finite(state: Mapping) -> tuple[str, tuple[int, ...]]:
    """The first field of a state (pom2k-ordered arrays; prognostic fields
    first) holding a NaN or inf, and the first such point, 1-based."""
    names = variables.names("prognostic")
    for name in names + [n for n in state if n not in names]:
        bad = ~np.isfinite(np.asarray(state[name]))
        if bad.any():
            return name, tuple(int(x) + 1 for x in np.argwhere(bad)[0])
    raise ValueError("every field is finite")


def read_checks(checks: Mapping, read: tuple[str, ...]) -> dict:
    """The check values ``read`` as Python floats, in one host read; the
    others (imax, jmax) stay tensors until a stop needs them."""
    if len(read) == 1:
        values = [float(checks[read[0]])]
    else:
        values = torch.stack([checks[n].to(checks[read[-1]].dtype) for n in read]).tolist()
    return {**checks, **dict(zip(read, values))}


def _finite(s: dict) -> torch.Tensor:
    """stepping.finite of a step's new state: a compiled step's graph has
    computed it (its FINITE entry, taken out here)."""
    flag = s.pop(FINITE, None)
    return stepping.finite(s) if flag is None else flag


class Core:
    """pom2k's main loop in torch around a free-surface part ``external``."""

    def __init__(self, config: Config, external, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, compile: bool | str = False,
                 checkpoint: str | None = None, policies: GradientPolicyConfig | None = None,
                 check_every: int = 1):
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype {dtype}: the core runs in torch.float64 or torch.float32")
        if checkpoint not in CHECKPOINTS:
            raise ValueError(f"checkpoint={checkpoint!r}: one of {CHECKPOINTS}")
        if policies is not None and not isinstance(policies, GradientPolicyConfig):
            raise TypeError(f"policies must be a GradientPolicyConfig, got {type(policies).__name__}")
        if compile not in COMPILES:
            raise ValueError(f"compile={compile!r}: one of {COMPILES}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every={check_every!r}: a whole number >= 1")
        object.__setattr__(self, "state", {})
        self.external = external
        # compile=True: whole-step graphs (pompy.core.compiled); "routines":
        # torch.compile each physics routine on its own
        self.compile = compile
        self.graphs = StepGraphs(self) if compile is True else None
        self.routines = {name: (recompute.compiled_routine(fn)
                                if compile == "routines" and name in COMPILED else fn)
                         for name, fn in stepping.ROUTINES.items()}
        # checkpoint="routines": recompute the heavy routines in the backward
        # pass instead of keeping their intermediates; "steps": whole steps
        self.checkpoint = checkpoint
        if checkpoint == "routines":
            self.routines = {name: (recompute.checkpointed(fn) if name in HEAVY else fn)
                             for name, fn in self.routines.items()}
        self.config = config
        # the gradient policies of this core's steps (default: the config's
        # &gradient_policy group): override as a gradient_policy context
        # around each step, layers explicit for their layer
        self.policies = config.policies if policies is None else policies
        self.device = torch.device(device)
        self.dtype = dtype
        self.params = parameters(config)
        self.iint = 0
        self.time0 = 0.0
        self.time = 0.0
        self.period = math.inf
        self.iend = config.iend
        self.generation_fast_path = False
        self.capture_interval = 0
        self.generation_records: list[dict] = []
        self._loop_mode: str | None = None
        self.last_good: dict | None = None
        self.vamax = 0.0
        # the part's per-step values kept for the output records (its
        # ``series``: the implicit solve's iterations), the last step's
        self.series = dict.fromkeys(getattr(external, "series", ()), math.nan)
        # checkpoint="steps": steps per outer checkpoint of a window (None:
        # about sqrt of the window's steps; 1: every step on its own)
        self.checkpoint_segment: int | None = None
        # checkpoint="steps": True keeps each step's graph, its saved tensors
        # recomputed routine by routine (recompute.by_routine; in a segment,
        # torch's non-reentrant checkpoint): gradients equal the unchecked ones
        # to the bit in any enclosing graph, the trainer's; False, one node per
        # step (the leanest forward, for long windows: recompute.recomputed)
        self.checkpoint_graph = False
        # steps between the stop checks' host reads (1: pom2k's, every step)
        self.check_every = check_every

    # pom2k names as attributes: core.u is core.state["u"]
    def __getattr__(self, name):
        state = self.__dict__.get("state", {})
        if name in state:
            return state[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in variables.ALL:
            if torch.is_tensor(value) and (value.dtype, value.device) != (self.dtype, self.device):
                value = self._tensor(name, value, tuple(value.shape))
            elif torch.is_tensor(value):
                # a copy only where not contiguous: a contiguous leaf stays that leaf
                value = value.contiguous()
            self.state[name] = value
        else:
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------ state
    def run_initialization(self) -> None:
        """pom2k's set-up (iint = 0), computed on the CPU in float64; for
        iproblem 3 from the config's IC file (pompy.icfile)."""
        self.load_state(setup.set_up(self.config), iint=0)

    def load_state(self, arrays: Mapping, iint: int, time0: float = 0.0) -> None:
        """Set the state from arrays by pom2k name (numpy or torch, pom2k
        order), e.g. a restart file or a golden state; names not given are
        zero. The next step is iint+1. Tensors are copied to the core's
        device and dtype differentiably: a tensor that requires grad keeps
        its autograd path."""
        c = self.config
        state = {}
        for name in variables.ALL:
            shape = variables.shape(name, c.im, c.jm, c.kb)
            value = arrays.get(name)
            if value is None:
                state[name] = torch.zeros(shape, dtype=self.dtype, device=self.device)
                continue
            state[name] = self._tensor(name, value, shape)
        # inertial period (days) for the forcing ramp, from the given cor
        # (float64 for a set-up or restart, whatever the core's dtype)
        cor = arrays.get("cor")
        f = 0.0 if cor is None else abs(float(cor[c.im // 2 - 1, c.jm // 2 - 1]))
        self.period = (2.0 * math.pi) / f / 86400.0 if f != 0 else math.inf
        object.__setattr__(self, "state", state)
        self._start(iint, time0)

    def _tensor(self, name: str, value, shape: tuple[int, ...]) -> torch.Tensor:
        """A contiguous copy of ``value`` on the core's device and dtype
        (autograd kept: a tensor that requires grad in another dtype is
        converted with a warning, its gradient then flows back through the
        rounding). Contiguous, as every field pompy makes: a compiled step's
        graphs are traced for that layout (another compiles them again, and
        a transposed state's ran 16% slower)."""
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(np.ascontiguousarray(value))
        value = torch.as_tensor(value)
        if tuple(value.shape) != shape:
            c = self.config
            raise ValueError(f"{name}: shape {tuple(value.shape)} does not fit the config's "
                             f"grid (expected {shape} for im={c.im}, jm={c.jm}, kb={c.kb})")
        if value.requires_grad and value.dtype != self.dtype:
            warnings.warn(f"pompy: {name} is {value.dtype} and requires grad; this {self.dtype} "
                          f"core converts it (its gradient comes back through the conversion)",
                          stacklevel=3)
        value = value.to(device=self.device, dtype=self.dtype)
        return value.clone(memory_format=torch.contiguous_format)

    def _start(self, iint: int, time0: float) -> None:
        """Step counters and fresh bookkeeping after the state was set."""
        c = self.config
        self.iint, self.time0 = iint, time0
        self.time = c.dti * iint / 86400.0 + time0
        self.last_good = None
        self._loop_mode = None
        self.generation_records = []

    def capture(self) -> dict:
        """Every field a restore needs to continue bit for bit (the table's
        "snapshot" category) as fresh detached tensors, with iint and time0."""
        return self._record(variables.names("snapshot"))

    def snapshot(self) -> dict:
        """The time-dependent part of :meth:`capture` (grid arrays left out,
        as a core of the same config holds them), for generation records."""
        grid = set(variables.names("grid"))
        return self._record([n for n in variables.names("snapshot") if n not in grid])

    def _record(self, names: list[str]) -> dict:
        record = detached_copies({name: self.state[name] for name in names})
        return dict(record, iint=self.iint, time0=self.time0, time=self.time)

    def restore(self, record: Mapping) -> None:
        """Continue from a :meth:`capture` or :meth:`snapshot` record (fresh
        tensors: nothing is shared with the record); fields a snapshot
        leaves out (the grid) are kept from this core's state. A record's
        tensor that requires grad keeps its gradient path (the copy is
        autograd's, as :meth:`load_state`'s)."""
        missing = [n for n in variables.names("snapshot")
                   if n not in record and n not in self.state]
        if missing:
            raise ValueError(f"restore: the record lacks {', '.join(missing)} and this core "
                             "has no state yet (run_initialization() first)")
        arrays = {n: record[n] if n in record else self.state[n].detach()
                  for n in variables.names("snapshot")}
        period = self.period
        self.load_state(arrays, iint=int(record["iint"]), time0=float(record.get("time0", 0.0)))
        if "cor" not in record:
            self.period = period

    def inject(self, arrays: Mapping) -> None:
        """Replace the named fields of the current state, keeping autograd
        (e.g. network-corrected initial conditions); the rest is unchanged."""
        c = self.config
        for name, value in arrays.items():
            if name not in variables.ALL:
                raise KeyError(f"inject: {name!r} is not a pompy variable")
            self.state[name] = self._tensor(name, value, variables.shape(name, c.im, c.jm, c.kb))

    def numpy_state(self) -> dict[str, np.ndarray]:
        """Every variable as a float64 numpy array in pom2k (Fortran) order."""
        return to_numpy(self.state)

    # ------------------------------------------------------------ time loop
    def run_time_loop(self, callback: Callable[[Core], None] | None = None) -> None:
        """pom2k's main loop for iint = self.iint+1 .. self.iend; ``callback(core)``
        after each step (with ``check_every`` N > 1, after each checked block
        of N steps). Raises ModelStop on a velocity or NaN blow-up.

        With ``generation_fast_path`` (data generation: no gradients) the
        leaf cloning is skipped and, every ``capture_interval`` steps, a
        detached :meth:`snapshot` is appended to ``generation_records``.
        Switching between the two modes needs run_initialization() (or
        load_state/restore) in between: a core reused across the modes
        without it is refused rather than run on a state the other mode
        left (the fast path's has no leaf clones and no graph)."""
        if not self.state:
            raise RuntimeError("run_initialization() (or load_state) must come before run_time_loop()")
        mode = "generation" if self.generation_fast_path else "gradient"
        if self._loop_mode not in (None, mode):
            raise RuntimeError(
                f"this core last ran in {self._loop_mode} mode (generation_fast_path="
                f"{self._loop_mode == 'generation'}); call run_initialization() or load_state() "
                f"before running it in {mode} mode, or use a separate core")
        self._loop_mode = mode
        if not self.generation_fast_path:
            # leaf tensors (initial conditions with requires_grad) become
            # intermediates, so the loop may rebind them freely
            for name in variables.names("loop_input"):
                self.state[name] = self.state[name].clone()
            # and what a forward_only() run left becomes ordinary (autograd saves it)
            object.__setattr__(self, "state", ordinary(self.state))
        with forward_only(self) if self.generation_fast_path else contextlib.nullcontext():
            # two levels: segments, then the last one's steps on their own
            # (the backward pass would recompute it at once)
            segment = self._segment_length(callback)
            while segment > 1 and self.iend - self.iint > segment:
                self._segment(self.iint + 1, self.iint + segment)
            every = 1 if self._lean(self.state) else self.check_every
            while self.iint < self.iend:
                if every == 1:
                    self.step(self.iint + 1)
                    self._capture()
                else:
                    self._block(self.iint + 1, min(self.iint + every, self.iend))
                if callback is not None:
                    callback(self)

    def _capture(self) -> None:
        """The generation fast path's snapshot, every ``capture_interval`` steps."""
        if self.generation_fast_path and self.capture_interval > 0 \
                and self.iint % self.capture_interval == 0:
            self.generation_records.append(self.snapshot())

    def _block(self, first: int, last: int) -> None:
        """Steps first..last with one host read for all their checks
        (``check_every``): each step's checks stay on the device. If one
        failed, the steps run again from the block's start, checked one by
        one, so the stop, its step and ``last_good`` are those of a run
        checked every step (the core is deterministic)."""
        good, time, kept = self.state, self.time, len(self.generation_records)
        passed = None
        for iint in range(first, last + 1):
            s, checks, ok = self._advance(self.state, iint, *self._fixed(iint), check=False)
            object.__setattr__(self, "state", s)
            self.iint, self.time = iint, self._time(iint)
            passed = ok if passed is None else passed & ok
            self._capture()
        vamax, self.series = checks["vamax"], {n: checks[n] for n in self.series}
        passed, self.vamax = torch.stack([passed.to(vamax.dtype), vamax]).tolist()
        if passed == 1.0:
            return
        object.__setattr__(self, "state", good)
        self.iint, self.time = first - 1, time
        del self.generation_records[kept:]
        for iint in range(first, last + 1):
            self.step(iint)
            self._capture()

    def _time(self, iint: int) -> float:
        return self.config.dti * float(iint) / 86400.0 + self.time0

    def _fixed(self, iint: int) -> tuple:
        """What step iint reads besides the state, fixed now: a
        recomputation in the backward pass (checkpoint="steps") must see the
        same (parameters with the ramp, routines, time0, policies)."""
        ramp = min(self._time(iint) / self.period, 1.0) if self.config.lramp else 1.0
        with self.policies.activate(), layer_policies(self.policies.layers):
            policies = captured_policies()
        return dict(self.params, ramp=ramp), dict(self.routines), self.time0, policies

    def _lean(self, state: Mapping) -> bool:
        """Whether steps are recomputed checkpoints here (checkpoint="steps",
        gradients on, no forward-mode tangent)."""
        return self.checkpoint == "steps" and torch.is_grad_enabled() and not recompute.traced(state)

    def _unrecorded(self) -> bool:
        """Whether a step gives the same outputs whether autograd records it
        or not, so that a checkpoint's forward pass can skip the graph
        (recompute's): the explicit core's eager steps."""
        return self.graphs is None and getattr(self.external, "same_unrecorded", False)

    def _zero_work(self) -> dict:
        """pom2k's work arrays as a checkpointed step starts them: zero, as
        load_state and restore give them (one set per core, never written)."""
        work = self.__dict__.get("_work")
        if work is None:
            c = self.config
            work = {n: torch.zeros(variables.shape(n, c.im, c.jm, c.kb), dtype=self.dtype,
                                   device=self.device) for n in variables.names("work")}
            object.__setattr__(self, "_work", work)
        return work

    def _lean_step(self, state: Mapping, iint: int, fixed: tuple, inner: bool = False) -> tuple:
        """:meth:`_advance` as a recomputed checkpoint of the carried fields
        (CARRIED; the work arrays start from zero): the node keeps those and
        nothing else. Returns what _advance does; fields the step leaves as
        they were are ``state``'s. With ``checkpoint_graph``, a step that is
        not ``inner`` to a recomputed segment keeps its graph and is
        recomputed routine by routine (recompute.by_routine)."""
        info = []
        p, routines, time0, policies = fixed
        params = recompute.tensor_params(p)

        def run(given, routines=routines):
            given = dict(given)
            q = {**p, **{k: given.pop(recompute.PARAM + k) for k in params}}
            s, *rest = self._advance({**self._zero_work(), **given}, iint, q, routines, time0,
                                     policies)
            info[:] = rest
            return s
        inputs = {**state, **{recompute.PARAM + k: v for k, v in params.items()}}
        names = CARRIED + tuple(recompute.PARAM + k for k in params)
        if self.checkpoint_graph and not inner:
            new = recompute.by_routine(run, inputs, names, routines,
                                       functools.partial(policies_in_force, policies))
        else:
            new = recompute.recomputed(run, inputs, names, self._unrecorded(),
                                       self.checkpoint_graph)
        return ({**state, **new}, *info)

    def step(self, iint: int) -> None:
        """Internal step iint, as one pass of pom2k's main loop; raises the
        stop of a failed check with ``last_good`` set."""
        good = self.state
        time = self._time(iint)
        fixed = self._fixed(iint)
        if self._lean(good):
            s, checks, going = self._lean_step(good, iint, fixed)
        else:
            s, checks, going = self._advance(good, iint, *fixed)
        self.vamax, self.series = checks["vamax"], {n: checks[n] for n in self.series}
        object.__setattr__(self, "state", s)
        self.iint, self.time = iint, time
        if not going:
            self.last_good = good
            stop = self.external.failure(iint, self.config, checks)
            raise stop if stop is not None else NonFiniteState(
                iint, *first_non_finite(self.numpy_state()))

    def _segment_length(self, callback) -> int:
        """Steps per outer checkpoint for this window (1: none): two levels
        where steps are recomputed checkpoints and no callback needs the
        state after each step."""
        if callback is not None or not self._lean(self.state):
            return 1
        if self.checkpoint_segment is not None:
            return max(int(self.checkpoint_segment), 1)
        return max(round(math.sqrt(max(self.iend - self.iint, 0))), 1)

    def _segment(self, first: int, last: int) -> None:
        """Steps first..last as one recomputed checkpoint of their steps,
        each a recomputed checkpoint (:meth:`_lean_step`). A step failing its checks stops the run as
        :meth:`step` does: the segment runs again step by step."""
        fixed = {iint: self._fixed(iint) for iint in range(first, last + 1)}
        info = []
        params = recompute.tensor_params(fixed[first][0])     # the same tensors in every step's p

        def run(state):
            state = dict(state)
            given = {k: state.pop(recompute.PARAM + k) for k in params}
            for iint in range(first, last + 1):
                p, *others = fixed[iint]
                s, *rest = self._lean_step(state, iint, ({**p, **given}, *others), inner=True)
                if not rest[1]:                        # going
                    raise recompute.Stopped(iint)
                state, info[:] = s, rest
            return state
        good = self.state
        inputs = {**good, **{recompute.PARAM + k: v for k, v in params.items()}}
        try:
            new = recompute.recomputed(lambda given: run({**self._zero_work(), **given}), inputs,
                                       CARRIED + tuple(recompute.PARAM + k for k in params),
                                       self._unrecorded(), self.checkpoint_graph)
        except recompute.Stopped:
            for iint in range(first, last + 1):
                self.step(iint)
            return
        self.vamax, self.series = info[0]["vamax"], {n: info[0][n] for n in self.series}
        object.__setattr__(self, "state", {**good, **new})
        self.iint, self.time = last, self._time(last)

    def _advance(self, state: dict, iint: int, p: dict, routines: dict, time0: float,
                 policies: tuple, check: bool = True) -> tuple:
        """One pass of pom2k's main loop on ``state`` (not written), with the
        parameters ``p`` (ramp set), ``routines`` and gradient ``policies``
        (captured_policies): the new state, the free-surface part's check
        values (pompy.core.external.checks: vamax, imax, jmax, ...) and
        whether the run may go on. Without ``check`` nothing is read from
        the device: the values and whether it may go on are tensors, and
        the internal mode runs whatever they say. A function of its arguments, so that
        it can be recomputed (checkpoint="steps")."""
        with policies_in_force(policies):
            return self._pass(state, iint, p, routines, time0, check)

    def terms(self, state: Mapping, p: dict, routines: dict) -> dict:
        """Surface forcing and the internal mode's terms the external mode
        reads."""
        s = dict(state)
        apply(s, p, "surface_forcing", routines=routines)
        if self.config.mode != 2:          # in mode 2 the initial aam2d is kept
            apply(s, p, "advct(a,c,ee)", "baropg", "smagorinsky", "vertical_averages",
                  routines=routines)
        return s

    def external_pass(self, state: Mapping, p: dict, routines: dict) -> dict:
        """The first half of a pass of pom2k's main loop: :meth:`terms`,
        then the external mode (its check values in the result)."""
        return self.external.external_mode(self.terms(state, p, routines), p, routines)

    def runs_internal_mode(self, iint: int, time0: float) -> bool:
        """Not on a cold start's first step, nor in mode 2."""
        return (iint != 1 or time0 != 0.0) and self.config.mode != 2

    def internal_pass(self, s: dict, iint: int, p: dict, routines: dict, time0: float) -> dict:
        """The second half: the internal mode (:meth:`runs_internal_mode`)
        and the end-of-step time-level shifts."""
        if self.runs_internal_mode(iint, time0):
            s = stepping.internal_step(s, p, routines)
        return stepping.end_of_step(s)

    def _pass(self, state: dict, iint: int, p: dict, routines: dict, time0: float,
              check: bool = True) -> tuple:
        c = self.config
        # the compiled graphs (compile=True) but for what they do not serve
        # (pompy.core.compiled): fortran_math's host callbacks, tangents,
        # torch.func transforms, and recorded steps whose gradient policies
        # the forward pass does not decide
        compiled = (self.graphs is not None and not compat.in_force() and not recompute.traced(state)
                    and (not _recording(state, p) or self.graphs.records_gradients()))
        run = self.graphs if compiled else self
        s = run.external_pass(state, p, routines)
        part = self.external
        checks = {n: s.pop(n) for n in part.checks}
        if not check:
            s = run.internal_pass(s, iint, p, routines, time0)
            return s, checks, part.within(c, checks) & _finite(s)
        # the part's checks (pom2k's velocity check, a solver's residual):
        # the first values read from the device this step, in one read (a
        # NaN fails them; pom2k's check skips NaN)
        checks = read_checks(checks, part.read)
        going = bool(part.within(c, checks))
        if going:
            s = run.internal_pass(s, iint, p, routines, time0)
            going = bool(_finite(s))             # the second value read
        return s, checks, going

    def run_generation_day(self, steps_per_day: int | None = None,
                           capture_interval: int = 0) -> list[dict]:
        """Data generation (what pompy.generate runs): ``steps_per_day`` steps from the
        current one (default: a day, nint(86400/dti)) on the generation fast
        path (no gradients, no loop-entry clones), with a detached
        :meth:`snapshot` every ``capture_interval`` steps (0: none); returns
        this call's snapshots. The flag is reset however the run ends; a
        gradient run of this core afterwards needs load_state/restore or
        run_initialization first (see :meth:`run_time_loop`)."""
        steps = steps_per_day if steps_per_day is not None else max(nint(86400 / self.config.dti), 1)
        first = len(self.generation_records)
        self.generation_fast_path, self.capture_interval = True, capture_interval
        self.iend = self.iint + steps
        try:
            self.run_time_loop()
            return list(self.generation_records[first:])
        finally:
            self.generation_fast_path = False

    # ------------------------------------------------------------ the drivers' interface
    def advance(self, last: int, on_step: Callable[[int, float], None] | None = None) -> None:
        """Steps iint+1..last; ``on_step(iint, vamax)`` after each. On a stop
        the exception carries the last good state as numpy arrays."""
        self.iend = last
        try:
            self.run_time_loop(None if on_step is None
                               else lambda core: on_step(core.iint, core.vamax))
        except ModelStop as exc:
            exc.last_good = to_numpy(self.last_good)
            raise
