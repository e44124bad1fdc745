"""A report's figures (matplotlib, Agg), each returned as PNG bytes: maps
at the last step, error growth, conservation and time per step. Fields
take a sequential colour map, signed differences a diverging one centred
on zero; every axis and colour bar says its units."""
from __future__ import annotations

import io
import warnings

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
# a Figure of its own (Agg when saved), not pyplot: no backend or global
# figure state is touched
from matplotlib.figure import Figure

from pompy.report.checks import DIAGNOSTIC, DIAGNOSTIC_BAR, PROGNOSTIC, PROGNOSTIC_BAR
from pompy.report.runs import Results

FIELD_CMAP = "viridis"
DIFF_CMAP = "RdBu_r"
# Zero (equal to the last bit) cannot sit on a log axis: it is drawn here.
FLOOR = 1e-18
DPI = 80


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # fixed metadata: the same figures give the same bytes
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def section_row(config) -> int:
    """The j (0-based) of the vertical section: the middle row, through the
    seamount's summit ((jm+1)/2 in pom2k's numbering)."""
    return (config.jm + 1) // 2 - 1


def _map_fields(state: dict, config) -> dict[str, tuple[np.ndarray, str, str]]:
    """{name: (array (i, j) or (i, k), units, title)} of the maps, land masked."""
    land = state["fsm"] == 0
    j = section_row(config)
    t = state["t"][:, j, :-1] + config.tbias
    return {
        "el": (np.ma.masked_where(land, state["el"]), "m", "surface elevation el"),
        "u": (np.ma.masked_where(state["dum"] == 0, state["u"][:, :, 0]), "m s-1",
              "surface x velocity u (k = 1)"),
        "v": (np.ma.masked_where(state["dvm"] == 0, state["v"][:, :, 0]), "m s-1",
              "surface y velocity v (k = 1)"),
        "t": (np.ma.masked_where(np.broadcast_to(land[:, j, None], t.shape), t), "degC",
              f"temperature t, section at j = {j + 1}"),
    }


def _axes_of(name: str, state: dict, config):
    """The plotting coordinates (km; for the section, km and m)."""
    if name == "t":
        j = section_row(config)
        x = np.broadcast_to(state["east_e"][:, j, None] / 1e3, (config.im, config.kb - 1))
        z = state["zz"][None, :-1] * state["h"][:, j, None]
        return x, z, "x (km)", "z = zz h (m)"
    return state["east_e"] / 1e3, state["north_e"] / 1e3, "x (km)", "y (km)"


def maps(res: Results, label: str, reference: str, config) -> bytes:
    """Rows: the torch run, its oracle and torch - oracle; columns: el,
    surface u and v, the t section, at the last step."""
    got, want = (_map_fields(res.last[n], config) for n in (label, reference))
    names = list(got)
    # a fixed layout: matplotlib's constrained layout took most of the time
    fig = Figure(figsize=(4.4 * len(names), 10.5))
    axes = fig.subplots(3, len(names), squeeze=False,
                        gridspec_kw=dict(left=0.05, right=0.97, bottom=0.05, top=0.93,
                                         wspace=0.45, hspace=0.5))
    for col, name in enumerate(names):
        a, units, title = got[name]
        b = want[name][0]
        x, y, xl, yl = _axes_of(name, res.last[label], config)
        lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
        diff = a - b
        span = float(np.abs(diff).max()) if diff.count() else 0.0
        span = span if span > 0 else 1.0
        for row, (values, run, cmap, kw) in enumerate((
                (a, label, FIELD_CMAP, dict(vmin=lo, vmax=hi)),
                (b, reference, FIELD_CMAP, dict(vmin=lo, vmax=hi)),
                (diff, f"{label} - {reference}", DIFF_CMAP,
                 dict(norm=TwoSlopeNorm(0.0, -span, span))))):
            ax = axes[row, col]
            # (i, j) arrays transposed: rows along y (or depth), columns along x;
            # a section's depths jump at a land column (h = 1 m), which
            # matplotlib warns of: the cells are drawn right all the same
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The input coordinates to pcolormesh")
                mesh = ax.pcolormesh(x.T, y.T, values.T, cmap=cmap, shading="nearest", **kw)
            bar = fig.colorbar(mesh, ax=ax, shrink=0.85)
            bar.set_label(units)
            ax.set_title(f"{title}\n{run}", fontsize=9)
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
    return _png(fig)


