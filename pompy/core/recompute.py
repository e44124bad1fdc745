"""Recomputed checkpoints and wrapped routines: how the core trades
compute for memory in gradient runs, and compiles routines one by one.

checkpoint="steps" (gradients through long windows): a step is a
recomputed checkpoint (:class:`_Recomputed`) that keeps only what the next
step reads, the carried fields (pom2k's work arrays are dead at a step's
entry: it starts from zero ones, as a restore does), and one graph node;
the backward pass runs it again with a graph. A window of n steps runs in
segments of k = ``checkpoint_segment`` steps (default about sqrt(n)), each
a recomputed checkpoint of its steps, the last segment's steps on their
own: the forward pass keeps the inputs of n/k segments and k steps, the
backward recomputes one segment at a time keeping the inputs of its k
steps, then one step's graph at a time (each step but the last segment's
runs twice more: about one forward pass more than one level).

With Core.checkpoint_graph (the trainer's) a step keeps its graph instead,
only its saved tensors dropped: a step on its own is brought back routine
by routine (:func:`by_routine`: its backward holds one routine's saved
tensors at a time, at the cost of a second recomputation), a step inside a
segment by torch's non-reentrant checkpoint (:func:`recomputed`).

compile="routines" runs each routine of COMPILED through torch.compile
(:func:`compiled_routine`); checkpoint="routines" recomputes the heavy
ones in the backward pass (:func:`checkpointed`).
"""
from __future__ import annotations

import contextlib
import functools
import warnings
import weakref
from collections.abc import Callable, Mapping

import torch
from torch.autograd import forward_ad
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from pompy.core.compiled import LRU_WARNING

# bcond compiles once per case, dtype and grid: more versions of one
# function than dynamo's default limit of 8; raised only during its calls
_RECOMPILE_LIMIT = 64


def compiled_routine(fn: Callable) -> Callable:
    """fn through torch.compile, with the recompile limit raised only while
    it runs (building a core changes no global dynamo setting)."""
    compiled = torch.compile(fn)

    @functools.wraps(fn)
    def wrapper(**kwargs):
        with torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT), \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=LRU_WARNING)
            return compiled(**kwargs)
    return wrapper


def checkpointed(fn: Callable) -> Callable:
    """fn, recomputed in the backward pass (non-reentrant torch checkpoint)
    when gradients are on. The backward runs on the graph of the forward
    pass (the recomputation only refills its saved tensors), so the
    gradient policies are those the forward pass recorded."""
    @functools.wraps(fn)
    def wrapper(**kwargs):
        if not torch.is_grad_enabled():
            return fn(**kwargs)
        return torch_checkpoint(fn, use_reentrant=False, preserve_rng_state=False, **kwargs)
    return wrapper


class _Recomputed(torch.autograd.Function):
    """A reentrant checkpoint: ``run(*inputs)``, a tuple of new tensors, runs
    in the forward pass (the node keeps the inputs, nothing else) and again
    in the backward pass, which then backpropagates through it. ``run`` must
    give the same outputs both times: its parameters are fixed when it is
    made. The backward's run records a graph; the forward's runs without
    one where ``unrecorded`` (its outputs do not depend on whether autograd
    records: not so for the implicit core, whose CG picks its solver by
    whether a gradient flows, nor for compiled steps, which serve a step
    only when it is not recorded), else with gradients on, as a run without
    checkpoints does, its graph dropped at once."""

    @staticmethod
    def forward(ctx, run, unrecorded, *inputs):
        ctx.run = run
        ctx.save_for_backward(*inputs)
        ctx.set_materialize_grads(False)
        if unrecorded:         # (autograd.Function's forward runs with gradients off)
            # which outputs a gradient reaches only a graph would tell: all may
            return tuple(t.detach() for t in run(*inputs))
        run = _Recomputed.rerun(ctx, inputs)[1]
        outputs = tuple(t.detach() for t in run)
        # outputs no gradient reaches (forcing, ...) stay so: no graph for them downstream
        ctx.mark_non_differentiable(*(o for o, t in zip(outputs, run) if not t.requires_grad))
        return outputs

    @staticmethod
    def rerun(ctx, inputs) -> tuple[list, tuple]:
        """Leaves standing for the inputs (requiring grad as they do) and
        ``run``'s outputs from them, with their graph."""
        leaves = [x.detach().requires_grad_(need) for x, need in zip(inputs, ctx.needs_input_grad[2:])]
        with torch.enable_grad():
            return leaves, ctx.run(*leaves)

    @staticmethod
    def backward(ctx, *grads):
        _refuse_second_order("its steps rerun from detached inputs")
        inputs, outputs = _Recomputed.rerun(ctx, ctx.saved_tensors)
        used = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        wanted = [x for x in inputs if x.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in used], wanted, [g for _, g in used],
                                       allow_unused=True) if used and wanted else [])
        return (None, None, *(next(got, None) if x.requires_grad else None for x in inputs))


