"""Gradient-safe elementary operations: safe_divide, safe_sqrt, safe_abs_pow,
safe_log, safe_reciprocal, with the seed's eps constants.

pompy's versions keep pom2k's forward values: wherever pom2k's operation
is defined (a positive depth, a non-negative square-root argument, ...)
the value is pom2k's to the last bit, so the oracle comparisons hold.
What they add is a guard and a backward:

- the guard marks the points where the operation is singular or its
  derivative unbounded: the bottom value, written ⊥ in the seed
  "Gradient Policies". There the forward value is made finite (the input
  is clamped to eps), and the derivative is evaluated at the clamped
  input, never at the singular one: a torch.where on the output alone
  would still send NaN back from the branch not taken (0 * inf);
- the backward multiplies the incoming gradient by the derivative and hands
  the result, with the guard's mask, to pompy.autodiff.policies.apply_policy,
  which applies the policy selected for the op's ``layer`` (the model
  routine's name: "smagorinsky", "profq", "bottom_drag", "dens", ...;
  "safety" when none is given). Every op takes ``policy=``, the explicit
  level of the seed's precedence: it wins over a surrounding
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
  linear and allowed. Second derivatives are refused (once_differentiable).

Guards (eps as in the seed):

    safe_sqrt(x)          ⊥ where sqrt(x) < SAFE_SQRT_EPS (x < 1e-16): the
                          derivative 1/(2 sqrt x) stays below 5e7
    safe_abs_pow(x, p)    ⊥ where |x| < SAFE_SQRT_EPS
    safe_log(x)           ⊥ where x < SAFE_LOG_EPS
    safe_divide(n, d)     ⊥ where |d| < SAFE_DIV_EPS
    safe_reciprocal(d)    ⊥ where |d| < SAFE_DIV_EPS
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch._C._functorch import get_unwrapped, is_batchedtensor   # torch.vmap's wrappers
from torch.autograd import forward_ad
from torch.autograd.function import once_differentiable

from pompy.autodiff.layers import SAFETY_LAYER
from pompy.autodiff.policies import (GradientPolicy, apply_policy, explicit_policy,
                                     forward_policy, policy_override, selected_policy)
from pompy.ops import sqrt_rn

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
    product grad*derivative, which no tangent reproduces: refused."""
    chosen = selected_policy(ctx.layer, ctx.policy or ctx.override)
    if chosen is GradientPolicy.CLAMP:
        raise RuntimeError(
            f"pompy: forward-mode AD is not defined under the CLAMP gradient policy (layer "
            f"{ctx.layer!r}): CLAMP clips reverse-mode products, which no tangent can reproduce; "
            "use PROJECT, REJECT or PASSTHROUGH (policy=, gradient_policy() or register_policy)")
    return apply_policy(tangent, bottom, policy=chosen)


def _remember(ctx, layer: str | None, policy: GradientPolicy | None) -> None:
    # a safe op called without a layer belongs to the "safety" layer (PROJECT)
    ctx.layer = layer or SAFETY_LAYER
    ctx.policy, ctx.override = explicit_policy(ctx.layer, policy), policy_override()


