"""The oracle build: cached by source hash, rebuilt on change, clear errors;
and the adapter that maps state dicts onto oracle calls."""
import ast
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pompy.oracle import build as oracle_build
from pompy.calls import parse_call

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Build module pointed at a private copy of the sources and cache."""
    src = tmp_path / "reference_fortran"
    shutil.copytree(oracle_build.SOURCE_DIR, src)
    monkeypatch.setattr(oracle_build, "SOURCE_DIR", src)
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "home"))
    return src


def test_sources_come_from_the_checkout():
    assert oracle_build.SOURCE_DIR == REPO / "reference_fortran"
    assert [f.name for f in oracle_build.sources()] == sorted(
        f.name for f in (REPO / "reference_fortran").glob("*.f90"))


def test_cache_is_under_pompy_home(tmp_path, monkeypatch):
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "home"))
    assert oracle_build.build_dir() == tmp_path / "home" / "oracle" / oracle_build.source_hash()
    monkeypatch.delenv("POMPY_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert oracle_build.cache_dir() == tmp_path / "user" / ".cache" / "pompy" / "oracle"


def test_build_module_is_a_leaf():
    tree = ast.parse(Path(oracle_build.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m == "pompy" or m.startswith("pompy.")]


def test_hash_follows_every_source(sandbox):
    before = oracle_build.source_hash()
    assert oracle_build.source_hash() == before
    target = sandbox / "density.f90"
    target.write_text(target.read_text() + "\n! edited\n")
    assert oracle_build.source_hash() != before


def test_changed_source_is_rebuilt_and_cached(sandbox):
    first = oracle_build.build()
    assert oracle_build.build() == first          # cached: same file, no rebuild
    stamp = first.stat().st_mtime_ns
    target = sandbox / "grid.f90"
    target.write_text(target.read_text() + "\n! edited\n")
    second = oracle_build.build()
    assert second != first and second.exists()
    assert not first.exists(), "stale builds are removed"
    assert oracle_build.build() == second and second.stat().st_mtime_ns >= stamp


TINY_SOURCE = """
subroutine twice(x, y)
  real*8, intent(in) :: x
  real*8, intent(out) :: y
  y = 2*x
end subroutine twice
"""


def test_concurrent_builds_share_one_cache(tmp_path, monkeypatch):
    """Two processes building the same oracle at once (as under torchrun):
    both get a complete build at the same path, and nothing half-built or
    temporary is left. A one-routine source keeps the builds short."""
    src = tmp_path / "tiny"
    src.mkdir()
    (src / "tiny.f90").write_text(TINY_SOURCE)
    monkeypatch.setattr(oracle_build, "SOURCE_DIR", src)
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "home"))
    code = ("import sys; from pathlib import Path; import pompy.oracle.build as b; "
            "b.SOURCE_DIR = Path(sys.argv[1]); m = b.load(); print(b.build(), m.twice(2.0))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(src)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    outs = {out.strip() for out, _ in results}
    assert len(outs) == 1
    path, value = outs.pop().split()
    assert float(value) == 4.0
    assert Path(path).parent == oracle_build.build_dir() and Path(path).exists()
    assert [d.name for d in oracle_build.cache_dir().iterdir()] == [oracle_build.source_hash()]
    assert oracle_build.build() == Path(path)          # cached: no third build


def test_a_build_says_what_it_does_while_it_runs(tmp_path, monkeypatch, capsys):
    """``pompy setup``'s build: one short line (the sources, the compiler,
    the folder), a line every TICK seconds while it compiles, its time at
    the end; not f2py's whole command line."""
    src = tmp_path / "tiny"
    src.mkdir()
    (src / "tiny.f90").write_text(TINY_SOURCE)
    monkeypatch.setattr(oracle_build, "SOURCE_DIR", src)
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(oracle_build, "TICK", 0.5)
    path = oracle_build.build(verbose=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("building the oracle: 1 Fortran source with gfortran through "
                               "f2py (meson) in "), lines
    assert "numpy.f2py" not in lines[0] and len(lines[0]) < 300
    ticks = [line for line in lines if line.startswith("  still compiling: ")]
    assert ticks, lines                           # a build takes seconds: ticked
    assert lines[-2].startswith("compiled in ") and lines[-1] == f"oracle built: {path}"


def test_missing_compiler_says_what_to_install(sandbox, monkeypatch):
    monkeypatch.setenv("FC", "/nonexistent/gfortran")
    with pytest.raises(oracle_build.OracleBuildError, match="apt-get install -y gfortran"):
        oracle_build.build()


def test_parse_call():
    assert parse_call("call advq(q2b,q2,uf,a,c)") == ("advq", ["q2b", "q2", "uf", "a", "c"])
    assert parse_call("baropg") == ("baropg", [])
    with pytest.raises(ValueError, match="cannot parse"):
        parse_call("advq(q2b")


def test_adapter_binds_pom2k_actuals_and_copies(oracle):
    im, jm, kb = 5, 4, 3
    rng = np.random.default_rng(0)
    state = {name: rng.random((im, jm, kb)) for name in ("t", "s", "rho")}
    state.update(zz=np.array([-0.25, -0.75, -1.25]), h=rng.random((im, jm)) * 100 + 10,
                 fsm=np.ones((im, jm)))
    params = {"grav": 9.806, "rhoref": 1025.0, "tbias": 0.0, "sbias": 0.0}
    rho_before = state["rho"].copy()
    out = oracle.call("dens(s,t,rho)", state, params)
    assert set(out) == {"rho"}
    np.testing.assert_array_equal(state["rho"], rho_before)   # input untouched
    swapped = oracle.call("dens(t,s,rho)", state, params)      # actuals are bound
    assert not np.array_equal(out["rho"], swapped["rho"])
    np.testing.assert_array_equal(out["rho"][:, :, -1], rho_before[:, :, -1])  # k=kb kept


def test_adapter_errors_name_the_argument(oracle):
    with pytest.raises(ValueError, match=r"advq takes 5 pom2k arguments"):
        oracle.call("advq(q2b,q2)", {}, {})
    grid = {"zz": np.zeros(3), "h": np.ones((4, 4)), "fsm": np.ones((4, 4))}
    params = {"grav": 9.806, "rhoref": 1025.0, "tbias": 0.0, "sbias": 0.0}
    with pytest.raises(KeyError, match="'si' \\(bound to 's'\\)"):
        oracle.call("dens(s,t,rho)", grid, params)
    with pytest.raises(AttributeError, match="no routine 'nosuch'"):
        oracle.signature("nosuch")
