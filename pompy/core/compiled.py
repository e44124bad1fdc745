"""Whole-step compilation: ``Core(..., compile=True)``.

A pass of pom2k's main loop runs as a few torch.compile graphs, each a
function of tensors only, everything Python decides resolved before
tracing:

    terms       surface forcing, the 3-D terms of the 2-D mode and the
                scheme's start of the external mode (``begin``)
    passes      ``CHUNK`` external passes at a time, one graph per run of
                pass kinds (pompy.core.external.split.PassKind): for the
                seamount's isplit 30, ispadv 5 two graphs, six calls a step
    internal    internal_step and end_of_step (not on a cold start's
                first step, as in Core.internal_pass)

A scheme without ``passes`` (the implicit one) compiles its external_mode
whole. The time-varying parameter (the forcing ramp), a member's numbers
(config.MEMBER_PARAMS: a wind factor) and any tensor among the parameters
(--learn's) are graph inputs, so neither a step nor a member recompiles;
each graph has a code object of its own, so Dynamo looks up one graph's
versions only. The host reads (the velocity and finiteness checks) stay
between the graphs, in Core._pass. Inductor's on-disk cache (under
TORCHINDUCTOR_CACHE_DIR) makes a second process start without compiling.

Core._pass runs eagerly, through the same code, what the graphs do not
serve: a forward-mode tangent or a torch.func transform (the ensemble's
vmap), pompy.compat.fortran_math (its host callbacks), and a step that
autograd records while a safe op's gradient policy is not yet decided in
the forward pass (no override in force: a context around the backward
pass could still choose it, which a compiled backward cannot). With an
override in force recorded steps run through the graphs: the safe ops
trace as variants without forward-mode rules and with the policy fixed in
the forward pass (pompy.utils.safety, policies.forward_policy), AOT
autograd traces their backward, and the graphs are keyed by the policies
in force; gradients equal eager's to the last bit (aot_eager, tests).
"""
from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Hashable, Mapping

import torch

from pompy import variables
from pompy.autodiff.policies import forward_policies_key, policy_override
from pompy.config import MEMBER_PARAMS
from pompy.core import stepping
from pompy.ops import hardware_sqrt

# external passes per graph at most (a graph of all 30 took minutes to compile)
CHUNK = 5
# versions of one graph Dynamo keeps (grad or not, float32/64, ...); its
# default of 8 is raised only while a compiled step runs
RECOMPILE_LIMIT = 64
# torch.compile's backend (the tests trace with Dynamo's "eager": the same
# graphs in a minute, not ten)
BACKEND = "inductor"
# Inductor's options on the CPU: its wrapper around the kernels in C++, not
# Python (a graph allocates and views hundreds of buffers a call; measured
# at 65x49x21 float64, one thread, six rounds alternating in one process:
# 60.5 ms a step against 71.7, faster in five rounds of six). Not measured
# on a GPU, so not used there. And a value that two or more later operations
# read is stored once (realize_reads_threshold 1), not recomputed inline in
# each reader's loop (Inductor's default, 4, recomputes up to three times,
# square roots and powers included): a core of each alternating in
# one process, eight rounds of five steps, states equal to the bit, at
# 65x49x21 float64 25.4 against 28.4 ms a step (fastest rounds; medians
# 26.4 against 29.6), float32 16.3 against 17.9 (17.1 against 18.3).
INDUCTOR_OPTIONS = {"cpp_wrapper": True, "realize_reads_threshold": 1}
_RAMP = "ramp"
# the internal graph's flag: whether the new state's prognostic fields are
# finite (stepping.finite fused into the graph; Core._pass reads it)
FINITE = "finite"
# pompy.calls' binders and pompy.ops' slices of a range are lru_cached pure
# functions of their arguments, which Dynamo traces through (and warns of)
LRU_WARNING = "Dynamo detected a call to a `functools.lru_cache`-wrapped function"
# the implicit scheme's PCG reads its residual on the host (its early exit):
# a graph break by design, which Dynamo's log would report at length
_ITEM_BREAK = "Graph break from `Tensor.item()`"
_DYNAMO_TENSOR_LOG = logging.getLogger("torch._dynamo.variables.tensor")
# the fields a step may compute from the state (forcing too: wtsurf from t):
# in a recorded graph they take a gradient from the first recorded step on
# (_promoted); the grid and the boundary values only where a user gives one,
# which they then keep every step
_DYNAMIC = frozenset(variables.names("prognostic") + variables.names("diagnostic")
                     + variables.names("work") + variables.names("forcing"))


def _promoted(names: tuple, inputs: tuple) -> tuple:
    """A recorded graph's inputs with every field of _DYNAMIC requiring grad
    (a fresh leaf, its gradient dropped, where it does not): Dynamo guards
    on each input's requires_grad, and over the first recorded steps the
    gradient reaches the state field by field, so each step compiled
    forward and backward graphs of its own (at 65x49x21, from el and t: 4
    versions of the 3-D terms' graph, 5 of the passes', 4 of the internal
    one's; on 2 cores the first two recorded steps took 25 minutes, and
    more followed) before the steady state's; now one of each, all
    compiled in 11 minutes."""
    return tuple(t.detach().requires_grad_() if i < len(names) and names[i] in _DYNAMIC
                 and not t.requires_grad and t.is_floating_point() else t
                 for i, t in enumerate(inputs))


def _without_item_break(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_ITEM_BREAK)


def chunks(kinds: list, size: int = CHUNK) -> list[tuple]:
    """The passes in runs of the largest divisor of their number up to
    ``size``: runs of equal kinds share one graph."""
    n = len(kinds)
    width = max(d for d in range(1, min(size, n) + 1) if n % d == 0) if n else 1
    return [tuple(kinds[i:i + width]) for i in range(0, n, width)]


