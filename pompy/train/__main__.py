"""``python -m pompy.train`` (and torchrun's ``-m pompy.train`` workers):
pompy.train.cli.main in a process on tcmalloc where the machine has it,
chosen before torch loads (pompy.utils.allocator). pompy.train's
``__init__``, which Python imports first, loads nothing of torch."""
if __name__ == "__main__":
    from pompy.utils.allocator import reexec

    reexec()
    from pompy.train.cli import main

    main(leave=True)
