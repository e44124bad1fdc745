"""pompy.autodiff.policies: the four gradient policies, selection precedence,
the layer registry, configs, context-locality (asyncio, threads) and
torch.compile."""
import asyncio
import json
import math
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from pompy.autodiff import policies
from pompy.autodiff.policies import (POLICY_REGISTRY, GradientPolicy, GradientPolicyConfig,
                                     apply_policy, gradient_policy, policy_override,
                                     policy_registry_snapshot, register_policy, rejection_loss,
                                     restore_policy_registry, selected_policy)

P = GradientPolicy
INF, NAN = math.inf, math.nan
LAYER = "test_policies_layer"   # not a physics layer: pompy.core registers those


@pytest.fixture(autouse=True)
def registry():
    """Every test leaves the registry as it found it, and no override behind."""
    before = policy_registry_snapshot()
    assert policy_override() is None
    yield before
    restore_policy_registry(before)
    assert policy_override() is None


# One gradient: unguarded finite small, finite large, non-finite; then the
# same kinds of values at guarded (⊥) points.
GRAD = [0.5, -0.25, 3.0, -7.0, NAN, INF, -INF, 0.75, 9.0, NAN, INF, -INF]
BOTTOM = [False] * 7 + [True] * 5


def grad_and_mask(dtype=torch.float32):
    return torch.tensor(GRAD, dtype=dtype), torch.tensor(BOTTOM)


