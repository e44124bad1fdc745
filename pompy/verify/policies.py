"""The policy suite: each GradientPolicy at a bottom (guarded) and an
ordinary point of each safe op of pompy.utils.safety against the
derivative computed here independently; forward mode (jvp == vjp; CLAMP
refused); the precedence explicit > layer map > forward context >
backward context > registry > built-in > CLAMP, each level against every
other policy below it; context isolation across threads and asyncio
tasks. Tolerance: 1e-12 relative in float64, 1e-6 in float32.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.autograd import forward_ad

from pompy.verify.checks import Check, within, reported

POLICY_LAYER = "pompy_verify_layer"      # a layer with no built-in policy


def _safe_ops():
    """(name, op(x, **kw), ordinary point, bottom point, exact derivative at
    the ordinary point, derivative at the clamped input at the bottom
    point), the derivatives written out here from the calculus and the
    guards' eps, not taken from the ops."""
    from pompy.utils import safety as sf

    half = 0.5
    return [
        ("safe_sqrt", lambda x, **kw: sf.safe_sqrt(x, **kw), 1e-4, 0.0,
         half / math.sqrt(1e-4), half / sf.SAFE_SQRT_EPS),
        # |x|**0.5 at x < 0 (the sign), bottom where |x| < eps: derivative at |x| held at eps
        ("safe_abs_pow", lambda x, **kw: sf.safe_abs_pow(x, 0.5, **kw), -1e-4, 1e-9,
         -half * 1e-4 ** -half, half * sf.SAFE_SQRT_EPS ** -half),
        ("safe_log", lambda x, **kw: sf.safe_log(x, **kw), 0.02, 0.0,
         1 / 0.02, 1 / sf.SAFE_LOG_EPS),
        ("safe_reciprocal", lambda x, **kw: sf.safe_reciprocal(x, **kw), 0.2, 0.0,
         -1 / 0.2 ** 2, -1 / sf.SAFE_DIV_EPS ** 2),
        # n / d w.r.t. the numerator (d = 0.04 ordinary, 0 at the bottom)
        ("safe_divide numerator",
         lambda x, **kw: sf.safe_divide(x, _pair(x, 0.04, 0.0), **kw), 2.0, 2.0,
         1 / 0.04, 1 / sf.SAFE_DIV_EPS),
        # n / d w.r.t. the denominator (n = 2)
        ("safe_divide denominator", lambda x, **kw: sf.safe_divide(2.0, x, **kw), 0.2, 0.0,
         -2.0 / 0.2 ** 2, -2.0 / sf.SAFE_DIV_EPS ** 2),
    ]


def _pair(like, first: float, second: float):
    """[first, second] in like's dtype and device (the fixed other operand)."""
    return torch.tensor([first, second], dtype=like.dtype, device=like.device)


def _expected(policy, exact: float, clamped: float) -> tuple[float, float]:
    """The gradient of each policy at (ordinary, bottom) for an incoming 1."""
    from pompy.autodiff.policies import GradientPolicy as P

    return {P.PROJECT: (exact, 0.0), P.CLAMP: (max(-1.0, min(1.0, exact)), 0.0),
            P.REJECT: (0.0, 0.0), P.PASSTHROUGH: (exact, clamped)}[policy]


def _deviation(got, want, dtype) -> float:
    """Max relative deviation of got (a tensor) from want (float64 values,
    rounded to dtype first: an overflow there is an inf to match)."""
    want = torch.tensor(want, dtype=torch.float64).to(dtype).to(torch.float64)
    got = got.detach().to("cpu", torch.float64)
    worst = 0.0
    for g, w in zip(got.tolist(), want.tolist()):
        if math.isinf(w) or math.isinf(g) or math.isnan(g):
            worst = max(worst, 0.0 if g == w else math.inf)
        else:
            worst = max(worst, abs(g - w) / max(abs(w), 1e-300) if w != 0 else abs(g))
    return worst


def _grad(op, points, dtype, device, **kw):
    """d sum(op(x, **kw)) / dx at ``points`` (dtype, device)."""
    x = torch.tensor(points, dtype=dtype, device=device, requires_grad=True)
    (g,) = torch.autograd.grad(op(x, **kw).sum(), x)
    return g


