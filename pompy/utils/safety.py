"""Gradient-safe elementary operations: safe_divide, safe_sqrt, safe_abs_pow,
safe_log, safe_reciprocal, with fixed eps constants (SAFE_DIV_EPS,
SAFE_SQRT_EPS, SAFE_LOG_EPS).

pompy's versions keep pom2k's forward values: wherever pom2k's operation
is defined (a positive depth, a non-negative square-root argument, ...)
the value is pom2k's to the last bit, so the oracle comparisons hold.
What they add is a guard and a backward:

- the guard marks the points where the operation is singular or its
  derivative unbounded: the bottom value, written ⊥ here and in
  pompy.autodiff.policies. There the forward value is made finite (the input
  is clamped to eps), and the derivative is evaluated at the clamped
  input, never at the singular one: a torch.where on the output alone
  would still send NaN back from the branch not taken (0 * inf);
- the backward multiplies the incoming gradient by the derivative and hands
  the result, with the guard's mask, to pompy.autodiff.policies.apply_policy,
  which applies the policy selected for the op's ``layer`` (the model
  routine's name: "smagorinsky", "profq", "bottom_drag", "dens", ...;
  "safety" when none is given). Every op takes ``policy=``, the explicit
  level of the policies' precedence: it wins over a surrounding
  ``gradient_policy`` context, which wins over the layer's registered or
  built-in default (PROJECT for pompy's layers and "safety": exact away
  from the guards). Which policy wins when the forward and the backward
  pass ran under different contexts: pompy.autodiff.policies, "Forward
  and backward pass";
- forward mode (torch.autograd.forward_ad, torch.func.jvp/jacfwd): the
  tangent is the input's tangent times the same derivative, under the
  same policy at the same guarded points, so forward and reverse mode give
  one Jacobian. CLAMP is refused there (it clips reverse-mode products,
  which no tangent reproduces); PROJECT, REJECT and PASSTHROUGH are
  linear and allowed;
- second derivatives (double backward, torch.func.hessian, a jvp of a
  gradient): the backward and the jvp compute the derivative from the op's
  input or output as saved, with its graph and tangent, and apply the
  policy with torch.where, so a backward run with create_graph=True is
  itself differentiable, exactly; at the guarded points the derivative is
  that of the held input, a constant, so the second derivative is 0.
  Forward over forward mode (jacfwd of jacfwd) is refused: torch does not
  differentiate a custom Function's jvp (it would give 0).

Guards (eps: the module's SAFE_*_EPS constants):

    safe_sqrt(x)          ⊥ where sqrt(x) < SAFE_SQRT_EPS (x < 1e-16): the
                          derivative 1/(2 sqrt x) stays below 5e7
    safe_abs_pow(x, p)    ⊥ where |x| < SAFE_SQRT_EPS
    safe_log(x)           ⊥ where x < SAFE_LOG_EPS
    safe_divide(n, d)     ⊥ where |d| < SAFE_DIV_EPS
    safe_reciprocal(d)    ⊥ where |d| < SAFE_DIV_EPS
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch._C._functorch import TransformType, get_unwrapped, is_batchedtensor   # torch.vmap's
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters   # transforms on
from torch.autograd import forward_ad

from pompy.autodiff.layers import SAFETY_LAYER
from pompy.autodiff.policies import (GradientPolicy, apply_policy, explicit_policy,
                                     forward_policy, policy_override, selected_policy)
from pompy.ops import host, on_host, sqrt_rn

SAFE_DIV_EPS = 1e-20
SAFE_SQRT_EPS = 1e-8
SAFE_LOG_EPS = 1e-12


def _policy(ctx, grad: Tensor, bottom: Tensor) -> Tensor:
    """The gradient policy at the guarded points, by the rule of
    pompy.autodiff.policies ("Forward and backward pass"): what the forward
    pass recorded (the op's explicit policy, else its layer's entry in
    layer_policies, else the gradient_policy override), else the override
    active where the backward runs, else the layer's registered or built-in
    default (apply_policy)."""
    return apply_policy(grad, bottom, policy=ctx.policy or ctx.override or policy_override(),
                        layer=ctx.layer)


def _tangent_policy(ctx, tangent: Tensor, bottom: Tensor) -> Tensor:
    """The forward-mode counterpart of :func:`_policy` (the tangent is
    computed in the forward pass, so the forward pass's context applies).
    PROJECT, REJECT and PASSTHROUGH are linear in the gradient, so forward
    and reverse mode give the same Jacobian; CLAMP clips each reverse-mode
    product grad*derivative, which no tangent reproduces: refused. So is
    forward over forward mode (:func:`_refuse_nested_forward`)."""
    _refuse_nested_forward(ctx)
    chosen = selected_policy(ctx.layer, ctx.policy or ctx.override)
    if chosen is GradientPolicy.CLAMP:
        raise RuntimeError(
            f"pompy: forward-mode AD is not defined under the CLAMP gradient policy (layer "
            f"{ctx.layer!r}): CLAMP clips reverse-mode products, which no tangent can reproduce; "
            "use PROJECT, REJECT or PASSTHROUGH (policy=, gradient_policy() or register_policy)")
    return apply_policy(tangent, bottom, policy=chosen)


def _refuse_nested_forward(ctx) -> None:
    """torch does not differentiate a custom Function's jvp under an outer
    forward-mode transform: torch.func.jacfwd(jacfwd(f)), a jvp of a jvp,
    would miss the derivative of this tangent and give 0 silently."""
    if sum(i.key() == TransformType.Jvp for i in retrieve_all_functorch_interpreters()) > 1:
        raise RuntimeError(
            f"pompy: second derivatives in forward over forward mode (torch.func.jacfwd of jacfwd, "
            f"a jvp of a jvp) are not supported through the safe ops (layer {ctx.layer!r}); use "
            "torch.func.hessian (forward over reverse), jacrev of jacrev or double backward")


def _remember(ctx, layer: str | None, policy: GradientPolicy | None) -> None:
    # a safe op called without a layer belongs to the "safety" layer (PROJECT)
    ctx.layer = layer or SAFETY_LAYER
    ctx.policy, ctx.override = explicit_policy(ctx.layer, policy), policy_override()


def _members_first(info, in_dims, tensors) -> list[Tensor]:
    """A custom Function's tensor inputs under torch.vmap as one batch: a
    batched input with its members' dimension first, its own dimensions
    right-aligned with the others' (ones put between), as broadcasting
    sees them per member; an unbatched one that carries a gradient expanded
    to every member (its gradient then the members' sum, as vmap's own rule
    adds them); the others as they are (broadcasting right-aligns them)."""
    rank = max(t.dim() - (d is not None) for t, d in zip(tensors, in_dims))
    out = []
    for t, d in zip(tensors, in_dims):
        if d is not None:
            t = t.movedim(d, 0)
            t = t.reshape(t.shape[0], *(1,) * (rank + 1 - t.dim()), *t.shape[1:])
        elif requires_grad(t) or _has_tangent(t):
            t = t.reshape(1, *(1,) * (rank - t.dim()), *t.shape).expand(
                info.batch_size, *(-1,) * rank)
        out.append(t)
    return out


class _Guarded(torch.autograd.Function):
    """y = value (computed by the caller from the guarded input); dy/dx =
    derivative(x or y), ``of_output`` saying which: computed in the backward
    and the jvp from the saved tensor, which carries its graph and tangent
    there, so the derivative is differentiable in turn (second order). The
    backward, and the forward-mode jvp, apply the layer's gradient policy at
    the bottom points."""

    @staticmethod
    def forward(x, value, derivative, of_output, bottom, layer, policy):
        # an input returned as it is cannot be saved (torch refuses): a copy
        return value.clone() if of_output else value

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, derivative, of_output, bottom, layer, policy = inputs
        ctx.derivative = derivative
        ctx.save_for_backward(output if of_output else x, bottom)
        ctx.save_for_forward(output if of_output else x, bottom)
        _remember(ctx, layer, policy)

    @staticmethod
    def backward(ctx, grad):
        source, bottom = ctx.saved_tensors
        return _policy(ctx, grad * ctx.derivative(source), bottom), None, None, None, None, \
            None, None

    @staticmethod
    def jvp(ctx, x_t, value_t, derivative_t, of_output_t, bottom_t, layer_t, policy_t):
        source, bottom = ctx.saved_tensors
        return _tangent_policy(ctx, x_t * ctx.derivative(source), bottom)

    @staticmethod
    def vmap(info, in_dims, x, value, derivative, of_output, bottom, layer, policy):
        """Under torch.vmap: once for every member (elementwise, so each
        member's values and gradients are its own op's), not vmap's
        generated rule, whose per-call overhead is most of an ensemble's."""
        x, value, bottom = _members_first(info, (in_dims[0], in_dims[1], in_dims[4]),
                                          (x, value, bottom))
        return _Guarded.apply(x, value, derivative, of_output, bottom, layer, policy), 0


class _CompiledGuarded(torch.autograd.Function):
    """:class:`_Guarded` as torch.compile traces it in a compiled step
    (pompy.core.compiled): no forward mode (no tangents there) and the
    policy decided in the forward pass (``chosen``, a policy's value), so
    AOT autograd can trace the backward."""

    @staticmethod
    def forward(x, value, derivative, bottom, chosen):
        return value

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, _, derivative, bottom, chosen = inputs
        ctx.save_for_backward(derivative, bottom)
        ctx.chosen = GradientPolicy(chosen)

    @staticmethod
    def backward(ctx, grad):
        derivative, bottom = ctx.saved_tensors
        return apply_policy(grad * derivative, bottom, policy=ctx.chosen), None, None, None, None


def _guarded(x: Tensor, value: Tensor, derivative, of_output: bool, bottom: Tensor,
             layer: str | None, policy: GradientPolicy | None) -> Tensor:
    """value with dvalue/dx = derivative(value if of_output else x)."""
    if torch.compiler.is_compiling():
        slope = derivative(value if of_output else x.detach())
        return _CompiledGuarded.apply(x, value, slope, bottom, _chosen(layer, policy))
    return _Guarded.apply(x, value, derivative, of_output, bottom, layer, policy)


def _chosen(layer: str | None, policy: GradientPolicy | None) -> str:
    return forward_policy(layer or SAFETY_LAYER, None if policy is None else policy.value)


def _has_tangent(x: Tensor) -> bool:
    """True for a forward-mode dual tensor (torch.autograd.forward_ad, or
    torch.func.jvp's inputs and everything computed from them)."""
    return forward_ad.unpack_dual(x).tangent is not None


def requires_grad(x: Tensor) -> bool:
    """x.requires_grad, also inside torch.vmap: a batched tensor says False
    whatever the tensor it wraps says, so ask the innermost one (else a
    safe op under vmap would drop its gradient: measured on an ensemble)."""
    while is_batchedtensor(x):
        x = get_unwrapped(x)
    return x.requires_grad


def _tracked(x: Tensor) -> bool:
    if torch.compiler.is_compiling():     # a compiled step: no tangent, no vmap
        return torch.is_grad_enabled() and x.requires_grad
    return (torch.is_grad_enabled() and requires_grad(x)) or _has_tangent(x)


def safe_sqrt(x: Tensor, eps: float = SAFE_SQRT_EPS, layer: str | None = None,
              policy: GradientPolicy | None = None) -> Tensor:
    """sqrt(x), correctly rounded as pom2k's; 0 where x <= 0 (pom2k takes
    no square root of a negative number; a rounding below zero is not one)."""
    if host(x):             # torch.clamp's min: -0.0 and NaN kept
        return sqrt_rn(np.where(x < 0.0, 0.0, x))
    value = sqrt_rn(torch.clamp(x.detach(), min=0.0))
    if not _tracked(x):
        return value
    # of the output: no second square root, and a clamp, not the singular x
    return _guarded(x, value, lambda y: 0.5 / torch.clamp(y, min=eps), True, value < eps,
                    layer, policy)


def safe_abs_pow(x: Tensor, exponent: float, eps: float = SAFE_SQRT_EPS,
                 layer: str | None = None, policy: GradientPolicy | None = None) -> Tensor:
    """|x|**exponent, as pom2k's abs(x)**exponent; for a negative exponent
    |x| is held at eps where it is smaller, so the value stays finite."""
    ax = torch.abs(x.detach())
    value = (torch.clamp(ax, min=eps) if exponent < 0 else ax) ** exponent
    if not _tracked(x):
        return value

    def derivative(x):
        return exponent * torch.clamp(torch.abs(x), min=eps) ** (exponent - 1.0) * torch.sign(x)
    return _guarded(x, value, derivative, False, ax < eps, layer, policy)


def safe_log(x: Tensor, eps: float = SAFE_LOG_EPS, layer: str | None = None,
             policy: GradientPolicy | None = None) -> Tensor:
    """log(x); log(eps) where x < eps."""
    xs = torch.clamp(x.detach(), min=eps)
    value = torch.log(xs)
    if not _tracked(x):
        return value
    return _guarded(x, value, lambda x: 1.0 / torch.clamp(x, min=eps), False, x.detach() < eps,
                    layer, policy)


class _Divide(torch.autograd.Function):
    """n/d, with d held at +-eps at the bottom points; both input gradients
    (and the tangent, in forward mode) go through the layer's gradient
    policy. The backward and the jvp use d and the quotient as saved, with
    their graph and tangent (second order), d held at +-eps (a constant)
    where it was in the forward pass."""

    @staticmethod
    def forward(n, d, held, eps, bottom, layer, policy):
        return n / held

    @staticmethod
    def setup_context(ctx, inputs, output):
        n, d, _, eps, bottom, layer, policy = inputs
        ctx.save_for_backward(d, output, bottom)
        ctx.save_for_forward(d, output, bottom)
        _remember(ctx, layer, policy)
        ctx.shapes, ctx.eps = (n.shape, d.shape), eps

    @staticmethod
    def backward(ctx, grad):
        held, quotient, bottom = _held(ctx)
        return *_quotient_grads(ctx, grad, held, quotient, bottom,
                                lambda g, bottom: _policy(ctx, g, bottom)), None, None, None, \
            None, None

    @staticmethod
    def jvp(ctx, n_t, d_t, held_t, eps_t, bottom_t, layer_t, policy_t):
        held, quotient, bottom = _held(ctx)
        tangent = torch.zeros_like(quotient)
        if n_t is not None:
            tangent = tangent + n_t / held
        if d_t is not None:
            tangent = tangent - d_t * quotient / held
        return _tangent_policy(ctx, tangent, bottom)

    @staticmethod
    def vmap(info, in_dims, n, d, held, eps, bottom, layer, policy):
        """Under torch.vmap: once for every member, as :meth:`_Guarded.vmap`."""
        n, d, held, bottom = _members_first(info, in_dims[:3] + in_dims[4:5],
                                            (n, d, held, bottom))
        return _Divide.apply(n, d, held, eps, bottom, layer, policy), 0


class _CompiledDivide(torch.autograd.Function):
    """:class:`_Divide` as a compiled step traces it (see :class:`_CompiledGuarded`)."""

    @staticmethod
    def forward(n, d, held, bottom, chosen):
        return n / held

    @staticmethod
    def setup_context(ctx, inputs, output):
        n, d, held, bottom, chosen = inputs
        ctx.save_for_backward(held, output, bottom)
        ctx.chosen = GradientPolicy(chosen)
        ctx.shapes = n.shape, d.shape

    @staticmethod
    def backward(ctx, grad):
        return *_quotient_grads(ctx, grad, *ctx.saved_tensors, lambda g, bottom: apply_policy(
            g, bottom, policy=ctx.chosen)), None, None, None


def _held(ctx) -> tuple[Tensor, Tensor, Tensor]:
    """(held, quotient, bottom) from _Divide's saved (d, quotient, bottom),
    with their graph but constant at the bottom points, as the derivatives
    there are (a second derivative 0; PASSTHROUGH's quotient would bring
    its own derivative in): held is d, or +-eps (d's sign) there, the bits
    of safe_divide's held."""
    d, quotient, bottom = ctx.saved_tensors
    held = torch.where(bottom, torch.full_like(d, ctx.eps).copysign(d), d)
    return held, torch.where(bottom, quotient.detach(), quotient), bottom


def _quotient_grads(ctx, grad: Tensor, held: Tensor, quotient: Tensor, bottom: Tensor,
                    policy) -> tuple[Tensor | None, Tensor | None]:
    """n/d's input gradients from (held, quotient, bottom), each through
    ``policy(g, bottom)`` and summed to its input's shape."""
    gn = gd = None
    if ctx.needs_input_grad[0]:
        gn = _sum_to(policy(grad / held, bottom), ctx.shapes[0])
    if ctx.needs_input_grad[1]:
        gd = _sum_to(policy(-grad * quotient / held, bottom), ctx.shapes[1])
    return gn, gd


def _sum_to(g: Tensor, shape: torch.Size) -> Tensor:
    """g summed over the dimensions broadcasting added to an input of ``shape``."""
    while g.dim() > len(shape):
        g = g.sum(0)
    for dim, size in enumerate(shape):
        if size == 1 and g.size(dim) != 1:
            g = g.sum(dim, keepdim=True)
    return g


# From this many elements (a 3-D field) an untracked safe_divide on the host
# first reads whether any |d| < eps: one pass where the guard takes three
_READ_FROM = 1 << 15


def _away_from_zero(d: Tensor, eps: float) -> bool:
    """Whether every |d| >= eps (d of one sign, none NaN), where safe_divide's
    held denominator is d itself, bit for bit."""
    lo, hi = torch.aminmax(d)
    return bool((lo >= eps) | (hi <= -eps))


def safe_divide(numerator: Tensor | float, denominator: Tensor, eps: float = SAFE_DIV_EPS,
                layer: str | None = None, policy: GradientPolicy | None = None) -> Tensor:
    """numerator/denominator, rounded once as pom2k's (a Python number over
    a tensor too); the denominator is held at +-eps where |d| < eps (outside
    autograd on the CPU a 3-D one is first read for any such point)."""
    if host(denominator):     # a host array (pompy.ops.host): the same bits
        held = np.copysign(np.maximum(np.abs(denominator), eps), denominator)
        return numerator / held
    raw = denominator.detach()
    if not torch.is_tensor(numerator):
        numerator = torch.full_like(raw, float(numerator))
    tracked = _tracked(numerator) or _tracked(denominator)
    if not tracked and raw.numel() >= _READ_FROM and raw.is_floating_point() and on_host(raw) \
            and _away_from_zero(raw, eps):
        return numerator / raw
    # d, or +-eps (d's sign) where |d| < eps: |d| raised to eps, then d's
    # sign, on one fresh tensor (a NaN stays NaN; 3 calls where a select
    # took 5, half the time of a 3-D safe_divide outside autograd)
    held = torch.abs(raw).clamp_min_(eps).copysign_(raw)      # clamp_min_: vmap has its rule
    if not tracked:
        return numerator / held
    bottom = torch.abs(raw) < eps
    if torch.compiler.is_compiling():
        return _CompiledDivide.apply(numerator, denominator, held, bottom, _chosen(layer, policy))
    return _Divide.apply(numerator, denominator, held, eps, bottom, layer, policy)


def safe_reciprocal(denominator: Tensor, eps: float = SAFE_DIV_EPS, layer: str | None = None,
                    policy: GradientPolicy | None = None) -> Tensor:
    """1/denominator, correctly rounded; 1/(+-eps) where |d| < eps."""
    return safe_divide(1.0, denominator, eps, layer, policy)
