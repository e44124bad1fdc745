"""checkpoint="steps": lean recomputed checkpoints of whole steps, two
levels for long windows (pompy.core.model).

A checkpointed step keeps only the carried fields (pompy.core.model.CARRIED)
and starts pom2k's work arrays from zero; that this changes nothing is
checked against runs that carry the work arrays from step to step. Its
gradients, stops and forward-mode tangents are checked against the run
without checkpointing, to the last bit."""
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.autograd import forward_ad

from pompy import variables
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.core.implicit import ImplicitCore
from pompy.core.model import CARRIED
from pompy.errors import CFLViolation

CONFIGS = Path(__file__).parents[1] / "configs"
WORK = variables.names("work")


def seamount(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=12, jm=10, kb=6, kl1=2, kl2=4), **changes})


def tiny(**changes):
    """8x7x5 with 3 external passes per step."""
    return seamount(**{**dict(im=8, jm=7, kb=5, kl1=2, kl2=3, isplit=3, ispadv=3), **changes})


def developed(config, kind=ExplicitCore, **kw):
    """A core two steps in (the cold start's first step has no internal mode)."""
    core = kind(config, **kw)
    core.run_initialization()
    core.iend = 2
    core.run_time_loop()
    return core


@pytest.mark.parametrize("kind", [ExplicitCore, ImplicitCore])
@pytest.mark.parametrize("changes", [{}, dict(mode=4), dict(mode=2), dict(nadv=2)],
                         ids=["mode3", "mode4", "mode2", "nadv2"])
def test_work_arrays_are_dead_at_a_step_entry(kind, changes):
    """Work arrays set to zero before every step (what a checkpointed step
    starts from) leave every carried field of 6 steps bit for bit as the
    run that carries them; random ones do not (their unwritten edges are
    read: utb, vtb, adx2d, ...), so the comparison can fail."""
    config = seamount(**changes)
    carried = kind(config)
    carried.run_initialization()
    carried.iend = 6
    carried.run_time_loop()

    def restarted_each_step(work):
        core = kind(config)
        core.run_initialization()
        for iint in range(1, 7):
            core.state.update({n: work(core.state[n]) for n in WORK})
            core.iend = iint
            core.run_time_loop()
        return [n for n in CARRIED if not torch.equal(core.state[n], carried.state[n])]

    assert restarted_each_step(torch.zeros_like) == []
    noise = torch.Generator().manual_seed(1)
    assert restarted_each_step(lambda t: torch.rand(t.shape, generator=noise, dtype=t.dtype)) != []


def gradient(config, steps, kind=ExplicitCore, segment=None, callback=None, **kw):
    """d(sum u^2 + sum el + 1e-3 sum t of the final state)/d(initial el, t)."""
    core = developed(config, kind, **kw)
    core.checkpoint_segment = segment
    el0 = core.el.clone().requires_grad_(True)
    t0 = core.t.clone().requires_grad_(True)
    core.el, core.t = el0, t0
    core.iend = 2 + steps
    core.run_time_loop(callback)
    (core.u.square().sum() + core.el.sum() + 1e-3 * core.t.sum()).backward()
    return el0.grad, t0.grad


@pytest.mark.parametrize("kind, steps", [(ExplicitCore, 12), (ImplicitCore, 6)])
def test_checkpointed_gradients_equal_the_plain_ones_to_the_last_bit(kind, steps):
    """One level (segments of 1, or a callback after each step), two levels
    (the default, ~sqrt(steps): 12 steps as 3 segments of 3, then 3 steps;
    uneven: 5+5 then 2 steps, 4 then 2): the gradients w.r.t. the initial
    el and t equal those without checkpointing bit for bit (measured:
    equal; the implicit core's CG is the reference one in both, as
    gradients flow)."""
    config = tiny()
    plain = gradient(config, steps, kind)
    assert all(torch.isfinite(g).all() and g.abs().max() > 0 for g in plain)
    seen = []
    cases = dict(default=dict(), one_level=dict(segment=1), uneven=dict(segment={12: 5, 6: 4}[steps]),
                 callback=dict(callback=lambda core: seen.append(core.iint)))
    for case, kw in cases.items():
        got = gradient(config, steps, kind, checkpoint="steps", **kw)
        for name, g, want in zip(("el", "t"), got, plain):
            assert torch.equal(g, want), (case, name, float((g - want).abs().max()))
    assert seen == list(range(3, 3 + steps))


