"""``pompy compare A.nc B.nc``: field-by-field, record-by-record differences.

Records are matched by their ``iint`` (by ``time`` in files without one),
so a run continued from a restart compares with the uninterrupted run on
the records both hold; the report says how many matched and which were in
one file only. For every variable the two files share (with a time
dimension: per common record) it gives the maximum absolute difference and
the maximum difference relative to the field's maximum magnitude in A;
``report`` says whether every relative difference is within the tolerance:
one given for all fields, or by default pompy report's bars, 1e-10 and
1e-8 for the diagnostic fields (l, km, kh, kq, w, ... amplify the
prognostic fields' rounding about 100-fold: pompy.report.checks).
A file that is missing or not NetCDF, variables of different shapes, or
files with no record in common raise :class:`pompy.errors.InputError`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pompy.errors import InputError
from pompy.io import open_netcdf
from pompy.variables import SERIES, VARIABLES

# the default bars, relative to each field's max magnitude in A (why each:
# pompy.report.checks, whose verdicts use them too)
PROGNOSTIC_BAR = 1e-10
DIAGNOSTIC_BAR = 1e-8

# Times of the same step agree to the last bit in pompy's files (both runs
# compute dti*iint/86400 + time0); the slack is for other writers, and far
# below any time step (1e-9 days = 86 microseconds).
TIME_SLACK_DAYS = 1e-9


@dataclass(frozen=True)
class Difference:
    name: str
    record: int | float | None   # the record's iint (or time); None for fields without time
    max_abs: float
    max_rel: float


@dataclass(frozen=True)
class Comparison:
    """The differences of two files, iterable as its Differences."""
    a: Path
    b: Path
    key: str | None              # "iint" or "time": what records were matched by; None: no records
    common: tuple                # key values of the records both files hold, in A's order
    only_a: tuple
    only_b: tuple
    fields_only_a: tuple[str, ...]
    fields_only_b: tuple[str, ...]
    diffs: tuple[Difference, ...]

    def __iter__(self) -> Iterator[Difference]:
        return iter(self.diffs)

    def __len__(self) -> int:
        return len(self.diffs)


def differences(a_path: Path, b_path: Path) -> Comparison:
    """Every shared variable's differences on the records both files hold."""
    with open_netcdf(a_path) as a, open_netcdf(b_path) as b:
        key = _record_key(a, b)
        keys_a, keys_b = _keys(a, key, a_path), _keys(b, key, b_path)
        pairs = _pairs(keys_a, keys_b, key)
        if key is not None and not pairs:
            raise InputError(f"no record in common: {a_path} holds {key} {_listing(keys_a)}, "
                             f"{b_path} holds {key} {_listing(keys_b)}")
        labels = [_label(keys_a[i]) for i, _ in pairs]
        names_a, names_b = set(a.variables), set(b.variables)
        diffs = []
        for name in sorted(names_a & names_b):
            diffs += _field(a, b, name, pairs, labels, (a_path, b_path))
    matched_a, matched_b = {i for i, _ in pairs}, {j for _, j in pairs}
    return Comparison(
        Path(a_path), Path(b_path), key, tuple(labels),
        tuple(_label(k) for i, k in enumerate(keys_a) if i not in matched_a),
        tuple(_label(k) for j, k in enumerate(keys_b) if j not in matched_b),
        tuple(sorted(names_a - names_b)), tuple(sorted(names_b - names_a)), tuple(diffs))


def _record_key(a, b) -> str | None:
    """iint where both files have it, else time; None where neither has records."""
    for key in ("iint", "time"):
        if key in a.variables and key in b.variables:
            return key
    return None


def _keys(ds, key: str | None, path: Path) -> np.ndarray:
    if key is None:
        return np.empty(0)
    keys = np.asarray(ds[key][:])
    if len(np.unique(keys)) != len(keys):
        values, counts = np.unique(keys, return_counts=True)
        raise InputError(f"{path}: record {key} {_label(values[counts > 1][0])} appears "
                         "more than once")
    return keys


def _pairs(keys_a: np.ndarray, keys_b: np.ndarray, key: str | None) -> list[tuple[int, int]]:
    """(index in A, index in B) of each record both files hold."""
    slack = TIME_SLACK_DAYS if key == "time" else 0
    pairs = []
    for i, k in enumerate(keys_a):
        match = np.flatnonzero(np.abs(keys_b - k) <= slack)
        if match.size:
            pairs.append((i, int(match[0])))
    return pairs


def _label(value) -> int | float:
    return int(value) if np.issubdtype(np.asarray(value).dtype, np.integer) else float(value)


