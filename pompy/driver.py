"""Run a case with any core: NetCDF output at pom2k's print steps (or
every ``output_every`` days), restart files every ``restart_every`` days
and at the end; when the model blows up, or a SIGINT or SIGTERM stops it,
a restart file of the last good step and a message naming the step (for a
blow-up, the field and the place). Nothing a user wrote is overwritten
without ``overwrite``, never the restart a run continues from, and a run
that would not fit in memory is refused before anything is allocated.

Every core is driven through the same small interface (a "model"):
``iint`` (the last step taken), ``time0``, ``advance(last, on_step)``
(steps iint+1..last, telling ``on_step(iint, vamax)`` of each step, or of
each run of steps it takes at once: the oracle's chunks, by their last;
raising :class:`pompy.errors.ModelStop` with ``last_good`` set), ``numpy_state()`` (the state as pom2k-ordered float64
arrays) and ``load_state(arrays, iint, time0)``. The driver finds the
cores in their registry (pompy.cores); no core imports the driver.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time as _time
from pathlib import Path

from tqdm import tqdm

from pompy import cores, files
from pompy.config import Config, nint, state_differences
from pompy.core.model import forward_only
from pompy.distributed import torch_device
from pompy.errors import EnvironmentFault, InputError, Interrupted, ModelStop
from pompy.io import (OutputWriter, Restart, estimate_output_bytes, history_line, incomplete_path,
                      read_restart, restart_bytes, write_restart)
from pompy.resources import available_bytes, estimate_run_bytes, gigabytes
from pompy.signals import signals_caught

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


def every(config: Config, days: float, first: int, last: int) -> list[int]:
    """The steps first..last at a whole multiple of ``days`` (at least one step)."""
    n = max(nint(days * 86400 / config.dti), 1)
    return [iint for iint in range(first, last + 1) if iint % n == 0]


def record_steps(config: Config, first: int, last: int) -> list[int]:
    """The output records: every ``output_every`` days, else pom2k's print
    steps; the last step always."""
    if config.output_every <= 0:
        return print_steps(config, first, last)
    return sorted(set(every(config, config.output_every, first, last)) | {last})


def check_device(core: str, device: str, dtype: str, fortran_math: bool = False) -> None:
    """InputError unless the core (a torch core of pompy.cores, or
    "oracle") can run on ``device`` in ``dtype``."""
    oracle = core == cores.ORACLE
    if not oracle and core not in cores.CORES:
        raise InputError(f"unknown core {core!r}: one of {', '.join(cores.RUNNABLE)}")
    if (oracle or fortran_math) and (device != "cpu" or dtype != "float64"):
        what = "the oracle" if oracle else "--fortran-math"
        raise InputError(f"{what} runs on the CPU in float64 only (got --device {device} "
                         f"--dtype {dtype})")
    if fortran_math and (oracle or not cores.get(core).fortran_math):
        raise InputError(f"--fortran-math is for the torch cores (--core "
                         f"{' or '.join(n for n, s in cores.CORES.items() if s.fortran_math)})")
    import torch

    kind = torch_device(device).type
    if kind == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: this torch has no CUDA device")
    if kind not in ("cpu", "cuda"):
        raise InputError(f"--device {device}: pompy runs on cpu or cuda")


def check_compile(core: str, fortran_math: bool = False) -> None:
    """InputError where --compile cannot serve: the oracle, and
    fortran_math's host callbacks (whose steps run eagerly)."""
    if core == cores.ORACLE or not cores.get(core).compile:
        raise InputError(f"--compile is for the torch cores (--core "
                         f"{' or '.join(n for n in cores.NAMES if cores.get(n).compile)}), "
                         "not the Fortran oracle")
    if fortran_math:
        raise InputError("--compile and --fortran-math do not go together: pompy.compat."
                         "fortran_math's host callbacks run eagerly; drop one of them")


COMPILED = "whole-step graphs (pompy.core.compiled)"      # the files' torch_compile attribute
COMPILING = ("compiling the step graphs (torch.compile): minutes at the first run of a grid "
             "and precision, seconds once Inductor's cache (TORCHINDUCTOR_CACHE_DIR) holds them")