def policy_suite(device, dtype, report: Callable[[Check], None]) -> list[Check]:
    """Every check of the suite (see the module docstring); the policy
    registry is left as it was."""
    from pompy.autodiff.policies import policy_registry_snapshot, restore_policy_registry

    rtol = 1e-12 if dtype == torch.float64 else 1e-6
    before = policy_registry_snapshot()
    try:
        return reported(_policy_checks(device, dtype, rtol), report)
    finally:
        restore_policy_registry(before)


def _policy_checks(device, dtype, rtol: float) -> Iterator[Check]:
    from pompy.autodiff.policies import GradientPolicy

    for name, op, ordinary, bottom, exact, clamped in _safe_ops():
        for policy in GradientPolicy:
            yield _policy_check(name, op, ordinary, bottom, policy,
                                _expected(policy, exact, clamped), device, dtype, rtol)
    yield _forward_mode_check(device, dtype, rtol)
    yield from _precedence_checks(device, dtype)
    yield from _isolation_checks(device, dtype)


def _policy_check(name: str, op, ordinary: float, bottom: float, policy, want, device, dtype,
                  rtol: float) -> Check:
    """``policy``'s gradient of safe op ``name`` at (ordinary, bottom) against ``want``."""
    try:
        got = _grad(op, [ordinary, bottom], dtype, device, policy=policy)
        figure = _deviation(got, want, dtype)
        detail = f"got {got.tolist()}, expected {list(want)} (ordinary, bottom)"
    except Exception as exc:
        figure, detail = math.inf, f"{type(exc).__name__}: {exc}"
    return Check("policies", _op_check_name(policy, name), figure, rtol, within(figure, rtol),
                 detail)


def _op_check_name(policy, op: str) -> str:
    return f"policy {policy.name} {op}"


def _level_check_name(i: int) -> str:
    return f"policy precedence: {LEVELS[i]} over {', '.join(LEVELS[i + 1:]) or 'built-in, CLAMP'}"


FORWARD_MODE = "policy forward mode (jvp == vjp; CLAMP refused)"
BUILTIN = "policy precedence: registry over built-in over CLAMP"
THREADS = "policy isolation across threads"
TASKS = "policy isolation across asyncio tasks"


def check_names() -> list[str]:
    """The names of the suite's checks, in its order (from its own tables)."""
    from pompy.autodiff.policies import GradientPolicy

    return [*(_op_check_name(policy, op[0]) for op in _safe_ops() for policy in GradientPolicy),
            FORWARD_MODE, *(_level_check_name(i) for i in range(len(LEVELS))), BUILTIN,
            THREADS, TASKS]


def _forward_mode_check(device, dtype, rtol) -> Check:
    """jvp == vjp for PROJECT, REJECT, PASSTHROUGH at both points of every
    safe op (elementwise: the tangent of ones is the gradient); CLAMP
    refused in forward mode."""
    from pompy.autodiff.policies import GradientPolicy as P

    worst, refused, problems = 0.0, 0, []
    for name, op, ordinary, bottom, _, _ in _safe_ops():
        for policy in (P.PROJECT, P.REJECT, P.PASSTHROUGH):
            reverse = _grad(op, [ordinary, bottom], dtype, device, policy=policy)
            x = torch.tensor([ordinary, bottom], dtype=dtype, device=device)
            with torch.no_grad(), forward_ad.dual_level():
                tangent = forward_ad.unpack_dual(
                    op(forward_ad.make_dual(x, torch.ones_like(x)), policy=policy)).tangent
            worst = max(worst, _deviation(tangent, reverse.double().cpu().tolist(), dtype))
        x = torch.tensor([ordinary, bottom], dtype=dtype, device=device)
        try:
            with torch.no_grad(), forward_ad.dual_level():
                op(forward_ad.make_dual(x, torch.ones_like(x)), policy=P.CLAMP)
            problems.append(f"{name}: CLAMP accepted in forward mode")
        except RuntimeError:
            refused += 1
    ok = within(worst, rtol) and not problems
    return Check("policies", FORWARD_MODE, worst, rtol, ok,
                 "; ".join(problems) or f"CLAMP refused by {refused} ops",
                 {"clamp_refused": refused})


# The probe: safe_sqrt at [1e-4, 0] gives a gradient that tells the four
# policies apart: CLAMP [1, 0], PROJECT [50, 0], REJECT [0, 0], PASSTHROUGH [50, 5e7].
PROBE = (1e-4, 0.0)
# the precedence's levels, highest first; ARGUMENT: a policy passed to the op
# itself (named "explicit" in the checks and the certificate), not a core
ARGUMENT = "explicit"
LEVELS = (ARGUMENT, "layer map", "forward context", "backward context", "registry")