def graph_nodes(tensor) -> list:
    nodes, stack = {}, [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in nodes:
            nodes[node] = None
            stack.extend(f for f, _ in node.next_functions)
    return list(nodes)


@pytest.mark.parametrize("segment, kept", [(None, 6), (1, 12)])
def test_the_forward_pass_keeps_one_node_and_the_carried_fields_per_checkpoint(segment, kept):
    """12 steps in segments of 3 (the default, ~sqrt(12): 3 segments, then
    the last 3 steps on their own) or 1: the graph of the final state has
    one node per checkpoint (no step's inner graph), and each keeps the
    carried fields, no work array."""
    core = developed(tiny(), checkpoint="steps")
    core.checkpoint_segment = segment
    core.el = core.el.clone().requires_grad_(True)
    core.iend = 14
    core.run_time_loop()
    nodes = graph_nodes(core.u)
    recomputed = [n for n in nodes if type(n).__name__ == "_RecomputedBackward"]
    assert len(recomputed) == kept and len(nodes) <= kept + 2     # + the entry clone, the leaf
    for node in recomputed:
        assert len(node.saved_tensors) == len(CARRIED)


@pytest.mark.parametrize("kind, recorded", [(ExplicitCore, False), (ImplicitCore, True)])
def test_the_forward_pass_records_a_graph_only_where_a_step_differs_without(kind, recorded):
    """Autograd saves nothing in the explicit core's checkpointed forward
    pass but the checkpoints' own inputs (a step computes the same without
    a graph); the implicit core's steps run recorded (its CG picks its
    solver by whether a gradient flows), saving some 900 tensors more a
    step here (8x7x5, 3 passes a step). Counted with a saved-tensors hook,
    3 steps in one level."""
    core = developed(tiny(), kind, checkpoint="steps")
    core.checkpoint_segment = 1
    core.el = core.el.clone().requires_grad_(True)
    core.iend = 5
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(1) or t, lambda t: t):
        core.run_time_loop()
    steps_own = len(saved) - 3 * len(CARRIED)
    assert (steps_own > 500 * 3) if recorded else (steps_own == 0)


def test_a_stop_inside_a_segment_names_the_first_bad_step_and_keeps_last_good():
    """A CFL stop at step 10 (inside the default segment 9..11 of a 12-step
    window): the same stop, state and differentiable last_good as without
    checkpointing, to the last bit."""
    config = tiny()
    vamax = {}
    developed(config).advance(14, lambda iint, v: vamax.__setitem__(iint, v))
    assert all(vamax[i] < vamax[10] for i in range(3, 10))    # the spin-up: it grows
    config = dataclasses.replace(config, vmaxl=(max(vamax[i] for i in range(3, 10)) + vamax[10]) / 2)

    def stopped(**kw):
        core = developed(config, **kw)
        el0 = core.el.clone().requires_grad_(True)
        core.el = el0
        core.iend = 14
        with pytest.raises(CFLViolation) as stop:
            core.run_time_loop()
        core.last_good["u"].square().sum().backward()
        return stop.value, core, el0.grad

    want_stop, want, want_grad = stopped()
    got_stop, got, got_grad = stopped(checkpoint="steps")
    assert got_stop.iint == want_stop.iint == 10 and str(got_stop) == str(want_stop)
    assert got.iint == 10 and got.vamax == want.vamax
    for name in CARRIED:
        assert torch.equal(got.last_good[name], want.last_good[name]), name
        assert torch.equal(got.state[name], want.state[name]), name
    assert torch.equal(got_grad, want_grad)