def _refuse_second_order(why: str) -> None:
    """A backward with create_graph (grad mode on in the backward pass)
    through checkpoint='steps', whose recomputations carry no graph back."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"pompy: second derivatives are not supported through "
                           f"checkpoint='steps' ({why}); use no checkpoints or "
                           f"checkpoint='routines'")


PARAM = "param:"          # a parameter among a recomputed step's inputs


def tensor_params(p: Mapping) -> dict:
    """The tensors among a step's parameters (--learn's horcon, ...): a
    recomputed checkpoint takes them as inputs, or their gradient would
    stop at it (review finding: checkpoint="steps" gave horcon none)."""
    return {k: v for k, v in p.items() if torch.is_tensor(v)}


class Stopped(Exception):
    """A step of a checkpointed segment failed its checks (the core runs
    the segment again step by step, to stop as a single step does)."""


def recomputed(run: Callable[[dict], dict], state: Mapping, names: tuple[str, ...],
                unrecorded: bool, graph: bool = False) -> dict:
    """``run(state)`` (a state dict to the next) as a :class:`_Recomputed`
    of the fields ``names`` of ``state``: what run gives back new (not one
    of its inputs), with a graph node that keeps only those inputs.

    ``graph``: as torch's non-reentrant checkpoint instead, which records
    run's graph as it is without checkpoints and drops only the tensors its
    nodes save (recomputed in the backward pass). Each input then receives
    its gradients one by one, in the order of the unchecked graph, so the
    gradients equal the unchecked ones to the bit in any enclosing graph
    (a :class:`_Recomputed` hands over one sum per input, which the
    enclosing graph adds to its other terms in another order: the last bit
    may differ); it keeps the nodes' bookkeeping, small beside their
    tensors."""
    new: list[str] = []

    def fields(*tensors):
        given = dict(zip(names, tensors))
        out = run(given)
        if not new:                  # the forward pass decides, the backward's run agrees
            new.extend(n for n, t in out.items() if t is not given.get(n))
        return tuple(out[n] for n in new)

    inputs = (state[n] for n in names)
    if graph:
        outputs = torch_checkpoint(fields, *inputs, use_reentrant=False, preserve_rng_state=False)
    else:
        outputs = _Recomputed.apply(fields, unrecorded, *inputs)
    return dict(zip(new, outputs))


def _standing(value):
    """A routine's argument as a recomputation takes it: a tensor detached
    (a leaf requiring grad where it did), anything else as it is."""
    if not torch.is_tensor(value):
        return value
    return value.detach().requires_grad_(True) if value.requires_grad else value.detach()


def _never(_):
    raise RuntimeError("pompy: a recomputation's own graph was differentiated")


class _Key:
    """What a node keeps for a tensor it saved in a step's first pass."""
    __slots__ = ("segment", "count", "__weakref__")

    def __init__(self, segment: int, count: int):
        self.segment, self.count = segment, count


