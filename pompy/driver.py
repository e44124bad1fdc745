"""Run a case with any core: NetCDF output at pom2k's print steps, a
restart file at the end, and, when the model blows up, a restart file of
the last good step and a message naming the step, the field and the place.

Every core is driven through the same small interface (a "model"):
``iint`` (the last step taken), ``time0``, ``advance(last, on_step)``
(steps iint+1..last, raising :class:`pompy.errors.ModelStop` with
``last_good`` set), ``numpy_state()`` (the state as pom2k-ordered float64
arrays), ``load_state(arrays, iint, time0)`` and ``name``. The driver
imports the cores; no core imports the driver.
"""
from __future__ import annotations

import time as _time
from pathlib import Path

from tqdm import tqdm

from pompy.config import Config, nint
from pompy.core.setup import check_external_cfl
from pompy.errors import ModelStop
from pompy.io import OutputWriter, read_restart, write_restart

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
               dtype: str = "float64", restart: Path | None = None, check_cfl: bool = False):
    """A set-up model of ``core`` (one set-up), with ``check_cfl`` its external CFL
    limit checked on that set-up (as `pompy run` does), at iint 0 or at
    the step of the restart file."""
    if core == "oracle":
        from pompy.oracle.driver import OracleModel

        if device != "cpu" or dtype != "float64":
            raise ValueError("the oracle runs on the CPU in float64 only")
        model = OracleModel(config)
    elif core == "explicit":
        import torch

        from pompy.core.explicit import ExplicitCore

        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {device}: this torch has no CUDA device")
        model = ExplicitCore(config, device=device, dtype=getattr(torch, dtype))
        model.run_initialization()
    else:
        raise ValueError(f"unknown core {core!r}: explicit or oracle")
    if check_cfl:
        check_external_cfl(config, model.state)     # the set-up's own grid, not a copy
    if restart is not None:
        saved = read_restart(restart)
        model.load_state(model.numpy_state() | saved.state, iint=saved.iint, time0=saved.time0)
    return model


def run_case(config: Config, output_dir: Path, core: str = "explicit", steps: int | None = None,
             restart: Path | None = None, device: str = "cpu", dtype: str = "float64",
             progress: bool = True, check_cfl: bool = False):
    """Run a case: ``<core>_output.nc`` at pom2k's print steps (for a run
    continued from a restart at step N, ``<core>_output_from_<N>.nc``) and
    ``<core>_restart.nc`` at the end; on a blow-up the restart holds the last
    good step and the raised ModelStop names it. Returns the model."""
    model = make_model(config, core, device, dtype, restart, check_cfl)
    first = model.iint + 1
    last = model.iint + (steps if steps is not None else config.iend)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # a continued run writes its own output file: the earlier one is kept
    out_name = f"{core}_output.nc" if first == 1 else f"{core}_output_from_{first - 1:06d}.nc"
    out_path, restart_path = output_dir / out_name, output_dir / f"{core}_restart.nc"
    days = lambda iint: config.dti * iint / 86400 + model.time0  # noqa: E731
    writer = OutputWriter(out_path, config, model.numpy_state())
    start = _time.perf_counter()
    try:
        with tqdm(total=last - first + 1, unit="step", desc=f"{core} {config.title}",
                  disable=not progress) as bar:
            for stop in print_steps(config, first, last):
                try:
                    model.advance(stop, lambda iint, vamax: progress_update(bar, iint, config,
                                                                            vamax))
                except ModelStop as exc:
                    path = write_restart(restart_path, config, exc.last_good, exc.iint - 1,
                                         days(exc.iint - 1), model.time0)
                    raise exc.with_restart(path) from None
                writer.write(model.numpy_state(), stop, days(stop))
    finally:
        writer.close()
    write_restart(restart_path, config, model.numpy_state(), last, days(last), model.time0)
    if progress:
        print(f"{last - first + 1} internal steps in {_time.perf_counter() - start:.2f} s; "
              f"output in {out_path}, restart in {restart_path}")
    return model


def progress_update(bar, iint: int, config: Config, vamax: float) -> None:
    """One step on the progress bar: step, model time (days) and vamax."""
    bar.set_postfix(iint=iint, days=f"{config.dti * iint / 86400:.4f}", vamax=f"{vamax:.3g}")
    bar.update(1)
