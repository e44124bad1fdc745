"""Whole-step compilation (``compile=True``, pompy.core.compiled): the
graphs it makes, that a step never recompiles them, and that values and
gradients through them are eager's.

Traced here with Dynamo's "eager" backend (its graphs run op by op, as
eager runs them): the same graphs as Inductor's in a minute, not ten. Inductor itself is checked at 65x49x21 by
``validation/compiled_core.py`` (minutes of compilation): measured there,
states equal to eager's to the last bit after 8 steps.
"""
import dataclasses
from pathlib import Path

import pytest
import torch

from torch._dynamo.utils import counters

from pompy.autodiff.policies import (GradientPolicy, GradientPolicyConfig, forward_policies_key,
                                     forward_policy, gradient_policy, layer_policies)
from pompy.compat import fortran_math
from pompy.config import load_config
from pompy.core import compiled
from pompy.core.explicit import ExplicitCore
from pompy.core.implicit import ImplicitCore

CONFIGS = Path(__file__).parents[1] / "configs"


def tiny(**changes):
    """An 8x7x5 seamount, isplit 9, ispadv 3: passes in three runs of
    three, the first two of one kind (advave on the third), the last with
    etf's sums."""
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, **{**dict(im=8, jm=7, kb=5, kl1=2, kl2=3, isplit=9,
                                                 ispadv=3), **changes})


def counting(backend: str, made: list):
    """torch.compile's ``backend``, counting the graphs Dynamo hands it."""
    inner = torch._dynamo.lookup_backend(backend)

    def compile_graph(gm, inputs):
        made.append(gm)
        return inner(gm, inputs)
    return compile_graph


@pytest.fixture
def graphs_made(monkeypatch):
    """The graphs made, by Dynamo alone (its graphs run op by op, as eager)."""
    made = []
    monkeypatch.setattr(compiled, "BACKEND", counting("eager", made))
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def stepped(core, steps):
    core.run_initialization()
    core.iend = steps
    core.run_time_loop()
    return core


def test_chunks_run_equal_kinds_through_one_graph():
    assert compiled.chunks(list("aaaaabbbbb")) == [tuple("aaaaa"), tuple("bbbbb")]
    assert compiled.chunks(list(range(30))) == [tuple(range(i, i + 5)) for i in range(0, 30, 5)]
    assert compiled.chunks(list(range(9))) == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    assert compiled.chunks(list(range(7))) == [(n,) for n in range(7)]      # 7 is prime
    assert compiled.chunks([]) == []


def test_compiled_steps_equal_eager_and_never_recompile(graphs_made):
    """Four graphs (terms, two kinds of pass runs, the internal step),
    made in the first two steps; four more steps, each with its own ramp,
    make none; every field equals eager's to the last bit. The four run
    with deferred checks (check_every 2: the graph's finiteness flag stays
    on the device) against an eager core checked every step."""
    config = tiny(lramp=True)                 # the ramp changes every step
    core = stepped(ExplicitCore(config, compile=True), 2)
    assert len(core.graphs._graphs) == 4
    made = len(graphs_made)
    core.check_every = 2
    core.iend = 6
    core.run_time_loop()
    assert len(graphs_made) == made
    eager = stepped(ExplicitCore(config), 6)
    assert core.state.keys() == eager.state.keys() and core.vamax == eager.vamax
    for name, want in eager.state.items():
        assert torch.equal(core.state[name], want), name


def test_steps_autograd_records_run_eagerly(graphs_made):
    """A recorded step whose gradient policy a context around the backward
    pass could still choose (no override in force: pompy.core.compiled)
    runs eagerly: no graph made, the gradient eager's to the last bit; a
    step after it without gradients is compiled again."""
    config = tiny(isplit=3, ispadv=3)

    def gradient(core):
        el0 = core.el.clone().requires_grad_(True)
        core.el = el0
        core.iend = 4
        core.run_time_loop()
        (core.u.square().sum() + core.el.sum() + 1e-3 * core.t.sum()).backward()
        return el0.grad

    core, eager = ExplicitCore(config, compile=True), ExplicitCore(config)
    with torch.no_grad():                     # the graphs the last step reuses
        stepped(core, 2)
        stepped(eager, 2)
    made = len(graphs_made)
    assert made > 0
    called = []
    graph_call = core.graphs._call
    core.graphs._call = lambda *args: called.append(args[0][0]) or graph_call(*args)
    got, want = gradient(core), gradient(eager)
    assert want.abs().max() > 0 and torch.equal(got, want)
    assert len(graphs_made) == made and called == []
    with torch.no_grad():
        for c in (core, eager):
            c.iend = 5
            c.run_time_loop()
    assert len(graphs_made) == made and called == ["terms", "passes", "internal"]
    assert all(torch.equal(core.state[n], eager.state[n]) for n in ("el", "u", "t", "q2"))


