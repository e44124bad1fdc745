"""Gradient policies: how backpropagation treats the bottom value ⊥.

In pompy the bottom ⊥ is a point where a guard of :mod:`pompy.utils.safety`
fires: a zero depth on land, the square root of a non-positive argument,
the log of zero, a division by a vanishing denominator. The safe op keeps
pom2k's forward value there (made finite), marks the point in a boolean
mask, and its backward hands the incoming gradient and that mask to
:func:`apply_policy`, which applies the policy selected for the op's layer.
Layers are named after the model routines (``"advct"``, ``"profq"``,
``"dens"``, ``"smagorinsky"``, ``"bottom_drag"``, ...; pompy.autodiff.layers).
The physics layers have the built-in policy :attr:`GradientPolicy.PROJECT`
(:data:`BUILTIN_POLICIES`, a constant: nothing is registered on import), so
that away from the guarded points their gradients are exact; CLAMP, the
global fallback, would clip every derivative to [-1, 1].

Policies (``grad`` the incoming gradient, ``is_bottom`` the guard's mask):

===========  ==================  =============================================
policy       at ⊥ points         elsewhere
===========  ==================  =============================================
CLAMP        0                   clamped to [-1, 1]; NaN -> 0, +inf -> 1,
                                 -inf -> -1
PROJECT      0                   unchanged (a non-finite gradient at an
                                 unguarded point passes through: it is a real
                                 defect, not one of the guarded singularities)
REJECT       0                   0 (no gradient on the local path; learn from
                                 other objectives, see :func:`rejection_loss`)
PASSTHROUGH  unchanged           unchanged (inf and NaN included; debugging)
===========  ==================  =============================================

Selection precedence (:func:`selected_policy`): an explicit ``policy``
argument, then the layer's entry in an active :func:`layer_policies` block
(what a core's ``policies=`` sets up: explicit for that layer), then the
active :func:`gradient_policy` context override, then the policy
registered for the layer (:func:`register_policy`), then the layer's
built-in policy (:data:`BUILTIN_POLICIES`), then CLAMP. A layer given a
policy explicitly therefore stays stronger than a surrounding context.

Forward and backward pass. The safe ops run the selection when their
backward runs, from what they recorded in the forward pass; in order:

1. the op's ``policy=``, else its layer's :func:`layer_policies` entry
   (recorded in the forward pass);
2. the :func:`gradient_policy` override active in the forward pass
   (recorded);
3. the override active where the backward runs;
4. the registered, then built-in default of the layer; then CLAMP.

What the forward pass recorded wins because it travels with the graph:
autograd runs a CUDA backward on its own device threads, which see no
context of the caller's, so a context around ``loss.backward()`` alone
reaches the ops there only on the CPU. A policy set in the forward pass
(a context around the forward, a core's ``policies=``, an op's
``policy=``) gives the same gradients on every device and thread; a
context around the backward fills in where the forward set none (so the
common usage, ``with gradient_policy(P): loss.backward()``, still works).
A core's checkpointed steps (checkpoint="steps") are recomputed in the
backward pass under the policies captured when the forward pass ran them,
so what the forward recorded holds there too. :func:`captured_policies`
and :func:`policies_in_force` carry the policies in force to code run
later (a core's step).

The context override is context-local (:mod:`contextvars`): an asyncio task
inherits the override active when it is created and then keeps its own
copy, so later changes leak neither between parent and child nor between
overlapping tasks; a new thread starts with no override (layer defaults or
CLAMP apply there; ``asyncio.to_thread`` copies the caller's context and so
keeps its override). The layer registry, by contrast, is process-wide.

:func:`apply_policy` does no Python branching on tensor values (only on the
policy, a Python enum, and on shapes and dtypes), so it traces under
``torch.compile(fullgraph=True)`` when the policy is passed explicitly.
Inside a compiled region the context override cannot be read (Dynamo does
not trace ``ContextVar.get``): there resolve the policy outside with
:func:`selected_policy` and pass it as ``policy=``; without ``fullgraph``
Dynamo breaks the graph and the resolution runs eagerly.

Example::

    from pompy.autodiff.policies import GradientPolicy, gradient_policy

    with gradient_policy(GradientPolicy.PROJECT):
        loss.backward()
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import threading
import types
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from pompy.autodiff.layers import PHYSICS_LAYERS, SAFETY_LAYER

__all__ = [
    "BUILTIN_POLICIES",
    "GradientPolicy",
    "GradientPolicyConfig",
    "POLICY_REGISTRY",
    "apply_policy",
    "captured_policies",
    "explicit_policy",
    "gradient_policy",
    "layer_policies",
    "policies_in_force",
    "policy_override",
    "policy_registry_snapshot",
    "register_policy",
    "rejection_loss",
    "restore_policy_registry",
    "selected_policy",
]


class GradientPolicy(enum.Enum):
    """How a gradient is treated at the bottom ⊥ (see the module docstring).

    The values are the stable serialized form (:meth:`GradientPolicyConfig.to_dict`).
    """

    CLAMP = "clamp"
    PROJECT = "project"
    REJECT = "reject"
    PASSTHROUGH = "passthrough"


_VALID_VALUES = ", ".join(repr(p.value) for p in GradientPolicy)

BUILTIN_POLICIES: Mapping[str, GradientPolicy] = types.MappingProxyType(
    {layer: GradientPolicy.PROJECT for layer in (*PHYSICS_LAYERS, SAFETY_LAYER)})
"""pompy's own layers and their policy when none is registered (read-only)."""


