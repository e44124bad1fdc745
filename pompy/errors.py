"""pompy's exceptions: what stops a run, and why. A leaf module.

ModelStop and its two kinds are raised by the time loop of either core
(torch or oracle) and carry the step, the field and the place, and
(after the driver writes it) the restart file of the last good step.
InputError is any bad input a user gave (ConfigError: a bad parameter),
raised before anything runs. EnvironmentFault is the machine's part: a
full disk, a file another process holds, a folder that cannot be written.
"""
from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Bad input a user gave (a file, a flag, a folder): the command line
    prints ``pompy: <message>`` and exits 2. The message names what was
    wrong (the file, the variable, the place) and, where it helps, what
    would be right."""


class ConfigError(InputError):
    """A config parameter that is unknown, of the wrong type or out of range."""


class EnvironmentFault(Exception):
    """The machine, not the input nor pompy: no space left, a file locked by
    another process, a folder that is not writable, POMPY_HOME that is not a
    folder, a build tool missing. The command line prints ``pompy:
    <message>`` and exits 4; the message names the file and the cause, and
    what was written before the fault is kept."""


class ModelStop(RuntimeError):
    """The time loop stopped at step ``iint``; ``last_good`` is the state
    after step iint-1 (pom2k-ordered arrays), ``restart`` its file if written."""

    iint: int
    last_good: dict | None = None
    restart: Path | None = None

    def _finish(self, message: str) -> str:
        if self.restart is not None:
            message += f"; the last good state (iint={self.iint - 1}) is in {self.restart}"
        return message


class CFLViolation(ModelStop):
    """pom2k's velocity check failed: vamax > vmaxl."""

    def __init__(self, iint: int, vamax: float, imax: int, jmax: int, vmaxl: float,
                 restart: Path | None = None, field: str = "vaf"):
        self.iint, self.vamax, self.imax, self.jmax, self.vmaxl = iint, vamax, imax, jmax, vmaxl
        self.restart, self.field = restart, field
        super().__init__(self._finish(
            f"step iint={iint}: velocity vamax={vamax:.6g} m/s exceeds "
            f"vmaxl={vmaxl:g} in field {field} at (i, j)=({imax}, {jmax})"))

    def with_restart(self, path: Path) -> CFLViolation:
        return CFLViolation(self.iint, self.vamax, self.imax, self.jmax, self.vmaxl, path,
                            self.field)


class NonFiniteState(ModelStop):
    """A field became NaN or infinite (pom2k's velocity check misses NaN)."""

    def __init__(self, iint: int, field: str, where: tuple[int, ...], restart: Path | None = None):
        self.iint, self.field, self.where, self.restart = iint, field, where, restart
        place = ", ".join(str(x) for x in where)
        index = "(i, j)" if len(where) == 2 else "(i, j, k)"
        super().__init__(self._finish(
            f"step iint={iint}: field {field} is not finite (NaN or inf) at {index}=({place})"))

    def with_restart(self, path: Path) -> NonFiniteState:
        return NonFiniteState(self.iint, self.field, self.where, path)


class NotConverged(ModelStop):
    """An elevation solve of the implicit free surface missed its
    tolerance: the step's own (``solve`` "elevation solver", at step
    ``iint``), or the adjoint or tangent solve of a derivative (``iint``
    None: the backward or forward-mode pass knows no step). Two causes,
    each with its own advice: the solve ran out of ``maxiter`` iterations
    (raise cg_maxiter, lower dti, or precondition by multigrid), or it
    stopped after ``iterations`` (< maxiter) because its true residual no
    longer fell: the floating-point floor of that system, above
    ``floor_factor`` x tol (raise cg_tol, or use multigrid, whose floor is
    lower). ``preconditioner``: the PCG's, where one ran (None: the
    reference CG)."""

    def __init__(self, iint: int | None, residual: float, tol: float, maxiter: int,
                 restart: Path | None = None, solve: str = "elevation solver", *,
                 iterations: int | None = None, floor_factor: float | None = None,
                 preconditioner: str | None = None):
        self.iint, self.residual, self.tol, self.maxiter, self.restart = (iint, residual, tol,
                                                                          maxiter, restart)
        self.solve, self.iterations = solve, iterations
        self.floor_factor, self.preconditioner = floor_factor, preconditioner
        self.stagnated = iterations is not None and iterations < maxiter
        where = "" if iint is None else f"step iint={iint}: "
        multigrid = "" if preconditioner != "jacobi" else "preconditioner='multigrid'"
        if self.stagnated:
            within = ("" if floor_factor is None
                      else f", more than the {floor_factor:g} x cg_tol a floor passes within")
            advice = f"raise cg_tol to {residual:.2g} or more" + (
                f", or use {multigrid}, whose floor is lower" if multigrid else "")
            message = (f"{where}the {solve}'s true relative residual stopped falling at "
                       f"{residual:.3g} > cg_tol={tol:g} after {iterations} iterations: the "
                       f"floating-point floor of this system, which more iterations cannot "
                       f"lower{within} ({advice})")
        else:
            message = (f"{where}the {solve} stopped at relative residual {residual:.3g} "
                       f"> cg_tol={tol:g} after cg_maxiter={maxiter} iterations (raise cg_maxiter, "
                       f"or lower dti" + (f", or use {multigrid}" if multigrid else "") + ")")
        super().__init__(self._finish(message))

    def with_restart(self, path: Path) -> NotConverged:
        return NotConverged(self.iint, self.residual, self.tol, self.maxiter, path, self.solve,
                            iterations=self.iterations, floor_factor=self.floor_factor,
                            preconditioner=self.preconditioner)


class Interrupted(Exception):
    """A run stopped by a signal (SIGINT, SIGTERM) after a completed step;
    the driver writes that step's restart and the command line exits
    128 + the signal number (130, 143)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"signal {signum}")