def assert_same(got, want):
    """Equal values, NaN where NaN, same dtype."""
    want = torch.tensor(want, dtype=got.dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


# ----------------------------------------------------------------- policies

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clamp_zero_at_bottom_clamped_elsewhere(dtype):
    grad, mask = grad_and_mask(dtype)
    out = apply_policy(grad, mask, P.CLAMP)
    assert_same(out, [0.5, -0.25, 1.0, -1.0, 0.0, 1.0, -1.0, 0, 0, 0, 0, 0])
    assert out.dtype == dtype and bool(torch.isfinite(out).all())


def test_project_masks_bottom_and_passes_the_rest_unchanged():
    grad, mask = grad_and_mask()
    out = apply_policy(grad, mask, P.PROJECT)
    assert_same(out, [0.5, -0.25, 3.0, -7.0, NAN, INF, -INF, 0, 0, 0, 0, 0])


def test_reject_is_zero_everywhere():
    grad, mask = grad_and_mask()
    out = apply_policy(grad, mask, P.REJECT)
    assert_same(out, [0.0] * len(GRAD))


def test_passthrough_changes_nothing_even_at_bottom():
    grad, mask = grad_and_mask()
    out = apply_policy(grad, mask, P.PASSTHROUGH)
    assert out is grad
    assert_same(out, GRAD)


@pytest.mark.parametrize("policy", list(P))
def test_no_bottom_points(policy):
    grad = torch.tensor([0.5, 2.0, -3.0])
    out = apply_policy(grad, torch.zeros(3, dtype=torch.bool), policy)
    want = {P.CLAMP: [0.5, 1.0, -1.0], P.PROJECT: [0.5, 2.0, -3.0], P.REJECT: [0.0, 0.0, 0.0],
            P.PASSTHROUGH: [0.5, 2.0, -3.0]}[policy]
    assert_same(out, want)


@pytest.mark.parametrize("policy", list(P))
def test_mask_broadcasts_to_the_gradient_shape(policy):
    grad = torch.full((3, 4), 5.0)
    mask = torch.tensor([[True], [False], [True]])        # one flag per row
    out = apply_policy(grad, mask, policy)
    assert out.shape == grad.shape
    row = {P.CLAMP: 1.0, P.PROJECT: 5.0, P.REJECT: 0.0, P.PASSTHROUGH: 5.0}[policy]
    bottom = 5.0 if policy is P.PASSTHROUGH else 0.0
    assert out[1].tolist() == [row] * 4
    assert out[0].tolist() == out[2].tolist() == [bottom] * 4


def test_bad_arguments_are_refused():
    grad = torch.ones(3)
    with pytest.raises(ValueError, match="does not broadcast"):
        apply_policy(grad, torch.zeros(2, 3, dtype=torch.bool), P.CLAMP)
    with pytest.raises(TypeError, match="torch.bool"):
        apply_policy(grad, torch.zeros(3), P.CLAMP)
    with pytest.raises(TypeError, match="GradientPolicy"):
        apply_policy(grad, torch.zeros(3, dtype=torch.bool), "clamp")
    with pytest.raises(TypeError, match="grad must be a torch.Tensor"):
        apply_policy([1.0], torch.zeros(1, dtype=torch.bool), P.CLAMP)


def test_rejection_loss_is_the_bottom_fraction_without_gradient():
    loss = rejection_loss(torch.tensor([[True, False], [False, False]]))
    assert loss.item() == 0.25 and loss.dtype == torch.get_default_dtype()
    assert not loss.requires_grad
    assert rejection_loss(torch.zeros(0, dtype=torch.bool)).item() == 0.0
    assert rejection_loss(torch.ones(3, dtype=torch.bool), dtype=torch.float64).dtype == torch.float64
    with pytest.raises(TypeError):
        rejection_loss(torch.ones(3))


# --------------------------------------------------------------- precedence

def test_precedence_explicit_context_layer_clamp():
    assert selected_policy() is P.CLAMP
    assert selected_policy(LAYER) is P.CLAMP                       # unregistered layer
    register_policy(LAYER, P.PROJECT)
    assert selected_policy(LAYER) is P.PROJECT                     # layer default
    assert selected_policy("other_" + LAYER) is P.CLAMP
    with gradient_policy(P.REJECT):
        assert selected_policy(LAYER) is P.REJECT                  # context beats layer
        assert selected_policy() is P.REJECT
        assert selected_policy(LAYER, P.PASSTHROUGH) is P.PASSTHROUGH   # explicit beats all
    assert selected_policy(LAYER, P.CLAMP) is P.CLAMP
    assert selected_policy(f"  {LAYER.upper()} ") is P.PROJECT     # normalised look-up


def test_apply_policy_follows_the_precedence():
    grad, mask = torch.tensor([3.0, 3.0]), torch.tensor([False, True])
    assert apply_policy(grad, mask).tolist() == [1.0, 0.0]                  # CLAMP
    register_policy(LAYER, P.PROJECT)
    assert apply_policy(grad, mask, layer=LAYER).tolist() == [3.0, 0.0]     # layer
    with gradient_policy(P.PASSTHROUGH):
        assert apply_policy(grad, mask, layer=LAYER).tolist() == [3.0, 3.0]  # context
        assert apply_policy(grad, mask, P.REJECT, LAYER).tolist() == [0.0, 0.0]  # explicit


def test_nested_contexts_and_exit_restore():
    with gradient_policy(P.PROJECT) as outer:
        assert outer is P.PROJECT and policy_override() is P.PROJECT
        with gradient_policy(P.REJECT):
            assert selected_policy() is P.REJECT
            with gradient_policy(P.PASSTHROUGH):
                assert selected_policy() is P.PASSTHROUGH
            assert selected_policy() is P.REJECT
        assert selected_policy() is P.PROJECT
    assert policy_override() is None and selected_policy() is P.CLAMP


def test_exception_in_context_restores():
    with pytest.raises(RuntimeError):
        with gradient_policy(P.REJECT):
            raise RuntimeError("boom")
    assert policy_override() is None


def test_gradient_policy_refuses_non_enum():
    with pytest.raises(TypeError, match="GradientPolicy"):
        with gradient_policy("project"):
            pass
    assert policy_override() is None


class _Guarded(torch.autograd.Function):
    """y = 2 x; the backward hands 2 * grad and the mask to apply_policy."""

    @staticmethod
    def forward(ctx, x, bottom):
        ctx.save_for_backward(bottom)
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        (bottom,) = ctx.saved_tensors
        return apply_policy(2 * grad, bottom, layer=LAYER), None


def test_context_around_backward_reaches_a_custom_backward():
    """The seed's usage: ``with gradient_policy(...): loss.backward()``."""
    bottom = torch.tensor([False, False, True])

    def grad_of_x(context=None):
        x = torch.tensor([0.1, 1.0, 1.0], requires_grad=True)
        loss = (_Guarded.apply(x, bottom) * torch.tensor([1.0, 4.0, 4.0])).sum()
        with context or gradient_policy(P.PASSTHROUGH):
            loss.backward()
        return x.grad.tolist()

    assert grad_of_x(gradient_policy(P.PROJECT)) == [2.0, 8.0, 0.0]
    assert grad_of_x(gradient_policy(P.CLAMP)) == [1.0, 1.0, 0.0]
    assert grad_of_x() == [2.0, 8.0, 8.0]


# ----------------------------------------------------------------- registry

def test_register_normalises_and_returns_previous():
    assert register_policy(f"  {LAYER.title()}\t", P.PROJECT) is None
    assert POLICY_REGISTRY[LAYER] is P.PROJECT
    assert f"  {LAYER.title()}\t" not in POLICY_REGISTRY
    assert register_policy(LAYER.upper(), P.REJECT) is P.PROJECT
    assert POLICY_REGISTRY[LAYER] is P.REJECT


@pytest.mark.parametrize("layer, policy, error", [
    ("", P.CLAMP, ValueError),
    ("   ", P.CLAMP, ValueError),
    (None, P.CLAMP, TypeError),
    (3, P.CLAMP, TypeError),
    (LAYER, "project", TypeError),
    (LAYER, None, TypeError),
    (LAYER, 1, TypeError),
])
def test_register_refuses_bad_entries(layer, policy, error):
    before = dict(POLICY_REGISTRY)
    with pytest.raises(error, match="empty|must be"):
        register_policy(layer, policy)
    assert dict(POLICY_REGISTRY) == before


def test_policy_registry_is_a_read_only_live_view():
    assert isinstance(POLICY_REGISTRY, types.MappingProxyType)
    with pytest.raises(TypeError):
        POLICY_REGISTRY[LAYER] = P.REJECT
    with pytest.raises(TypeError):
        del POLICY_REGISTRY["dens"]
    assert LAYER not in POLICY_REGISTRY
    register_policy(LAYER, P.REJECT)
    assert POLICY_REGISTRY[LAYER] is P.REJECT


def test_snapshot_is_immutable_and_point_in_time():
    snap = policy_registry_snapshot()
    with pytest.raises(TypeError):
        snap[LAYER] = P.REJECT
    register_policy(LAYER, P.REJECT)
    assert LAYER not in snap
    assert policy_registry_snapshot()[LAYER] is P.REJECT


def test_restore_replaces_the_whole_registry(registry):
    register_policy(LAYER, P.REJECT)
    previous = restore_policy_registry({f" {LAYER}_A ": P.PROJECT})
    assert dict(POLICY_REGISTRY) == {f"{LAYER}_a": P.PROJECT}     # normalised; others gone
    assert previous[LAYER] is P.REJECT
    restore_policy_registry(previous)
    assert dict(POLICY_REGISTRY) == {**registry, LAYER: P.REJECT}


@pytest.mark.parametrize("bad", [
    {"good_layer": P.PROJECT, "": P.CLAMP},                      # empty key
    {"good_layer": P.PROJECT, 7: P.CLAMP},                       # non-str key
    {"good_layer": P.PROJECT, "bad_layer": "clamp"},             # str, not enum
    {"good_layer": P.PROJECT, "bad_layer": None},
    {"good_layer": P.PROJECT, "Dup": P.CLAMP, "dup ": P.REJECT},  # conflicting duplicates
    [("good_layer", P.PROJECT)],                                 # not a mapping
])
def test_restore_is_atomic(bad):
    register_policy(LAYER, P.REJECT)
    before, before_snapshot = dict(POLICY_REGISTRY), policy_registry_snapshot()
    with pytest.raises((TypeError, ValueError)):
        restore_policy_registry(bad)
    assert dict(POLICY_REGISTRY) == before
    assert policy_registry_snapshot() is before_snapshot
    assert selected_policy(LAYER) is P.REJECT and selected_policy("good_layer") is P.CLAMP


# ------------------------------------------------------------------- config

def test_config_round_trip():
    config = GradientPolicyConfig(override=P.PROJECT, layers={" Advct": P.CLAMP, "profq": P.REJECT})
    data = config.to_dict()
    assert data == {"override": "project", "layers": {"advct": "clamp", "profq": "reject"}}
    assert GradientPolicyConfig.from_dict(json.loads(json.dumps(data))) == config
    assert hash(GradientPolicyConfig.from_dict(data)) == hash(config)
    empty = GradientPolicyConfig()
    assert empty.to_dict() == {"override": None, "layers": {}}
    assert GradientPolicyConfig.from_dict({}) == empty
    with pytest.raises(TypeError):
        config.layers["advct"] = P.PROJECT


@pytest.mark.parametrize("data, error", [
    ({"override": "CLAMP"}, ValueError),                  # the name, not the value
    ({"override": "clip"}, ValueError),
    ({"override": 1}, ValueError),
    ({"layers": {"advct": "projected"}}, ValueError),
    ({"layers": {"advct": None}}, ValueError),
    ({"layers": {"": "clamp"}}, ValueError),
    ({"default": "clamp"}, ValueError),                   # unknown key
    ({"layers": [("advct", "clamp")]}, TypeError),
    ([("override", "clamp")], TypeError),
])
def test_from_dict_rejects_unknown(data, error):
    with pytest.raises(error):
        GradientPolicyConfig.from_dict(data)


def test_config_validates_its_fields():
    with pytest.raises(TypeError):
        GradientPolicyConfig(override="project")
    with pytest.raises(TypeError):
        GradientPolicyConfig(layers={"advct": "project"})


def test_config_install_activate_and_from_registry():
    register_policy(LAYER, P.REJECT)
    config = GradientPolicyConfig(override=P.PASSTHROUGH, layers={LAYER + "_b": P.PROJECT})
    previous = config.install()
    assert POLICY_REGISTRY[LAYER] is P.REJECT and POLICY_REGISTRY[LAYER + "_b"] is P.PROJECT
    assert LAYER + "_b" not in previous
    with config.activate():
        assert selected_policy(LAYER) is P.PASSTHROUGH
    with GradientPolicyConfig().activate():
        assert policy_override() is None
    captured = GradientPolicyConfig.from_registry()
    assert dict(captured.layers) == dict(POLICY_REGISTRY) and captured.override is None


# ---------------------------------------------------- context-local state

def test_asyncio_child_inherits_then_is_isolated():
    async def main():
        child_may_look, child_changed = asyncio.Event(), asyncio.Event()
        seen = {}

        async def child():
            seen["at start"] = policy_override()
            await child_may_look.wait()
            seen["after parent changed"] = policy_override()
            with gradient_policy(P.REJECT):
                child_changed.set()
                await asyncio.sleep(0)
                seen["own"] = policy_override()

        with gradient_policy(P.PROJECT):
            task = asyncio.create_task(child())         # created under PROJECT
            await asyncio.sleep(0)
        with gradient_policy(P.PASSTHROUGH):            # parent changes afterwards
            child_may_look.set()
            await child_changed.wait()
            seen["parent while child in REJECT"] = policy_override()
            await task
        seen["parent after"] = policy_override()
        return seen

    assert asyncio.run(main()) == {
        "at start": P.PROJECT, "after parent changed": P.PROJECT, "own": P.REJECT,
        "parent while child in REJECT": P.PASSTHROUGH, "parent after": None}


def test_overlapping_asyncio_tasks_are_isolated():
    async def worker(policy, seen):
        with gradient_policy(policy):
            for _ in range(5):
                await asyncio.sleep(0)                  # interleave with the other task
                seen.append((policy, policy_override(), selected_policy(LAYER)))

    async def main():
        seen = []
        await asyncio.gather(worker(P.PROJECT, seen), worker(P.REJECT, seen))
        return seen, policy_override()

    seen, after = asyncio.run(main())
    assert len(seen) == 10 and {entry[0] for entry in seen} == {P.PROJECT, P.REJECT}
    assert all(want is got is selected for want, got, selected in seen)
    assert after is None


def test_new_thread_starts_without_override():
    register_policy(LAYER, P.PROJECT)
    seen = {}

    def look():
        seen["override"] = policy_override()
        seen["plain"] = selected_policy()
        seen["layer"] = selected_policy(LAYER)

    with gradient_policy(P.REJECT):
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
        with ThreadPoolExecutor(1) as pool:
            pooled = pool.submit(lambda: (policy_override(), selected_policy(LAYER))).result()
        assert policy_override() is P.REJECT
    assert seen == {"override": None, "plain": P.CLAMP, "layer": P.PROJECT}
    assert pooled == (None, P.PROJECT)


# ------------------------------------------------------------- torch.compile

def test_apply_policy_compiles_with_fullgraph():
    """One small compiled graph holding all four policies (CPU inductor: a
    few seconds to a minute on first compile)."""
    def all_policies(grad, mask):
        return tuple(apply_policy(grad, mask, policy) for policy in P)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(all_policies, fullgraph=True)
        grad, mask = grad_and_mask()
        for got, want in zip(compiled(grad, mask), all_policies(grad, mask)):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    finally:
        torch._dynamo.reset()


def test_selection_inside_fullgraph_compile_fails_clearly():
    """The context override is not readable by Dynamo: without an explicit
    policy a fullgraph compile stops with pompy's message (traced only,
    backend="eager": no code generation)."""
    def implicit(grad, mask):
        return apply_policy(grad, mask, layer=LAYER)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(implicit, fullgraph=True, backend="eager")
        grad, mask = grad_and_mask()
        with pytest.raises(Exception, match="outside the compiled"):
            compiled(grad, mask)
        # without fullgraph Dynamo breaks the graph and selects eagerly
        lenient = torch.compile(implicit, backend="eager")
        with gradient_policy(P.PROJECT):
            torch.testing.assert_close(lenient(grad, mask), apply_policy(grad, mask, P.PROJECT),
                                       rtol=0, atol=0, equal_nan=True)
    finally:
        torch._dynamo.reset()


def test_module_exports():
    import pompy.autodiff as autodiff
    assert set(policies.__all__) <= set(autodiff.__all__)
    assert all(getattr(autodiff, name) is getattr(policies, name) for name in policies.__all__)
