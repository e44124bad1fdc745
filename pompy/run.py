"""Run a case with either core: NetCDF output at pom2k's print steps, a
restart file at the end, and, when the model blows up, a restart file of
the last good step and a message naming the step, the field and the place.

Both cores are driven through the same small interface (a "model"):
``iint`` (the last step taken), ``advance(last)`` (steps iint+1..last,
raising :class:`ModelStop` with ``last_good`` set), ``numpy_state()`` (the
state as pom2k-ordered float64 arrays) and ``name``.
"""
from __future__ import annotations

import time as _time
from pathlib import Path

import numpy as np

from pompy import variables
from pompy.config import Config, nint


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
                 restart: Path | None = None):
        self.iint, self.vamax, self.imax, self.jmax, self.vmaxl = iint, vamax, imax, jmax, vmaxl
        self.restart = restart
        super().__init__(self._finish(
            f"step iint={iint}: external velocity vamax={vamax:.6g} m/s exceeds "
            f"vmaxl={vmaxl:g} in field vaf at (i, j)=({imax}, {jmax})"))

    def with_restart(self, path: Path) -> CFLViolation:
        return CFLViolation(self.iint, self.vamax, self.imax, self.jmax, self.vmaxl, path)


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


def first_non_finite(state) -> tuple[str, tuple[int, ...]]:
    """The first field of a state (pom2k-ordered arrays; prognostic fields
    first) holding a NaN or inf, and the first such point, 1-based."""
    names = variables.names("prognostic")
    for name in names + [n for n in state if n not in names]:
        bad = ~np.isfinite(np.asarray(state[name]))
        if bad.any():
            return name, tuple(int(x) + 1 for x in np.argwhere(bad)[0])
    raise ValueError("every field is finite")


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


def make_model(config: Config, core: str = "explicit", device: str = "cpu",
               dtype: str = "float64", restart: Path | None = None):
    """A set-up model of ``core`` ("explicit" or "oracle"), at iint 0 or at
    the step of the restart file."""
    from pompy.io import read_restart

    saved = read_restart(restart) if restart is not None else None
    if core == "oracle":
        from pompy.oracle.run import OracleModel

        if device != "cpu" or dtype != "float64":
            raise ValueError("the oracle runs on the CPU in float64 only")
        return OracleModel(config, saved)
    if core == "explicit":
        import torch

        from pompy.core.explicit import ExplicitCore

        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {device}: this torch has no CUDA device")

        model = ExplicitCore(config, device=device, dtype=getattr(torch, dtype))
        model.run_initialization()
        if saved is not None:
            state = model.numpy_state() | saved[0]
            model.load_state(state, iint=saved[1])
        return model
    raise ValueError(f"unknown core {core!r}: explicit or oracle")


def run_case(config: Config, output_dir: Path, core: str = "explicit", steps: int | None = None,
             restart: Path | None = None, device: str = "cpu", dtype: str = "float64",
             progress: bool = True):
    """Run a case: ``<core>_output.nc`` at pom2k's print steps (for a run
    continued from a restart at step N, ``<core>_output_from_<N>.nc``) and
    ``<core>_restart.nc`` at the end; on a blow-up the restart holds the last
    good step and the raised ModelStop names it. Returns the model."""
    from tqdm import tqdm

    from pompy.io import OutputWriter, write_restart

    model = make_model(config, core, device, dtype, restart)
    first = model.iint + 1
    last = model.iint + (steps if steps is not None else config.iend)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # a continued run writes its own output file: the earlier one is kept
    out_name = f"{core}_output.nc" if first == 1 else f"{core}_output_from_{first - 1:06d}.nc"
    out_path, restart_path = output_dir / out_name, output_dir / f"{core}_restart.nc"
    days = lambda iint: config.dti * iint / 86400  # noqa: E731
    writer = OutputWriter(out_path, config, model.numpy_state())
    start = _time.perf_counter()
    try:
        with tqdm(total=last - first + 1, unit="step", desc=f"{core} {config.title}",
                  disable=not progress) as bar:
            for stop in print_steps(config, first, last):
                try:
                    model.advance(stop, bar)
                except ModelStop as exc:
                    path = write_restart(restart_path, config, exc.last_good, exc.iint - 1,
                                         days(exc.iint - 1))
                    raise exc.with_restart(path) from None
                writer.write(model.numpy_state(), stop, days(stop))
    finally:
        writer.close()
    write_restart(restart_path, config, model.numpy_state(), last, days(last))
    if progress:
        print(f"{last - first + 1} internal steps in {_time.perf_counter() - start:.2f} s; "
              f"output in {out_path}, restart in {restart_path}")
    return model


def progress_update(bar, iint: int, config: Config, vamax: float) -> None:
    """One step on the progress bar: step, model time (days) and vamax."""
    if bar is not None:
        bar.set_postfix(iint=iint, days=f"{config.dti * iint / 86400:.4f}", vamax=f"{vamax:.3g}")
        bar.update(1)


