"""`pompy report`: the JSON's figures against a direct comparison of the
runs' NetCDF files (netCDF4, not pompy.compare), the fortran_math runs bit
for bit with the oracle in those files, the golden comparison against the
golden files themselves, the JSON deterministic but for timings, the page
rendering its figures in headless Chromium, and the input errors.

A 21x17x11 seamount for 12 steps, both cores (6 runs); the golden case is
the 65x49x21 seamount for 3 steps, explicit core only. Measured: the
whole file in 58 s on 2 cores shared at load 5 (9 minutes at load 12, where
torch's two threads wait on each other).
"""
import base64
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import netCDF4
import numpy as np
import pytest

from conftest import GOLDEN, in_ci, require_golden
from pompy import cli
from pompy.io import output_fields
from pompy.provenance import source_hash

SEAMOUNT = str(Path(__file__).parents[1] / "configs" / "seamount.nml")
SMALL = ["--set", "im=21", "--set", "jm=17", "--set", "kb=11", "--set", "kl2=9",
         "--days", "0.025", "--cores", "explicit,implicit"]          # 12 steps of 180 s
TORCH_RUNS = ("explicit", "explicit_fortran_math", "implicit", "implicit_fortran_math")


def report(output: Path, *extra: str, config: str = SEAMOUNT, options=SMALL) -> int:
    return cli.main(["report", config, *options, "--output", str(output), *extra])


@pytest.fixture(scope="module")
def small(oracle, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report") / "R"
    assert report(folder) == 0
    return folder


def body(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def netcdf_differences(a_path: Path, b_path: Path) -> dict[int, dict[str, tuple[float, float]]]:
    """{iint: {field: (max |b - a|, that / max |a|)}}, read with netCDF4 directly."""
    out = {}
    with netCDF4.Dataset(a_path) as a, netCDF4.Dataset(b_path) as b:
        assert list(a["iint"][:]) == list(b["iint"][:])
        for n, iint in enumerate(a["iint"][:]):
            out[int(iint)] = {}
            for name in output_fields():
                x, y = np.asarray(a[name][n], float), np.asarray(b[name][n], float)
                d = float(np.abs(y - x).max())
                scale = float(np.abs(x).max())
                out[int(iint)][name] = (d, d / scale if scale > 0 else d)
    return out


def test_json_matches_the_netcdf_files(small):
    """Every field's max |torch - oracle| and its ratio to max |oracle| at
    each NetCDF record, as the JSON gives them (records and the error
    growth curve), equal a direct comparison of the two files; the
    fortran_math runs' files equal the oracle's to the last bit."""
    b = body(small)
    assert set(b["records"]) == set(TORCH_RUNS)
    for run in TORCH_RUNS:
        info, oracle = b["runs"][run], b["runs"][b["runs"][run]["reference"]]
        direct = netcdf_differences(small / oracle["output"], small / info["output"])
        assert sorted(direct) == [6, 12]
        for iint, fields in direct.items():
            n = b["sampled_steps"].index(iint)
            for name, (d_abs, d_rel) in fields.items():
                got = b["records"][run][str(iint)][name]
                assert (got["max_abs"], got["max_rel"]) == (d_abs, d_rel), (run, iint, name)
                assert b["error_growth"][run][name][n] == d_rel, (run, iint, name)
            if run.endswith("fortran_math"):
                assert max(d for d, _ in fields.values()) == 0.0, run
        # the largest difference at a record is at most the table's over the run
        for name in output_fields():
            worst = b["max_differences"][run][name]
            assert worst["max_abs"] >= max(direct[i][name][0] for i in direct)


def test_json_names_versions_hashes_and_checks(small):
    b = body(small)
    env = b["environment"]
    assert env["torch"].startswith("2.") and env["gfortran"].startswith("GNU Fortran")
    assert env["source_hash"] == source_hash()
    assert "reference_fortran/implicit.f90" in env["source_hash_covers"]
    assert set(b["max_differences"]["explicit"]) == set(output_fields())
    names = [c["name"] for c in b["checks"]]
    assert "explicit_fortran_math vs oracle: every output field, bit for bit" in names
    # bit for bit with pom2k's functions; within the bars with torch's
    # (measured here: prognostic 3e-13 explicit, 2.5e-11 implicit)
    assert all(c["passed"] for c in b["checks"]) and b["passed"]
    assert "&pom2k" in b["config"]["namelist"] and b["config"]["steps"] == 12
    assert b["command"].startswith("pompy report ") and "--cores explicit,implicit" in b["command"]


def test_two_reports_of_the_same_run_differ_only_in_timings(small):
    first = body(small)
    kept = small.with_name("R_first")
    shutil.copytree(small, kept, dirs_exist_ok=True)
    assert report(small, "--overwrite") == 0
    second = body(small)
    for b in (first, second):
        b.pop("timing")
        b["command"] = b["command"].replace(" --overwrite", "")
    assert [k for k in first if first[k] != second.get(k)] == []
    assert first == second
    # the page too, but for the timing figure and table, and the times
    assert (kept / "report.html").read_text().count("<img") == \
        (small / "report.html").read_text().count("<img")


def colourful(png: Path) -> float:
    """The fraction of pixels with a clear hue (figures; text and tables are grey)."""
    rgb = matplotlib.image.imread(png)[..., :3].astype(float)
    return float(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25).mean())


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "chromium is not installed (Debian: apt-get install -y chromium)"
        if in_ci():
            pytest.fail(reason + "; CI installs it (.ci/run)")
        pytest.skip(reason)
    return path


def overflow(browser: str, page: Path, width: int, folder: Path) -> int:
    """How many CSS pixels ``page`` is wider than a ``width`` px window (0:
    no horizontal scrolling): a copy in ``folder`` with a script that puts
    the difference in its title, read from headless chromium's DOM."""
    probe = folder / f"{page.stem}_{width}.html"
    script = ("<script>document.title = 'W' + (document.documentElement.scrollWidth - "
              "window.innerWidth) + 'W';</script></body>")
    probe.write_text(page.read_text().replace("</body>", script))
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", f"--window-size={width},900", "--dump-dom",
                          probe.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    return int(re.search(r"<title>W(-?\d+)W</title>", out).group(1))


def screenshot(browser: str, page: Path, png: Path) -> None:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", "--window-size=1400,9000", page.as_uri()],
                   check=True, capture_output=True, timeout=120)


