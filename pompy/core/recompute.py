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

compile="routines" runs each routine of COMPILED through torch.compile
(:func:`compiled_routine`); checkpoint="routines" recomputes the heavy
ones in the backward pass (:func:`checkpointed`).
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping

import torch
from torch.autograd import forward_ad
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from pompy.core.compiled import _LRU_WARNING

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
            warnings.filterwarnings("ignore", message=_LRU_WARNING)
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
        if torch.is_grad_enabled():     # create_graph: the rerun starts from detached leaves
            raise RuntimeError("pompy: second derivatives are not supported through "
                               "checkpoint='steps' (its steps rerun from detached inputs); use "
                               "no checkpoints or checkpoint='routines'")
        inputs, outputs = _Recomputed.rerun(ctx, ctx.saved_tensors)
        used = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        wanted = [x for x in inputs if x.requires_grad]
        got = iter(torch.autograd.grad([o for o, _ in used], wanted, [g for _, g in used],
                                       allow_unused=True) if used and wanted else [])
        return (None, None, *(next(got, None) if x.requires_grad else None for x in inputs))


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


def traced(state: Mapping) -> bool:
    """Whether a forward-mode tangent or a torch.func transform is about,
    which a recomputed checkpoint does not carry (those runs keep no graph
    anyway)."""
    return torch._C._are_functorch_transforms_active() or any(
        forward_ad.unpack_dual(t).tangent is not None for t in state.values())
