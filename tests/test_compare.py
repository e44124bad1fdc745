"""pompy compare: equal files pass, a perturbed field is found and fails;
records are matched by iint (or time), bad files and tolerances refused."""
import dataclasses
import math
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from pompy.cli import main
from pompy.compare import differences, report
from pompy.config import load_config
from pompy.core.model import to_numpy
from pompy.core.setup import set_up
from pompy.errors import InputError
from pompy.io import OutputWriter

SEAMOUNT = str(Path(__file__).parents[1] / "configs" / "seamount.nml")


def test_compare_finds_the_perturbed_field_and_record(oracle, tmp_path, capsys):
    assert main(["run", SEAMOUNT, "--output", str(tmp_path / "a"), "--core", "oracle"]) == 0
    a = tmp_path / "a" / "oracle_output.nc"
    assert main(["compare", str(a), str(a)]) == 0
    assert "all within" in capsys.readouterr().out
    b = tmp_path / "b.nc"
    b.write_bytes(a.read_bytes())
    with netCDF4.Dataset(b, "a") as ds:
        t = ds["t"][1]
        t[3, 10, 20] += 1e-3 * abs(t).max()
        ds["t"][1] = t
    assert main(["compare", str(a), str(b), "--tolerance", "1e-6"]) == 1
    lines = capsys.readouterr().out.splitlines()
    bad = [line for line in lines if "> tolerance" in line]
    assert len(bad) == 1 and bad[0].split()[:2] == ["t", "12"]      # record 1 is iint 12
    assert float(bad[0].split()[3]) == pytest.approx(1e-3, rel=1e-6)
    assert main(["compare", str(a), str(b), "--tolerance", "1e-2"]) == 0


def test_compare_missing_file(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "x.nc"), str(tmp_path / "y.nc")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small():
    config = dataclasses.replace(load_config(SEAMOUNT), im=8, jm=7, kb=5, kl1=2, kl2=3)
    return config, to_numpy(set_up(config))


def at(state: dict, iint: int) -> dict:
    """The state with t shifted by iint/1000: each record tells its step."""
    return state | {"t": state["t"] + iint / 1000}


def write(path, small, steps, perturb=None):
    config, state = small
    writer = OutputWriter(path, config, state)
    for iint in steps:
        s = at(state, iint)
        if iint == perturb:
            s["el"] = s["el"].copy()
            s["el"][2, 3] += 0.5
        writer.write(s, iint, iint * config.dti / 86400)
    writer.close()
    return path


def test_a_continued_run_compares_on_the_common_records(small, tmp_path):
    whole = write(tmp_path / "whole.nc", small, range(6, 61, 6))
    continued = write(tmp_path / "continued.nc", small, range(30, 61, 6), perturb=42)
    c = differences(whole, continued)
    assert (c.key, c.common, c.only_a, c.only_b) == ("iint", (30, 36, 42, 48, 54, 60),
                                                     (6, 12, 18, 24), ())
    # matched by iint, t is equal; by index it would differ by 0.024 everywhere
    assert {d.max_abs for d in c if d.name == "t"} == {0.0}
    bad = [d for d in c if d.max_abs > 0]
    assert [(d.name, d.record) for d in bad] == [("el", 42)]
    text, ok = report(c, 1e-10)
    assert not ok
    assert "6 records matched by iint: 30, 36, 42, 48, 54, 60" in text
    assert f"4 records only in {whole}, not compared: iint 6, 12, 18, 24" in text
    el = [line.split() for line in text.splitlines() if line.startswith("el ")]
    assert [line[1] for line in el] == ["30", "36", "42", "48", "54", "60"]
    assert [line[2] for line in el if line[-1] == "tolerance"] == ["5.000e-01"]


def test_the_default_bars_are_pompy_reports():
    """Without --tolerance each field has pompy report's bar: 1e-10 of its
    magnitude, 1e-8 for a diagnostic field (l here: the closure amplifies
    rounding about 100-fold); a tolerance given holds for every field."""
    from pompy.compare import Difference
    from pompy.report.checks import DIAGNOSTIC_BAR, PROGNOSTIC_BAR
    assert (PROGNOSTIC_BAR, DIAGNOSTIC_BAR) == (1e-10, 1e-8)
    l_off, t_off = Difference("l", 24, 1.0, 7.2e-10), Difference("t", 24, 1.0, 5e-11)
    text, ok = report([l_off, t_off])
    assert ok and text.endswith("all within relative tolerances (1e-10; the diagnostic "
                                "fields 1e-08)"), text
    text, ok = report([l_off, t_off], 1e-10)
    assert not ok and [line.split()[0] for line in text.splitlines()
                       if line.endswith("> tolerance")] == ["l"]
    text, ok = report([Difference("t", 24, 1.0, 2e-10)])
    assert not ok and text.splitlines()[-2].endswith("> tolerance")


