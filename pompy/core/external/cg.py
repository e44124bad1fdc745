"""Conjugate gradients for the implicit free surface's elevation equation.

The operator is a symmetric five-point stencil on the (i, j) grid
(:class:`FivePoint`): on the active cells (the unknowns)

    (A x)(i,j) = diag(i,j) x(i,j) - cx(i,j) x(i-1,j) - cx(i+1,j) x(i+1,j)
                                  - cy(i,j) x(i,j-1) - cy(i,j+1) x(i,j+1)

with cx(i,j) the coefficient of the face between cells i-1 and i (as dum
sits on it) and cy(i,j) that between j-1 and j; faces that do not join two
active cells carry 0. Elsewhere A is the identity (x = b). With diag >
cx + cx(i+1) + cy + cy(j+1) and c >= 0 it is symmetric positive definite.

Two solvers, both to the relative residual ``tol`` (|b - A x| <= tol |b|):

- :func:`solve` (the reference): plain CG with a fixed iteration budget,
  every entry frozen by masks once converged, so nothing is read on the
  host and no Python branch depends on a value (torch.vmap batches it;
  the Fortran twin's cg_solve is its algorithm).
- :func:`pcg` (accelerated): preconditioned CG that stops when the
  residual, read on the host every ``check_every`` iterations, is small
  enough. Its preconditioner (namelist ``preconditioner``): "jacobi", the
  diagonal's inverse, or "multigrid", a V-cycle
  (pompy.core.external.multigrid) whose iterations do not grow with the
  grid.

Under torch.vmap (an ensemble's members) both run batched, each member's
solution, residual and iterations those of its own solve to the last bit:
the reference CG as it is, the PCG by :func:`pcg_members` (its iterations
batched, every member's residual read at once, a member that has converged
frozen where its own solve stops).

Both return the true relative residual |b - A x|/|b| recomputed from x,
which the core checks against cg_tol (one host read per step, with the
velocity check). Rounding drifts the recurrence's residual from the true
one near tol: a PCG whose recurrence met tol while the true residual did
not goes on to tol, or to the true residual's floating-point floor, where
it stops (STALL_CHECKS) and passes within FLOOR_FACTOR x tol
(:func:`accepted`). Either is differentiable by implicit differentiation
(:class:`_Solve`): the backward pass is one more solve with the same
(symmetric) operator and preconditioner, A lambda = dL/dx, and gives dL/db = lambda,
dL/ddiag = -lambda x, dL/dcx(i) = lambda(i) x(i-1) + lambda(i-1) x(i)
(likewise cy), so its memory does not grow with the iteration count;
forward mode likewise (x' = A^-1 (b' - A' x)). These solves check their
residual as the forward one does: one that stops short raises
NotConverged naming it.

:func:`solve_auto`, the core's: the PCG, under gradients or not and under
torch.func transforms, the reference CG inside pompy.compat.fortran_math();
:func:`solve_counted` the same with its iterations (the output's
cg_iterations).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
from torch.autograd import forward_ad

from pompy import compat
from pompy.core.external import multigrid
from pompy.core.external.stencil import FivePoint, Interior, apply, apply_interior, interior_of
from pompy.errors import NotConverged
from pompy.ops import xm, ym
from pompy.utils.safety import requires_grad

# what gradients through the core's elevation solve go through (solve_auto),
# by the namelist's preconditioner: a verification certificate's key names it
GRADIENT_SOLVERS = {"jacobi": "Jacobi PCG, implicitly differentiated",
                    "multigrid": "multigrid PCG, implicitly differentiated"}

# the PCG's preconditioners (namelist ``preconditioner``), each with its
# iterations between host reads of the residual: Jacobi's are cheap (a
# read every one would cost more than it saves), a V-cycle is not, and
# it converges in some 15 (one read each stops it at the first that may)
CHECK_EVERY = {"jacobi": 8, "multigrid": 1}
PRECONDITIONERS = tuple(CHECK_EVERY)

# the residual's slack over cg_tol (the solves stop on |r|^2 <= tol^2 |b|^2,
# and |r|/|b| may round a few ulps past tol; the Fortran twin's the same)
SLACK = 1.0 + 1e-9

# A PCG whose recurrence's residual met tol while the true residual did
# not (rounding drifts the two apart near tol: measured a true 1.005e-12
# at the recurrence's 9.99e-13 on step 10 of the 65x49x21 seamount at dti
# 600 s, mode 4, and a true 1.0006e-12 once in a day at dti 390 s, mode 3)
# goes on, reading the true residual every check_every iterations, until
# it meets tol or stops falling: STALL_CHECKS reads in a row with no fall
# below STALL_FALL times its value at the last fall (24 Jacobi iterations,
# 3 V-cycles). It has then reached the floor of the arithmetic on that
# system (measured in float64 at dti 600 s: Jacobi 6e-14 to 1.7e-13,
# multigrid 1.4e-14 to 3.1e-14, on seamount grids from 65x49 to 720x480;
# in float32 1 to 300 times eps), which more iterations cannot lower.
STALL_CHECKS = 3
STALL_FALL = 0.9
# A solve stopped so, at its floor, passes within FLOOR_FACTOR x tol: its
# solution is as good as the arithmetic makes it, and a looser solve moves
# little (measured: every step of a day at cg_tol 1e-11 rather than 1e-12
# moves the 65x49x21 seamount's fields by 1.7e-11 (el) to 5.2e-10 (w),
# relative L2, at dti 600 s, mode 4; docs/implicit-core.md). Further out
# the step stops, its NotConverged saying to raise cg_tol (or to use the
# multigrid preconditioner, whose floor is lower).
FLOOR_FACTOR = 10.0


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum()


def _member_dots(a: Tensor, b: Tensor) -> Tensor:
    """Each member's :func:`_dot` (a leading dimension), shaped (B, 1, 1)
    to scale its fields: the reduction torch.vmap makes of _dot, bit for
    bit each member's own."""
    return (a * b).sum((-2, -1), keepdim=True)


