"""``python -m pompy`` and the ``pompy`` console script: pompy.cli.main in a
process on tcmalloc where the machine has it (pompy.utils.allocator),
chosen before torch is imported."""
import sys

from pompy.utils.allocator import reexec


def entry() -> None:
    reexec()
    from pompy.cli import main
    sys.exit(main())


if __name__ == "__main__":
    entry()