def _check_policy(policy: Any, what: str = "policy") -> GradientPolicy:
    if not isinstance(policy, GradientPolicy):
        hint = " (a layer name goes in layer=)" if isinstance(policy, str) else ""
        raise TypeError(f"{what} must be a GradientPolicy member, got "
                        f"{type(policy).__name__} {policy!r}{hint}")
    return policy


def _layer_key(layer: Any) -> str:
    """The registry key of LAYER: trimmed and lower-cased; empty refused."""
    if not isinstance(layer, str):
        raise TypeError(f"a layer identifier must be a str, got {type(layer).__name__} {layer!r}")
    key = layer.strip().lower()
    if not key:
        raise ValueError(f"a layer identifier must not be empty (got {layer!r})")
    return key


# --------------------------------------------------------------------------
# Context override
# --------------------------------------------------------------------------

_OVERRIDE: contextvars.ContextVar[GradientPolicy | None] = contextvars.ContextVar(
    "pompy_gradient_policy", default=None)


@contextlib.contextmanager
def gradient_policy(policy: GradientPolicy) -> Iterator[GradientPolicy]:
    """Override the gradient policy for the current execution context.

    Inside the ``with`` block every selection without an explicit ``policy``
    argument gets POLICY, registered layer defaults included; the previous
    override (or none) is restored on exit, exceptions included. Contexts
    nest. Yields POLICY.
    """
    _check_policy(policy)
    token = _OVERRIDE.set(policy)
    try:
        yield policy
    finally:
        _OVERRIDE.reset(token)


def policy_override() -> GradientPolicy | None:
    """The override of the innermost active :func:`gradient_policy` in this
    context, or None."""
    return _OVERRIDE.get()


_NO_LAYERS: Mapping[str, GradientPolicy] = types.MappingProxyType({})
_LAYERS: contextvars.ContextVar[Mapping[str, GradientPolicy]] = contextvars.ContextVar(
    "pompy_layer_policies", default=_NO_LAYERS)


@contextlib.contextmanager
def layer_policies(layers: Mapping[str, GradientPolicy]) -> Iterator[Mapping[str, GradientPolicy]]:
    """Give the layers of LAYERS (layer -> policy, keys normalised as in
    :func:`register_policy`) an explicit policy while the block runs: an op
    of such a layer behaves as if called with ``policy=``, so the policy
    holds inside a surrounding :func:`gradient_policy` context (how a core's
    ``policies=`` opts a layer out of one). Context-local like the
    override; blocks nest, inner entries win. Yields the mapping in force."""
    merged = types.MappingProxyType({**_LAYERS.get(), **_validated_registry(layers)})
    token = _LAYERS.set(merged)
    try:
        yield merged
    finally:
        _LAYERS.reset(token)


def explicit_policy(layer: str | None = None,
                    policy: GradientPolicy | None = None) -> GradientPolicy | None:
    """The explicit level of the precedence for an op of LAYER: POLICY if
    given, else LAYER's entry in the active :func:`layer_policies`, else
    None. A safe op records it in its forward pass."""
    if policy is not None:
        return _check_policy(policy)
    if layer is None:
        return None
    return _LAYERS.get().get(_layer_key(layer))