def _true_residual(v: Interior, b: Tensor, x: Tensor, scale: Tensor, dot=_dot) -> Tensor:
    """|b - A x| / |b| recomputed from x: the recurrence's residual drifts
    from it by rounding (measured: float32 reported 1e-13 where the true
    one was 2e-6; float64 at cg_tol 1e-17, 7e-18 against 1.3e-14), so the
    solves report this one, which no tolerance below the arithmetic's
    floor can pass."""
    r = b - apply_interior(v, x)
    return torch.sqrt(dot(r, r) / scale)


def _cg(a: FivePoint, b: Tensor, tol: float, maxiter: int, x: Tensor | None = None
        ) -> tuple[Tensor, Tensor]:
    """Fixed-budget CG with converged entries frozen: (x, the true
    |b - A x|/|b|)."""
    x = torch.zeros_like(b) if x is None else x
    v = interior_of(a)
    r = b - apply_interior(v, x)
    p = r
    rr = _dot(r, r)
    bb = _dot(b, b)
    limit = (tol * tol) * torch.where(bb > 0, bb, torch.ones_like(bb))
    one = torch.ones_like(rr)
    for _ in range(maxiter):
        going = rr > limit
        ap = apply_interior(v, p)
        pap = _dot(p, ap)
        alpha = torch.where(going, rr / torch.where(pap != 0, pap, one), 0 * one)
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = _dot(r, r)
        beta = torch.where(going, rr_new / torch.where(rr != 0, rr, one), 0 * one)
        p = torch.where(going, r + beta * p, p)
        rr = torch.where(going, rr_new, rr)
    return x, _true_residual(v, b, x, torch.where(bb > 0, bb, one))