class _Guarded(torch.autograd.Function):
    """y = value; dy/dx = derivative (both computed by the caller from the
    guarded input); the backward, and the forward-mode jvp, apply the
    layer's gradient policy at the bottom points."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, value, derivative, bottom, layer, policy):
        return value

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, _, derivative, bottom, layer, policy = inputs
        ctx.save_for_backward(derivative, bottom)
        ctx.save_for_forward(derivative, bottom)
        _remember(ctx, layer, policy)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        derivative, bottom = ctx.saved_tensors
        return _policy(ctx, grad * derivative, bottom), None, None, None, None, None

    @staticmethod
    def jvp(ctx, x_t, value_t, derivative_t, bottom_t, layer_t, policy_t):
        derivative, bottom = ctx.saved_tensors
        return _tangent_policy(ctx, x_t * derivative, bottom)


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


def _guarded(x: Tensor, value: Tensor, derivative: Tensor, bottom: Tensor, layer: str | None,
             policy: GradientPolicy | None) -> Tensor:
    if torch.compiler.is_compiling():
        return _CompiledGuarded.apply(x, value, derivative, bottom, _chosen(layer, policy))
    return _Guarded.apply(x, value, derivative, bottom, layer, policy)


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
    value = sqrt_rn(torch.clamp(x.detach(), min=0.0))
    if not _tracked(x):
        return value
    return _guarded(x, value, 0.5 / torch.clamp(value, min=eps), value < eps, layer, policy)


def safe_abs_pow(x: Tensor, exponent: float, eps: float = SAFE_SQRT_EPS,
                 layer: str | None = None, policy: GradientPolicy | None = None) -> Tensor:
    """|x|**exponent, as pom2k's abs(x)**exponent; for a negative exponent
    |x| is held at eps where it is smaller, so the value stays finite."""
    ax = torch.abs(x.detach())
    value = (torch.clamp(ax, min=eps) if exponent < 0 else ax) ** exponent
    if not _tracked(x):
        return value
    derivative = exponent * torch.clamp(ax, min=eps) ** (exponent - 1.0) * torch.sign(x.detach())
    return _guarded(x, value, derivative, ax < eps, layer, policy)


def safe_log(x: Tensor, eps: float = SAFE_LOG_EPS, layer: str | None = None,
             policy: GradientPolicy | None = None) -> Tensor:
    """log(x); log(eps) where x < eps."""
    xs = torch.clamp(x.detach(), min=eps)
    value = torch.log(xs)
    if not _tracked(x):
        return value
    return _guarded(x, value, 1.0 / xs, x.detach() < eps, layer, policy)


class _Divide(torch.autograd.Function):
    """n/d, with d held at +-eps at the bottom points; both input gradients
    (and the tangent, in forward mode) go through the layer's gradient
    policy."""

    generate_vmap_rule = True

    @staticmethod
    def forward(n, d, held, bottom, layer, policy):
        return n / held

    @staticmethod
    def setup_context(ctx, inputs, output):
        n, d, held, bottom, layer, policy = inputs
        ctx.save_for_backward(held, output, bottom)
        ctx.save_for_forward(held, output, bottom)
        _remember(ctx, layer, policy)
        ctx.shapes = n.shape, d.shape

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return *_quotient_grads(ctx, grad, lambda g, bottom: _policy(ctx, g, bottom)), \
            None, None, None, None

    @staticmethod
    def jvp(ctx, n_t, d_t, held_t, bottom_t, layer_t, policy_t):
        held, quotient, bottom = ctx.saved_tensors
        tangent = torch.zeros_like(quotient)
        if n_t is not None:
            tangent = tangent + n_t / held
        if d_t is not None:
            tangent = tangent - d_t * quotient / held
        return _tangent_policy(ctx, tangent, bottom)


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
        return *_quotient_grads(ctx, grad, lambda g, bottom: apply_policy(
            g, bottom, policy=ctx.chosen)), None, None, None


def _quotient_grads(ctx, grad: Tensor, policy) -> tuple[Tensor | None, Tensor | None]:
    """n/d's input gradients from the saved (held, quotient, bottom), each
    through ``policy(g, bottom)`` and summed to its input's shape."""
    held, quotient, bottom = ctx.saved_tensors
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


def safe_divide(numerator: Tensor | float, denominator: Tensor, eps: float = SAFE_DIV_EPS,
                layer: str | None = None, policy: GradientPolicy | None = None) -> Tensor:
    """numerator/denominator, rounded once as pom2k's (a Python number over
    a tensor too); the denominator is held at +-eps where |d| < eps."""
    raw = denominator.detach()
    # d, or +-eps (d's sign) where |d| < eps: |d| raised to eps, then d's
    # sign, on one fresh tensor (a NaN stays NaN; 3 calls where a select
    # took 5, half the time of a 3-D safe_divide outside autograd)
    held = torch.abs(raw).clamp_min_(eps).copysign_(raw)      # clamp_min_: vmap has its rule
    if not torch.is_tensor(numerator):
        numerator = torch.full_like(raw, float(numerator))
    if not (_tracked(numerator) or _tracked(denominator)):
        return numerator / held
    bottom = torch.abs(raw) < eps
    if torch.compiler.is_compiling():
        return _CompiledDivide.apply(numerator, denominator, held, bottom, _chosen(layer, policy))
    return _Divide.apply(numerator, denominator, held, bottom, layer, policy)


def safe_reciprocal(denominator: Tensor, eps: float = SAFE_DIV_EPS, layer: str | None = None,
                    policy: GradientPolicy | None = None) -> Tensor:
    """1/denominator, correctly rounded; 1/(+-eps) where |d| < eps."""
    return safe_divide(1.0, denominator, eps, layer, policy)
