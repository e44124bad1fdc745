"""The ``pompy`` command: setup, run, config."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pompy.config import DERIVED, Config, load_config, pom2k_fields
from pompy.errors import ConfigError, ModelStop

GFORTRAN_INSTALL = "sudo apt-get install -y gfortran"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as err:
        print(f"pompy: {err}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pompy", description="PyTorch port of the Princeton Ocean Model (pom2k).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    setup_cmd = commands.add_parser("setup", help="install gfortran if missing and build the Fortran oracle")
    setup_cmd.set_defaults(handler=setup)

    run_cmd = commands.add_parser("run", help="run a case")
    add_config_arguments(run_cmd)
    run_cmd.add_argument("--core", choices=CORES, default="explicit",
                         help="the torch core (explicit, default) or the Fortran oracle")
    run_cmd.add_argument("--device", default="cpu", help="torch device of the explicit core: cpu, cuda, cuda:N")
    run_cmd.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                         help="precision of the explicit core (default float64)")
    run_cmd.add_argument("--no-cfl-check", action="store_true",
                         help="let a dte at or above the external CFL limit through (the run will blow up)")
    run_cmd.add_argument("--output", type=Path, help="output folder (default: output/<config name>)")
    run_cmd.add_argument("--steps", type=positive_int, help="internal steps to run (default: the config's iend)")
    run_cmd.add_argument("--restart", type=Path, metavar="FILE",
                         help="continue from a restart file written by an earlier run")
    run_cmd.set_defaults(handler=run_command)

    compare_cmd = commands.add_parser("compare", help="differences between two NetCDF outputs, field by field and time by time")
    compare_cmd.add_argument("a", type=Path, metavar="A.nc")
    compare_cmd.add_argument("b", type=Path, metavar="B.nc")
    compare_cmd.add_argument("--tolerance", type=float, default=1e-10,
                             help="largest accepted difference relative to the field's max magnitude in A (default 1e-10)")
    compare_cmd.set_defaults(handler=compare)

    config_cmd = commands.add_parser("config", help="print the resolved config, derived quantities included")
    add_config_arguments(config_cmd)
    config_cmd.set_defaults(handler=show_config)
    return parser


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, metavar="CONFIG.nml", help="Fortran namelist with pom2k parameter names")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="override one parameter, value as in a namelist (repeatable)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def setup(args: argparse.Namespace) -> int:
    """Install gfortran if it is missing (as root; otherwise say how), then build the oracle."""
    if shutil.which("gfortran") is None:
        if os.geteuid() != 0:
            print("pompy setup: gfortran is not installed. Install it with:", file=sys.stderr)
            print(GFORTRAN_INSTALL)
            return 2
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "gfortran"]):
            if subprocess.run(command, env=env).returncode != 0:
                print(f"pompy setup: {' '.join(command)} failed", file=sys.stderr)
                return 1
    from pompy.oracle.build import OracleBuildError, build

    try:
        path = build(verbose=True)
    except OracleBuildError as exc:
        print(f"pompy setup: {exc}", file=sys.stderr)
        return 1
    print(f"pompy setup: the Fortran oracle is built in {path.parent} "
          "($POMPY_HOME/oracle/<hash>; POMPY_HOME defaults to ~/.cache/pompy)")
    return 0


CORES = ("explicit", "oracle")


def run_command(args: argparse.Namespace) -> int:
    from pompy.driver import run_case

    config = load_config(args.config, args.set)
    output = args.output or Path("output") / args.config.stem
    restart = args.restart
    if restart is None and config.nread == 1:
        restart = output / f"{args.core}_restart.nc"
    if restart is not None and not Path(restart).exists():
        print(f"pompy run: restart file {restart} does not exist", file=sys.stderr)
        return 2
    try:
        run_case(config, output, core=args.core, steps=args.steps, restart=restart,
                 device=args.device, dtype=args.dtype, check_cfl=not args.no_cfl_check)
    except ModelStop as exc:
        print(f"pompy run stopped: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:
        print(f"pompy run: {exc}", file=sys.stderr)
        return 2
    return 0


def compare(args: argparse.Namespace) -> int:
    from pompy.compare import differences, report

    for path in (args.a, args.b):
        if not path.exists():
            print(f"pompy compare: {path} does not exist", file=sys.stderr)
            return 2
    text, ok = report(differences(args.a, args.b), args.tolerance)
    print(text)
    return 0 if ok else 1


def show_config(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    rows = [(f.name, getattr(config, f.name), f.metadata["doc"]) for f in pom2k_fields()]
    rows += [(name, getattr(config, name), "derived: " + getattr(Config, name).__doc__) for name in DERIVED]
    for name, value, doc in rows:
        print(f"{name:<9} = {value!r:<12} ! {doc}")
    policies = config.policies.to_dict()
    print(f"gradient policies: override {policies['override'] or 'none'}; layers "
          + (", ".join(f"{k}={v}" for k, v in policies["layers"].items()) or "built-in defaults"))
    return 0