def captured_policies() -> tuple[GradientPolicy | None, Mapping[str, GradientPolicy]]:
    """The override and the layer policies in force here, for
    :func:`policies_in_force` (a checkpointed recomputation runs under what
    its forward pass saw)."""
    return _OVERRIDE.get(), _LAYERS.get()


@contextlib.contextmanager
def policies_in_force(captured: tuple[GradientPolicy | None, Mapping[str, GradientPolicy]]
                      ) -> Iterator[None]:
    """Run the block under the override and layer policies of
    :func:`captured_policies` (an override of None: none)."""
    override, layers = captured
    tokens = _OVERRIDE.set(override), _LAYERS.set(layers)
    try:
        yield
    finally:
        _LAYERS.reset(tokens[1])
        _OVERRIDE.reset(tokens[0])


# --------------------------------------------------------------------------
# Layer registry
# --------------------------------------------------------------------------

_LOCK = threading.Lock()
_registry: dict[str, GradientPolicy] = {}
# The registry as selection reads it: an immutable copy, replaced as a whole
# (one reference assignment) on every change, so that a reader never sees a
# half-applied restore.
_frozen: Mapping[str, GradientPolicy] = types.MappingProxyType({})

POLICY_REGISTRY: Mapping[str, GradientPolicy] = types.MappingProxyType(_registry)
"""Read-only live view of the layer registry (layer -> policy). Assignment
raises TypeError; change it with :func:`register_policy` or
:func:`restore_policy_registry`."""


def _install(new: dict[str, GradientPolicy]) -> Mapping[str, GradientPolicy]:
    """Make NEW the registry (caller holds _LOCK); returns the previous snapshot."""
    global _frozen
    previous = _frozen
    for key in [k for k in _registry if k not in new]:
        del _registry[key]
    _registry.update(new)
    _frozen = types.MappingProxyType(dict(new))
    return previous


def register_policy(layer: str, policy: GradientPolicy) -> GradientPolicy | None:
    """Register POLICY as the default of LAYER; returns the layer's previous
    policy, or None.

    LAYER is trimmed and lower-cased (``" Advct "`` is ``"advct"``); an
    empty identifier raises ValueError, a non-str layer or a policy that is
    not a :class:`GradientPolicy` member raises TypeError.
    """
    key = _layer_key(layer)
    _check_policy(policy)
    with _LOCK:
        new = dict(_frozen)
        previous = new.get(key)
        new[key] = policy
        _install(new)
    return previous


def policy_registry_snapshot() -> Mapping[str, GradientPolicy]:
    """An immutable point-in-time copy of the registry (later registrations
    do not show in it)."""
    return _frozen


def _validated_registry(snapshot: Any) -> dict[str, GradientPolicy]:
    if not isinstance(snapshot, Mapping):
        raise TypeError(f"a policy registry snapshot must be a mapping, got "
                        f"{type(snapshot).__name__}")
    new: dict[str, GradientPolicy] = {}
    for layer, policy in snapshot.items():
        key = _layer_key(layer)
        _check_policy(policy, f"the policy of layer {layer!r}")
        if key in new and new[key] is not policy:
            raise ValueError(f"layer {key!r} appears twice in the snapshot, as "
                             f"{new[key].value!r} and {policy.value!r}")
        new[key] = policy
    return new


def restore_policy_registry(snapshot: Mapping[str, GradientPolicy]) -> Mapping[str, GradientPolicy]:
    """Replace the whole registry with SNAPSHOT, atomically; returns the
    previous snapshot.

    Every entry is validated first (keys normalised as in
    :func:`register_policy`; two keys that normalise alike must agree): on
    any error (TypeError, ValueError) the registry is left exactly as it
    was.
    """
    new = _validated_registry(snapshot)
    with _LOCK:
        return _install(new)


# --------------------------------------------------------------------------
# Selection and application
# --------------------------------------------------------------------------

