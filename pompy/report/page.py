"""report.html: one self-contained static page (figures as embedded PNG,
no script, no network), built from the report's JSON body and figures.
Headings and columns use the JSON's names."""
from __future__ import annotations

import base64
from html import escape

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #111; max-width: 1900px; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 13px; }
td, th { border: 1px solid #bbb; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #eee; }
td.num { text-align: right; font-family: monospace; white-space: nowrap; }
.pass { background: #d8f0d8; } .fail { background: #f6d0d0; } .info { background: #eee; }
img { display: block; margin: 0.3em 0 1.2em; border: 1px solid #ddd; max-width: 100%; height: auto; }
td { overflow-wrap: anywhere; }
.stale { background: #fbe9c8; padding: 0.4em 0.6em; }
pre { background: #f6f6f6; padding: 0.6em; font-size: 12px; overflow-x: auto; }
"""


def _num(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if value != 0 else "0"
    return str(value)


def html_table(header: list[str], rows: list[list], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{classes[n]}"' if classes else ""
        cells = "".join(f'<td class="num">{escape(_num(c))}</td>' if isinstance(c, (int, float))
                        and not isinstance(c, bool) else f"<td>{escape(_num(c))}</td>"
                        for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def html_img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _resting(check: dict) -> str:
    rest = check.get("at_rest") or {}
    if not rest:
        return ""
    return ("; at rest over the run, compared absolutely (max_abs <= floor): "
            + ", ".join(f"{n} {v['max_abs']:.2g} <= {v['floor']:g}" for n, v in rest.items()))


def _verdict(passed) -> str:
    return "info" if passed is None else "pass" if passed else "fail"


def render(body: dict, figures: dict[str, bytes]) -> str:
    """The page: summary, verdict, differences, maps, error growth,
    conservation, timing, golden, environment, namelist."""
    cfg, timing = body["config"], body["timing"]
    checks = body["checks"]
    failed = [c for c in checks if c["passed"] is False]
    parts = [f"<h1>pompy report: {escape(cfg['title'])} ({escape(cfg['file'])})</h1>",
             f"<p><b>{'PASSED' if body['passed'] else 'FAILED'}</b>: {len(checks)} checks, "
             f"{len(failed)} failed. {cfg['steps']} internal steps of dti = {cfg['dti']:g} s "
             f"({cfg['days']:g} days) on a {cfg['im']}x{cfg['jm']}x{cfg['kb']} grid. "
             f"Command: <code>{escape(body['command'])}</code></p>"]
    parts.append("<h2>runs</h2>" + html_table(
        ["run", "pompy_run", "description", "output"],
        [[label, r["pompy_run"], r["description"], r["output"]]
         for label, r in body["runs"].items()]))
    parts.append("<h2>checks</h2>" + html_table(
        ["name", "steps", "tolerance", "figure", "worst_field", "worst_step", "verdict", "why"],
        [[c["name"], c["steps"], "none" if c["tolerance"] is None else c["tolerance"], c["figure"],
          c["worst_field"], c["worst_step"], _verdict(c["passed"]), c["why"] + _resting(c)]
         for c in checks],
        [_verdict(c["passed"]) for c in checks]))
    torch_runs = list(body["max_differences"])
    fields = list(next(iter(body["max_differences"].values()))) if torch_runs else []
    keys = ("max_rel", "max_abs", "step", "max_step_rel")
    parts.append("<h2>max_differences</h2><p>Per output field over the sampled steps: max_abs, "
                 "the largest max |torch - oracle| (the field's units) and its step; max_rel, "
                 "max_abs over the field's largest max |oracle| in the run (what the checks "
                 "use); max_step_rel, the largest of the error growth curve (each step "
                 "relative to that step's max |oracle|).</p>" + html_table(
                     ["field", *[f"{r} {k}" for r in torch_runs for k in keys]],
                     [[f, *[body["max_differences"][r][f][k] for r in torch_runs for k in keys]]
                      for f in fields]))
    for name, png in figures.items():
        if name.startswith("maps_"):
            parts.append(f"<h2>maps at step {cfg['steps']}: {escape(name[5:])}</h2>" + html_img(png, name))
    parts.append("<h2>error_growth</h2><p>max |torch - oracle| / max |oracle| of each output "
                 "field at each sampled step (prognostic fields solid, diagnostic dashed), with "
                 "the bars; left torch's elementary functions, right pom2k's (--fortran-math). A "
                 "field still at rest in the first steps (w ~ 1e-16 m/s) shows its rounding as "
                 "a large fraction of itself: the checks scale by the field's max over the "
                 "run.</p>")
    parts += [html_img(png, name) for name, png in figures.items() if name.startswith("error_growth_")]
    parts.append("<h2>conservation</h2><p>As pom2k's printall computes them (vtot over the wet "
                 "cells of levels 1..kbm1, taver and saver the volume means of tb and sb) and "
                 "the kinetic energy, 1/2 rhoref (u^2 + v^2) at the T points.</p>")
    parts.append(html_img(figures["conservation"], "conservation"))
    parts.append(html_table(["run", "quantity", "first", "last", "last - first"],
                        [[label, k, f"{v[0]:.15g}", f"{v[-1]:.15g}", v[-1] - v[0]]
                         for label, series in body["conservation"].items()
                         for k, v in series.items() if k != "steps"]))
    parts.append("<h2>timing</h2><p>Wall time of the time steps (set-up and output excluded), "
                 "measured in this run, the runs stepped in turn; ratios to the oracle of the "
                 "same scheme. Timings are the only figures that differ between two reports of "
                 "the same run.</p>" + html_img(figures["timing"], "timing") + html_table(
                     ["run", "seconds_per_step", "ratio_to_oracle"],
                     [[r, timing["seconds_per_step"][r], timing["ratio_to_oracle"][r]]
                      for r in timing["seconds_per_step"]]))
    if body.get("golden"):
        g = body["golden"]
        parts.append(f"<h2>golden</h2><p>Against legacy pom2k's states in {escape(g['folder'])} "
                     f"at iint {', '.join(map(str, g['steps']))} (files beyond the run: "
                     f"{', '.join(map(str, g['beyond_run'])) or 'none'}): the largest max_rel of "
                     "any array at each state.</p>" + html_table(
                         ["run", *[f"iint {s}" for s in g["steps"]]],
                         [[r, *[max(by_step[str(s)].values()) for s in g["steps"]]]
                          for r, by_step in g["max_rel"].items()]))
    env = body["environment"]
    parts.append("<h2>environment</h2>" + html_table(
        ["item", "value"],
        [[k, ", ".join(v) if isinstance(v, list) else v] for k, v in env.items()]
        + [["start", timing["start"]], ["end", timing["end"]]]))
    parts.append(f"<h2>namelist</h2><pre>{escape(cfg['namelist'])}</pre>")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>pompy report: {escape(cfg['title'])}</title><style>{STYLE}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")