def error_growth(res: Results, labels: list[str]) -> bytes:
    """max |torch - oracle| / max |oracle| of each output field against the
    step, one panel per run (torch's functions, then pom2k's), log scale,
    with the bars; zero sits on the floor line."""
    fig = Figure(figsize=(7.5 * len(labels), 5.2))
    axes = fig.subplots(1, len(labels), squeeze=False, sharey=True,
                        gridspec_kw=dict(left=0.06, right=0.86, bottom=0.1, top=0.93,
                                         wspace=0.08))
    colours = colormaps.get_cmap("tab20")
    for ax, label in zip(axes[0], labels):
        run = next(r for r in res.runs if r.label == label)
        growth = res.growth[label]
        zero = []
        for n, name in enumerate(PROGNOSTIC + DIAGNOSTIC):
            values = np.maximum(np.asarray(growth[name], dtype=float), FLOOR)
            if not np.any(np.asarray(growth[name]) > 0):
                zero.append(name)
            ax.semilogy(res.steps, values, color=colours(n % 20), lw=1.2,
                        ls="-" if name in PROGNOSTIC else "--", label=name)
        ax.axhline(PROGNOSTIC_BAR, color="k", lw=1.5, label=f"prognostic bar {PROGNOSTIC_BAR:g}")
        ax.axhline(DIAGNOSTIC_BAR, color="k", lw=1.5, ls=":",
                   label=f"diagnostic bar {DIAGNOSTIC_BAR:g}")
        ax.set_ylim(FLOOR / 3, 1.0)
        ax.set_xlabel("internal step iint")
        ax.set_title(f"{label} vs {run.oracle}" + (" (bar: 0, bit for bit)"
                                                   if run.kind == "fortran_math" else ""),
                     fontsize=10)
        if zero:
            text = ("every field equal to the last bit" if len(zero) == len(growth)
                    else f"{len(zero)} fields equal to the last bit")
            ax.text(0.02, 0.04, f"{text} (drawn at {FLOOR:g})", transform=ax.transAxes,
                    fontsize=9)
    axes[0, 0].set_ylabel("max |torch - oracle| / max |oracle| (1)")
    axes[0, -1].legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


CONSERVATION = (("vtot", "volume vtot (m3)"), ("taver", "mean temperature taver (degC)"),
                ("saver", "mean salinity saver (psu)"),
                ("kinetic_energy", "kinetic energy (J)"))


def conservation(res: Results) -> bytes:
    """pom2k's printall figures and the kinetic energy against the step,
    every run, as the change since the first sampled step."""
    fig = Figure(figsize=(13, 8.5))
    axes = fig.subplots(2, 2, gridspec_kw=dict(left=0.08, right=0.98, bottom=0.07, top=0.93,
                                               wspace=0.28, hspace=0.4))
    styles = ["-", "--", ":", "-."]
    for ax, (key, title) in zip(axes.flat, CONSERVATION):
        for n, r in enumerate(res.runs):
            values = np.asarray(res.conservation[r.label][key])
            ax.plot(res.steps, values - values[0], lw=2.4 - 0.4 * (n % 4), ls=styles[n % 4],
                    label=r.label)
        unit = title[title.rindex("(") + 1:-1]
        ax.set_title(f"{title}\nat step {res.steps[0]}: "
                     f"{res.conservation[res.runs[0].label][key][0]:.10g}", fontsize=9)
        ax.set_xlabel("internal step iint")
        ax.set_ylabel(f"change since step {res.steps[0]} ({unit})")
    axes[0, 0].legend(fontsize=8)
    return _png(fig)


def timing(res: Results, per_step: dict[str, float], ratios: dict[str, float]) -> bytes:
    """Seconds per step of each run, with its ratio to its oracle."""
    labels = [r.label for r in res.runs]
    fig = Figure(figsize=(9, 0.5 * len(labels) + 1.2))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.25, right=0.97, bottom=0.8 / (0.5 * len(labels) + 1.2), top=0.95)
    values = [per_step[n] for n in labels]
    ax.barh(labels, values, color=colormaps.get_cmap("viridis")(np.linspace(0.15, 0.85, len(labels))))
    for y, n in enumerate(labels):
        ax.text(per_step[n], y, f"  {per_step[n] * 1e3:.1f} ms, {ratios[n]:.1f}x its oracle",
                va="center", fontsize=9)
    ax.set_xlabel("wall time per internal step (s)")
    ax.set_xlim(0, max(values) * 1.6 if max(values) > 0 else 1)
    ax.invert_yaxis()
    return _png(fig)