def test_forward_mode_through_checkpointed_steps():
    """A forward-mode tangent passes checkpoint="steps" (its steps are not
    recomputed: forward mode keeps no graph): the same as without."""
    direction = torch.randn((8, 7, 5), generator=torch.Generator().manual_seed(3),
                            dtype=torch.float64)

    def tangent(**kw):
        core = developed(tiny(), **kw)
        with forward_ad.dual_level():
            core.t = forward_ad.make_dual(core.t.detach().clone(), direction)
            core.iend = 6
            core.run_time_loop()
            return forward_ad.unpack_dual(core.u).tangent

    want = tangent()
    assert want.abs().max() > 0
    assert torch.equal(tangent(checkpoint="steps"), want)


@pytest.mark.parametrize("segment", [None, 1, 3])
@pytest.mark.parametrize("with_el", [True, False])
def test_a_learned_parameter_gets_its_gradient_through_checkpointed_steps(segment, with_el):
    """horcon as a tensor in core.params (as --learn puts it): d(sum u**2)/d
    horcon after 6 steps equal to the plain run's (to an ulp: the order of
    the sum), with one or two levels of checkpoints, with or without a
    state field requiring grad too (review finding: the recomputed steps took only the state as
    inputs, so horcon got no gradient, or part of it)."""
    grads = []
    for checkpoint in (None, "steps"):
        core = ExplicitCore(tiny(), checkpoint=checkpoint)
        if checkpoint is not None:
            core.checkpoint_segment = segment
        core.run_initialization()
        core.iend = 2
        core.run_time_loop()
        horcon = torch.tensor(core.params["horcon"], dtype=torch.float64, requires_grad=True)
        core.params = dict(core.params, horcon=horcon)
        if with_el:
            core.el = core.el.clone().requires_grad_(True)
        core.iend = 8
        core.run_time_loop()
        core.u.square().sum().backward()
        grads.append(horcon.grad)
    # the nodes' contributions add up in another order: measured 2.0e-16
    # relative with the default segments, 0 with 1 and 3
    assert grads[0] is not None and grads[0] != 0
    assert abs(grads[1] - grads[0]) <= 1e-15 * abs(grads[0])


def enclosed_gradient(config, steps, kind, checkpoint=None, segment=None):
    """The trainer's shape of graph around the core: corrections of the
    initial el and t by a small function of a weight (a network's stand-in),
    the steps (checkpointed, each keeping its graph, where ``checkpoint``),
    and a loss of the final state and of the corrected initial state too (a
    decoder reading it): the weight's gradient."""
    core = developed(config, kind, checkpoint=checkpoint)
    core.checkpoint_segment, core.checkpoint_graph = segment, checkpoint is not None
    w = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    el0, t0 = core.el + 1e-3 * torch.tanh(w * core.el), core.t * (1 + 1e-4 * w)
    core.el, core.t = el0, t0
    core.iend = 2 + steps
    core.run_time_loop()
    loss = core.u.square().sum() + core.el.sum() + 1e-3 * core.t.sum() + (el0 * t0[..., 0]).sum()
    (grad,) = torch.autograd.grad(loss, w)
    return grad


@pytest.mark.parametrize("kind", [ExplicitCore, ImplicitCore])
def test_steps_keeping_their_graph_equal_the_plain_gradient_inside_any_graph(kind):
    """checkpoint_graph (the trainer's --physics_checkpoint steps and
    steps:K): each step a non-reentrant checkpoint, its graph recorded and
    only the saved tensors recomputed, so an input's gradient terms add up
    in the plain run's order and a weight's gradient through corrections
    read inside and outside the steps equals the plain one to the bit, at
    one level and two (5 steps in segments of 2, then 1)."""
    config = tiny()
    plain = enclosed_gradient(config, 5, kind)
    assert torch.isfinite(plain) and plain != 0
    for segment in (1, 2):
        got = enclosed_gradient(config, 5, kind, checkpoint="steps", segment=segment)
        assert torch.equal(got, plain), (segment, float(got - plain))