@pytest.mark.parametrize("checkpoint", [None, "steps"])
def test_gradients_through_compiled_steps_equal_eager(monkeypatch, checkpoint):
    """With the policies decided in the forward pass (an override in
    force), recorded steps run through the graphs, traced by AOT autograd
    (backend aot_eager: its forward and backward graphs, run op by op):
    the gradient of two steps' loss (from step 1: both run the internal
    mode) with respect to the initial t is eager's to the last bit (issue
    14 asks for 1e-12), with no graph break (the safe ops' compiled
    variants); the graphs are keyed by the policies in force. The
    policies (a CLAMP override, REJECT for profq's layer) change the
    gradient from the built-in PROJECT's, so the compiled backward shows
    that both reach it. With checkpoint="steps" (each step recomputed in
    the backward pass) the gradient is that of eager checkpointed steps,
    and the backward pass recomputes the steps through the graphs (as many
    graph calls as the forward pass; none without checkpoints)."""
    made = []
    monkeypatch.setattr(compiled, "BACKEND", counting("aot_eager", made))
    torch._dynamo.reset()
    config = tiny(isplit=3, ispadv=3)
    policies = GradientPolicyConfig(override=GradientPolicy.CLAMP,
                                    layers={"profq": GradientPolicy.REJECT})
    start = stepped(ExplicitCore(config), 1).numpy_state()

    calls = {"forward": 0, "backward": 0}

    def gradient(compile, policies=policies):
        core = ExplicitCore(config, compile=compile, policies=policies, checkpoint=checkpoint)
        core.load_state(start, iint=1)
        if compile:           # the graph calls of the forward pass, then of the backward pass
            graph_call, phase = core.graphs._call, ["forward"]
            core.graphs._call = lambda *args: calls.__setitem__(
                phase[0], calls[phase[0]] + 1) or graph_call(*args)
        t0 = core.t.detach().clone().requires_grad_(True)
        core.t = t0
        core.iend = 3
        core.run_time_loop()
        if compile:
            phase[0] = "backward"
        # scaled: the safe ops' products grad * derivative pass CLAMP's bound
        (1e6 * (core.u.square().sum() + core.el.sum()) + core.t.sum()).backward()
        return core, t0.grad

    counters.clear()
    try:
        core, got = gradient(True)
        eager, want = gradient(False)
        assert made and not counters["graph_break"]
        with policies.activate(), layer_policies(policies.layers):
            assert {key[-1] for key in core.graphs._graphs} == {forward_policies_key()}
    finally:
        torch._dynamo.reset()
    assert want.abs().max() > 0 and torch.equal(got, want)
    # checkpointed steps recompute their forward pass through the graphs
    assert calls["forward"] > 0 and calls["backward"] == (calls["forward"] if checkpoint else 0)
    _, builtin = gradient(False, GradientPolicyConfig(override=GradientPolicy.PROJECT))
    assert not torch.equal(builtin, want)
    for name in ("u", "el", "t", "q2"):
        assert torch.equal(core.state[name], eager.state[name]), name


@pytest.mark.parametrize("checkpoint", [None, "steps"])
def test_recorded_steps_compile_one_graph_of_each_kind(graphs_made, checkpoint):
    """Over the first recorded steps the gradient reaches the state field by
    field, and Dynamo guards on each input's requires_grad: every field a
    step may compute takes a gradient in a recorded graph from the start
    (pompy.core.compiled._promoted), so four recorded steps from el and t
    make one graph of each kind (terms, two kinds of pass runs, the
    internal step; without it 13 here, 15 with checkpoints), and the
    gradient is eager's to the last bit."""
    config = tiny()
    policies = GradientPolicyConfig(override=GradientPolicy.PROJECT)

    def gradient(compile):
        core = ExplicitCore(config, compile=compile, policies=policies, checkpoint=checkpoint)
        with torch.no_grad():
            stepped(core, 2)
        made = len(graphs_made)
        el0, t0 = (core.el.clone().requires_grad_(True), core.t.clone().requires_grad_(True))
        core.el, core.t = el0, t0
        core.iend = 6
        core.run_time_loop()
        (core.u.square().sum() + core.el.sum()).backward()
        return len(graphs_made) - made, el0.grad, t0.grad

    made, *got = gradient(True)
    assert made == 4
    _, *want = gradient(False)
    for g, w in zip(got, want):
        assert w.abs().max() > 0 and torch.equal(g, w)


