"""pom2k call strings: the one binder, for the torch cores, the oracle
adapter and the tests.

A call is written as pom2k's main program writes it, e.g.
``advq(q2b,q2,uf,a,c)``: the actual arguments bind to the routine's pom2k
dummy arguments (``qb,q,qf,xflux,yflux``); every other argument of the
routine is a pom2k common-block name, looked up by that name in the state,
then in the parameters. A leaf module: the routines to run are given.
"""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import NamedTuple

from torch import Tensor

# pom2k's dummy arguments, for the routines that take any.
POM2K_DUMMIES = {
    "advct": ("xflux", "yflux", "curv"),
    "advave": ("curv2d",),
    "advq": ("qb", "q", "qf", "xflux", "yflux"),
    "advt1": ("fb", "f", "fclim", "ff", "xflux", "yflux"),
    "advt2": ("fb", "f", "fclim", "ff", "xflux", "yflux", "nitera", "sw"),
    "bcond": ("idx",),
    "dens": ("si", "ti", "rhoo"),
    "profq": ("a", "c", "dh", "dtef"),  # pom2k: sm, sh, dh, cc (aliases)
    "proft": ("f", "wfsurf", "fsurf", "nbc", "dh"),
    "vertvl": ("xflux", "yflux"),
}

# The calls as pom2k's main program makes them, used when only a name is given.
POM2K_CALLS = {
    "advct": "advct(a,c,ee)",
    "advave": "advave(tps)",
    "vertvl": "vertvl(a,c)",
    "profq": "profq(a,c,tps,dtef)",
    "dens": "dens(s,t,rho)",
}

_CALL = re.compile(r"^\s*(?:call\s+)?(\w+)\s*(?:\((.*)\))?\s*$")


def parse_call(call: str) -> tuple[str, list[str]]:
    """``'call advq(q2b,q2,uf,a,c)'`` -> ``('advq', ['q2b','q2','uf','a','c'])``."""
    m = _CALL.match(call)
    if not m:
        raise ValueError(f"cannot parse pom2k call {call!r}")
    name, actuals = m.group(1), m.group(2)
    return name, [a.strip() for a in actuals.split(",")] if actuals else []


@lru_cache(maxsize=None)
def bind(call: str) -> tuple[str, dict[str, str]]:
    """Routine name and {dummy argument: actual name or literal} (cached:
    do not modify the dict)."""
    name, actuals = parse_call(POM2K_CALLS.get(call.strip(), call))
    dummies = POM2K_DUMMIES.get(name, ())
    if actuals and len(actuals) != len(dummies):
        raise ValueError(f"{name} takes {len(dummies)} pom2k arguments {dummies}, got {actuals}")
    return name, dict(zip(dummies, actuals))


def argument(routine: str, arg: str, source: str, state, params):
    """The value bound to argument ``arg`` of ``routine``: the state's array
    named ``source``, else the parameter, else the number ``source`` spells."""
    if source in state:
        return state[source]
    if source in params:
        return params[source]
    number = literal(source)
    if number is None:
        raise KeyError(f"{routine}: no value for argument {arg!r}"
                       + (f" (bound to {source!r})" if source != arg else "")
                       + " in the state or the parameters")
    return number


@lru_cache(maxsize=1024)       # a step binds bcond's idx some 70 times
def literal(text: str) -> int | float | None:
    """The number an actual argument spells (``1``, ``.5d0``), else None."""
    try:
        value = float(text.lower().replace("d", "e"))
    except ValueError:
        return None
    return int(text) if re.fullmatch(r"[+-]?\d+", text.strip()) else value


def outputs(typename: str, fields: str) -> type:
    """The NamedTuple a routine returns: its in/output arguments (space
    separated, in the oracle's argument order), each a Tensor."""
    return NamedTuple(typename, [(name, Tensor) for name in fields.split()])


@lru_cache(maxsize=None)
def _parameters(fn: Callable) -> tuple[str, ...]:
    # the routine's own signature, through torch.compile and checkpoint wrappers
    return tuple(inspect.signature(inspect.unwrap(fn)).parameters)


@lru_cache(maxsize=4096)
def _plan(fn: Callable, call: str) -> tuple[str, dict[str, str], tuple[tuple[str, str], ...]]:
    # (routine name, binding, (argument, the name it reads)...): a step makes
    # some 90 calls, each binding tens of arguments
    name, binding = bind(call)
    return name, binding, tuple((arg, binding.get(arg, arg)) for arg in _parameters(fn))


def invoke(fn: Callable, call: str, s: Mapping, p: Mapping) -> tuple[NamedTuple, dict[str, str]]:
    """Run the torch routine ``fn`` as pom2k's ``call`` (each argument bound
    to its actual in ``s``, else ``p``, else the literal); its NamedTuple
    result and the binding."""
    name, binding, plan = _plan(fn, call)
    out = fn(**{arg: s[source] if source in s else argument(name, arg, source, s, p)
                for arg, source in plan})
    return out, binding


def call(text: str, s: Mapping, p: Mapping, routines: Mapping[str, Callable]) -> dict:
    """Run one routine of ``routines`` (name -> function) as pom2k's main
    program calls it, e.g. ``call("advq(q2b,q2,uf,a,c)", s, p, routines)``;
    the result maps the actual names to what the routine wrote."""
    out, binding = invoke(routines[bind(text)[0]], text, s, p)
    return {binding.get(f, f): v for f, v in zip(out._fields, out)}


def apply(s: dict, p: Mapping, *calls: str, routines: Mapping[str, Callable]) -> None:
    """Apply pom2k calls in order to the local state dict ``s`` (rebinding
    names, never writing a tensor in place)."""
    for text in calls:
        s.update(call(text, s, p, routines))