def test_a_variable_b_lacks_is_no_match(small, tmp_path, capsys):
    """B without A's t: exit 1, the verdict saying what B lacks; B with
    more variables than A compares on A's."""
    import netCDF4
    from pompy.cli import main
    a = write(tmp_path / "a.nc", small, (6,))
    b = tmp_path / "b.nc"
    with netCDF4.Dataset(a) as src, netCDF4.Dataset(b, "w") as dst:
        for name, dim in src.dimensions.items():
            dst.createDimension(name, None if dim.isunlimited() else len(dim))
        for name, v in src.variables.items():
            if name != "t":
                dst.createVariable(name, v.dtype, v.dimensions)[...] = v[...]
    assert main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "1 record matched by iint: 6" in out[0] and f"variables only in {a}" in out[1]
    assert out[-1].endswith(f"; but {b} lacks t"), out[-1]
    assert main(["compare", str(b), str(a)]) == 0


def test_a_cores_own_series_is_not_a_missing_field():
    """The implicit core's cg_iterations, which other cores' outputs lack,
    does not fail a comparison of the fields."""
    from pathlib import Path

    from pompy.compare import Comparison, Difference
    c = Comparison(Path("a.nc"), Path("b.nc"), "iint", (6,), (), (), ("cg_iterations",), (),
                   (Difference("t", 6, 0.0, 0.0),))
    assert report(c)[1]


def test_records_are_matched_by_time_without_iint(small, tmp_path):
    a = write(tmp_path / "a.nc", small, (6, 12, 18))
    b = write(tmp_path / "b.nc", small, (12, 18, 24))
    for path in (a, b):
        with netCDF4.Dataset(path, "a") as ds:
            ds.renameVariable("iint", "step")
    c = differences(a, b)
    dti = small[0].dti
    assert c.key == "time" and c.common == (12 * dti / 86400, 18 * dti / 86400)
    assert c.only_a == (6 * dti / 86400,) and c.only_b == (24 * dti / 86400,)
    assert all(d.max_abs == 0 for d in c)


def test_no_record_in_common(small, tmp_path):
    a = write(tmp_path / "a.nc", small, (6, 12))
    b = write(tmp_path / "b.nc", small, (18, 24))
    with pytest.raises(InputError) as err:
        differences(a, b)
    assert str(err.value) == f"no record in common: {a} holds iint 6, 12, {b} holds iint 18, 24"


def test_different_shapes_name_the_variable(tmp_path):
    for name, nx in (("a.nc", 3), ("b.nc", 4)):
        with netCDF4.Dataset(tmp_path / name, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", nx)
            ds.createVariable("iint", "i4", ("time",))[:] = [1, 2]
            ds.createVariable("el", "f8", ("time", "x"))[:] = np.zeros((2, nx))
    with pytest.raises(InputError) as err:
        differences(tmp_path / "a.nc", tmp_path / "b.nc")
    assert str(err.value).startswith("el has dims ('time', 'x') and shape (2, 3) in ")


@pytest.mark.parametrize("damage", ["missing", "text", "truncated"])
def test_a_file_that_is_not_netcdf_is_named(small, tmp_path, damage):
    good = write(tmp_path / "good.nc", small, (6,))
    bad = tmp_path / "bad.nc"
    if damage == "text":
        bad.write_text("not netcdf\n")
    elif damage == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for a, b in ((good, bad), (bad, good)):
        with pytest.raises(InputError) as err:
            differences(a, b)
        assert str(err.value).startswith(f"file {bad} ")


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -1e-10, "abc"])
def test_a_tolerance_must_be_finite_and_not_negative(tolerance):
    with pytest.raises(InputError) as err:
        report([], tolerance)
    assert str(err.value) == f"--tolerance {tolerance}: must be a finite number >= 0"


def test_zero_tolerance_passes_equal_files(small, tmp_path):
    a = write(tmp_path / "a.nc", small, (6, 12))
    text, ok = report(differences(a, a), 0)
    assert ok and text.endswith("all within relative tolerance 0")
