"""The ``pompy`` command: setup, run, config."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import shlex
import shutil
import signal
import subprocess
import sys
import traceback
from pathlib import Path

from pompy import __version__
from pompy import cores, settings
from pompy.config import DERIVED, POLICY_GROUP, Config, load_config, namelist_literal, pom2k_fields
from pompy.errors import EnvironmentFault, InputError, Interrupted, ModelStop
from pompy.oracle.build import BuildEnvironmentError, OracleBuildError
from pompy.settings import RunSettings, VerifySettings
from pompy.utils import allocator
from pompy.utils.streams import Tolerant

GFORTRAN_INSTALL = "sudo apt-get install -y gfortran"
TCMALLOC_PACKAGE = "libtcmalloc-minimal4"
TCMALLOC_INSTALL = f"sudo apt-get install -y {TCMALLOC_PACKAGE}"


EXIT_FAULT = 4          # the machine's fault (pompy.errors.EnvironmentFault)
# the commands whose product is what they print (a full device loses it: exit 4)
PRINTING = ("config", "compare")
BUG_REPORT = ("pompy: this is a bug in pompy, not in your input; please report it with the "
              "command line and the traceback above")


def main(argv: list[str] | None = None) -> int:
    """The command line: 0 done, 1 a comparison beyond tolerance, 2 bad
    input (one line "pompy: ..."), 3 a model stop (blow-up), 4 a fault of
    the machine (one line: a full disk, a locked file, a folder not
    writable), 128+N a signal N (130 SIGINT, 143 SIGTERM); a traceback only
    for bugs."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:                         # the command's usage, not pompy's list of commands
        parser.commands.choices[args.command].error(
            f"unrecognized arguments: {' '.join(unknown)}")
    args.words = list(sys.argv[1:] if argv is None else argv)    # as typed, for `pompy train`'s
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Tolerant(sys.stdout), Tolerant(sys.stderr)
    try:
        code = _handled(args)
        sys.stdout.flush()              # what a lost reader leaves in the buffer: dropped
        if sys.stdout.lost == errno.ENOSPC and code == 0 and args.command in PRINTING:
            print("pompy: standard output: no space left on the device; what the command "
                  "printed there is lost", file=sys.stderr)
            code = EXIT_FAULT
        sys.stderr.flush()
        return code
    finally:
        sys.stdout, sys.stderr = streams


