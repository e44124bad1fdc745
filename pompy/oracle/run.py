"""Run whole cases with the Fortran oracle: pom2k's set-up and main loop.

``new_state(config)`` allocates every variable of pompy.variables (Fortran
order) and runs pom2k's set-up; ``run_steps(state, config, first, last)`` advances the
state in place through internal steps ``first..last``.
"""
from __future__ import annotations

import numpy as np

from pompy import variables
from pompy.config import Config, parameters
from pompy.oracle.adapter import Oracle
from pompy.run import CFLViolation

_ORACLE = None


def oracle() -> Oracle:
    """The oracle, built and loaded once per process."""
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = Oracle()
    return _ORACLE


def new_state(config: Config) -> dict[str, np.ndarray]:
    """pom2k's state after its set-up (iint = 0): every variable and work
    array of pompy.variables, Fortran-ordered, as the oracle set it up.

    iproblem=3: the IC file's arrays (pompy.icfile.read_ic) are placed in
    the state before the set-up (file2ic finishes them), its output-only
    coordinates east_e, north_e, if it has them, after."""
    state = {name: np.zeros(variables.shape(name, config.im, config.jm, config.kb), order="F")
             for name in (*variables.VARIABLES, *variables.WORK)}
    after = {}
    if config.iproblem == 3:
        from pompy import icfile

        ic, after = icfile.split_ic(config)
        for name, value in ic.items():
            state[name][...] = value
    oracle().call("initialize", state, parameters(config), inplace=True)
    for name, value in after.items():
        state[name][...] = value
    return state


def run_steps(state: dict, config: Config, iint_first: int, iint_last: int,
              time0: float = 0.0) -> int:
    """Advance ``state`` in place; return the last step taken.

    Raises CFLViolation (state left as pom2k leaves it) when vamax > vmaxl.
    """
    params = dict(parameters(config), iint_first=iint_first, iint_last=iint_last, time0=time0)
    out = oracle().call("run_steps", state, params, inplace=True)
    if out["vamax"] > config.vmaxl:
        raise CFLViolation(out["iint_done"], out["vamax"], out["imax"], out["jmax"], config.vmaxl)
    return out["iint_done"]


class OracleModel:
    """The oracle driven through pompy.run's model interface.

    ``advance(last)`` runs the Fortran driver ``chunk`` steps per call; the
    state at the start of each call is kept, so that after a blow-up the
    last good step is recomputed from it (bit for bit) rather than copied
    at every step."""

    name = "oracle"
    chunk = 10

    def __init__(self, config: Config, saved: tuple | None = None):
        self.config = config
        self.state = new_state(config)
        self.iint = 0
        if saved is not None:
            self.state.update({k: np.asfortranarray(v) for k, v in saved[0].items()})
            self.iint = saved[1]

    def numpy_state(self) -> dict[str, np.ndarray]:
        return self.state

    def advance(self, last: int, bar=None) -> None:
        from pompy.run import progress_update

        while self.iint < last:
            stop = min(last, self.iint + self.chunk)
            kept = {k: v.copy() for k, v in self.state.items()}
            try:
                run_steps(self.state, self.config, self.iint + 1, stop)
            except CFLViolation as exc:
                if exc.iint - 1 > self.iint:
                    run_steps(kept, self.config, self.iint + 1, exc.iint - 1)
                exc.last_good = kept
                raise
            if not _finite(self.state):
                self._find_non_finite_step(kept, stop)
            for iint in range(self.iint + 1, stop + 1):
                progress_update(bar, iint, self.config, float(np.abs(self.state["vaf"]).max()))
            self.iint = stop

    def _find_non_finite_step(self, good: dict, stop: int) -> None:
        """pom2k's check skips NaN, so the driver runs on through it: redo the
        chunk step by step from ``good`` and stop at the first non-finite step."""
        from pompy.run import NonFiniteState, first_non_finite

        for iint in range(self.iint + 1, stop + 1):
            trial = {k: v.copy(order="F") for k, v in good.items()}
            run_steps(trial, self.config, iint, iint)
            if not _finite(trial):
                self.state = trial
                exc = NonFiniteState(iint, *first_non_finite(trial))
                exc.last_good = good
                raise exc
            good = trial


def _finite(state: dict) -> bool:
    return all(np.isfinite(state[name]).all() for name in variables.names("prognostic"))
