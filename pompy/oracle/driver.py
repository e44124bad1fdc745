"""Run whole cases with the Fortran oracle: pom2k's set-up and main loop.

``new_state(config)`` allocates every variable of pompy.variables (Fortran
order) and runs pom2k's set-up, by the same path as the torch core
(pompy.core.setup.set_up); ``run_steps(state, config, first, last)``
advances the state in place through internal steps ``first..last``;
``OracleModel`` is the oracle as a driver's model (pompy.driver).

The free-surface scheme is that of a torch core's Fortran twin, named by
the core (``core=``, a name of pompy.cores; pom2k's mode split by
default, the semi-implicit free surface's twin is
reference_fortran/implicit.f90): the Fortran ``run_steps`` takes the
registry's ``twin`` as its ``scheme`` and runs one time loop with that
external mode.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pompy import cores, variables
from pompy.config import SETUP_PARAMS, Config, case_of, parameters
from pompy.core.model import first_non_finite
from pompy.core import setup
from pompy.errors import CFLViolation, ConfigError, NonFiniteState, NotConverged
from pompy.oracle.adapter import Oracle

_ORACLE = None


def oracle() -> Oracle:
    """The oracle, built and loaded once per process."""
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = Oracle()
    return _ORACLE


def _initialize(state: dict, params: dict) -> dict:
    oracle().call("initialize", state, params, inplace=True)
    return state


def check_supported(config: Config) -> None:
    """ConfigError for a parameter pompy's torch cores have and the Fortran
    does not (it would be ignored): wind_factor other than 1, a seamount
    case parameter (SETUP_PARAMS) other than pom2k's constant."""
    if config.wind_factor != 1.0:
        raise ConfigError(f"wind_factor={config.wind_factor!r}: the Fortran oracle has no wind "
                          "factor (pom2k's wind stress only); run a torch core, or set "
                          "wind_factor = 1.0")
    for name, pom2k in case_of(names=SETUP_PARAMS).items():
        value = getattr(config, name)
        if value != pom2k:
            raise ConfigError(f"{name}={value!r}: the Fortran oracle has pom2k's seamount "
                              f"constant ({pom2k!r}); run a torch core, or set {name} = {pom2k!r}")


def new_state(config: Config) -> dict[str, np.ndarray]:
    """pom2k's state after its set-up (iint = 0): every variable and work
    array of pompy.variables, Fortran-ordered, as the oracle set it up."""
    return setup.set_up(config, _initialize, zeros=lambda shape: np.zeros(shape, order="F"),
                  array=lambda value: np.array(value, dtype=np.float64, order="F"))


def run_steps(state: dict, config: Config, iint_first: int, iint_last: int,
              time0: float = 0.0, core: str = cores.DEFAULT) -> int:
    """Advance ``state`` in place with ``core``'s twin; return the last
    step taken (see :func:`main_loop`)."""
    return main_loop(state, config, iint_first, iint_last, time0, core)["iint_done"]


def main_loop(state: dict, config: Config, iint_first: int, iint_last: int,
              time0: float = 0.0, core: str = cores.DEFAULT) -> dict:
    """pom2k's main loop (Fortran ``run_steps``) with the external mode of
    ``core``'s twin on ``state`` in place; returns the Fortran's outputs:
    ``iint_done`` (the last step taken), that step's ``vamax``, ``imax``,
    ``jmax``, ``cg_residual`` and ``cg_iters`` (a solving scheme's), and
    ``cg_iters_total`` (all steps).

    Stops as the torch core does after a failed check, the state left as
    that step's external mode left it: CFLViolation when vamax > vmaxl
    (as pom2k leaves it), else, for a core that solves for the elevation,
    NotConverged when the solver missed cg_tol (not cg_residual <= cg_tol
    (1 + 1e-9), the torch core's slack; a NaN too).
    """
    check_supported(config)
    params = dict(parameters(config), iint_first=iint_first, iint_last=iint_last, time0=time0,
                  scheme=cores.get(core).twin)
    out = oracle().call("run_steps", state, params, inplace=True)
    iint = out["iint_done"]
    if out["stopped"] == 1:
        raise CFLViolation(iint, out["vamax"], out["imax"], out["jmax"], config.vmaxl)
    if out["stopped"] == 2:
        raise NotConverged(iint, out["cg_residual"], config.cg_tol, config.cg_maxiter)
    return out


class OracleModel:
    """The oracle driven as a driver's model (pompy.driver).

    ``advance(last)`` runs the Fortran driver ``chunk`` steps per call; the
    state at the start of each call is kept, so that after a blow-up the
    last good step is recomputed from it (bit for bit) rather than copied
    at every step.

    ``core``: the torch core whose Fortran twin this is (pompy.cores; its
    runs are named by the registry's ``twin_name``: "oracle" for pom2k's
    mode split). A twin that solves for the elevation stops as its core:
    CFLViolation, NotConverged (the solver), or NonFiniteState at the
    first step whose state is not finite (a NaN reaches the solver a step
    later as a NaN residual)."""

    chunk = 10

    def __init__(self, config: Config, core: str = cores.DEFAULT):
        self.spec = cores.get(core)
        check_supported(config)
        self.config = config
        self.name = self.spec.twin_name
        self.state = new_state(config)
        self.iint = 0
        self.time0 = 0.0

    def load_state(self, arrays: dict, iint: int, time0: float = 0.0) -> None:
        """Continue from a restart's arrays (placed over the set-up state)."""
        self.state.update({k: np.asfortranarray(v, dtype=np.float64) for k, v in arrays.items()})
        self.iint, self.time0 = iint, time0

    def numpy_state(self) -> dict[str, np.ndarray]:
        return self.state

    def _run(self, state: dict, first: int, last: int) -> int:
        return run_steps(state, self.config, first, last, self.time0, self.spec.name)

    def advance(self, last: int, on_step: Callable[[int, float], None] | None = None) -> None:
        while self.iint < last:
            stop = min(last, self.iint + self.chunk)
            kept = {k: v.copy(order="F") for k, v in self.state.items()}
            try:
                self._run(self.state, self.iint + 1, stop)
            except (CFLViolation, NotConverged) as exc:
                start = _copy(kept) if self.spec.solver else None
                if exc.iint - 1 > self.iint:
                    self._run(kept, self.iint + 1, exc.iint - 1)
                if start is not None and not _finite(kept):
                    # an earlier step left a NaN, which the implicit loop
                    # meets only at the next step's solver: stop where the
                    # torch core stops, at that earlier step
                    self._find_non_finite_step(start, exc.iint - 1)
                exc.last_good = kept
                raise
            if not _finite(self.state):
                self._find_non_finite_step(kept, stop)
            self.iint = stop                        # before on_step, which may stop the run here
            if on_step is not None:     # once a chunk: its steps' own vamax are not kept
                on_step(stop, float(np.abs(self.state["vaf"]).max()))

    def _find_non_finite_step(self, good: dict, stop: int) -> None:
        """pom2k's check skips NaN, so the driver runs on through it: redo the
        chunk step by step from ``good`` and stop at the first non-finite step."""
        for iint in range(self.iint + 1, stop + 1):
            trial = {k: v.copy(order="F") for k, v in good.items()}
            self._run(trial, iint, iint)
            if not _finite(trial):
                self.state = trial
                exc = NonFiniteState(iint, *first_non_finite(trial))
                exc.last_good = good
                raise exc
            good = trial


def _copy(state: dict) -> dict:
    return {k: v.copy(order="F") for k, v in state.items()}


def _finite(state: dict) -> bool:
    return all(np.isfinite(state[name]).all() for name in variables.names("prognostic"))