def _field(a, b, name: str, pairs, labels, paths) -> list[Difference]:
    """One variable's differences, per common record if it has a time dimension."""
    if name in ("time", "iint"):                  # the record keys, matched already
        return []
    va, vb = a[name], b[name]
    timed = va.dimensions[:1] == ("time",)
    if timed != (vb.dimensions[:1] == ("time",)) or \
            (va.shape[1:] if timed else va.shape) != (vb.shape[1:] if timed else vb.shape):
        raise InputError(f"{name} has dims {va.dimensions} and shape {va.shape} in {paths[0]} "
                         f"but dims {vb.dimensions} and shape {vb.shape} in {paths[1]}")
    if not np.issubdtype(va.dtype, np.floating):
        return []
    if not timed:
        return [difference(name, None, va[:], vb[:])]
    return [difference(name, label, va[i], vb[j]) for (i, j), label in zip(pairs, labels)]


def difference(name: str, record, x, y) -> Difference:
    """The Difference of two arrays of field ``name`` at ``record`` (also
    pompy.report's, so that a report and pompy compare agree)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    diff = np.abs(x - y)
    if not np.array_equal(np.isnan(x), np.isnan(y)):
        max_abs = float("inf")        # NaN in one file only
    else:
        max_abs = float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0
    scale = float(np.nanmax(np.abs(x))) if x.size and not np.isnan(x).all() else 0.0
    return Difference(name, record, max_abs, max_abs / scale if scale > 0 else max_abs)


def check_tolerance(tolerance) -> float:
    """The tolerance as a float; NaN (which every comparison passes), inf or
    a negative number raises InputError."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(f"--tolerance {tolerance}: must be a finite number >= 0")
    return value


def default_bar(name: str) -> float:
    """The default tolerance of a field: DIAGNOSTIC_BAR for pompy's
    diagnostic variables, PROGNOSTIC_BAR for any other."""
    variable = VARIABLES.get(name)
    return DIAGNOSTIC_BAR if variable is not None and variable.kind == "diagnostic" \
        else PROGNOSTIC_BAR


def report(diffs: Comparison | Iterable[Difference],
           tolerance: float | None = None) -> tuple[str, bool]:
    """The differences as a table, and whether all are within ``tolerance``
    (relative; None: each field's :func:`default_bar`). A Comparison's
    table starts with the records it matched."""
    tolerance = None if tolerance is None else check_tolerance(tolerance)
    key = getattr(diffs, "key", None) or "time"
    lines = _summary(diffs) if isinstance(diffs, Comparison) else []
    lines.append(f"{'field':<10} {key:>8} {'max |a-b|':>12} {'max rel':>12}")
    ok = True
    for d in diffs:
        bar = default_bar(d.name) if tolerance is None else tolerance
        bad = not d.max_rel <= bar          # NaN is beyond any tolerance
        ok &= not bad
        record = "-" if d.record is None else f"{d.record:g}"
        lines.append(f"{d.name:<10} {record:>8} "
                     f"{d.max_abs:12.3e} {d.max_rel:12.3e}{'  > tolerance' if bad else ''}")
    bars = (f"relative tolerance {tolerance:g}" if tolerance is not None else
            f"relative tolerances ({PROGNOSTIC_BAR:g}; the diagnostic fields {DIAGNOSTIC_BAR:g})")
    missing = [n for n in getattr(diffs, "fields_only_a", ())   # B lacks a field A holds
               if n not in SERIES]                              # (a core's own series aside)
    lines.append(f"{'all within' if ok else 'NOT within'} {bars}"
                 + (f"; but {diffs.b} lacks {', '.join(missing)}" if missing else ""))
    return "\n".join(lines), ok and not missing


def _summary(c: Comparison) -> list[str]:
    lines = []
    if c.key is not None:
        lines.append(f"{len(c.common)} record{'' if len(c.common) == 1 else 's'} matched by "
                     f"{c.key}: {_listing(c.common)}")
        for path, only in ((c.a, c.only_a), (c.b, c.only_b)):
            if only:
                lines.append(f"{len(only)} records only in {path}, not compared: "
                             f"{c.key} {_listing(only)}")
    for path, only in ((c.a, c.fields_only_a), (c.b, c.fields_only_b)):
        if only:
            lines.append(f"variables only in {path}, not compared: {', '.join(only)}")
    return lines


def _listing(values, most: int = 8) -> str:
    """'6, 12, 18' or, for many, '6, 12, 18, ..., 588, 594, 600 (100 values)'."""
    text = [f"{v:g}" for v in values]
    if len(text) > most:
        text = text[:3] + ["..."] + text[-3:] + [f"({len(values)} values)"]
        return ", ".join(text[:-1]) + " " + text[-1]
    return ", ".join(text) or "none"