@pytest.mark.parametrize("kind", [ExplicitCore, ImplicitCore])
def test_released_graphs_drop_what_the_loss_does_not_reach_and_keep_its_gradients(kind):
    """pool.release_graphs (the trainer's, once a batch's predictions are
    taken): the saved tensors of graph nodes only a further step would have
    read go at once, not at the end of the backward pass; the loss's
    gradients are those of the cores left holding their graph, to the bit."""
    import weakref

    from pompy.train.pool import release_graphs

    def run(release: bool):
        core = developed(seamount(), kind)
        leaves = {n: core.state[n].clone().requires_grad_(True) for n in ("u", "t")}
        core.inject(leaves)
        saved = []

        def pack(t):
            saved.append(weakref.ref(t))
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            core.iend = core.iint + 2
            core.run_time_loop()
        loss = core.u.square().sum() + core.t.sum()
        before = sum(r() is not None for r in saved)
        if release:
            release_graphs([core])
        after = sum(r() is not None for r in saved)
        return before, after, torch.autograd.grad(loss, list(leaves.values()))

    before, after, want = run(False)
    assert after == before
    before, after, got = run(True)
    assert after < before
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("kind", [ExplicitCore, ImplicitCore])
def test_a_step_keeping_its_graph_is_recomputed_one_routine_at_a_time(kind, monkeypatch):
    """checkpoint_graph's steps (recompute.by_routine): in the backward pass
    a step's saved tensors come back a routine at a time, so at most a
    fraction of the step's bytes are held at once, and each step's frame is gone
    when its backward is (none kept alive by a cache of the wrapped
    routines: the call binder's plans are cached by function)."""
    import weakref

    from pompy.core import recompute

    frames, held, saved = [], [], {}
    init, pack, unpack = (recompute._ByRoutine.__init__, recompute._ByRoutine.pack,
                          recompute._ByRoutine.unpack)

    def spied_init(self, *args):
        init(self, *args)
        frames.append(weakref.ref(self))

    def spied_pack(self, tensor):          # bytes saved in the first pass, per step
        if self.mode == "first":
            saved[id(self)] = saved.get(id(self), 0) + tensor.nbytes
        return pack(self, tensor)

    def spied_unpack(self, holder):        # bytes held in the backward pass, at most
        out = unpack(self, holder)
        held.append((sum(t.nbytes for t in self.stored.values()) + out.nbytes) / saved[id(self)])
        return out
    monkeypatch.setattr(recompute._ByRoutine, "__init__", spied_init)
    monkeypatch.setattr(recompute._ByRoutine, "pack", spied_pack)
    monkeypatch.setattr(recompute._ByRoutine, "unpack", spied_unpack)
    core = developed(seamount(), kind, checkpoint="steps")
    core.checkpoint_graph, core.checkpoint_segment = True, 1
    u0 = core.u.clone().requires_grad_(True)
    core.inject({"u": u0})
    core.iend = core.iint + 3
    core.run_time_loop()
    loss = core.u.square().sum() + core.t.sum()
    core.restore(core.capture())               # the core lets go of the graph
    loss.backward()
    assert len(frames) == 3 and u0.grad.abs().max() > 0
    # measured 0.30 (implicit) and 0.53 (explicit: its external passes'
    # 2-D tensors, saved between routine calls, weigh as much as the 3-D
    # ones on a 12x10x6 grid); a whole step's recompute holds 1
    assert max(held) < 0.6, max(held)
    del loss
    assert all(frame() is None for frame in frames)