def make_model(config: Config, core: str = cores.DEFAULT, device: str = "cpu",
               dtype: str = "float64", restart: Path | Restart | None = None,
               check_cfl: bool = False, oracle: bool = False, check_every: int = 1,
               compile: bool = False):
    """A set-up model of ``core`` (one set-up), with ``check_cfl`` its CFL
    limit checked on that set-up (as `pompy run` does), at iint 0 or at
    the step of the restart (a file, or one read_restart gave). ``oracle``:
    the torch core's Fortran twin (``core="oracle"``: the default core's). A torch core
    reads its stop checks every ``check_every`` steps (Core.check_every)
    and with ``compile`` runs its steps as whole-step graphs
    (pompy.core.compiled)."""
    twin = core == cores.ORACLE or oracle
    spec = cores.get(cores.DEFAULT if core == cores.ORACLE else core)
    check_device(cores.ORACLE if twin else core, device, dtype)
    if compile:
        check_compile(cores.ORACLE if twin else core)
    if check_every != 1 and twin:
        raise InputError("--check-every is for the torch cores (the Fortran checks every step)")
    if twin:
        from pompy.oracle.driver import OracleModel

        model = OracleModel(config, core=spec.name)
    else:
        import torch

        model = spec.make(config, device=device, dtype=getattr(torch, dtype),
                          check_every=check_every, compile=compile)
        model.run_initialization()
    if check_cfl:                                   # the set-up's own grid, not a copy
        spec.check_cfl(config, model.state)
    if restart is not None:
        saved = restart if isinstance(restart, Restart) else read_restart(restart, config)
        model.load_state(model.numpy_state() | saved.state, iint=saved.iint, time0=saved.time0)
    return model


def output_files(output_dir: Path, core: str, first: int) -> tuple[Path, Path]:
    """(output, restart) files of a run starting at step ``first``. A
    continued run writes its own files (``_from_<N>``, N its first step
    less one), so neither the earlier run's output nor the restart it
    continues from is touched."""
    suffix = "" if first == 1 else f"_from_{first - 1:06d}"
    return output_dir / f"{core}_output{suffix}.nc", output_dir / f"{core}_restart{suffix}.nc"


def latest_restart(output_dir: Path, core: str) -> Path:
    """The restart a run with nread = 1 continues from: that of the latest
    segment in the folder (``<core>_restart.nc``, then ``..._from_<N>.nc``
    with the largest N)."""
    def start(path: Path) -> int:
        tail = path.stem.rpartition("_from_")[2]
        return int(tail) if tail.isdigit() else 0
    found = sorted(Path(output_dir).glob(f"{core}_restart*.nc"), key=start)
    if not found:
        raise InputError(f"nread=1: {output_dir} holds no {core}_restart*.nc to continue from "
                         "(give --restart FILE)")
    return found[-1]


def prepare_output(output_dir: Path, written: tuple[Path, ...], overwrite: bool) -> None:
    """The output folder made and writable (else EnvironmentFault); InputError
    if it is a file, or if it holds any of ``written`` and ``overwrite`` is
    off; EnvironmentFault if one to be replaced is open in another process."""
    for folder in (output_dir, *output_dir.parents):
        try:
            blocked = folder.exists() and not folder.is_dir()
        except OSError as err:             # a folder above this user may not enter
            raise files.fault(folder, err, "looking for the output folder") from None
        if blocked:
            where = "" if folder == output_dir else f" ({folder} is a file)"
            raise InputError(f"output folder {output_dir}{where if where else ' is a file'}; "
                             "give another --output")
    files.check_writable_folder(output_dir)
    taken = [f for f in written if f.exists()]
    if taken and not overwrite:
        raise InputError(f"{output_dir} already holds {', '.join(f.name for f in taken)} (from "
                         "an earlier run); give --overwrite to replace them, or another --output")
    for f in taken:
        files.check_unlocked(f)