def _handled(args: argparse.Namespace) -> int:
    """The command's exit code: its handler's, or its error's (main)."""
    try:
        return args.handler(args)
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        return 2
    except EnvironmentFault as err:
        print(f"pompy: {err}", file=sys.stderr)
        return EXIT_FAULT
    except OracleBuildError as err:      # the compiler's messages are in the log it names
        print(f"pompy: {str(err).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAULT
    except KeyboardInterrupt:
        print("pompy: interrupted (SIGINT) before the time loop; nothing was written",
              file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        print(BUG_REPORT, file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pompy", description="PyTorch port of the Princeton Ocean Model (pom2k).")
    parser.add_argument("--version", action="version", version=f"pompy {__version__}")
    commands = parser.commands = parser.add_subparsers(dest="command", required=True,
                                                       metavar="COMMAND")

    setup_cmd = commands.add_parser("setup", help="install gfortran if missing and build the Fortran oracle")
    setup_cmd.set_defaults(handler=setup)
    add_run_command(commands)
    add_settings_commands(commands)
    config_cmd = commands.add_parser("config", help="print the resolved config, derived quantities included")
    add_config_arguments(config_cmd)
    config_cmd.set_defaults(handler=show_config)
    return parser


def add_run_command(commands) -> None:
    """``pompy run`` and ``pompy compare``."""
    run_cmd = commands.add_parser("run", help="run a case")
    settings.add_arguments(run_cmd, RunSettings, print_config=False)
    run_cmd.set_defaults(handler=run_command)

    compare_cmd = commands.add_parser("compare", help="differences between two NetCDF outputs, field by field and time by time")
    compare_cmd.add_argument("a", type=Path, metavar="A.nc")
    compare_cmd.add_argument("b", type=Path, metavar="B.nc")
    compare_cmd.add_argument("--tolerance", type=float, default=None,
                             help="largest accepted difference relative to the field's max magnitude in A, "
                                  "for every field (default: 1e-10, and 1e-8 for the diagnostic fields "
                                  "l, km, kh, kq, w, ..., which amplify rounding: pompy report's bars)")
    compare_cmd.set_defaults(handler=compare)



def add_settings_commands(commands) -> None:
    """The commands whose settings pompy.settings declares (generate,
    evaluate, train, verify), and report."""
    from pompy.generate import DESCRIPTION, add_arguments as add_generate_arguments

    generate_cmd = commands.add_parser("generate", help="write a training dataset from an ensemble of runs",
                                       description=DESCRIPTION,
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_generate_arguments(generate_cmd)
    generate_cmd.set_defaults(handler=generate_command)

    from pompy.evaluate import DESCRIPTION as EVALUATE_DESCRIPTION, add_arguments as add_evaluate_arguments

    evaluate_cmd = commands.add_parser("evaluate", help="roll a trained corrector out on held-out members "
                                       "against the reference, with and without it",
                                       description=EVALUATE_DESCRIPTION,
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_evaluate_arguments(evaluate_cmd)
    evaluate_cmd.set_defaults(handler=evaluate_command)

    from pompy.train.cli import DESCRIPTION as TRAIN_DESCRIPTION, add_arguments as add_train_arguments

    train_cmd = commands.add_parser("train", help="train neural correctors through a verified torch "
                                    "core (torchrun --nproc_per_node=N -m pompy train ...)",
                                    description=TRAIN_DESCRIPTION)
    add_train_arguments(train_cmd)
    train_cmd.set_defaults(handler=train_command)

    verify_cmd = commands.add_parser(
        "verify", help="check a torch core against the Fortran oracle (parity, gradcheck, "
                       "gradient policies) and write the certificate the trainer requires")
    settings.add_arguments(verify_cmd, VerifySettings, print_config=False)
    verify_cmd.add_argument("--config", type=Path, dest="config_option", metavar="CONFIG.nml",
                            help=argparse.SUPPRESS)       # the older spelling, kept
    verify_cmd.set_defaults(handler=verify_command)

    from pompy.report import DESCRIPTION as REPORT_DESCRIPTION, add_arguments as add_report_arguments

    report_cmd = commands.add_parser("report", help="run the torch core(s) and the oracle side by "
                                     "side and write a reproducibility report (HTML and JSON)",
                                     description=REPORT_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_report_arguments(report_cmd)
    report_cmd.set_defaults(handler=report_command)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, metavar="CONFIG.nml", help="Fortran namelist with pom2k parameter names")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="override one parameter, value as in a namelist (repeatable)")


def setup(args: argparse.Namespace) -> int:
    """Install gfortran if it is missing (as root; otherwise say how), and
    tcmalloc where apt-get can (optional: pompy.utils.allocator), then build
    the oracle."""
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    if shutil.which("gfortran") is None:
        if os.geteuid() != 0:
            print("pompy setup: gfortran is not installed. Install it with:", file=sys.stderr)
            print(GFORTRAN_INSTALL)
            return 2
        if not _apt_install("gfortran", env):
            print("pompy setup: apt-get install -y gfortran failed", file=sys.stderr)
            return 1
    if allocator.tcmalloc_path() is None:
        if os.geteuid() == 0 and shutil.which("apt-get") is not None and _apt_install(TCMALLOC_PACKAGE, env):
            print(f"pompy setup: installed {TCMALLOC_PACKAGE} (tcmalloc: pompy's CPU steps run "
                  "faster on it)")
        else:
            print(f"pompy setup: tcmalloc is not installed, so pompy runs on the system's "
                  f"allocator, eager CPU steps about 10% slower; to install it: "
                  f"{TCMALLOC_INSTALL}", file=sys.stderr)
    from pompy.oracle.build import build

    try:
        path = build(verbose=True)
    except OracleBuildError as exc:
        print(f"pompy setup: {exc}", file=sys.stderr)
        return EXIT_FAULT if isinstance(exc, BuildEnvironmentError) else 1
    print(f"pompy setup: the Fortran oracle is built in {path.parent} "
          "($POMPY_HOME/oracle/<hash>; POMPY_HOME defaults to ~/.cache/pompy)")
    return 0


def _apt_install(package: str, env: dict) -> bool:
    """apt-get install, after an apt-get update where the lists lack it."""
    install = ["apt-get", "install", "-y", package]
    return subprocess.run(install, env=env).returncode == 0 or (
        subprocess.run(["apt-get", "update"], env=env).returncode == 0
        and subprocess.run(install, env=env).returncode == 0)


def run_command(args: argparse.Namespace) -> int:
    from pompy.driver import latest_restart, run_case

    s = settings.from_parsed(RunSettings, args)
    m, f = s.model, s.files
    config = load_config(s.config, s.overrides)
    every = {name: getattr(f, name) for name in ("restart_every", "output_every")
             if getattr(f, name) is not None}
    config = dataclasses.replace(config, **every)
    restart = f.restart
    if restart is None and config.nread == 1:
        restart = latest_restart(f.output, cores.get(m.core).twin_name if m.oracle else m.core)
    if restart is not None and not Path(restart).exists():
        raise InputError(f"restart file {restart} does not exist")
    try:
        run_case(config, f.output, core=m.core, steps=s.length.steps, restart=restart,
                 device=m.device, dtype=m.dtype, check_cfl=not s.checks.no_cfl_check,
                 overwrite=f.overwrite, force=f.force, fortran_math=m.fortran_math,
                 oracle=m.oracle, check_every=s.checks.check_every, compile=m.compile,
                 days=s.length.days)
    except ModelStop as exc:
        print(f"pompy run stopped: {exc}", file=sys.stderr)
        _print_notes(exc)
        return 3
    except Interrupted as exc:
        name = signal.Signals(exc.signum).name
        if exc.restart is None:
            print(f"pompy: {name} after step iint={exc.iint}; its restart could not be written",
                  file=sys.stderr)
            _print_notes(exc)
            return EXIT_FAULT
        print(f"pompy: {name} after step iint={exc.iint}; its restart is in {exc.restart}; "
              f"continue with: {continue_command(s, exc.restart)}", file=sys.stderr)
        _print_notes(exc)
        return 128 + exc.signum
    return 0


def _print_notes(error: BaseException) -> None:
    """What else went wrong while a run stopped (a failed record, a restart
    that could not be written), one line each."""
    for note in getattr(error, "__notes__", ()):
        print(note, file=sys.stderr)


# what a continued run is not given again: it goes on to the end the first was heading for
NOT_CONTINUED = ("config", "overrides", "steps", "days", "restart", "output", "overwrite")


def continue_command(s: RunSettings, restart: Path) -> str:
    """The `pompy run` that continues the run of ``s`` from ``restart`` on
    the same core, device, precision and parameters, to the end it was
    heading for (so no --steps or --days)."""
    words = ["pompy", "run", str(s.config)]
    for item in s.overrides:
        words += ["--set", item]
    values = settings.flat(s)
    for leaf in settings.leaves(RunSettings):
        value = values[leaf.name]
        if leaf.name in NOT_CONTINUED or value == leaf.default:
            continue
        words += [leaf.flag] if value is True else [leaf.flag, str(value)]
    return shlex.join(words + ["--restart", str(restart), "--output", str(s.files.output)])


def generate_command(args: argparse.Namespace) -> int:
    from pompy.generate import run_command as generate

    return generate(args)


def evaluate_command(args: argparse.Namespace) -> int:
    from pompy.evaluate import run_command as evaluate

    return evaluate(args)


def train_command(args: argparse.Namespace) -> int:
    """As ``python -m pompy.train``: the process ends with the status once
    the trainer is cleaned up (pompy.train.cli._leave: a torchrun rank once
    hung in Python's teardown), so an in-process caller does not get it back."""
    from pompy.train.cli import run_parsed

    return run_parsed(args, leave=True)


def verify_command(args: argparse.Namespace) -> int:
    from pompy.verify import run_command as verify

    if args.config is not None and args.config_option is not None \
            and args.config != args.config_option:
        raise InputError(f"pompy verify: two configs, {args.config} and --config "
                         f"{args.config_option}; give one")
    args.config = args.config or args.config_option
    return verify(settings.from_parsed(VerifySettings, args))


def report_command(args: argparse.Namespace) -> int:
    from pompy.report import run_command as report

    return report(args)


def compare(args: argparse.Namespace) -> int:
    from pompy.compare import check_tolerance, differences, report

    if args.tolerance is not None:
        check_tolerance(args.tolerance)
    text, ok = report(differences(args.a, args.b), args.tolerance)
    print(text)
    return 0 if ok else 1


def show_config(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    rows = [(f.name, getattr(config, f.name), f.metadata["doc"]) for f in pom2k_fields()]
    rows += [(name, getattr(config, name), "derived: " + getattr(Config, name).__doc__) for name in DERIVED]
    print("&pom2k")
    for name, value, doc in rows:
        line = f"    {name:<13} = {namelist_literal(value)}"
        print(f"{line:<38} ! {doc}" if name not in DERIVED else f"!   {line[4:]:<34} ! {doc}")
    print("/")
    policies = config.policies.to_dict()
    print(f"&{POLICY_GROUP}")
    if policies["override"] is not None:
        print(f"    override = {namelist_literal(policies['override'])}")
    for layer, policy in policies["layers"].items():
        print(f"    {layer} = {namelist_literal(policy)}")
    print("/")
    return 0
