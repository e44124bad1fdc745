"""The long regression set: one `pompy report` per case, and an index page.

    python3 validation/regression.py --output regression           # every case, 3 days
    python3 validation/regression.py --output R --only box-mode3-nadv2 --days 0.5

Cases (configs/seamount.nml, configs/box.nml and an IC-file case, each
against the oracle with both torch cores, with torch's and with pom2k's
elementary functions): modes 2, 3 and 4, nadv 1 and 2. The IC-file case
(iproblem=3) starts from the seamount's set-up with a warm eddy of 0.5 degC
in the upper ocean, written to <output>/icfile/seamount_eddy_ic.nc. Each
case writes <output>/<case>/report.html and report.json; <output>/index.html
lists them with their verdicts and worst figures, <output>/index.json the
same. Exit 0 when every check of every case passed, 1 otherwise.

In the box the flow is rounding noise (u, v ~1e-11 m/s after a day, driven
by 1e-13 degC of noise in t): with torch's elementary functions its checks
fail after about a day (480 steps, nadv 2: u, v 30 % of themselves, q2
3.5e-10, w 6.5e-8), as two roundings of noise part; its --fortran-math
runs stay equal to the oracle's to the last bit, the verdict that carries.

Run lengths (estimated from the measured 0.5-day seamount report, 0.32 s
per explicit torch step with OMP_NUM_THREADS=1 on a shared 2-core CPU): a
3-day seamount case (1440 steps, four torch runs) about half an hour, a box
case a few minutes. Smoke-tested: every case for 2 steps (9 of 9 passed, 72
s).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from html import escape
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pompy.config import Config, load_config  # noqa: E402
from pompy.errors import InputError, ModelStop  # noqa: E402
from pompy.report import make_report, parse_cores  # noqa: E402

CONFIGS = REPO / "configs"
# (name, config file, overrides): modes 2, 3, 4 and nadv 1, 2 on each problem
CASES = [
    ("seamount-mode3-nadv1", "seamount.nml", {}),
    ("seamount-mode3-nadv2", "seamount.nml", {"nadv": 2}),
    ("seamount-mode2", "seamount.nml", {"mode": 2}),
    ("seamount-mode4-nadv1", "seamount.nml", {"mode": 4}),
    ("box-mode3-nadv1", "box.nml", {}),
    ("box-mode3-nadv2", "box.nml", {"nadv": 2}),
    ("box-mode2", "box.nml", {"mode": 2}),
    ("box-mode4-nadv2", "box.nml", {"mode": 4, "nadv": 2}),
    ("icfile-mode3-nadv2", "icfile", {"nadv": 2}),
]


def eddy_icfile(folder: Path) -> Path:
    """The IC file of the IC-file case: the seamount's set-up (the oracle's)
    with a warm Gaussian eddy (0.5 degC, radius 15 km, e-folding 300 m)."""
    from pompy.icfile import write_ic_from_state
    from pompy.oracle.driver import new_state

    config = load_config(CONFIGS / "seamount.nml")
    state = new_state(config)
    x, y = state["east_e"], state["north_e"]
    xc, yc = x[config.im // 4, 0], y[0, config.jm // 2]
    r2 = ((x - xc) ** 2 + (y - yc) ** 2) / 15e3 ** 2
    depth = -state["zz"][None, None, :] * state["h"][..., None]
    eddy = 0.5 * np.exp(-r2)[..., None] * np.exp(-depth / 300.0) * state["fsm"][..., None]
    state = dict(state, t=state["t"] + eddy, tb=state["tb"] + eddy)
    folder.mkdir(parents=True, exist_ok=True)
    return write_ic_from_state(folder / "seamount_eddy_ic.nc", state, config)


def case_config(name: str, days: float, output: Path) -> tuple[Config, str]:
    """The case's config and how the index names it."""
    _, file, overrides = next(c for c in CASES if c[0] == name)
    if file == "icfile":
        path = eddy_icfile(output / "icfile")
        base = load_config(CONFIGS / "seamount.nml", ["iproblem=3", f"icfile='{path}'"])
        label = f"configs/seamount.nml, iproblem=3, icfile={path.name}"
    else:
        base = load_config(CONFIGS / file)
        label = f"configs/{file}"
    changes = dict(overrides, days=days, title=name)
    config = dataclasses.replace(base, **changes)
    shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
    return config, label + (f" ({shown})" if shown else "")


