"""The command line's side of ``pompy verify``: the input check, the four
suites in turn and the certificate they write (:func:`verify`), and the
table it prints (:func:`run_command`)."""
from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pompy import cores
from pompy.config import Config
from pompy.settings.commands import DEFAULT_SAMPLES, DEFAULT_STEPS, VerifySettings
from pompy.verify.certificate import certificate_key, write_certificate
from pompy.verify.checks import Check
from pompy.verify.gradcheck import gradcheck_suite
from pompy.verify.parity import parity_suite
from pompy.verify.policies import policy_suite
from pompy.verify.run import run_suite
from pompy.verify.states import window

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def check_input(config: Config, core: str, device: str, dtype: str, samples: int, steps: int,
                force: bool = False) -> None:
    """InputError (exit 2) for what cannot be verified: an unknown core,
    device or dtype, a count below 1, a run of the core on the config's
    grid (what the whole-run parity steps) that would not fit in the
    memory (unless ``force``), a config breaking the core's CFL limit."""
    from pompy.driver import check_device, check_memory
    from pompy.errors import InputError

    if core not in cores.NAMES:
        raise InputError(f"--core {core}: pompy verify checks the torch cores: "
                         f"{', '.join(cores.NAMES)}")
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype}: one of {', '.join(DTYPES)}")
    if samples < 1 or steps < 1:
        raise InputError(f"--samples and --steps must be at least 1 (got {samples}, {steps})")
    check_device(core, device, dtype)
    check_memory(config, core, dtype, force)           # before the set-up allocates the grid
    from pompy.core import setup
    # the whole set-up (the internal limit reads t and s); a bad IC file: ConfigError
    cores.get(core).check_cfl(config, setup.checked_set_up(config))


def verify(config: Config, core: str = cores.DEFAULT, device: str = "cpu", dtype: str = "float64",
           samples: int = DEFAULT_SAMPLES, steps: int = DEFAULT_STEPS, seed: int = 0,
           config_name: str = "CONFIG", report: Callable[[Check], None] | None = None,
           checked: bool = False, progress: Callable[[str], None] | None = None
           ) -> tuple[list[Check], Path]:
    """Run the four suites and write the certificate; (checks, its path).
    The input is checked first (:func:`check_input`) unless ``checked``.
    ``progress`` is told of each suite as it starts and ends (a line each)."""
    from pompy.oracle import Oracle

    if not checked:
        check_input(config, core, device, dtype, samples, steps)
    report = report or (lambda check: None)
    progress = progress or (lambda line: None)
    torch_dtype = DTYPES[dtype]
    dev = torch.device(device)
    oracle = Oracle()
    key = certificate_key(core, dev, dtype, config)   # the sources verified: hashed before the checks
    started = time.perf_counter()
    checks, times = [], {}

    counts = suite_checks(core)

    def timed(suite, fn, *args):
        progress(f"{suite}: {counts[suite]} checks {suite_scope(suite, config)}")
        t0 = time.perf_counter()
        result = fn(*args)
        times[suite] = round(time.perf_counter() - t0, 3)
        progress(f"{suite}: done in {times[suite]:.0f} s, {time.perf_counter() - started:.0f} s "
                 "elapsed")
        return result

    checks += timed("parity", parity_suite, config, core, oracle, dev, torch_dtype, samples, seed,
                    report)
    run_checks, reference = timed("run", run_suite, config, core, oracle, dev, torch_dtype, steps,
                                  report)
    checks += run_checks
    checks += timed("gradcheck", gradcheck_suite, config, core, oracle, dev, seed, report)
    checks += timed("policies", policy_suite, dev, torch_dtype, report)
    times["total"] = round(time.perf_counter() - started, 3)
    extra = _settings(config, dev, dtype, samples, steps, seed, config_name, reference, times)
    extra["summary"] = {"checks": len(checks), "failed": [c.name for c in checks if not c.passed]}
    path = write_certificate(key, [c.as_dict() for c in checks], extra)
    return checks, path


def suite_checks(core: str) -> dict[str, int]:
    """How many checks each suite has for ``core`` (from their own tables)."""
    from pompy.verify import gradcheck, parity, policies, run

    return {"parity": len(parity.check_names(core)), "run": len(run.check_names(core)),
            "gradcheck": len(gradcheck.check_names(core)),
            "policies": len(policies.check_names())}


