"""``python -m pompy.generate`` (and torchrun's ``-m pompy.generate``
workers): pompy.generate.command.main in a process on tcmalloc where the
machine has it, chosen before torch loads (pompy.utils.allocator).
pompy.generate's ``__init__``, which Python imports first, loads nothing
of torch."""
if __name__ == "__main__":
    import sys

    from pompy.utils.allocator import reexec

    reexec()
    from pompy.generate.command import main

    sys.exit(main())
