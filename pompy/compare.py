"""``pompy compare A.nc B.nc``: field-by-field, time-by-time differences.

For every variable the two files share (with a time dimension: per record),
prints the maximum absolute difference and the maximum difference relative
to the field's maximum magnitude in A; the exit status is 1 when any
relative difference exceeds the tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np


@dataclass(frozen=True)
class Difference:
    name: str
    record: int | None      # time index, None for fields without time
    max_abs: float
    max_rel: float


def differences(a_path: Path, b_path: Path) -> list[Difference]:
    out = []
    with netCDF4.Dataset(a_path) as a, netCDF4.Dataset(b_path) as b:
        a.set_auto_mask(False)
        b.set_auto_mask(False)
        for name in sorted(set(a.variables) & set(b.variables)):
            va, vb = a[name], b[name]
            if va.shape != vb.shape:
                raise ValueError(f"{name}: shape {va.shape} in {a_path} but {vb.shape} in {b_path}")
            if not np.issubdtype(va.dtype, np.floating):
                continue
            timed = va.dimensions[:1] == ("time",) and name != "time"
            records = range(va.shape[0]) if timed else [None]
            for r in records:
                x = np.asarray(va[r] if timed else va[:], dtype=np.float64)
                y = np.asarray(vb[r] if timed else vb[:], dtype=np.float64)
                diff = np.abs(x - y)
                if not np.array_equal(np.isnan(x), np.isnan(y)):
                    max_abs = float("inf")        # NaN in one file only
                else:
                    max_abs = float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0
                scale = float(np.nanmax(np.abs(x))) if x.size else 0.0
                out.append(Difference(name, r, max_abs, max_abs / scale if scale > 0 else max_abs))
    return out


def report(diffs: list[Difference], tolerance: float) -> tuple[str, bool]:
    lines = [f"{'field':<10} {'time':>5} {'max |a-b|':>12} {'max rel':>12}"]
    ok = True
    for d in diffs:
        bad = d.max_rel > tolerance
        ok &= not bad
        lines.append(f"{d.name:<10} {'-' if d.record is None else d.record:>5} "
                     f"{d.max_abs:12.3e} {d.max_rel:12.3e}{'  > tolerance' if bad else ''}")
    lines.append(f"{'all within' if ok else 'NOT within'} relative tolerance {tolerance:g}")
    return "\n".join(lines), ok