def check_continuation(saved: Restart, path: Path, config: Config, core: str, dtype: str,
                       force: bool) -> str | None:
    """InputError if the restart at ``path`` was made by another core, in
    another precision or with other state parameters (pompy.config.
    RUN_CONTROL aside) than this run's, unless ``force``; then the
    differences, for the output's history (None when there are none)."""
    written = saved.written
    changed = [f"{what}: {written[what]} (restart) -> {now}"
               for what, now in (("core", core), ("dtype", dtype))
               if what in written and written[what] != now]
    if "namelist" in written:
        try:
            changed += state_differences(config, written["namelist"])
        except ValueError as err:       # ConfigError too: a value of the wrong type, say
            raise InputError(f"restart {path}: its namelist attribute cannot be read ({err})") \
                from None
    if not changed:
        return None
    if not force:
        raise InputError(f"restart {path} was made with other settings than this run's: "
                         f"{'; '.join(changed)}; continue with the restart's (its namelist is "
                         "in its `namelist` attribute), or give --force")
    return f"continued from {path} with --force despite: {'; '.join(changed)}"


def continuous_time(saved: Restart, config: Config) -> tuple[Restart, str]:
    """``saved`` with time0 moved so that its step keeps its model time
    under ``config``'s dti (a run forced on with another dti would
    otherwise step back in time), and the words for the history ("" when
    nothing moved)."""
    time0 = saved.time_days - config.dti * saved.iint / 86400
    if abs(time0 - saved.time0) <= 1e-12 * max(1.0, abs(saved.time_days)):
        return saved, ""
    moved = Restart(saved.state, saved.iint, saved.time_days, time0)
    moved.written = saved.written
    return moved, (f"; time0 moved from day {saved.time0:.9g} to {time0:.9g} so that model time "
                   f"goes on from day {saved.time_days:.9g} at dti={config.dti:g} s")


def continued_end(saved: Restart, config: Config) -> int:
    """The last step of a run continued from ``saved``: the end, in model
    time, that the run which wrote it was heading for (the same step unless
    --force changed dti); a restart of a finished run goes on for the
    config's ``days`` more."""
    end_days = float(saved.written.get("run_end_days", saved.time_days))
    steps = nint((end_days - saved.time_days) * 86400 / config.dti)
    return saved.iint + (steps if steps > 0 else config.iend)


def check_memory(config: Config, core: str, dtype: str, force: bool, members: int = 1) -> int:
    """The estimated peak memory of the run (of ``members`` run together);
    InputError if more than is available, unless ``force``."""
    need = estimate_run_bytes(config, cores.is_twin(core), dtype, members=members)
    have = available_bytes()
    if have is not None and need > have and not force:
        together = f" ({members} members together)" if members > 1 else ""
        raise InputError(f"a {config.im}x{config.jm}x{config.kb} run{together} of the {core} core in {dtype} "
                         f"needs about {gigabytes(need)} of memory and {gigabytes(have)} is "
                         "available; give --force to run it anyway")
    return need


