"""The torch side of a pom2k call, looked up when called (so that the
tables the cores use are the ones checked): a routine by its pom2k name,
a routine as a call binds it, a main-program section."""
from __future__ import annotations

from collections.abc import Callable


def torch_routine(name: str) -> Callable:
    """The torch routine of that pom2k name: pompy.core.stepping.ROUTINES,
    else pompy.core (smol_adif)."""
    from pompy import core
    from pompy.core import stepping

    fn = stepping.ROUTINES.get(name)
    return fn if fn is not None else getattr(core, name)


def routine_forward(name: str, call: str) -> Callable:
    """(state, params) -> {actual name: output} of routine ``name`` called
    as pom2k's ``call`` binds it."""
    from pompy import calls

    return lambda s, p: calls.call(call, s, p, {calls.bind(call)[0]: torch_routine(name)})


SECTIONS = ("external_step", "implicit_step", "internal_step")


def section_forward(name: str, **solver) -> Callable:
    """(state, params) -> state of the main-program section ``name`` (one
    of SECTIONS) with the routines of ROUTINES; ``solver``: implicit_step's
    elevation solver, where given."""
    from pompy.core import stepping
    from pompy.core.external import implicit, split

    return {"external_step": lambda s, p: split.external_step(s, p, stepping.ROUTINES),
            "implicit_step": lambda s, p: implicit.implicit_step(s, p, stepping.ROUTINES, **solver),
            "internal_step": lambda s, p: stepping.internal_step(s, p, stepping.ROUTINES)}[name]
