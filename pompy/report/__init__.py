"""``pompy report``: a reproducibility report of a case.

    pompy report CONFIG [--days D] [--cores explicit,implicit] [--golden DIR]
                 [--set NAME=VALUE] --output DIR [--overwrite]
    pompy report RUN [--output DIR]     (a training run: pompy.report.training)

Runs each torch core twice (torch's elementary functions, and pom2k's:
--fortran-math) and the Fortran oracle of its scheme side by side
(pompy.report.runs) and writes, in DIR:

- ``report.html``: one self-contained page (figures embedded as PNG, no
  network at view time): the verdict table, the largest differences per
  field, maps at the last step (el, surface u and v, a t section) of torch
  and oracle and their difference, error growth per field (log scale, with
  the bars), pom2k's conservation figures (vtot, taver, saver) and the
  kinetic energy, time per step (ratios to the oracle), the comparison
  with legacy pom2k states (--golden), the environment (versions, CPU or
  GPU, threads, git commit, source hashes), the namelist and the command;
- ``report.json``: every number on the page under the page's names; two
  reports of the same run differ only under "timing";
- ``runs/<run>_output.nc``: each run's NetCDF output (pompy.io) at the
  middle and the last step, for `pompy compare`.

An existing output folder is refused unless --overwrite (which replaces
these files only); a missing oracle build, an unknown core and a --golden
folder without pom2k states are input errors (exit 2). Exit 0 when every
check passed, 1 when one failed, 3 when a run stopped (blow-up).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from pompy import cores, files
from pompy.compare import differences as compare_files
from pompy.config import Config, load_config
from pompy.errors import InputError, ModelStop
from pompy.oracle.driver import check_supported

DESCRIPTION = __doc__.split("\n\n", 2)[2].split("\nAn existing")[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, metavar="CONFIG.nml|RUN",
                        help="a Fortran namelist with pom2k parameter names (the "
                             "reproducibility report), or a training run's folder (its page)")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="override one parameter, value as in a namelist (repeatable)")
    parser.add_argument("--days", type=float, help="run length in days (default: the config's days)")
    parser.add_argument("--cores", default=cores.DEFAULT, metavar="CORE[,CORE]",
                        help=f"torch cores to report on, comma-separated: "
                             f"{', '.join(cores.NAMES)} (default {cores.DEFAULT})")
    parser.add_argument("--golden", type=Path, metavar="DIR",
                        help="compare with legacy pom2k states in DIR (iint_NNNNNN.npz, as "
                             "../shared/golden/seamount)")
    parser.add_argument("--output", type=Path, default=None, metavar="DIR",
                        help="the report's folder (refused if it exists, unless --overwrite); "
                             "required but for a training run (default: the run's folder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an existing folder, replacing an earlier report's files")


def parse_cores(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in cores.CORES]
    if bad or not names:
        raise InputError(f"--cores {text}: one or more of {', '.join(cores.NAMES)}, "
                         "comma-separated")
    return list(dict.fromkeys(names))


def require_oracle() -> None:
    """InputError saying how to build the oracle when no build of the
    current Fortran sources exists (a report never builds it silently)."""
    from pompy.oracle import build

    try:
        target = build.build_dir()
    except build.OracleBuildError as exc:
        raise InputError(f"the Fortran oracle cannot be built: {exc}") from None
    if build.extension_path(target) is None:
        raise InputError(f"the Fortran oracle is not built (no build in {target}); "
                         "build it with: python3 -m pompy setup")


def prepare_folder(output: Path, overwrite: bool) -> None:
    if output.exists() and not output.is_dir():
        raise InputError(f"--output {output} is a file; give a folder")
    if output.exists() and not overwrite:
        raise InputError(f"output folder {output} exists; give --overwrite to replace the report "
                         "in it, or another --output")
    try:
        (output / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as err:              # the machine's: a folder not writable, say
        raise files.fault(output, err, "making the output folder") from None


def command_line(args: argparse.Namespace) -> str:
    """The command, as a user would type it (options in a fixed order)."""
    words = ["pompy", "report", str(args.config)]
    for value in args.set or []:
        words += ["--set", value]
    if args.days is not None:
        words += ["--days", f"{args.days:g}"]
    words += ["--cores", ",".join(parse_cores(args.cores))]
    if args.golden is not None:
        words += ["--golden", str(args.golden)]
    words += ["--output", str(args.output)] + (["--overwrite"] if args.overwrite else [])
    return shlex.join(words)


def _rank(x: float) -> float:
    """NaN above everything (a NaN difference is the worst)."""
    return math.inf if math.isnan(x) else x


def _finite_or_text(x):
    """JSON numbers; inf and NaN (a field NaN in one run only) as text."""
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _max_differences(res, label: str) -> dict:
    """Per field: the largest max |torch - oracle| over the sampled steps
    (max_abs) and its first step, that over the field's largest max
    |oracle| in the run (max_rel), and the error growth curve's maximum
    (max_step_rel)."""
    table = {}
    for name, rel in res.growth[label].items():
        d_abs = res.growth_abs[label][name]
        n = max(range(len(d_abs)), key=lambda i: (_rank(d_abs[i]), -i))
        scale = max(res.scale[label][name])
        table[name] = {"max_rel": _finite_or_text(d_abs[n] / scale if scale > 0 else d_abs[n]),
                       "max_abs": _finite_or_text(d_abs[n]), "step": res.steps[n],
                       "max_step_rel": _finite_or_text(max(rel, key=_rank))}
    return table


def _records(oracle_file: Path, torch_file: Path) -> dict:
    """{iint: {field: max_rel, max_abs}} of the two NetCDF files' common
    records: `pompy compare`'s figures."""
    records: dict = {}
    for d in compare_files(oracle_file, torch_file):
        if d.record is not None:
            records.setdefault(str(d.record), {})[d.name] = {
                "max_rel": _finite_or_text(d.max_rel), "max_abs": _finite_or_text(d.max_abs)}
    return records