class _ByRoutine:
    """A step whose graph is kept whole but whose saved tensors are dropped
    (as torch's non-reentrant checkpoint), brought back in the backward
    pass one routine at a time: the first tensor asked for reruns the step
    once to take each routine call's arguments (and the few tensors saved
    between routine calls), then each routine call reruns alone, from its
    arguments, when a tensor it saved is asked for. The backward so holds
    the step's fields between routines and one routine's saved tensors at
    a time, not the whole step's. A saved tensor is known by its segment
    (even: between routine calls, odd: in one) and its place in it, the
    same in every pass of a deterministic step."""

    def __init__(self, run: Callable, around: Callable):
        self.run, self.around = run, around          # run(*inputs): the step
        # the step's inputs (set by by_routine) until the boundary pass takes them
        self.inputs: list | None = None
        self.mode, self.segment, self.count, self.depth = "first", 0, 0, 0
        self.calls: dict[int, tuple[Callable, dict]] = {}
        self.stored: dict[tuple[int, int], torch.Tensor] = {}
        # the first pass's holders still held by a node: the saved tensors of
        # nodes since freed (run, or never to run) are not stored again
        self.keys: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    @contextlib.contextmanager
    def _active(self, mode: str, segment: int = 0, depth: int = 0):
        self.mode, self.segment, self.count, self.depth = mode, segment, 0, depth
        _ACTIVE.append(self)
        try:
            yield
        finally:
            _ACTIVE.pop()

    def traverse(self, mode: str, inputs) -> tuple:
        """A pass of the step in ``mode`` ("first", "boundary")."""
        with self._active(mode):
            return self.run(*inputs)

    def call(self, fn: Callable, kwargs: dict):
        """A routine call of a pass: a segment of its own (its arguments
        kept in the boundary pass); a routine it calls is part of it."""
        if self.depth:
            return fn(**kwargs)
        self._next_segment()
        if self.mode == "boundary":
            self.calls[self.segment] = fn, {k: _standing(v) for k, v in kwargs.items()}
        self.depth += 1
        try:
            return fn(**kwargs)
        finally:
            self.depth -= 1
            self._next_segment()

    def _next_segment(self) -> None:
        self.segment, self.count = self.segment + 1, 0

    def pack(self, tensor: torch.Tensor):
        key = (self.segment, self.count)
        self.count += 1
        if self.mode == "first":
            holder = self.keys[key] = _Key(*key)
            return holder
        if (self.mode == "routine" or key[0] % 2 == 0) and key in self.keys:
            self.stored[key] = tensor.detach()
        return None

    def unpack(self, holder: _Key) -> torch.Tensor:
        _refuse_second_order("its saved tensors come back detached")
        key = (holder.segment, holder.count)
        if key not in self.stored:
            self._recompute(key[0])
        try:
            return self.stored.pop(key)
        except KeyError:
            raise RuntimeError(f"pompy: a recomputed step saved other tensors than its first pass "
                               f"(segment {key[0]}, tensor {key[1]}): is the step deterministic?"
                               ) from None

    def _recompute(self, segment: int) -> None:
        if self.inputs is not None:
            inputs, self.inputs = self.inputs, None
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(self.pack, _never):
                self.traverse("boundary", [_standing(x) for x in inputs])
        if segment % 2 == 1 and segment in self.calls:
            fn, kwargs = self.calls.pop(segment)
            with torch.enable_grad(), self.around(), self._active("routine", segment, 1), \
                    torch.autograd.graph.saved_tensors_hooks(self.pack, _never):
                fn(**kwargs)


# the _ByRoutine frames whose passes are running, innermost last
_ACTIVE: list[_ByRoutine] = []


@functools.lru_cache(maxsize=None)
def counted(fn: Callable) -> Callable:
    """``fn`` as a routine of a step recomputed by routine (:func:`by_routine`):
    a call of the running frame's pass, else fn itself. One wrapper per
    routine (the call binder caches its plans by function)."""
    @functools.wraps(fn)
    def routine(**kwargs):
        return _ACTIVE[-1].call(fn, kwargs) if _ACTIVE else fn(**kwargs)
    return routine


def by_routine(run: Callable[[dict, dict], dict], state: Mapping, names: tuple[str, ...],
               routines: Mapping[str, Callable], around: Callable) -> dict:
    """``run(state, routines)`` (a state dict to the next, calling its
    routines from ``routines``) with its graph kept and its saved tensors
    recomputed in the backward pass routine by routine (:class:`_ByRoutine`;
    ``around()``: the context a routine runs in, its gradient policies):
    what run gives back new (not one of its inputs) of the fields
    ``names``. The gradients are the unchecked graph's, to the bit."""
    new: list[str] = []
    wrapped = {name: counted(fn) for name, fn in routines.items()}

    def fields(*tensors):
        given = dict(zip(names, tensors))
        out = run(given, wrapped)
        if not new:
            new.extend(n for n, t in out.items() if t is not given.get(n))
        return tuple(out[n] for n in new)
    frame = _ByRoutine(fields, around)
    frame.inputs = [state[n] for n in names]
    with torch.autograd.graph.saved_tensors_hooks(frame.pack, frame.unpack):
        outputs = frame.traverse("first", frame.inputs)
    frame.mode = "done"
    return dict(zip(new, outputs))


def traced(state: Mapping) -> bool:
    """Whether a forward-mode tangent or a torch.func transform is about,
    which a recomputed checkpoint does not carry (those runs keep no graph
    anyway)."""
    return torch._C._are_functorch_transforms_active() or any(
        forward_ad.unpack_dual(t).tangent is not None for t in state.values())