def index_page(rows: list[dict]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("case", "config", "steps", "verdict", "failed checks",
                                             "worst prognostic figure (torch's functions)",
                                             "fortran_math figure"))
    body = []
    for r in rows:
        cls = "pass" if r["passed"] else "fail"
        body.append(f'<tr class="{cls}"><td><a href="{escape(r["case"])}/report.html">'
                    f'{escape(r["case"])}</a></td><td>{escape(r["config"])}</td>'
                    f'<td>{r["steps"]}</td><td>{"pass" if r["passed"] else escape(r["verdict"])}'
                    f'</td><td>{escape("; ".join(r["failed"]))}</td>'
                    f'<td>{r["prognostic"]:.3g}</td><td>{r["fortran_math"]:.3g}</td></tr>')
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pompy regression set"
            "</title><style>body{font-family:sans-serif;margin:1.5em} table{border-collapse:"
            "collapse} td,th{border:1px solid #bbb;padding:2px 6px} .pass{background:#d8f0d8}"
            " .fail{background:#f6d0d0}</style></head><body><h1>pompy regression set</h1>"
            f"<table><tr>{head}</tr>{''.join(body)}</table></body></html>\n")


def summary(name: str, label: str, body: dict | None, stopped: str | None) -> dict:
    if body is None:
        return {"case": name, "config": label, "steps": 0, "passed": False,
                "verdict": f"stopped: {stopped}", "failed": [], "prognostic": float("nan"),
                "fortran_math": float("nan")}
    checks = body["checks"]
    figure = lambda kind: max([c["figure"] for c in checks if kind(c)] or [0.0])  # noqa: E731
    return {"case": name, "config": label, "steps": body["config"]["steps"],
            "passed": body["passed"], "verdict": "pass" if body["passed"] else "fail",
            "failed": [c["name"] for c in checks if c["passed"] is False],
            "prognostic": figure(lambda c: c["fields"] == "prognostic" and c["reference"] != "golden"),
            "fortran_math": figure(lambda c: c["run"].endswith("fortran_math")
                                   and c["reference"] != "golden")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True, help="folder of the reports")
    parser.add_argument("--days", type=float, default=3.0, help="run length (default 3 days)")
    parser.add_argument("--cores", default="explicit,implicit", help="default explicit,implicit")
    parser.add_argument("--only", action="append", choices=[c[0] for c in CASES],
                        help="run only this case (repeatable)")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier reports")
    args = parser.parse_args(argv)
    try:
        cores = parse_cores(args.cores)
        rows = []
        for name, _, _ in CASES:
            if args.only and name not in args.only:
                continue
            config, label = case_config(name, args.days, args.output)
            print(f"regression: {name} ({label}, {config.iend} steps)", flush=True)
            body, stopped = None, None
            try:
                body = make_report(config, label, cores, args.output / name,
                                   overwrite=args.overwrite,
                                   command=f"python3 validation/regression.py --only {name} "
                                           f"--days {args.days:g} --cores {','.join(cores)}")
            except ModelStop as exc:
                stopped = str(exc)
            rows.append(summary(name, label, body, stopped))
            (args.output / "index.html").write_text(index_page(rows))
            (args.output / "index.json").write_text(json.dumps(rows, indent=1) + "\n")
    except InputError as err:
        print(f"pompy: {err}", file=sys.stderr)
        return 2
    print(f"regression: {args.output / 'index.html'}; "
          f"{sum(r['passed'] for r in rows)} of {len(rows)} cases passed")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