def clock(seconds: float) -> str:
    """h:mm:ss."""
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Steps done, model day and vamax: a bar on a terminal, else (a log, a
    pipe) one plain line at each 5 % of the steps (``marks``: 20 a run),
    with the time elapsed and the time left at the rate so far (logs get
    lines, not thousands of carriage returns). A terminal that reports no
    size gets a bar as on 80 x 24."""

    MARKS = 20                      # lines in a log: one every 100/MARKS %

    def __init__(self, total: int, desc: str, enabled: bool, stream=None, unit: str = "step",
                 marks: int = MARKS, start: int = 0):
        self.stream, self.marks = stream or sys.stderr, marks
        self.iint = start                   # the last step told of (update)
        self.total, self.desc, self.done = total, desc, 0
        self.start = _time.perf_counter()
        tty = enabled and self.stream.isatty()
        # tqdm draws nothing on a terminal of 0 lines (its bar "below the screen")
        size = {} if _has_size(self.stream) else {"ncols": 80, "nrows": 24}
        self.bar = tqdm(total=total, unit=unit, desc=desc, file=self.stream,
                        **size) if tty else None
        self.plain = enabled and not tty

    def update(self, iint: int, days: float, vamax: float) -> None:
        """Model steps done up to ``iint`` (one, or a model's run of them: the
        oracle's chunks) and that step's model day and vamax."""
        steps, self.iint = iint - self.iint, iint
        self.advance(f"step {iint}", f"day {days:.4f}, vamax {vamax:.3g}", steps, iint=iint,
                     days=f"{days:.4f}", vamax=f"{vamax:.3g}")

    def advance(self, which: str, more: str = "", count: int = 1, **postfix) -> None:
        """``count`` more of ``total`` done, ``which`` the last: ``which`` and
        ``more`` in a log's line, ``postfix`` beside a terminal's bar."""
        self.done += count
        if self.bar is not None:
            self.bar.set_postfix(**postfix)
            self.bar.update(count)
            return
        mark = self.marks * self.done // self.total        # integers: no mark skipped
        if self.plain and mark > self.marks * (self.done - count) // self.total:
            elapsed = _time.perf_counter() - self.start
            left = elapsed / self.done * (self.total - self.done)
            print(f"{self.desc}: {which} ({100 * self.done // self.total}%), "
                  f"{more + ', ' if more else ''}elapsed {clock(elapsed)}, ETA {clock(left)}",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _has_size(stream) -> bool:
    """Whether the terminal of ``stream`` reports its size (a pty made by a
    program may report 0 x 0)."""
    try:
        size = os.get_terminal_size(stream.fileno())
        return size.columns > 0 and size.lines > 0
    except (OSError, ValueError, AttributeError):
        return False


def run_case(config: Config, output_dir: Path, core: str = cores.DEFAULT, steps: int | None = None,
             restart: Path | Restart | None = None, device: str = "cpu", dtype: str = "float64",
             progress: bool = True, check_cfl: bool = False, overwrite: bool = False,
             force: bool = False, fortran_math: bool = False, oracle: bool = False,
             check_every: int = 1, compile: bool = False, days: float | None = None):
    """Run a case: ``<core>_output.nc`` at the record steps and
    ``<core>_restart.nc`` every ``restart_every`` days and at the end (a run
    continued from a restart at step N writes ``..._from_<N>.nc`` files:
    see output_files). ``steps`` or ``days`` long, else the config's days;
    a run continued from a restart file goes on to the end its first run
    was heading for (continued_end), and is refused if the restart was made
    with another core, dtype or state parameter unless ``force``
    (check_continuation). On a blow-up or a signal the restart holds the
    last good step and the raised ModelStop or Interrupted names it; a
    failed write raises EnvironmentFault at once (the output so far kept
    under its ``.incomplete.nc`` name). ``compile``: whole-step graphs
    (torch.compile). Returns the model."""
    if oracle and core in (cores.ORACLE, cores.DEFAULT):
        raise InputError(f"--oracle goes with --core {' or '.join(cores.NAMES[1:])} (its Fortran "
                         f"twin); the {cores.DEFAULT} core's Fortran driver is --core oracle")
    check_device(cores.ORACLE if oracle else core, device, dtype, fortran_math)
    if compile:
        check_compile(cores.ORACLE if oracle else core, fortran_math)
    name = cores.get(core).twin_name if oracle else core          # the files' prefix
    # a Restart object is the caller's own state (not validated as a file is)
    saved = restart if restart is None or isinstance(restart, Restart) else read_restart(restart, config)
    history = None
    if isinstance(restart, (str, Path)):
        history = check_continuation(saved, Path(restart), config, name, dtype, force)
        if history is not None:
            saved, moved = continuous_time(saved, config)
            history += moved
    first = saved.iint + 1 if saved is not None else 1
    if steps is None and days is not None:
        steps = max(nint(days * 86400 / config.dti), 1)
    if steps is not None:
        last = first - 1 + steps
    else:
        last = continued_end(saved, config) if isinstance(restart, (str, Path)) else \
            first - 1 + config.iend
    output_dir = Path(output_dir)
    out_path, restart_path = output_files(output_dir, name, first)
    if isinstance(restart, (str, Path)) and Path(restart).resolve() in (out_path.resolve(),
                                                                       restart_path.resolve()):
        raise InputError(f"the restart to continue from, {restart}, is a file this run would "
                         "write (it continues from its own step); give another --output")
    check_memory(config, name, dtype, force)
    made = not os.path.exists(output_dir)    # no error where a folder above may not be entered
    prepare_output(output_dir, (out_path, restart_path, incomplete_path(out_path)), overwrite)
    records = record_steps(config, first, last)
    size = estimate_output_bytes(config, len(records))
    if progress and size > 1e9:
        print(f"pompy: the output will take about {gigabytes(size)} ({len(records)} records); "
              "--output-every DAYS writes fewer", file=sys.stderr)
    if progress and compile:
        print(f"pompy: {COMPILING}", file=sys.stderr)
    if progress and isinstance(restart, (str, Path)):
        print(f"pompy: continuing from iint={saved.iint} (day {saved.time_days:.4f}) to "
              f"iint={last}" + ("" if steps is not None else
                                " (where the run that wrote the restart was to end)"
                                if last - saved.iint != config.iend else
                                " (the config's days more)"), file=sys.stderr)
    if history is not None:
        print(f"pompy: {history}", file=sys.stderr)
    with _elementary_functions(fortran_math):
        try:
            model = make_model(config, core, device, dtype, saved, check_cfl, oracle,
                               check_every, compile)
        except InputError:              # a bad IC file, say: no empty folder left behind
            if made and not any(output_dir.iterdir()):
                output_dir.rmdir()
            raise
        return _time_loop(model, config, name, first, last, records, out_path, restart_path,
                          progress, fortran_math, "float64" if cores.is_twin(name) else dtype,
                          history)


def _closing(writer: OutputWriter, error: BaseException, status: str | None = None
             ) -> BaseException:
    """``error``, the run's own, after closing ``writer`` (put in place with
    ``status``, a clean stop; else left under its incomplete name); a failed
    output record (its error not raised yet) noted on it, never in its place."""
    record_error = writer.abandon(status)
    if record_error is not None:
        error.add_note(f"pompy: an output record failed too: {record_error}")
    return error


def _elementary_functions(fortran_math: bool):
    if not fortran_math:
        return contextlib.nullcontext()
    from pompy.compat import fortran_math as pom2k_functions

    return pom2k_functions()


def _kept(writer: OutputWriter, restart: Path | BaseException, iint: int) -> str:
    """What a run that failed to write kept, for its message."""
    records = ("no record is" if writer.last_iint is None
               else f"the records up to iint={writer.last_iint} are")
    where = f"{records} readable in {writer.part} (status: incomplete)"
    if isinstance(restart, Path):
        return f"{where}; the restart of iint={iint} is in {restart}"
    return f"{where}; the restart of iint={iint} could not be written either ({restart}), an " \
        "earlier one is as it was"


def _run_attributes(model, core: str, dtype: str, fortran_math: bool,
                    history: str | None) -> dict:
    """What a run's output and restart files say of how they were made."""
    attributes = {"core": core, "dtype": dtype, "elementary_functions": (
        "pom2k's (gfortran) via pompy.compat.fortran_math: bit for bit with Fortran"
        if fortran_math else "gfortran's (the oracle)" if cores.is_twin(core) else "torch's"),
        "torch_compile": COMPILED if getattr(model, "graphs", None) is not None else "none"}
    if history is not None:
        attributes["history"] = f"{history_line()}\n{history}"
    return attributes


