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

from pompy.config import Config
from pompy.oracle.build import load

# Open-boundary radiation factors of pom2k's bdry block (1 in both problems).
BOUNDARY_FACTORS = {"rfe": 1.0, "rfw": 1.0, "rfn": 1.0, "rfs": 1.0}
_BOUNDS = re.compile(r"^(\w+) : (?:input|in/output) rank-(\d) array\('d'\) with bounds \(([\w,]+)\)", re.M)


class CFLViolation(RuntimeError):
    """pom2k's velocity check failed: vamax > vmaxl."""

    def __init__(self, iint: int, vamax: float, imax: int, jmax: int, vmaxl: float):
        self.iint, self.vamax, self.imax, self.jmax = iint, vamax, imax, jmax
        super().__init__(
            f"step iint={iint}: external velocity vamax={vamax:.6g} m/s exceeds "
            f"vmaxl={vmaxl:g} in field vaf at (i, j)=({imax}, {jmax})")


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


def run_case(config: Config, output_dir: Path, steps: int | None = None) -> dict:
    """Run a case end to end with the oracle and save the final state."""
    from tqdm import tqdm

    iend = steps if steps is not None else config.iend
    state = new_state(config)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    start = _time.perf_counter()
    with tqdm(total=iend, unit="step", desc=f"oracle {config.title}") as bar:
        for iint in range(1, iend + 1):
            run_steps(state, config, iint, iint)
            bar.set_postfix(time_days=f"{config.dti * iint / 86400:.4f}",
                            vamax=f"{np.abs(state['vaf']).max():.3g}")
            bar.update()
    elapsed = _time.perf_counter() - start
    path = output_dir / f"oracle_iint_{iend:06d}.npz"
    np.savez(path, time_days=config.dti * iend / 86400, **state)
    print(f"{iend} internal steps in {elapsed:.2f} s; final state written to {path}")
    return state
