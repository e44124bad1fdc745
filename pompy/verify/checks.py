"""The verification's results: :class:`Check` (one line of the table and
of the certificate), the relative error every comparison measures, and
:class:`WorstField`, the worst field of a comparison against its own bar."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


@dataclasses.dataclass
class Check:
    """One line of the table and of the certificate."""
    suite: str
    name: str
    figure: float
    tolerance: float
    passed: bool
    detail: str = ""
    measured: dict = dataclasses.field(default_factory=dict)   # more figures, by name

    def as_dict(self) -> dict[str, Any]:
        return _json_ready({"suite": self.suite, "name": self.name, "figure": self.figure,
                            "tolerance": self.tolerance, "passed": bool(self.passed),
                            "detail": self.detail, **self.measured})


def crashed(suite: str, name: str, tolerance: float, exc: Exception,
            measured: dict | None = None) -> Check:
    """The failed check of what raised ``exc`` (a routine that fails to run
    fails its check): an infinite figure, the exception as its detail."""
    return Check(suite, name, math.inf, tolerance, False, f"{type(exc).__name__}: {exc}",
                 measured or {})


def _json_ready(value: Any) -> Any:
    """``value`` with every float JSON cannot hold (NaN, inf) as its name."""
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def within(figure: float, tolerance: float) -> bool:
    return bool(figure <= tolerance)            # a NaN fails


def relative_error(got: np.ndarray, want: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """max |got - want| over max |want| (absolute where want is all zero)
    and where (1-based (i, j, k)); NaN anywhere is an infinite error."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if want.size == 0:
        return 0.0, ()
    diff = np.abs(got - want)
    if not np.isfinite(diff).all():
        where = np.unravel_index(np.argmax(~np.isfinite(diff)), diff.shape)
        return math.inf, tuple(int(x) + 1 for x in where)
    where = np.unravel_index(np.argmax(diff), diff.shape)
    scale = float(np.abs(want).max())
    err = float(diff.max())
    return (err / scale if scale > 0 else err), tuple(int(x) + 1 for x in where)


class WorstField:
    """The worst field of a comparison, relative to its own tolerance."""

    def __init__(self):
        self.ratio, self.figure, self.tolerance, self.where = -1.0, 0.0, 0.0, ""

    def add(self, err: float, tol: float, where: str) -> None:
        ratio = math.inf if not math.isfinite(err) else (err / tol if tol > 0 else
                                                          (0.0 if err == 0 else math.inf))
        if ratio > self.ratio:
            self.ratio, self.figure, self.tolerance, self.where = ratio, err, tol, where

    def check(self, suite: str, name: str, **measured) -> Check:
        return Check(suite, name, self.figure, self.tolerance,
                     within(self.figure, self.tolerance), self.where, measured)


def reported(checks, report) -> list[Check]:
    """``checks`` (any iterable), each passed to ``report`` as it comes."""
    done = []
    for check in checks:
        done.append(check)
        report(check)
    return done
