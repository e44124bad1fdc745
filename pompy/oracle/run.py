"""Run whole cases with the Fortran oracle: pom2k's set-up and main loop.

``new_state(config)`` allocates every array the oracle's ``initialize`` and
``run_steps`` take (shapes read from the f2py signatures, Fortran order) and
runs pom2k's set-up; ``run_steps(state, config, first, last)`` advances the
state in place through internal steps ``first..last``.
"""
from __future__ import annotations

import dataclasses
import re
import time as _time
from pathlib import Path

import numpy as np

from pompy.config import Config, nint
from pompy.oracle.build import load

# Open-boundary radiation factors of pom2k's bdry block (1 in both problems).
BOUNDARY_FACTORS = {"rfe": 1.0, "rfw": 1.0, "rfn": 1.0, "rfs": 1.0}
_BOUNDS = re.compile(r"^(\w+) : (?:input|in/output) rank-(\d) array\('d'\) with bounds \(([\w,]+)\)", re.M)


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


def array_shapes(routine: str, config: Config, module=None) -> dict[str, tuple[int, ...]]:
    """{argument: shape} for every real array argument of an oracle routine."""
    module = module or load()
    dims = {"im": config.im, "jm": config.jm, "kb": config.kb}
    return {name: tuple(dims[d] for d in bounds.split(","))
            for name, _rank, bounds in _BOUNDS.findall(getattr(module, routine).__doc__)}


def parameters(config: Config) -> dict:
    """Scalar arguments of the oracle routines, from the config."""
    params = dataclasses.asdict(config)
    params.update(BOUNDARY_FACTORS, lramp=int(config.lramp), dti=config.dti,
                  dti2=config.dti2, dte2=config.dte2, ramp=1.0)
    return params


def new_state(config: Config) -> dict[str, np.ndarray]:
    """pom2k's state after its set-up (iint = 0), as Fortran-ordered arrays."""
    if config.iproblem not in (1, 2):
        raise NotImplementedError(f"iproblem={config.iproblem}: the oracle sets up "
                                  "the seamount (1) and box (2) problems")
    module = load()
    shapes = array_shapes("run_steps", config, module)
    shapes.update(array_shapes("initialize", config, module))
    state = {name: np.zeros(shape, order="F") for name, shape in shapes.items()}
    _call(module.initialize, state, parameters(config))
    return state


def run_steps(state: dict, config: Config, iint_first: int, iint_last: int,
              time0: float = 0.0) -> int:
    """Advance ``state`` in place; return the last step taken.

    Raises CFLViolation (state left as pom2k leaves it) when vamax > vmaxl.
    """
    module = load()
    params = parameters(config)
    params.update(iint_first=iint_first, iint_last=iint_last, time0=time0)
    iint_done, vamax, imax, jmax = _call(module.run_steps, state, params)
    if vamax > config.vmaxl:
        raise CFLViolation(iint_done, vamax, imax, jmax, config.vmaxl)
    return iint_done


def _call(fn, state: dict, params: dict):
    from pompy.oracle.adapter import _parse_doc
    sig = _parse_doc(fn.__name__, fn.__doc__)
    kwargs = {}
    for arg in sig.args:
        if arg in state:
            kwargs[arg] = state[arg]
        elif arg in params:
            kwargs[arg] = params[arg]
        else:
            raise KeyError(f"oracle {fn.__name__}: no value for {arg!r}")
    return fn(**kwargs)


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
             restart: Path | None = None) -> dict:
    """Run a case with the oracle: NetCDF output at pom2k's print steps and a
    restart file at the end, or of the last good step when the run stops."""
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
    writes = set(print_steps(config, first, last))
    days = lambda iint: config.dti * iint / 86400  # noqa: E731
    writer = OutputWriter(output_dir / "oracle_output.nc", config, state)
    start = _time.perf_counter()
    try:
        with tqdm(total=last - first + 1, unit="step", desc=f"oracle {config.title}") as bar:
            for iint in range(first, last + 1):
                good = {k: v.copy() for k, v in state.items()}
                try:
                    run_steps(state, config, iint, iint)
                except CFLViolation as exc:
                    path = write_restart(output_dir / "restart.nc", config, good, iint - 1,
                                         days(iint - 1))
                    raise CFLViolation(exc.iint, exc.vamax, exc.imax, exc.jmax,
                                       config.vmaxl, restart=path) from None
                if iint in writes:
                    writer.write(state, iint, days(iint))
                bar.set_postfix(days=f"{days(iint):.4f}",
                                vamax=f"{np.abs(state['vaf']).max():.3g}")
                bar.update()
    finally:
        writer.close()
    write_restart(output_dir / "restart.nc", config, state, last, days(last))
    print(f"{last - first + 1} internal steps in {_time.perf_counter() - start:.2f} s; "
          f"output in {output_dir / 'oracle_output.nc'}, restart in {output_dir / 'restart.nc'}")
    return state