def selected_policy(layer: str | None = None, policy: GradientPolicy | None = None) -> GradientPolicy:
    """The policy the precedence rules pick: POLICY if given, else LAYER's
    entry in the active :func:`layer_policies`, else the active context
    override, else LAYER's registered, then built-in default, else CLAMP.

    Call it outside a ``torch.compile`` region when POLICY is None (the
    context is not readable there; with ``fullgraph=True`` the compilation
    fails with a message saying so).
    """
    if policy is not None:
        return _check_policy(policy)
    if torch.compiler.is_compiling():
        raise RuntimeError(
            "the gradient policy cannot be selected inside torch.compile (Dynamo cannot read "
            "the context-local override); call selected_policy(layer) outside the compiled "
            "region and pass the result as policy=")
    return _selected(layer)


def _selected(layer: str | None) -> GradientPolicy:
    key = None if layer is None else _layer_key(layer)
    if key is not None and key in _LAYERS.get():
        return _LAYERS.get()[key]
    override = _OVERRIDE.get()
    if override is not None:
        return override
    if key is not None:
        registered = _frozen.get(key, BUILTIN_POLICIES.get(key))
        if registered is not None:
            return registered
    return GradientPolicy.CLAMP


# Dynamo cannot trace ContextVar.get: a compiled graph takes the value this
# had when traced, without a guard; pompy.core.compiled keys its graphs by
# the policies in force (forward_policies_key), so none is used under others
@torch.compiler.assume_constant_result
def forward_policy(layer: str, policy: str | None) -> str:
    """The value of the policy an op of ``layer`` (with ``policy=``, a
    value, or None) gets when everything is decided in its forward pass:
    the explicit levels, the override in force, the registered and built-in
    defaults; a context around the backward pass alone is not consulted.
    What a compiled step's safe ops use (see pompy.utils.safety)."""
    if policy is not None:
        return policy
    override = _OVERRIDE.get()
    key = _layer_key(layer)
    if key not in _LAYERS.get() and override is None:
        raise RuntimeError(f"pompy: the gradient policy of layer {layer!r} is not decided in the "
                           "forward pass (no override in force): a compiled step cannot record it")
    return _selected(layer).value


def forward_policies_key() -> tuple:
    """What :func:`forward_policy` reads (the override, the layer policies,
    the registry), hashable: a compiled graph's policies."""
    return _OVERRIDE.get(), tuple(sorted(_LAYERS.get().items())), tuple(sorted(_frozen.items()))


def _check_mask(grad: Any, is_bottom: Any) -> None:
    if not isinstance(grad, Tensor):
        raise TypeError(f"grad must be a torch.Tensor, got {type(grad).__name__}")
    if not isinstance(is_bottom, Tensor) or is_bottom.dtype != torch.bool:
        what = is_bottom.dtype if isinstance(is_bottom, Tensor) else type(is_bottom).__name__
        raise TypeError(f"is_bottom must be a torch.bool tensor, got {what}")
    if torch.broadcast_shapes(grad.shape, is_bottom.shape) != grad.shape:
        raise ValueError(f"is_bottom of shape {tuple(is_bottom.shape)} does not broadcast to "
                         f"the gradient's shape {tuple(grad.shape)}")


def apply_policy(grad: Tensor, is_bottom: Tensor, policy: GradientPolicy | None = None,
                 layer: str | None = None) -> Tensor:
    """GRAD transformed by the selected policy at the bottom points IS_BOTTOM.

    GRAD is a floating-point gradient tensor; IS_BOTTOM a ``torch.bool``
    tensor that broadcasts to GRAD's shape (True where the forward value is
    ⊥). The policy is ``selected_policy(layer, policy)``. The result has
    GRAD's shape, dtype and device:

    - CLAMP: 0 at ⊥; elsewhere GRAD clamped to [-1, 1], with NaN -> 0,
      +inf -> 1, -inf -> -1;
    - PROJECT: 0 at ⊥; elsewhere GRAD unchanged (non-finite values too);
    - REJECT: 0 everywhere;
    - PASSTHROUGH: GRAD itself, unchanged everywhere (inf and NaN included).

    The ⊥ points are selected with ``torch.where``, never by multiplying
    with the mask, so a NaN or inf at a ⊥ point still gives 0. No Python
    branch depends on tensor values.
    """
    _check_mask(grad, is_bottom)
    chosen = selected_policy(layer, policy)
    if chosen is GradientPolicy.PASSTHROUGH:
        return grad
    if chosen is GradientPolicy.REJECT:
        return torch.zeros_like(grad)
    zero = grad.new_zeros(())
    if chosen is GradientPolicy.PROJECT:
        return torch.where(is_bottom, zero, grad)
    finite = torch.nan_to_num(grad, nan=0.0, posinf=1.0, neginf=-1.0).clamp(-1.0, 1.0)
    return torch.where(is_bottom, zero, finite)


