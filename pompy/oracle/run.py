"""Run whole cases with the Fortran oracle: pom2k's set-up and main loop.

``new_state(config)`` allocates every variable of pompy.variables (Fortran
order) and runs pom2k's set-up; ``run_steps(state, config, first, last)`` advances the
state in place through internal steps ``first..last``.
"""
from __future__ import annotations

import dataclasses
import time as _time
from pathlib import Path

import numpy as np

from pompy import variables
from pompy.config import Config, nint
from pompy.oracle.adapter import Oracle

# Open-boundary radiation factors of pom2k's bdry block (1 in both problems).
BOUNDARY_FACTORS = {"rfe": 1.0, "rfw": 1.0, "rfn": 1.0, "rfs": 1.0}


class CFLViolation(RuntimeError):
    """pom2k's velocity check failed: vamax > vmaxl."""

    def __init__(self, iint: int, vamax: float, imax: int, jmax: int, vmaxl: float,
                 restart: Path | None = None):
        self.iint, self.vamax, self.imax, self.jmax = iint, vamax, imax, jmax
        self.restart = restart
        message = (f"step iint={iint}: external velocity vamax={vamax:.6g} m/s exceeds "
                   f"vmaxl={vmaxl:g} in field vaf at (i, j)=({imax}, {jmax})")
        if restart is not None:
            message += f"; the last good state (iint={iint - 1}) is in {restart}"
        super().__init__(message)


def parameters(config: Config) -> dict:
    """Scalar arguments of the oracle routines, from the config."""
    params = dataclasses.asdict(config)
    params.update(BOUNDARY_FACTORS, lramp=int(config.lramp), dti=config.dti,
                  dti2=config.dti2, dte2=config.dte2, ramp=1.0)
    return params


_ORACLE = None


def oracle() -> Oracle:
    """The oracle, built and loaded once per process."""
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = Oracle()
    return _ORACLE


def new_state(config: Config) -> dict[str, np.ndarray]:
    """pom2k's state after its set-up (iint = 0): every variable and work
    array of pompy.variables, Fortran-ordered, as the oracle set it up."""
    if config.iproblem not in (1, 2):
        raise NotImplementedError(f"iproblem={config.iproblem}: the oracle sets up "
                                  "the seamount (1) and box (2) problems")
    state = {name: np.zeros(variables.shape(name, config.im, config.jm, config.kb), order="F")
             for name in (*variables.VARIABLES, *variables.WORK)}
    oracle().call("initialize", state, parameters(config), inplace=True)
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


def print_steps(config: Config, first: int, last: int) -> list[int]:
    """The steps pom2k prints at: every iprint, prtd2's interval from iswtch on,
    and the last step."""
    steps, iprint = [], config.iprint
    for iint in range(first, last + 1):
        if iint >= config.iswtch:
            iprint = nint(config.prtd2 * 86400 / config.dti)
        if iint % max(iprint, 1) == 0:
            steps.append(iint)
    if last not in steps:
        steps.append(last)
    return steps


def run_case(config: Config, output_dir: Path, steps: int | None = None,
             restart: Path | None = None, chunk: int = 10) -> dict:
    """Run a case with the oracle: NetCDF output at pom2k's print steps and a
    restart file at the end, or of the last good step when the run stops.

    The oracle runs ``chunk`` steps (or up to the next output step) per call;
    the state at the start of each call is kept, so that after a blow-up the
    last good step is recomputed from it (bit for bit) rather than copied
    at every step.
    """
    from tqdm import tqdm

    from pompy.io import OutputWriter, read_restart, write_restart

    state = new_state(config)
    first = 1
    if restart is not None:
        saved, iint0, _ = read_restart(restart)
        state.update(saved)
        first = iint0 + 1
    last = (first - 1) + (steps if steps is not None else config.iend)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    writes = print_steps(config, first, last)
    stops = sorted(set(writes) | set(range(first - 1 + chunk, last, chunk)))
    days = lambda iint: config.dti * iint / 86400  # noqa: E731
    writer = OutputWriter(output_dir / "oracle_output.nc", config, state)
    start, done = _time.perf_counter(), first - 1
    try:
        with tqdm(total=last - done, unit="step", desc=f"oracle {config.title}") as bar:
            for stop in stops:
                kept = {k: v.copy() for k, v in state.items()}
                try:
                    run_steps(state, config, done + 1, stop)
                except CFLViolation as exc:
                    if exc.iint - 1 > done:
                        run_steps(kept, config, done + 1, exc.iint - 1)
                    path = write_restart(output_dir / "restart.nc", config, kept, exc.iint - 1,
                                         days(exc.iint - 1))
                    raise CFLViolation(exc.iint, exc.vamax, exc.imax, exc.jmax,
                                       config.vmaxl, restart=path) from None
                if stop in writes:
                    writer.write(state, stop, days(stop))
                bar.set_postfix(days=f"{days(stop):.4f}",
                                vamax=f"{np.abs(state['vaf']).max():.3g}")
                bar.update(stop - done)
                done = stop
    finally:
        writer.close()
    write_restart(output_dir / "restart.nc", config, state, last, days(last))
    print(f"{last - first + 1} internal steps in {_time.perf_counter() - start:.2f} s; "
          f"output in {output_dir / 'oracle_output.nc'}, restart in {output_dir / 'restart.nc'}")
    return state