class StepGraphs:
    """The compiled halves of a pass of ``core``'s main loop, with
    Core.external_pass's and Core.internal_pass's signatures."""

    def __init__(self, core):
        self.core = core
        self._graphs: dict[Hashable, Callable] = {}

    def records_gradients(self) -> bool:
        """Whether the graphs may serve a step autograd records: where every
        safe op's gradient policy is decided in the forward pass (an
        override in force: a core's ``policies=GradientPolicyConfig(
        override=...)``), which AOT autograd then traces into the backward
        graph; else a context around the backward pass could still choose
        it, and the step runs eagerly. Not the implicit scheme's (its
        elevation solve is an autograd.Function with a forward-mode rule
        and its reference CG reads its residual: measured, gradients equal
        to eager's but twenty graph breaks in three steps at 8x7x5)."""
        return (policy_override() is not None and self.core.checkpoint != "routines"
                and hasattr(self.core.external, "passes"))

    def _graph(self, key: Hashable, fn: Callable[[dict, dict], dict], names: tuple,
               p: Mapping, recording: bool) -> Callable:
        """``fn(s, p) -> s`` compiled as a function of the tensors of ``s``
        (``names``), the ramp and the tensors among ``p``; a recorded step's
        graph is also one of the gradient policies in force."""
        tensors = tuple(k for k, v in p.items() if torch.is_tensor(v))
        fixed = {k: v for k, v in p.items() if k not in tensors and k != _RAMP}
        key = (key, names, tensors, tuple(sorted(fixed.items())),
               forward_policies_key() if recording else None)
        graph = self._graphs.get(key)
        if graph is None:
            n, inputs = len(names), (_RAMP, *tensors)

            def run(*args):
                return fn(dict(zip(names, args[:n])), {**fixed, **dict(zip(inputs, args[n:]))})
            # a code object of its own: Dynamo keeps versions per code object
            run.__code__ = run.__code__.replace(co_name=f"pompy_{len(self._graphs)}")
            cpu = self.core.device.type == "cpu"
            options = INDUCTOR_OPTIONS if BACKEND == "inductor" and cpu else None
            graph = self._graphs[key] = torch.compile(run, backend=BACKEND, dynamic=False,
                                                      options=options)
        return graph

    def _call(self, key: Hashable, fn: Callable[[dict, dict], dict], state: Mapping,
              p: Mapping) -> dict:
        names = tuple(state)
        ramp = torch.tensor(float(p.get(_RAMP, 1.0)), dtype=torch.float64,
                            device=self.core.device)
        # a member's numbers (a wind factor each) as graph inputs, so that
        # members share their graphs instead of compiling each its own
        p = {**p, **{k: torch.tensor(float(p[k]), dtype=torch.float64, device=self.core.device)
                     for k in MEMBER_PARAMS if k in p and not torch.is_tensor(p[k])}}
        inputs = (*state.values(), ramp, *(v for v in p.values() if torch.is_tensor(v)))
        requiring = any(t.requires_grad for t in inputs)
        recording = requiring and torch.is_grad_enabled()
        graph = self._graph(key, fn, names, p, recording)
        if recording:
            inputs = _promoted(names, inputs)
        elif requiring:         # a tensor left requiring grad by a recorded step: no new version
            inputs = tuple(t.detach() if t.requires_grad else t for t in inputs)
        return dict(graph(*inputs))

    @contextlib.contextmanager
    def _calling(self):
        """What _call's graphs run under, entered once by external_pass and
        internal_pass for all their calls (some 80 us a time): the
        recompile limit, Dynamo's warnings and log records that pompy
        expects filtered, and Inductor's correctly rounded CPU sqrt
        (pompy.ops.hardware_sqrt; Dynamo's eager backend runs ATen's, which
        is not)."""
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT), \
                warnings.catch_warnings(), hardware_sqrt(BACKEND == "inductor"):
            warnings.filterwarnings("ignore", message=LRU_WARNING)
            _DYNAMO_TENSOR_LOG.addFilter(_without_item_break)
            try:
                yield
            finally:
                _DYNAMO_TENSOR_LOG.removeFilter(_without_item_break)

    def external_pass(self, state: Mapping, p: dict, routines: Mapping) -> dict:
        with self._calling():
            return self._external_pass(state, p, routines)

    def _external_pass(self, state: Mapping, p: dict, routines: Mapping) -> dict:
        core, part = self.core, self.core.external
        if not hasattr(part, "passes"):
            return self._call(("external", *routines.values()),
                              lambda s, q: core.external_pass(s, q, routines), state, p)
        s = self._call(("terms", *routines.values()),
                       lambda s, q: part.begin(core.terms(s, q, routines), q), state, p)
        for run in chunks(part.passes(p)):
            def passes(s, q, run=run):
                for kind in run:
                    s = part.step(s, q, routines, kind)
                return s
            # each pass writes the check's values anew: not an input, so the
            # first run of a step shares the graph of the runs after it
            s = {n: v for n, v in s.items() if n not in part.checks}
            s = self._call(("passes", run, *routines.values()), passes, s, p)
        return s

    def internal_pass(self, s: dict, iint: int, p: dict, routines: Mapping,
                      time0: float) -> dict:
        if not self.core.runs_internal_mode(iint, time0):
            return stepping.end_of_step(s)
        def internal(s, q):
            s = stepping.end_of_step(stepping.internal_step(s, q, routines))
            return {**s, FINITE: stepping.finite(s)}
        with self._calling():
            return self._call(("internal", *routines.values()), internal, s, p)