def rejection_loss(is_bottom: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """The fraction of ⊥ points in IS_BOTTOM (a ``torch.bool`` tensor), as a
    0-d tensor of DTYPE (default: torch's default dtype); 0 for an empty
    mask.

    Hard, metric-style accounting: it carries no gradient (a count of a
    boolean mask), so it reports how much of a field was rejected but does
    not itself teach a model to avoid ⊥ (that needs a soft surrogate).
    """
    if not isinstance(is_bottom, Tensor) or is_bottom.dtype != torch.bool:
        what = is_bottom.dtype if isinstance(is_bottom, Tensor) else type(is_bottom).__name__
        raise TypeError(f"is_bottom must be a torch.bool tensor, got {what}")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    count = torch.count_nonzero(is_bottom).to(dtype)
    return count / max(is_bottom.numel(), 1)


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

def _policy_from_value(value: Any, where: str) -> GradientPolicy:
    if isinstance(value, GradientPolicy):
        return value
    if isinstance(value, str):
        for member in GradientPolicy:
            if member.value == value:
                return member
    raise ValueError(f"unknown gradient policy {value!r} for {where}; expected one of {_VALID_VALUES}")


@dataclasses.dataclass(frozen=True)
class GradientPolicyConfig:
    """A serializable gradient-policy set-up.

    ``override``: the policy :meth:`activate` puts in force as context
    override (None: none, layer defaults apply). ``layers``: per-layer
    default policies, keys normalised as in :func:`register_policy`
    (stored as a read-only mapping).

    ``to_dict()`` writes the stable enum values::

        {"override": "project", "layers": {"advct": "clamp"}}

    and ``from_dict()`` reads them back, refusing unknown keys and values.
    """

    override: GradientPolicy | None = None
    layers: Mapping[str, GradientPolicy] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.override is not None:
            _check_policy(self.override, "override")
        object.__setattr__(self, "layers", types.MappingProxyType(_validated_registry(self.layers)))

    def __hash__(self) -> int:
        return hash((self.override, frozenset(self.layers.items())))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: policies as their stable values, layers sorted."""
        return {
            "override": None if self.override is None else self.override.value,
            "layers": {layer: self.layers[layer].value for layer in sorted(self.layers)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GradientPolicyConfig:
        """The config written by :meth:`to_dict`. Missing keys take their
        defaults; unknown keys or policy values raise ValueError, a
        non-mapping (the whole, or ``layers``) raises TypeError."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a gradient policy config must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(map(str, data)) - {"override", "layers"})
        if unknown:
            raise ValueError(f"unknown gradient policy config key(s) {unknown}; "
                             "expected 'override' and 'layers'")
        raw_override = data.get("override")
        override = None if raw_override is None else _policy_from_value(raw_override, "override")
        raw_layers = data.get("layers", {})
        if not isinstance(raw_layers, Mapping):
            raise TypeError(f"'layers' must be a mapping, got {type(raw_layers).__name__}")
        layers = {layer: _policy_from_value(value, f"layer {layer!r}")
                  for layer, value in raw_layers.items()}
        return cls(override=override, layers=layers)

    @classmethod
    def from_registry(cls, override: GradientPolicy | None = None) -> GradientPolicyConfig:
        """The current registry as a config (with OVERRIDE)."""
        return cls(override=override, layers=policy_registry_snapshot())

    def install(self) -> Mapping[str, GradientPolicy]:
        """Register every layer policy of this config in one atomic step
        (layers not in it keep theirs); returns the previous snapshot, for
        :func:`restore_policy_registry`."""
        with _LOCK:
            return _install({**_frozen, **self.layers})

    def activate(self) -> contextlib.AbstractContextManager[GradientPolicy | None]:
        """A context manager putting ``override`` in force
        (:func:`gradient_policy`), or doing nothing when it is None."""
        if self.override is None:
            return contextlib.nullcontext(None)
        return gradient_policy(self.override)