def suite_scope(suite: str, config: Config) -> str:
    """Where a suite's checks run: the routine checks on a window of a large
    grid (pompy.verify.states.WINDOW), the rest on the whole grid."""
    grid = window(config)
    whole = f"{config.im}x{config.jm}x{config.kb}"
    drawn = f"{grid.im}x{grid.jm}x{grid.kb}" + ("" if grid is config else
                                                 f", a window of the {whole} grid")
    return {"parity": f"(routines and sections on random states of {drawn}; set-ups on {whole})",
            "run": f"(the whole run on {whole})",
            "gradcheck": f"(routines and sections on random states of {drawn}; two whole steps "
                         f"on {whole}" + ("" if grid is config else
                                          ", as directional derivatives") + ")",
            "policies": "(the safe ops' gradient policies, on small tensors of their own)"}[suite]


def _settings(config: Config, dev: torch.device, dtype: str, samples: int, steps: int, seed: int,
              config_name: str, reference: str, seconds: dict) -> dict[str, Any]:
    """What the certificate records of the verification besides its checks."""
    from pompy import __version__

    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pompy": __version__, "config": config_name,
        "grid": {"im": config.im, "jm": config.jm, "kb": config.kb, "kl1": config.kl1,
                 "kl2": config.kl2},
        "device_name": (torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"),
        "samples": samples, "steps": steps, "seed": seed,
        "run_reference": reference,
        "gradcheck_dtype": "float64" + ("" if dtype == "float64" else
                                        " (gradients are checked in float64 on the same device; "
                                        "a float32 finite difference is noise)"),
        "seconds": seconds,
    }


def row(check: Check, width: int) -> str:
    """One table row: check (a ``width`` column), figure, tolerance,
    pass/fail (and the detail of a failure)."""
    line = (f"{check.name:<{width}} {check.figure:>10.3g} {check.tolerance:>10.3g}  "
            f"{'pass' if check.passed else 'FAIL'}")
    return line if check.passed else f"{line}  {check.detail}"


def header(width: int) -> str:
    return f"{'check':<{width}} {'figure':>10} {'tolerance':>10}  result"


# what the figures are, printed under the header
LEGEND = ("figure: parity and run, the largest difference from the Fortran relative to the "
          "field's largest magnitude (the worst field); gradcheck, the directional "
          "derivative's error in units of gradcheck's tolerance (1e-5 + 1e-3 x |the central "
          "difference|), so 1 is the bar; policies, the gradient's difference from the policy's, "
          "or the count of cases gone wrong")


def run_command(args: VerifySettings) -> int:
    """``pompy verify``: print the table, write the certificate; 0 when
    every check passed, 1 otherwise (bad input raises InputError: 2)."""
    from pompy.config import load_config

    config = load_config(args.config, args.overrides)
    check_input(config, args.core, args.device, args.dtype, args.samples, args.steps,
                args.force)
    from pompy import files
    from pompy.verify.certificate import certificate_dir

    # where the certificate goes, checked before minutes of checks
    files.check_writable_folder(certificate_dir(), "certificate folder")
    print(f"pompy verify: {args.config} ({config.im}x{config.jm}x{config.kb}), core {args.core}, "
          f"{args.device}, {args.dtype}, {args.samples} random states per routine, "
          f"{args.steps} steps", flush=True)
    from pompy.verify.certificate import check_names

    width = max(len(name) for name in check_names(args.core))
    print(LEGEND, flush=True)
    print(header(width), flush=True)
    started = time.perf_counter()
    checks, path = verify(config, args.core, args.device, args.dtype, args.samples, args.steps,
                          args.seed, str(args.config),
                          report=lambda check: print(row(check, width), flush=True), checked=True,
                          progress=lambda line: print(f"-- {line}", flush=True))
    failed = [c for c in checks if not c.passed]
    took = time.perf_counter() - started
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed in {took:.0f} s; "
          f"certificate: {path}")
    if failed:
        print("FAILED: " + ", ".join(c.name for c in failed))
        return 1
    return 0
