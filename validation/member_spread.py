"""How far the members of a pompy generate dataset differ: for each field
the rms over wet points (levels 1..kb-1) of the difference between two
members at one snapshot, relative to the rms of the field itself (for t,
of its anomaly from the horizontal mean), averaged over member pairs.

    python validation/member_spread.py DATA [--snapshot N]

prints one row per field: the mean pairwise relative rms difference and
the range over the pairs (docs/training.md quotes it for the default
``--perturb params`` ensemble and the older ic and wind ones).
"""
from __future__ import annotations

import argparse
import itertools

import numpy as np

from pompy.dataset import SnapshotDataset

FIELDS = ("u", "v", "t", "s", "el", "ua", "va")
MASKS = {"u": "dum", "v": "dvm", "ua": "dum", "va": "dvm"}


def spread(data: str, snapshot: int) -> dict[str, tuple[float, float, float]]:
    ds = SnapshotDataset(data, horizon=1)
    per = len(ds) // len(ds.members)
    n = min(snapshot, per - 1) if snapshot >= 0 else per - 1
    samples = [ds[i * per + n] for i in range(len(ds.members))]
    grid = ds.restore_record(samples[0])
    out = {}
    for name in FIELDS:
        mask = grid[MASKS.get(name, "fsm")].numpy().astype(bool)
        fields = []
        for s in samples:
            a = s["state"][name].numpy()
            a = a[..., :-1][mask] if a.ndim == 3 else a[mask]
            fields.append(a - a.mean(0) if name in ("t", "s") else a)
        ratios = [np.sqrt(np.mean((x - y) ** 2)) / max(np.sqrt(np.mean(x ** 2)), 1e-30)
                  for x, y in itertools.combinations(fields, 2)]
        out[name] = (float(np.mean(ratios)), float(np.min(ratios)), float(np.max(ratios)))
    ds.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("--snapshot", type=int, default=-1, help="snapshot index (default last)")
    args = parser.parse_args()
    print("| field | mean relative rms difference | range over pairs |")
    print("|---|---|---|")
    for name, (mean, low, high) in spread(args.data, args.snapshot).items():
        print(f"| {name} | {mean:.3g} | {low:.3g} .. {high:.3g} |")


if __name__ == "__main__":
    main()