def _face_grads(lam: Tensor, x: Tensor, active: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """dL/ddiag, dL/dcx, dL/dcy for A x = b and the adjoint lam."""
    lam = torch.where(active, lam, torch.zeros_like(lam))
    gdiag = -lam * x
    gcx = lam * xm(x) + xm(lam) * x
    gcy = lam * ym(x) + ym(lam) * x
    return gdiag, gcx, gcy


def _solved(a: FivePoint, b: Tensor, tol: float, maxiter: int, accelerated: bool,
            preconditioner: str, members: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(x, true relative residual, iterations) by the PCG with
    ``preconditioner`` (``accelerated``) or the reference CG (its fixed
    budget: maxiter); of each member (a's and b's leading dimension) where
    ``members``."""
    if accelerated and members:
        return pcg_members(a, b, tol, maxiter, preconditioner=preconditioner)
    if accelerated:
        x, residual, done = pcg(a, b, tol, maxiter, preconditioner=preconditioner)
        return x, residual, torch.full_like(residual, done)
    x, residual = _each(lambda a, b: _cg(a, b, tol, maxiter), members)(a, b)
    return x, residual, torch.full_like(residual, maxiter)


def _each(fn: Callable, members: bool) -> Callable:
    """``fn`` of one system, over the members (leading dimension) where ``members``."""
    return torch.vmap(fn) if members else fn


def accepted(residual, iterations, tol: float, maxiter: int):
    """Whether a solve's true relative residual passes: within tol (and
    SLACK), or within FLOOR_FACTOR x tol where the solve stopped at its
    floating-point floor, before maxiter (the PCG stops short of maxiter
    only at tol or at its floor; the reference CG runs all of them, a
    solve whose iterations are not known (NaN) is neither). Floats, or
    tensors (elementwise, no host read)."""
    return (residual <= tol * SLACK) | ((iterations < maxiter) & (residual <= FLOOR_FACTOR * tol))


def _under_vmap() -> bool:
    """Whether a torch.vmap (torch.func.vmap, jacfwd, jacrev, hessian) is
    about: its batched values cannot be read on the host."""
    return any(i.key() == TransformType.Vmap for i in retrieve_all_functorch_interpreters())


def _checked(x: Tensor, residual: Tensor, iterations: Tensor, rhs: Tensor, tol: float,
             maxiter: int, preconditioner: str | None, solve: str) -> Tensor:
    """x, once its solve (each member's: ``residual`` and ``iterations``
    (B,)) is known to pass (:func:`accepted`): NotConverged naming the solve
    otherwise (unless that right-hand side ``rhs`` is not finite: a NaN
    loss's gradient, whose NaN goes on for the caller to see). Under
    torch.vmap (torch.func.vmap, jacfwd, hessian) the residual cannot be
    read on the host: a short solve's x is NaN there, which the time loop's
    finiteness check or the loss reports."""
    if _under_vmap():
        return torch.where(accepted(residual, iterations, tol, maxiter), x,
                           torch.full_like(x, float("nan")))
    values = residual.reshape(-1).tolist()
    counts = iterations.reshape(-1).tolist()
    finite = torch.isfinite(rhs.reshape(len(values), -1)).all(1).tolist()
    short = next(((v, n) for v, n, f in zip(values, counts, finite)
                  if not accepted(v, n, tol, maxiter) and f), None)
    if short is not None:
        raise NotConverged(None, short[0], tol, maxiter, solve=solve,
                           iterations=int(short[1]) if math.isfinite(short[1]) else None,
                           floor_factor=FLOOR_FACTOR, preconditioner=preconditioner)
    return x


class _Solve(torch.autograd.Function):
    """(x = A^-1 b, its residual, the iterations) by a CG (the PCG with
    ``preconditioner`` where ``accelerated``, else the fixed-budget
    reference), differentiated implicitly: the adjoint and tangent solves
    are the same CG (preconditioner and all) to the same tol, their
    residuals checked. With create_graph the adjoint is itself a _Solve, so
    second derivatives are implicit too. ``members``: the inputs' leading
    dimension is an ensemble's members, each solved as its own system (the
    vmap rule's)."""

    @staticmethod
    def forward(diag, cx, cy, active, b, tol, maxiter, accelerated, preconditioner, members):
        return _solved(FivePoint(diag, cx, cy, active), b, tol, maxiter, accelerated,
                       preconditioner, members)

    @staticmethod
    def setup_context(ctx, inputs, output):
        diag, cx, cy, active, b, tol, maxiter, accelerated, preconditioner, members = inputs
        x, _, _ = output
        ctx.save_for_backward(diag, cx, cy, active, x)
        ctx.save_for_forward(diag, cx, cy, active, x)
        ctx.tol, ctx.maxiter, ctx.accelerated = tol, maxiter, accelerated
        ctx.preconditioner, ctx.members = preconditioner, members
        ctx.mark_non_differentiable(output[1], output[2])

    @staticmethod
    def vmap(info, in_dims, diag, cx, cy, active, b, tol, maxiter, accelerated, preconditioner,
             members):
        """Under torch.vmap: every member's system at once (members=True),
        the PCG's host reads made for all of them (pcg_members), which a
        vmapped forward could not."""
        if members:
            raise NotImplementedError("the elevation solve under two levels of torch.vmap")
        tensors = [t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)
                   for t, d in zip((diag, cx, cy, active, b), in_dims[:5])]
        return _Solve.apply(*tensors, tol, maxiter, accelerated, preconditioner, True), (0, 0, 0)

    @staticmethod
    def derivative_solve(ctx, a: FivePoint, rhs: Tensor, solve: str) -> Tensor:
        if torch.is_grad_enabled():                 # create_graph: differentiable again
            x, residual, iterations = _Solve.apply(*a, rhs, ctx.tol, ctx.maxiter,
                                                   ctx.accelerated, ctx.preconditioner,
                                                   ctx.members)
        else:
            x, residual, iterations = _solved(a, rhs, ctx.tol, ctx.maxiter, ctx.accelerated,
                                              ctx.preconditioner, ctx.members)
        return _checked(x, residual, iterations, rhs, ctx.tol, ctx.maxiter,
                        ctx.preconditioner if ctx.accelerated else None, solve)

    @staticmethod
    def backward(ctx, grad_x, grad_res, grad_iterations):
        diag, cx, cy, active, x = ctx.saved_tensors
        a = FivePoint(diag, cx, cy, active)
        # A symmetric: A^T = A
        lam = _Solve.derivative_solve(ctx, a, grad_x, "adjoint elevation solve (backward pass)")
        gdiag, gcx, gcy = _each(_face_grads, ctx.members)(lam, x, active)
        return gdiag, gcx, gcy, None, lam, None, None, None, None, None

    @staticmethod
    def jvp(ctx, diag_t, cx_t, cy_t, active_t, b_t, tol_t, maxiter_t, accelerated_t,
            preconditioner_t, members_t):
        diag, cx, cy, active, x = ctx.saved_tensors
        zero = torch.zeros_like(x)
        tangent_a = FivePoint(zero if diag_t is None else diag_t, zero if cx_t is None else cx_t,
                              zero if cy_t is None else cy_t, active)
        rhs = (zero if b_t is None else b_t) - torch.where(
            active, _each(apply, ctx.members)(tangent_a, x), zero)
        x_t = _Solve.derivative_solve(ctx, FivePoint(diag, cx, cy, active), rhs,
                                      "tangent elevation solve (forward mode)")
        return x_t, None, None


def solve(a: FivePoint, b: Tensor, tol: float, maxiter: int) -> tuple[Tensor, Tensor]:
    """The reference CG: (x, relative residual), differentiable in diag, cx,
    cy and b (module docstring)."""
    x, residual, _ = _Solve.apply(a.diag, a.cx, a.cy, a.active, b, tol, maxiter, False, "jacobi",
                                  False)
    return x, residual


def _preconditioner(a: FivePoint, preconditioner: str) -> Callable[[Tensor], Tensor]:
    """r -> M r, M the preconditioner's approximation of A^-1."""
    if preconditioner == "multigrid":
        return multigrid.Multigrid(a)
    if preconditioner != "jacobi":
        raise ValueError(f"preconditioner {preconditioner!r}: one of {PRECONDITIONERS}")
    inverse = torch.where(a.active, 1.0 / a.diag, torch.ones_like(a.diag))
    return lambda r: inverse * r


def pcg(a: FivePoint, b: Tensor, tol: float, maxiter: int, check_every: int | None = None,
        preconditioner: str = "jacobi") -> tuple[Tensor, Tensor, int]:
    """Preconditioned CG with early exit (no gradients): (x, the true
    relative residual, iterations). The recurrence's residual is read on
    the host every ``check_every`` iterations (default: the
    preconditioner's, CHECK_EVERY); once it meets tol, the true residual
    once: one that does not goes on to tol or to its floor
    (:func:`_to_floor`)."""
    if check_every is None:
        check_every = CHECK_EVERY[preconditioner]
    with torch.no_grad():
        precondition = _preconditioner(a, preconditioner)
        v = interior_of(a)
        state = _pcg_start(precondition, b)
        bb = float(_dot(b, b)) or 1.0
        limit = tol * tol * bb
        done = 0
        while done < maxiter:
            n = min(check_every, maxiter - done)
            state = _pcg_iterations(v, precondition, *state, n)
            done += n
            if float(_dot(state[1], state[1])) <= limit:
                break
        scale = torch.as_tensor(bb, dtype=b.dtype, device=b.device)
        residual = _true_residual(v, b, state[0], scale)
        if done < maxiter and not float(residual) <= tol * SLACK:
            return _to_floor(v, precondition, b, scale, state, residual, tol, maxiter, done,
                             check_every)
        return state[0], residual, done


def _to_floor(v: Interior, precondition: Callable[[Tensor], Tensor], b: Tensor, scale: Tensor,
              state: tuple[Tensor, ...], residual: Tensor, tol: float, maxiter: int, done: int,
              check_every: int) -> tuple[Tensor, Tensor, int]:
    """The PCG on from ``state`` after ``done`` iterations, where its
    recurrence met tol and its true residual ``residual`` did not: the true
    residual read every ``check_every`` iterations until it meets tol, or
    stops falling (STALL_CHECKS reads without a fall below STALL_FALL times
    its value at the last fall: its floor), or maxiter comes. (The x of the
    least true residual read, that residual, the iterations run.)"""
    best_x, best, least = state[0], residual, float(residual)
    mark, still = least, 0
    while done < maxiter:
        n = min(check_every, maxiter - done)
        state = _pcg_iterations(v, precondition, *state, n)
        done += n
        r = _true_residual(v, b, state[0], scale)
        value = float(r)
        if value < least:
            best_x, best, least = state[0], r, value
        if least <= tol * SLACK:
            break
        if value <= STALL_FALL * mark:
            mark, still = value, 0
        else:
            still += 1
            if still >= STALL_CHECKS:
                break
    return best_x, best, done


def _pcg_start(precondition: Callable[[Tensor], Tensor], b: Tensor, dot=_dot
               ) -> tuple[Tensor, ...]:
    """The PCG's (x, r, z, p, rz) before its first iteration, from x = 0."""
    z = precondition(b)
    return torch.zeros_like(b), b.clone(), z, z, dot(b, z)


def _pcg_iterations(v: Interior, precondition: Callable[[Tensor], Tensor], x: Tensor,
                    r: Tensor, z: Tensor, p: Tensor, rz: Tensor, n: int, dot=_dot
                    ) -> tuple[Tensor, ...]:
    """n PCG iterations from (x, r, z, p, rz); of members with ``dot``
    :func:`_member_dots`."""
    for _ in range(n):
        ap = apply_interior(v, p)
        pap = dot(p, ap)
        alpha = rz / torch.where(pap != 0, pap, torch.ones_like(pap))
        x = x + alpha * p
        r = r - alpha * ap
        z = precondition(r)
        rz_new = dot(r, z)
        p = z + (rz_new / torch.where(rz != 0, rz, torch.ones_like(rz))) * p
        rz = rz_new
    return x, r, z, p, rz


def pcg_members(a: FivePoint, b: Tensor, tol: float, maxiter: int, check_every: int | None = None,
                preconditioner: str = "jacobi") -> tuple[Tensor, Tensor, Tensor]:
    """:func:`pcg` of B systems at once (a's and b's leading dimension, the
    members): (x, true relative residuals, iterations), each member's its
    own pcg's to the last bit. The iterations run on the members' stacked
    fields (each reduction :func:`_member_dots`, as torch.vmap would make
    it, without its dispatch on every small operation, which cost more than
    the arithmetic on a training grid); the multigrid preconditioner is
    each member's own, under torch.vmap. Every member's residual is read at
    once, and a member that has converged is frozen from then on, as its
    own solve stops there; a member whose true residual then misses tol
    goes on alone, as its own pcg (:func:`_to_floor`)."""
    if check_every is None:
        check_every = CHECK_EVERY[preconditioner]
    with torch.no_grad():
        v = interior_of(a)
        if preconditioner == "jacobi":          # elementwise: the members' at once
            precondition = _preconditioner(a, preconditioner)
        else:
            precondition = functools.partial(
                torch.vmap(lambda a, r: _preconditioner(a, preconditioner)(r)), a)
        state = _pcg_start(precondition, b, _member_dots)
        bbs = [value or 1.0 for value in _member_dots(b, b).reshape(-1).tolist()]
        limits = [tol * tol * bb for bb in bbs]
        going, done = [True] * len(bbs), [0] * len(bbs)
        step = 0
        while step < maxiter and any(going):
            n = min(check_every, maxiter - step)
            new = _pcg_iterations(v, precondition, *state, n, _member_dots)
            mask = torch.tensor(going, device=b.device).view(-1, 1, 1)
            state = tuple(torch.where(mask, fresh, old) for fresh, old in zip(new, state))
            step += n
            for m, rr in enumerate(_member_dots(state[1], state[1]).reshape(-1).tolist()):
                if going[m]:
                    done[m], going[m] = step, not rr <= limits[m]
        scale = torch.tensor(bbs, dtype=b.dtype, device=b.device).view(-1, 1, 1)
        x = state[0]
        residual = _true_residual(v, b, x, scale, _member_dots).reshape(-1)
        short = [m for m, value in enumerate(residual.tolist())
                 if done[m] < maxiter and not value <= tol * SLACK]
        if short:
            x, residual = x.clone(), residual.clone()
        for m in short:
            own = FivePoint(*(t[m] for t in a))
            x[m], residual[m], done[m] = _to_floor(
                interior_of(own), _preconditioner(own, preconditioner), b[m], scale[m].reshape(()),
                (*(t[m] for t in state[:4]), state[4][m].reshape(())),
                residual[m], tol, maxiter, done[m], check_every)
        return x, residual, torch.tensor(done, dtype=residual.dtype, device=b.device)


def _differentiated(tensors: tuple[Tensor, ...]) -> bool:
    """Whether a derivative can flow through: reverse mode (grad enabled and
    an input requires grad) or forward mode (an input carries a tangent,
    which torch.no_grad does not stop)."""
    if torch.is_grad_enabled() and any(requires_grad(t) for t in tensors):
        return True
    return any(forward_ad.unpack_dual(t).tangent is not None for t in tensors)


def solve_auto(a: FivePoint, b: Tensor, tol: float, maxiter: int,
               preconditioner: str = "jacobi") -> tuple[Tensor, Tensor]:
    """(x, relative residual): the reference CG inside pompy.compat.fortran_math() (bit for bit
    with the Fortran twin, whose cg_solve is the reference's algorithm);
    the PCG with ``preconditioner`` otherwise, differentiated implicitly
    whenever a derivative can flow through the solve, and under torch.func
    transforms (jvp, grad, jacrev, jacfwd, vmap: _Solve's vmap rule runs
    batched members' solves by pcg_members, whose host reads a vmapped
    forward could not make), so forward mode there solves as
    torch.autograd.forward_ad does, to the last bit. Training's batches
    (gradients on) and its test batches (off) so solve the same way, to
    the same residual floor; the PCG's early exit cuts no gradient, which
    implicit differentiation takes from the solution, not from the
    iterations (so the exit, a branch on a tensor value, does not decide
    what a gradient-enabled step computes)."""
    x, residual, _ = solve_counted(a, b, tol, maxiter, preconditioner)
    return x, residual


def solve_counted(a: FivePoint, b: Tensor, tol: float, maxiter: int,
                  preconditioner: str = "jacobi") -> tuple[Tensor, Tensor, Tensor]:
    """:func:`solve_auto` and its iterations (a tensor like the residual):
    the PCG's to convergence, the reference CG's fixed budget."""
    if compat.in_force():
        x, residual, iterations = _Solve.apply(a.diag, a.cx, a.cy, a.active, b, tol, maxiter,
                                               False, "jacobi", False)
        return x, residual, iterations
    if torch._C._are_functorch_transforms_active() or _differentiated((a.diag, a.cx, a.cy, b)):
        return _accelerated(a, b, tol, maxiter, preconditioner)
    x, res, done = pcg(a, b, tol, maxiter, preconditioner=preconditioner)
    return x, res, torch.full_like(res, done)


def solve_members(a: FivePoint, b: Tensor, tol: float, maxiter: int,
                  preconditioner: str = "jacobi") -> tuple[Tensor, Tensor]:
    """:func:`solve_auto` for an ensemble's members, under torch.vmap: the
    PCG, which _Solve's vmap rule runs for all members at once
    (:func:`pcg_members`), each member's solution, residual and iterations
    those of its own solve_auto to the last bit."""
    x, residual, _ = _accelerated(a, b, tol, maxiter, preconditioner)
    return x, residual


def _accelerated(a: FivePoint, b: Tensor, tol: float, maxiter: int,
                 preconditioner: str) -> tuple[Tensor, Tensor, Tensor]:
    """(x, residual, iterations) by the PCG, differentiated implicitly (and
    batched under torch.vmap: _Solve's vmap rule)."""
    return _Solve.apply(a.diag, a.cx, a.cy, a.active, b, tol, maxiter, True, preconditioner,
                        False)


def solve_with(solver: Callable, a: FivePoint, b: Tensor, p: Mapping
               ) -> tuple[Tensor, Tensor, Tensor]:
    """(x, relative residual, iterations) of ``solver`` to p's cg_tol within
    cg_maxiter: :func:`solve_auto` and :func:`solve_members` with p's
    preconditioner, counted; the reference CG with its fixed budget; any
    other solver (a spy, the Fortran's cg_solve) as it is, its iterations
    not known (NaN)."""
    tol, maxiter = p["cg_tol"], p["cg_maxiter"]
    if solver is solve_auto:
        return solve_counted(a, b, tol, maxiter, p["preconditioner"])
    if solver is solve_members:
        return _accelerated(a, b, tol, maxiter, p["preconditioner"])
    x, residual = solver(a, b, tol, maxiter)
    return x, residual, torch.full_like(residual, maxiter if solver is solve else math.nan)


def to_scipy(a: FivePoint):
    """A as a scipy.sparse CSR matrix (cells numbered i fastest, pom2k's
    order), for direct solves in tests and checks."""
    import numpy as np
    import scipy.sparse as sp

    diag, cx, cy, active = (t.detach().cpu().double().numpy() if t.dtype != torch.bool
                            else t.cpu().numpy() for t in a)
    im, jm = diag.shape
    index = lambda i, j: i + im * j            # noqa: E731
    rows, cols, vals = [], [], []
    for j in range(jm):
        for i in range(im):
            n = index(i, j)
            if not active[i, j]:
                rows.append(n), cols.append(n), vals.append(1.0)
                continue
            rows.append(n), cols.append(n), vals.append(diag[i, j])
            for di, dj, c in ((-1, 0, cx[i, j]), (1, 0, cx[i + 1, j] if i + 1 < im else 0.0),
                              (0, -1, cy[i, j]), (0, 1, cy[i, j + 1] if j + 1 < jm else 0.0)):
                if c != 0.0:
                    rows.append(n), cols.append(index(i + di, j + dj)), vals.append(-c)
    return sp.csr_matrix((np.array(vals), (np.array(rows), np.array(cols))), shape=(im * jm,) * 2)
