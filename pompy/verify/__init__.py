"""``pompy verify``: the gate in front of the trainer.

On the config's grid (im, jm, kb, kl1, kl2 and its parameters), on one
device and dtype, for one core of pompy.cores, four suites, each a module:

parity (:mod:`pompy.verify.parity`)
    every torch routine, the main-program sections and the set-ups against
    the Fortran oracle on random valid states (:mod:`pompy.verify.states`).
run (:mod:`pompy.verify.run`)
    a short whole run against the core's Fortran twin
    (:mod:`pompy.verify.twins`), and a solving core's self-checks.
gradcheck (:mod:`pompy.verify.gradcheck`)
    torch.autograd.gradcheck of every routine, the sections and two whole
    steps, measured as :mod:`pompy.verify.gradients` does; in float64
    whatever the dtype.
policies (:mod:`pompy.verify.policies`)
    each gradient policy at each safe op, forward mode, the precedence of
    the levels, context isolation across threads and asyncio tasks.

On a grid larger than pom2k's own 65 x 49, the routine and section checks
draw their random states on a window of it (:func:`pompy.verify.states.window`
says why that covers the grid); the set-ups, the whole run, the solver's
self-checks and two whole steps' gradients (as directional derivatives)
run on the whole grid.

Each module's docstring gives its tolerances and why. Besides:
:mod:`pompy.verify.checks` (the Check record and the relative error),
:mod:`pompy.verify.routines` (the torch side of a pom2k call),
:mod:`pompy.verify.certificate` (the certificate's key, writing it, and
:func:`require_certificate`, the trainer's look-up) and
:mod:`pompy.verify.cli` (the input check, :func:`verify` and the table).

The certificate holds every check: suite, name, figure, tolerance,
passed, and what else was measured (worst field and place, seed,
gradcheck's verdict, forward-mode error, guards fired), and the run's
settings and times.

Run: ``pompy verify CONFIG [--core NAME] [--device cpu|cuda]
[--dtype float64|float32] [--samples N] [--steps N] [--seed S]``; exit 0
all passed, 1 a check failed (the certificate says passed=false), 2 bad
input.
"""
from pompy.verify.certificate import require_certificate
from pompy.verify.checks import Check
from pompy.verify.cli import check_input, run_command, verify

__all__ = ["Check", "check_input", "require_certificate", "run_command", "verify"]