def _probe_policy(grad) -> Any:
    from pompy.autodiff.policies import GradientPolicy as P

    g = grad.detach().to("cpu", torch.float64).tolist()
    for policy in P:
        if _deviation(torch.tensor(g), list(_expected(policy, 50.0, 5e7)), grad.dtype) <= 1e-6:
            return policy
    return None


def _probe(device, dtype, layer: str, set_levels: Mapping[str, Any]):
    """The policy the probe's gradient shows, with each level of
    ``set_levels`` (a LEVELS name -> policy) in force."""
    from pompy.autodiff.policies import (gradient_policy, layer_policies, policy_registry_snapshot,
                                         register_policy, restore_policy_registry)
    from pompy.utils.safety import safe_sqrt

    before = policy_registry_snapshot()
    try:
        if "registry" in set_levels:
            register_policy(layer, set_levels["registry"])
        stack = contextlib.ExitStack()
        with stack:
            if "layer map" in set_levels:
                stack.enter_context(layer_policies({layer: set_levels["layer map"]}))
            if "forward context" in set_levels:
                stack.enter_context(gradient_policy(set_levels["forward context"]))
            x = torch.tensor(PROBE, dtype=dtype, device=device, requires_grad=True)
            y = safe_sqrt(x, layer=layer, policy=set_levels.get(ARGUMENT)).sum()
        backward = set_levels.get("backward context")
        with gradient_policy(backward) if backward is not None else contextlib.nullcontext():
            (g,) = torch.autograd.grad(y, x)
        return _probe_policy(g)
    finally:
        restore_policy_registry(before)


def _precedence_checks(device, dtype) -> list[Check]:
    """Each level of the precedence against every other policy at every
    level below it (higher levels unset): the level's policy must win.

    On CUDA autograd runs the backward of CUDA tensors on its own device
    thread, which pompy.autodiff.policies ("Forward and backward pass")
    documents as not seeing a context opened around the backward alone:
    there the backward context may win or lose to the level below it (the
    registry); either is accepted and the certificate records which
    (``reached_the_device``). Any other outcome fails. (Not yet run on a
    GPU here.)"""
    return [*(_level_check(device, dtype, i) for i in range(len(LEVELS))),
            _builtin_check(device, dtype)]


def _level_check(device, dtype, i: int) -> Check:
    """LEVELS[i]'s policy against every other policy at every level below it."""
    from pompy.autodiff.policies import GradientPolicy as P

    cuda = torch.device(device).type == "cuda"
    level = LEVELS[i]
    wrong, reached = [], []
    trials = 0
    for winner in P:
        for loser in P:
            if winner is loser:
                continue
            levels = {level: winner, **{below: loser for below in LEVELS[i + 1:]}}
            allowed = {winner}
            if cuda and level == "backward context":
                allowed.add(loser)
            got = _probe(device, dtype, POLICY_LAYER, levels)
            trials += 1
            reached.append(got is winner)
            if got not in allowed:
                wrong.append(f"{level}={winner.name} over {loser.name}: "
                             f"{got.name if got else 'none'}")
    measured = {"combinations": trials}
    if cuda and level == "backward context":
        measured["reached_the_device"] = (all(reached) if all(reached) or not any(reached)
                                          else "sometimes")
    return Check("policies", _level_check_name(i), float(len(wrong)), 0.0,
                 not wrong, "; ".join(wrong[:4]) or f"{trials} combinations", measured)


def _builtin_check(device, dtype) -> Check:
    """The last two levels: a layer's built-in policy (smagorinsky: PROJECT)
    when nothing else is set, CLAMP for a layer without one."""
    from pompy.autodiff.policies import GradientPolicy as P

    wrong = []
    got = _probe(device, dtype, "smagorinsky", {})
    if got is not P.PROJECT:
        wrong.append(f"built-in smagorinsky: {got}")
    for winner in (P.CLAMP, P.REJECT, P.PASSTHROUGH):
        got = _probe(device, dtype, "smagorinsky", {"registry": winner})
        if got is not winner:
            wrong.append(f"registry {winner.name} over built-in PROJECT: {got}")
    got = _probe(device, dtype, POLICY_LAYER, {})
    if got is not P.CLAMP:
        wrong.append(f"no policy anywhere: {got}, not CLAMP")
    return Check("policies", BUILTIN,
                 float(len(wrong)), 0.0, not wrong, "; ".join(wrong) or "5 combinations")


