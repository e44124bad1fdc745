"""The runs of a report, side by side: each torch core with torch's
elementary functions and with pom2k's (``fortran_math``), and the Fortran
oracle of the same scheme, stepped together to each sampled step, where
the report takes each torch run's differences from its oracle, pom2k's
conservation figures, the golden comparison and the NetCDF records.

The runs are the ones `pompy run` makes (pompy.driver.make_model); the
implicit core's --fortran-math run solves for the elevation with the
reference CG, the algorithm of its Fortran twin, as pompy run's does
(cg.solve_auto inside pompy.compat.fortran_math), so that the two compare
to the last bit.
"""
from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pompy import cores, variables
from pompy.compare import difference
from pompy.config import Config
from pompy.core.model import forward_only
from pompy.driver import make_model, output_files
from pompy.errors import InputError
from pompy.io import OutputWriter, output_fields

# About this many sampled steps per run (every step up to twice this).
SAMPLES = 240
GOLDEN_FILE = re.compile(r"iint_(\d{6})\.npz")
GOLDEN_LAYOUT = ("pom2k states named iint_NNNNNN.npz (NNNNNN the internal step, 6 digits), "
                 "each holding float64 arrays under pom2k's names indexed (i, j, k) as the "
                 "Fortran is, as ../shared/golden/README.md describes (e.g. ../shared/golden/seamount)")


@dataclass(frozen=True)
class Run:
    """One run of a report: ``label`` names it everywhere (page and JSON)."""
    label: str
    core: str              # the torch core (pompy.cores) of the scheme
    kind: str              # "torch", "fortran_math" or "oracle"

    @property
    def oracle(self) -> str:
        """The label of the oracle run this run is compared with."""
        return cores.get(self.core).twin_name

    @property
    def description(self) -> str:
        spec = cores.get(self.core)
        if self.kind == "oracle":
            return spec.twin_description
        solver = ", reference CG" if spec.solver and self.kind == "fortran_math" else ""
        math_ = "pom2k's elementary functions" if self.kind == "fortran_math" else \
            "torch's elementary functions"
        return f"the torch {self.core} core, {math_}{solver}"

    @property
    def command(self) -> str:
        """The `pompy run` options of this run."""
        if self.kind == "oracle":
            return (f"--core {cores.ORACLE}" if self.oracle == cores.get(cores.DEFAULT).twin_name
                    else f"--core {self.core} --oracle")
        return f"--core {self.core}" + (" --fortran-math" if self.kind == "fortran_math" else "")


def plan(names: list[str]) -> list[Run]:
    """Per core: the oracle of its scheme, the torch core, and the torch core
    with --fortran-math."""
    runs = []
    for core in names:
        runs += [Run(cores.get(core).twin_name, core, "oracle"), Run(core, core, "torch"),
                 Run(f"{core}_fortran_math", core, "fortran_math")]
    return runs


def sample_steps(steps: int, extra: list[int] = ()) -> list[int]:
    """The steps the runs are compared at: the set-up (0), every step (or
    every few, for long runs), the record and golden steps, and the last."""
    every = max(1, math.ceil(steps / SAMPLES))
    return sorted(set(range(0, steps + 1, every)) | {s for s in extra if 0 <= s <= steps}
                  | {steps})


