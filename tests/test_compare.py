"""pompy compare: equal files pass, a perturbed field is found and fails."""
from pathlib import Path

import netCDF4

from pompy.cli import main

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
    assert len(bad) == 1 and bad[0].split()[:2] == ["t", "1"]
    assert float(bad[0].split()[3]) == __import__("pytest").approx(1e-3, rel=1e-6)
    assert main(["compare", str(a), str(b), "--tolerance", "1e-2"]) == 0


def test_compare_missing_file(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "x.nc"), str(tmp_path / "y.nc")]) == 2
    assert "does not exist" in capsys.readouterr().err