def _isolation_checks(device, dtype) -> list[Check]:
    """The gradient_policy context is context-local: two threads each in
    its own context, forward and backward interleaved (a barrier between
    them), each get their own policy; a new thread sees none of its
    parent's (CLAMP for a layer without a default); asyncio tasks inherit
    the context at creation and then keep their own, overlapping tasks
    included."""
    return [_thread_isolation(device, dtype), _asyncio_isolation(device, dtype)]


def _probe_forward(device, dtype):
    """(x, y): the probe's forward, y = sum(safe_sqrt(x)) in a layer with no policy."""
    from pompy.utils.safety import safe_sqrt

    x = torch.tensor(PROBE, dtype=dtype, device=device, requires_grad=True)
    return x, safe_sqrt(x, layer=POLICY_LAYER).sum()


def _thread_isolation(device, dtype) -> Check:
    from pompy.autodiff.policies import GradientPolicy as P
    from pompy.autodiff.policies import gradient_policy, policy_override

    wrong = []
    barrier = threading.Barrier(2, timeout=60)
    seen: dict[str, Any] = {}

    def worker(policy):
        try:
            with gradient_policy(policy):
                barrier.wait()
                x, y = _probe_forward(device, dtype)
                barrier.wait()                          # both forwards done, under their own
                (g,) = torch.autograd.grad(y, x)
                barrier.wait()
            seen[policy.name] = _probe_policy(g)
        except Exception as exc:                        # reported below
            seen[policy.name] = exc

    def plain():
        x, y = _probe_forward(device, dtype)
        (g,) = torch.autograd.grad(y, x)
        seen["new thread"] = (policy_override(), _probe_policy(g))

    with gradient_policy(P.REJECT):
        threads = [threading.Thread(target=worker, args=(p,)) for p in (P.PROJECT, P.PASSTHROUGH)]
        threads.append(threading.Thread(target=plain))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if policy_override() is not P.REJECT:
            wrong.append(f"the main thread's override changed to {policy_override()}")
    for policy in (P.PROJECT, P.PASSTHROUGH):
        if seen.get(policy.name) is not policy:
            wrong.append(f"thread in {policy.name}: {seen.get(policy.name)}")
    if seen.get("new thread") != (None, P.CLAMP):
        wrong.append(f"a new thread under the parent's REJECT saw {seen.get('new thread')}")
    return Check("policies", THREADS, float(len(wrong)), 0.0,
                 not wrong, "; ".join(wrong) or "3 threads")


def _asyncio_isolation(device, dtype) -> Check:
    from pompy.autodiff.policies import GradientPolicy as P
    from pompy.autodiff.policies import gradient_policy, policy_override

    async def main():
        got = {}
        child_may_look = asyncio.Event()

        async def child():
            got["child at start"] = policy_override()
            await child_may_look.wait()
            got["child after parent changed"] = policy_override()

        async def task(policy):
            with gradient_policy(policy):
                x, y = _probe_forward(device, dtype)
                for _ in range(3):
                    await asyncio.sleep(0)              # the other task runs in between
                (g,) = torch.autograd.grad(y, x)
                got[f"task {policy.name}"] = _probe_policy(g)

        with gradient_policy(P.PROJECT):
            spawned = asyncio.create_task(child())
            await asyncio.sleep(0)
        with gradient_policy(P.PASSTHROUGH):
            child_may_look.set()
            await spawned
            got["parent"] = policy_override()
        await asyncio.gather(task(P.REJECT), task(P.CLAMP), task(P.PROJECT))
        got["parent after"] = policy_override()
        return got

    want = {"child at start": P.PROJECT, "child after parent changed": P.PROJECT,
            "parent": P.PASSTHROUGH, "task REJECT": P.REJECT, "task CLAMP": P.CLAMP,
            "task PROJECT": P.PROJECT, "parent after": None}
    try:
        got = asyncio.run(main())
        wrong = [f"{k}: {got.get(k)} (expected {v})" for k, v in want.items() if got.get(k) is not v]
    except Exception as exc:
        wrong = [f"{type(exc).__name__}: {exc}"]
    return Check("policies", TASKS, float(len(wrong)), 0.0,
                 not wrong, "; ".join(wrong) or f"{len(want)} observations")