def _add_comparisons(body: dict, res, runs) -> None:
    """Each torch run against its oracle (largest differences, error
    growth, records) and every run's conservation, into the report's body."""
    for r in runs:
        if r.kind != "oracle":
            body["max_differences"][r.label] = _max_differences(res, r.label)
            body["error_growth"][r.label] = {name: [_finite_or_text(x) for x in v]
                                             for name, v in res.growth[r.label].items()}
            body["records"][r.label] = _records(res.files[r.oracle], res.files[r.label])
        body["conservation"][r.label] = {k: [_finite_or_text(x) for x in v]
                                         for k, v in res.conservation[r.label].items()}


def _golden_section(res, golden: Path, found, steps: int) -> dict:
    """The runs against pom2k's golden output at the steps it has."""
    return {"folder": str(golden), "steps": sorted(s for s in found if s <= steps),
            "beyond_run": sorted(s for s in found if s > steps),
            "max_rel": {label: {str(s): {n: _finite_or_text(v) for n, v in by_name.items()}
                                for s, by_name in sorted(by_step.items())}
                        for label, by_step in res.golden.items()}}


def make_report(config: Config, config_file: str, names: list[str], output: Path,
                golden: Path | None = None, overwrite: bool = False, command: str = "",
                progress: bool = True) -> dict:
    """Run, compare, plot and write the report; returns report.json's body."""
    from pompy.report import checks as checks_, figures, page
    from pompy.report.environment import environment
    from pompy.report.runs import golden_states, plan, run_side_by_side

    require_oracle()
    found = golden_states(golden, config)
    if found and not any(cores.get(c).golden for c in names):
        pom2k = [n for n in cores.NAMES if cores.get(n).golden]
        raise InputError(f"--golden compares runs of pom2k's scheme: give --cores with "
                         f"{' or '.join(pom2k)}")
    check_supported(config)             # what the oracle cannot run, before any folder is made
    output = Path(output)
    made = not os.path.exists(output)
    prepare_folder(output, overwrite)
    steps = config.iend
    runs = plan(names)
    env = environment()                 # the sources hashed before they run, as verify does
    started = datetime.now(timezone.utc)
    wall = time.perf_counter()

    def tell(step: int, total: int) -> None:
        if progress and step > 0 and (step == total or step * 10 // total != (step - 1) * 10 // total):
            print(f"pompy report: step {step} of {total}", file=sys.stderr, flush=True)

    try:
        res = run_side_by_side(config, runs, steps, output / "runs", found, tell)
    except InputError:                  # a bad IC file, say: no half-made folder left behind
        if made:
            shutil.rmtree(output, ignore_errors=True)
        raise
    checks = checks_.checks(res, steps, config.rhoref)
    body = {
        "command": command,
        "config": {"file": config_file, "title": config.title, "im": config.im, "jm": config.jm,
                   "kb": config.kb, "dti": config.dti, "days": config.days, "steps": steps,
                   "namelist": str(config.to_namelist())},
        "passed": all(c["passed"] is not False for c in checks),
        "checks": [dict(c, figure=_finite_or_text(c["figure"])) for c in checks],
        "runs": {r.label: {"pompy_run": r.command, "description": r.description,
                           "reference": None if r.kind == "oracle" else r.oracle,
                           "output": str(res.files[r.label].relative_to(output))}
                 for r in runs},
        "sampled_steps": res.steps,
        "max_differences": {},
        "records": {},
        "error_growth": {},
        "conservation": {},
    }
    _add_comparisons(body, res, runs)
    if found:
        body["golden"] = _golden_section(res, golden, found, steps)
    body["environment"] = env
    per_step = {label: s / steps for label, s in res.seconds.items()}
    ended = datetime.now(timezone.utc)
    body["timing"] = {
        "start": started.isoformat(timespec="seconds"), "end": ended.isoformat(timespec="seconds"),
        "wall_s": round(time.perf_counter() - wall, 3),
        "seconds_per_step": per_step,
        "ratio_to_oracle": {r.label: per_step[r.label] / per_step[r.oracle]
                            if per_step[r.oracle] > 0 else None for r in runs}}
    pngs = {}
    for core in names:
        pngs[f"maps_{core}"] = figures.maps(res, core, next(r.oracle for r in runs if r.core == core),
                                            config)
    for core in names:
        pngs[f"error_growth_{core}"] = figures.error_growth(res, [core, f"{core}_fortran_math"])
    pngs["conservation"] = figures.conservation(res)
    pngs["timing"] = figures.timing(res, per_step, body["timing"]["ratio_to_oracle"])
    (output / "report.json").write_text(json.dumps(body, indent=1) + "\n")
    (output / "report.html").write_text(page.render(body, pngs))
    return body


def run_command(args: argparse.Namespace) -> int:
    """`pompy report`: 0 every check passed, 1 one failed, 3 a run stopped.
    CONFIG a training run's folder: its page (pompy.report.training)."""
    from pompy.report import training

    if training.is_training_run(args.config):
        return training.run_command(args.config, args.output)
    if args.output is None:
        raise InputError("pompy report CONFIG: --output DIR is required (the report's folder)")
    names = parse_cores(args.cores)
    overrides = list(args.set or [])
    if args.days is not None:
        if not (args.days > 0 and math.isfinite(args.days)):
            raise InputError(f"--days {args.days:g}: must be a number of days > 0")
        overrides.append(f"days={args.days!r}")
    config = load_config(args.config, overrides)
    try:
        body = make_report(config, str(args.config), names, args.output, args.golden,
                           args.overwrite, command_line(args))
    except ModelStop as exc:
        print(f"pompy report: a run stopped: {exc}", file=sys.stderr)
        return 3
    failed = [c["name"] for c in body["checks"] if c["passed"] is False]
    print(f"pompy report: {args.output / 'report.html'} and report.json; "
          + (f"{len(failed)} checks failed: {'; '.join(failed)}" if failed
             else f"all {len(body['checks'])} checks passed"))
    return 1 if failed else 0
