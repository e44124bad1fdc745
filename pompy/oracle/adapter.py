"""Map a model state (a dict of pom2k-named arrays) onto oracle calls.

Every oracle subroutine takes explicit arguments named as in pom2k. A call
is written as pom2k's main program writes it, e.g. ``advq(q2b,q2,uf,a,c)``:
the actual arguments are bound to the routine's pom2k dummy arguments
(``qb,q,qf,xflux,yflux``); every other argument is looked up by name in the
state, then in the parameters. The state is copied, never modified; the
result holds every array the routine may have written, under state names.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pompy.calls import argument, bind
from pompy.oracle.build import load

_ARRAY = re.compile(r"^(\w+) : (?:input|in/output) rank-\d array\('d'\) with bounds \(([\w,]+)\)", re.M)


@dataclass(frozen=True)
class Signature:
    name: str
    args: tuple[str, ...]        # required arguments in order
    inout: frozenset[str]        # arrays the routine may write
    outputs: tuple[str, ...]     # scalars returned (intent(out))
    bounds: dict                 # {array argument: its Fortran bounds, e.g. ("im", "jm")}


def _parse_doc(name: str, doc: str) -> Signature:
    head = doc.strip().splitlines()[0]
    outputs: tuple[str, ...] = ()
    if "=" in head:
        lhs, head = head.split("=", 1)
        outputs = tuple(x.strip() for x in lhs.split(","))
    inner = head[head.index("(") + 1:head.rindex(")")]
    required = inner.split("[")[0]
    args = tuple(a.strip() for a in required.split(",") if a.strip())
    inout = frozenset(m.group(1) for m in re.finditer(r"^(\w+) : in/output", doc, re.M))
    bounds = {m.group(1): tuple(m.group(2).split(",")) for m in _ARRAY.finditer(doc)}
    return Signature(name, args, inout, outputs, bounds)


class Oracle:
    """The compiled Fortran oracle, called with pom2k-named state dicts."""

    def __init__(self, module=None):
        self.module = module if module is not None else load()
        self._sigs: dict[str, Signature] = {}

    def signature(self, name: str) -> Signature:
        if name not in self._sigs:
            fn = getattr(self.module, name, None)
            if fn is None:
                raise AttributeError(f"the oracle has no routine {name!r}")
            self._sigs[name] = _parse_doc(name, fn.__doc__)
        return self._sigs[name]

    def bind(self, call: str) -> tuple[str, dict[str, str]]:
        """Routine name and {dummy argument: actual name or literal}."""
        return bind(call)

    def call(self, call: str, state: Mapping, params: Mapping | None = None,
             inplace: bool = False) -> dict:
        """Run one routine on a copy of ``state``; return what it wrote.

        The result maps state names to the arrays after the call (every
        array the routine may write) and scalar outputs to their values.
        With ``inplace`` the routine writes the state's own arrays, which
        must then be Fortran-ordered float64 (as pompy.oracle.driver makes them).
        """
        params = params or {}
        name, binding = self.bind(call)
        sig = self.signature(name)
        kwargs, written = {}, {}
        for arg in sig.args:
            source = binding.get(arg, arg)
            value = argument(f"oracle {name}", arg, source, state, params)
            if source in state and arg in sig.inout:
                if not inplace:
                    value = np.array(value, dtype=np.float64, order="F", copy=True)
                written[source] = value
            kwargs[arg] = value
        result = getattr(self.module, name)(**kwargs)
        if sig.outputs:
            values = result if isinstance(result, tuple) else (result,)
            written.update(zip(sig.outputs, (v.item() if hasattr(v, "item") else v
                                             for v in values)))
        return written