def record_steps(steps: int) -> list[int]:
    """The NetCDF records: the middle and the last step."""
    return sorted({max(1, steps // 2), steps})


def golden_states(folder: Path | None, config: Config) -> dict[int, Path]:
    """{iint: file} of the pom2k states in ``folder``; InputError naming the
    expected layout when there is none, or when they are on another grid."""
    if folder is None:
        return {}
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"--golden {folder}: not a folder; it should hold {GOLDEN_LAYOUT}")
    found = {int(m.group(1)): p for p in sorted(folder.iterdir())
             if (m := GOLDEN_FILE.fullmatch(p.name))}
    if not found:
        raise InputError(f"--golden {folder}: no pom2k state found; it should hold {GOLDEN_LAYOUT}")
    first = min(found)
    with np.load(found[first]) as npz:
        shape = npz["t"].shape if "t" in npz.files else None
    if shape != (config.im, config.jm, config.kb):
        raise InputError(f"--golden {folder}: {found[first].name} holds t of shape {shape}, not the "
                         f"config's grid (im, jm, kb) = ({config.im}, {config.jm}, {config.kb})")
    return found


def conservation(state: dict, config: Config) -> dict[str, float]:
    """pom2k's printall figures: vtot (m3), the volume of the wet cells of
    levels 1..kbm1 with depth dt; taver (degC) and saver (psu), tb and sb
    averaged over it (bias added back); and the kinetic energy (J), 1/2
    rhoref (u^2 + v^2) at the T points summed over the same volume."""
    fsm, dt, dz = state["fsm"], state["dt"], state["dz"][:-1]
    dvol = (state["dx"] * state["dy"] * fsm * dt)[..., None] * dz       # (im, jm, kbm1)
    vtot = float(dvol.sum())
    u, v = state["u"][..., :-1], state["v"][..., :-1]
    u_t = 0.5 * (u + np.concatenate([u[1:], u[-1:]], axis=0))        # U faces i, i+1 -> T
    v_t = 0.5 * (v + np.concatenate([v[:, 1:], v[:, -1:]], axis=1))
    ke = 0.5 * config.rhoref * float((dvol * (u_t ** 2 + v_t ** 2)).sum())
    return {"vtot": vtot,
            "taver": float((state["tb"][..., :-1] * dvol).sum()) / vtot + config.tbias,
            "saver": float((state["sb"][..., :-1] * dvol).sum()) / vtot + config.sbias,
            "kinetic_energy": ke}


def differences(got: dict, want: dict, fields: list[str]) -> dict[str, tuple[float, float]]:
    """{field: (max |got - want|, that / max |want|)}: pompy compare's figures
    (want in the role of its file A)."""
    out = {}
    for name in fields:
        d = difference(name, None, want[name], got[name])
        out[name] = (d.max_abs, d.max_rel)
    return out


@dataclass
class Results:
    """What the side-by-side runs measured."""
    runs: list[Run]
    steps: list[int]                                       # the sampled steps
    growth: dict[str, dict[str, list[float]]] = field(default_factory=dict)   # run: field: rel
    growth_abs: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    scale: dict[str, dict[str, list[float]]] = field(default_factory=dict)    # max |oracle|
    conservation: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    golden: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    last: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # run: last state
    files: dict[str, Path] = field(default_factory=dict)   # run: NetCDF output
    records: list[int] = field(default_factory=list)


def _math(run: Run):
    if run.kind != "fortran_math":
        return contextlib.nullcontext()
    from pompy.compat import fortran_math

    return fortran_math()


def _model(config: Config, run: Run):
    with _math(run):
        if run.kind == "oracle":
            return make_model(config, run.core, check_cfl=True, oracle=True)
        return make_model(config, run.core, check_cfl=True)


def run_side_by_side(config: Config, runs: list[Run], steps: int, folder: Path,
                     golden: dict[int, Path] | None = None,
                     progress=None) -> Results:
    """Every run through ``steps`` internal steps, compared at the sampled
    steps; the NetCDF output of each in ``folder`` (<name>_output.nc, as
    `pompy run` names it, at :func:`record_steps`)."""
    golden = {s: p for s, p in (golden or {}).items() if s <= steps}
    fields = output_fields()
    samples = sample_steps(steps, [*record_steps(steps), *golden])
    res = Results(runs, samples, records=record_steps(steps))
    models = {r.label: _model(config, r) for r in runs}
    torch_runs = [r for r in runs if r.kind != "oracle"]
    for r in torch_runs:
        res.growth[r.label] = {f: [] for f in fields}
        res.growth_abs[r.label] = {f: [] for f in fields}
        res.scale[r.label] = {f: [] for f in fields}
    for r in runs:
        res.conservation[r.label] = {k: [] for k in ("vtot", "taver", "saver", "kinetic_energy")}
        res.seconds[r.label] = 0.0
        res.files[r.label] = output_files(folder, r.label, 1)[0]
    folder.mkdir(parents=True, exist_ok=True)
    writers = {r.label: OutputWriter(res.files[r.label], config, models[r.label].numpy_state(),
                                     attributes={"core": r.label, "pompy_run": r.command})
               for r in runs}
    try:
        for stop in samples:
            for r in runs:
                model = models[r.label]
                start = time.perf_counter()
                with _math(r), forward_only(model):      # as pompy run steps
                    model.advance(stop)
                res.seconds[r.label] += time.perf_counter() - start
            states = {r.label: models[r.label].numpy_state() for r in runs}
            for r in torch_runs:
                for name, (d_abs, d_rel) in differences(states[r.label], states[r.oracle],
                                                        fields).items():
                    res.growth[r.label][name].append(d_rel)
                    res.growth_abs[r.label][name].append(d_abs)
                    res.scale[r.label][name].append(float(np.abs(states[r.oracle][name]).max()))
            for r in runs:
                for k, value in conservation(states[r.label], config).items():
                    res.conservation[r.label][k].append(value)
                if stop in res.records:
                    writers[r.label].write(states[r.label], stop,
                                           config.dti * stop / 86400 + models[r.label].time0)
            if stop in golden:
                _golden(res, runs, states, stop, golden[stop])
            if progress is not None:
                progress(stop, steps)
    finally:
        for w in writers.values():
            w.close()
    res.last = {r.label: {k: np.array(v) for k, v in models[r.label].numpy_state().items()}
                for r in runs}
    return res


def _golden(res: Results, runs: list[Run], states: dict, step: int, path: Path) -> None:
    """Each run of pom2k's scheme against the golden state of ``step``: every
    variable the file holds."""
    with np.load(path) as npz:
        want = {k: npz[k] for k in npz.files if k in variables.ALL}
    for r in runs:
        if not cores.get(r.core).golden:
            continue
        got = states[r.label]
        res.golden.setdefault(r.label, {})[step] = {
            name: d_rel for name, (_, d_rel) in differences(got, want, sorted(want)).items()}