def _noted(path: Path | EnvironmentFault, iint: int, error: BaseException) -> Path | None:
    """The restart written, or None with a note on ``error`` saying why not."""
    if isinstance(path, Path):
        return path
    error.add_note(f"pompy: the restart of iint={iint} could not be written: {path}")
    return None


def _close_output(writer, try_save, last: int) -> None:
    """The output's last record written and the file closed; on an error
    the restart of ``last`` is still tried, and a fault of the machine
    says what was kept."""
    try:
        writer.close()              # the last record; a record's error raised here
    except BaseException as exc:
        path = try_save()
        if isinstance(exc, EnvironmentFault):
            raise EnvironmentFault(f"{exc}; {_kept(writer, path, last)}") from None
        raise


def _time_loop(model, config: Config, core: str, first: int, last: int, records: list[int],
               out_path: Path, restart_path: Path, progress: bool, fortran_math: bool,
               dtype: str = "float64", history: str | None = None):
    days = lambda iint: config.dti * iint / 86400 + model.time0  # noqa: E731
    restarts = set(every(config, config.restart_every, first, last)) if config.restart_every > 0 \
        else set()
    attributes = _run_attributes(model, core, dtype, fortran_math, history)

    def save(state: dict, iint: int) -> Path:
        writer.drain()          # HDF5 is not thread-safe: the output record first
        return write_restart(restart_path, config, state, iint, days(iint), model.time0,
                             attributes=attributes | {"run_end_days": days(last)})

    def try_save(state: dict, iint: int) -> Path | EnvironmentFault:
        """The restart, or the fault that kept it from being written."""
        try:
            return save(state, iint)
        except EnvironmentFault as fault:
            return fault

    def saved_or_noted(state: dict, iint: int, error: BaseException) -> Path | None:
        return _noted(try_save(state, iint), iint, error)

    def output_noted(error: BaseException) -> None:
        if writer.part.exists():
            error.add_note(f"pompy: the output is left in {writer.part}, unfinished")

    # a run keeps no graph: without one the cores may take host-side fast
    # paths (ops.sqrt_rn through numpy) that a gradient step must not
    with signals_caught() as caught, forward_only(model):   # from here on a signal loses no completed step
        # records compressed and written while the run goes on
        writer = OutputWriter(out_path, config, model.numpy_state(), attributes=attributes,
                              background=True, reserve=restart_bytes(config), series=getattr(model, "series", {}))
        bar = Progress(last - first + 1, f"{core} {config.title}", progress, start=first - 1)
        start = _time.perf_counter()

        def on_step(iint: int, vamax: float) -> None:
            bar.update(iint, days(iint), vamax)
            writer.failed()                 # a record that failed stops the run now
            if caught:
                raise Interrupted(caught[0])
        try:
            for stop in sorted(set(records) | restarts):
                model.advance(stop, on_step)
                if stop in records:
                    writer.write(model.numpy_state(), stop, days(stop),
                                 {n: float(v) for n, v in getattr(model, "series", {}).items()})
                if stop in restarts:
                    save(model.numpy_state(), stop)
                if caught:
                    raise Interrupted(caught[0])
        except ModelStop as exc:
            stopped = exc.with_restart(None)
            path = saved_or_noted(exc.last_good, exc.iint - 1, stopped)
            if path is not None:
                stopped = exc.with_restart(path)
            _closing(writer, stopped, f"stopped: the model blew up at iint={exc.iint}")
            output_noted(stopped)
            raise stopped from None
        except Interrupted as exc:
            exc.iint = model.iint
            exc.restart = saved_or_noted(model.numpy_state(), model.iint, exc)
            _closing(writer, exc, f"stopped by a signal after iint={model.iint}")
            output_noted(exc)
            raise exc
        except EnvironmentFault as exc:
            writer.abandon()
            path = try_save(model.numpy_state(), model.iint)
            raise EnvironmentFault(f"{exc}; {_kept(writer, path, model.iint)}") from None
        except BaseException as exc:
            raise _closing(writer, exc)
        finally:
            bar.close()
        _close_output(writer, lambda: try_save(model.numpy_state(), last), last)
        save(model.numpy_state(), last)       # a signal now finds the run complete
    if progress:
        print(f"{last - first + 1} internal steps in {_time.perf_counter() - start:.2f} s; "
              f"output in {out_path}, restart in {restart_path}")
    return model
