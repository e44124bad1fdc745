"""``python -m pompy.oracle build [--force]``: build the Fortran oracle."""
import argparse
import sys

from pompy.oracle.build import OracleBuildError, build


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pompy.oracle")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile reference_fortran/ with f2py into $POMPY_HOME/oracle (cached)")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    try:
        build(verbose=True, force=args.force)
    except OracleBuildError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
