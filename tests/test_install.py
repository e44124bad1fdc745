"""A non-editable install works from any folder: `pip install .` ships the
Fortran sources as package data, `pompy setup` builds the oracle into
$POMPY_HOME, and `pompy run` runs both cores, with pompy imported from the
install and not from this checkout."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import in_ci

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300   # per command; the whole test takes about a minute
# What the copy of the working tree leaves out: version control, build
# outputs and caches (setuptools' build/ would otherwise carry stale files
# into the wheel, and building in the checkout would write into it).
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pompy_build", ".pytest_cache", ".hypothesis",
                                     ".benchmarks", "output")


def run(cmd, cwd, env, installed_only=False):
    """Run CMD; with INSTALLED_ONLY, check (python -v) that it imports nothing
    from this checkout: an editable install of it in the system site-packages
    would otherwise supply any module the installed package lacks."""
    if installed_only:
        env = dict(env, PYTHONVERBOSE="1")
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    errors = proc.stderr
    if installed_only:
        errors = "\n".join(line for line in errors.splitlines()
                           if not line.startswith(("#", "import ", "extension module ")))
        leaks = sorted({line for line in proc.stderr.splitlines() if f"{REPO}{os.sep}" in line})
        assert not leaks, f"{cmd} imported from the checkout:\n" + "\n".join(leaks[:20])
    assert proc.returncode == 0, (f"{cmd} exited {proc.returncode}\n"
                                  f"{proc.stdout[-3000:]}\n{errors[-3000:]}")
    return proc.stdout


def test_non_editable_install_runs_both_cores_from_any_folder(tmp_path):
    if shutil.which(os.environ.get("FC", "gfortran")) is None and not in_ci():
        pytest.skip("gfortran is not installed (`python3 -m pompy setup` says how)")
    source, venv, home, work = (tmp_path / name for name in ("source", "venv", "home", "work"))
    shutil.copytree(REPO, source, ignore=NOT_SOURCES)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["POMPY_HOME"] = str(home)
    # torch, numpy, setuptools and pip come from the system site-packages (no
    # network); --without-pip, because the venv's own bundled setuptools could
    # not build a wheel without the `wheel` package.
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp_path, env)
    python, pompy = venv / "bin" / "python", venv / "bin" / "pompy"
    run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", source], work, env)

    # pompy and its Fortran sources come from the venv, not from this checkout
    # (the system site-packages may hold an editable install of it)
    where = run([python, "-c", "import pompy, pompy.oracle.build as b; "
                 "print(pompy.__file__); print(b.SOURCE_DIR); print(b.build_dir())"],
                work, env).split()
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                    work, env).strip())
    assert Path(where[0]) == site / "pompy" / "__init__.py"
    assert Path(where[1]) == site / "pompy" / "_fortran"
    assert sorted(p.name for p in Path(where[1]).glob("*.f90")) == sorted(
        p.name for p in (REPO / "reference_fortran").glob("*.f90"))
    build_dir = Path(where[2])
    assert build_dir.parent == home / "oracle"

    out = run([python, "-m", "pompy", "setup"], work, env, installed_only=True)
    assert str(build_dir) in out
    assert list(build_dir.glob("_pom2k_oracle*"))
    assert [p.name for p in (home / "oracle").iterdir()] == [build_dir.name]

    shutil.copy(REPO / "configs" / "seamount.nml", work)
    for core in ("oracle", "explicit"):
        run([pompy, "run", "seamount.nml", "--core", core, "--steps", "2", "--output", "out"],
            work, env, installed_only=True)
        assert (work / "out" / f"{core}_output.nc").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["out", "seamount.nml"]