def test_page_renders_its_figures_in_headless_chromium(small, tmp_path):
    """The page against itself with every figure removed: the figures fill
    a good part of the screenshot with colour, the bare page has almost
    none (measured: 4.3 % of a 1400x9000 window against 0.0015 %); each
    embedded PNG decodes to a picture that is not blank."""
    browser = chromium()
    html = (small / "report.html").read_text()
    images = html.count('src="data:image/png;base64,')
    assert images == 6              # maps and error growth of each core, conservation, timing
    assert "http://" not in html and "https://" not in html and "<script" not in html
    for n, data in enumerate(re.findall(r'src="data:image/png;base64,([^"]+)"', html)):
        picture = matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
        assert min(picture.shape[:2]) > 100 and picture[..., :3].std() > 0.05, n
    bare = tmp_path / "bare.html"
    start = 0
    parts = []
    while (at := html.find('src="data:image/png;base64,', start)) >= 0:
        end = html.index('"', at + 5)
        parts += [html[start:at], 'src=""']
        start = end + 1
    bare.write_text("".join(parts) + html[start:])
    screenshot(browser, small / "report.html", tmp_path / "page.png")
    screenshot(browser, bare, tmp_path / "bare.png")
    full, empty = colourful(tmp_path / "page.png"), colourful(tmp_path / "bare.png")
    assert full > 0.02 and empty < 0.001, (full, empty)


def test_golden_states_every_one_found(oracle, tmp_path):
    """--golden: each run of pom2k's scheme at every golden state up to its
    last step; the oracle and the fortran_math run equal to the last bit in
    the model fields (within 2.2e-16 in the post-processing coordinates, as
    tests/test_oracle_golden.py measures), and the oracle's NetCDF record of
    step 3 equal to the golden file itself. 3 steps of the 65x49x21 seamount:
    the states 0 to 3; 10 and 120 lie beyond the run."""
    golden = require_golden() / "seamount"
    out = tmp_path / "G"
    assert report(out, "--golden", str(golden), options=["--days", str(3 * 180 / 86400)]) == 0
    b = body(out)
    g = b["golden"]
    assert g["steps"] == [0, 1, 2, 3] and g["beyond_run"] == [10, 120]
    for run in ("oracle", "explicit_fortran_math"):
        for step in g["steps"]:
            assert max(g["max_rel"][run][str(step)].values()) <= 2.3e-16, (run, step)
    with np.load(golden / "iint_000003.npz") as npz, \
            netCDF4.Dataset(out / b["runs"]["oracle"]["output"]) as ds:
        n = list(ds["iint"][:]).index(3)
        for name in ("el", "u", "t", "q2"):
            assert np.array_equal(np.asarray(ds[name][n]).T, npz[name]), name
    golden_checks = [c for c in b["checks"] if c["reference"] == "golden"]
    assert len(golden_checks) == 4 and all(c["passed"] for c in golden_checks)


def test_an_existing_output_folder_is_refused(tmp_path, capsys):
    (tmp_path / "R").mkdir()
    assert report(tmp_path / "R") == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: output folder") and "--overwrite" in err and err.count("\n") == 1


def test_a_golden_folder_without_states_says_the_layout(oracle, tmp_path, capsys):
    assert report(tmp_path / "R", "--golden", str(GOLDEN.parent)) == 2
    err = capsys.readouterr().err
    assert "no pom2k state found" in err and "iint_NNNNNN.npz" in err and err.count("\n") == 1
    assert not (tmp_path / "R").exists()


def test_a_missing_oracle_build_says_how_to_build_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "empty_home"))
    assert report(tmp_path / "R") == 2
    err = capsys.readouterr().err
    assert "the Fortran oracle is not built" in err and "python3 -m pompy setup" in err
    assert err.count("\n") == 1 and not (tmp_path / "R").exists()


def test_unknown_core_is_refused(tmp_path, capsys):
    assert report(tmp_path / "R", options=["--cores", "explicit,oracle"]) == 2
    assert "--cores explicit,oracle: one or more of explicit, implicit" in capsys.readouterr().err


def test_a_config_the_oracle_cannot_run_is_refused_before_any_folder(tmp_path, capsys):
    """wind_factor != 1 (the oracle has none): one line, exit 2, no folder
    left behind to need --overwrite next time (review finding)."""
    assert cli.main(["report", SEAMOUNT, "--days", "0.001", "--set", "wind_factor=1.1",
                     "--output", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.startswith("pompy: wind_factor=1.1: the Fortran oracle")
    assert not (tmp_path / "r").exists()


def test_the_usage_names_both_kinds_of_argument(capsys):
    """A namelist (the reproducibility report) or a training run's folder."""
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "CONFIG.nml|RUN" in out and "a training run's folder (its page)" in out