def test_recorded_steps_of_the_implicit_scheme_run_eagerly():
    """Its elevation solve (an autograd.Function with a jvp) and the
    reference CG's residual reads would break its graphs."""
    policies = GradientPolicyConfig(override=GradientPolicy.PROJECT)
    with policies.activate():
        assert not ImplicitCore(tiny(), compile=True, policies=policies).graphs.records_gradients()
        assert ExplicitCore(tiny(), compile=True, policies=policies).graphs.records_gradients()
    assert not ExplicitCore(tiny(), compile=True, policies=policies).graphs.records_gradients()


def test_forward_policy_is_decided_in_the_forward_pass():
    """What a compiled step's safe ops use: the explicit policy, else the
    layer's entry, else the override with the registry under it; with none
    of these in force it is undecided (refused)."""
    assert forward_policy("advct", "clamp") == "clamp"
    with gradient_policy(GradientPolicy.PASSTHROUGH):
        assert forward_policy("advct", None) == "passthrough"
        with layer_policies({"advct": GradientPolicy.CLAMP}):
            assert forward_policy("advct", None) == "clamp"
            assert forward_policy("profq", None) == "passthrough"
        key = forward_policies_key()
    with gradient_policy(GradientPolicy.PROJECT):
        assert forward_policies_key() != key
    with layer_policies({"advct": GradientPolicy.REJECT}):
        assert forward_policy("advct", None) == "reject"
        with pytest.raises(RuntimeError, match="not decided in the forward pass"):
            forward_policy("profq", None)


def test_what_the_graphs_do_not_serve_runs_eagerly(graphs_made):
    """fortran_math's host callbacks and the ensemble's vmap go eagerly
    through the same code: no graph made, states as an eager core's."""
    config = tiny()
    with fortran_math():
        core = stepped(ExplicitCore(config, compile=True), 3)
        eager = stepped(ExplicitCore(config), 3)
    assert graphs_made == [] and core.graphs._graphs == {}
    for name, want in eager.state.items():
        assert torch.equal(core.state[name], want), name


def test_implicit_core_compiles_its_external_mode_whole(graphs_made):
    """The implicit scheme's external mode is one graph (broken where its
    PCG reads its residual, which Dynamo's log does not report: a break
    by design), states equal to eager's to the last bit."""
    import logging

    from torch._dynamo.variables.tensor import TensorVariable

    TensorVariable._warn_capture_scalar_outputs.cache_clear()     # Dynamo warns once a process
    logged = []
    handler = logging.Handler()
    handler.emit = logged.append
    log = logging.getLogger("torch._dynamo.variables.tensor")
    log.addHandler(handler)
    try:
        config = tiny(isplit=15, ispadv=5)
        core = stepped(ImplicitCore(config, compile=True), 3)
    finally:
        log.removeHandler(handler)
    assert {key[0][0] for key in core.graphs._graphs} == {"external", "internal"}
    assert len(graphs_made) > 2 and not [r for r in logged if "Graph break" in str(r.msg)]
    eager = stepped(ImplicitCore(config), 3)
    for name in ("el", "u", "v", "t", "s", "q2"):
        torch.testing.assert_close(core.state[name], eager.state[name], rtol=0, atol=0)


def test_compile_choice_is_checked():
    with pytest.raises(ValueError, match="compile='yes'"):
        ExplicitCore(tiny(), compile="yes")


def test_pompy_run_compile_writes_the_uncompiled_runs_files(graphs_made, tmp_path, capsys):
    """`pompy run --compile`: the core's steps go through the graphs (four
    made), the compiling line comes first, and the output and restart
    files hold the uncompiled run's every value to the last bit; their
    torch_compile attributes say which is which."""
    import netCDF4
    import numpy as np

    from pompy import driver
    from pompy.cli import main

    config = tmp_path / "tiny.nml"
    tiny(lramp=True).to_namelist().write(config)
    for folder, extra in (("compiled", ["--compile"]), ("eager", [])):
        assert main(["run", str(config), "--steps", "4", "--output", str(tmp_path / folder),
                     *extra]) == 0
        if extra:
            assert len(graphs_made) == 4
            assert capsys.readouterr().err.startswith("pompy: compiling the step graphs")
    for name in ("explicit_output.nc", "explicit_restart.nc"):
        with netCDF4.Dataset(tmp_path / "compiled" / name) as a, \
                netCDF4.Dataset(tmp_path / "eager" / name) as b:
            assert a.variables.keys() == b.variables.keys()
            assert (a.torch_compile, b.torch_compile) == (driver.COMPILED, "none")
            for var in b.variables:
                assert np.array_equal(a[var][...], b[var][...]), (name, var)
