"""Build the Fortran oracle with numpy.f2py (meson backend), cached by source hash.

The extension is built into ``<repo>/.pompy_build/<hash>/`` where the hash
covers every ``reference_fortran/*.f90`` file, the compiler flags, and the
numpy and Python versions; a changed source gives a new hash and a rebuild.
``python -m pompy.oracle build`` builds on demand; ``load()`` builds if needed.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np

MODULE = "_pom2k_oracle"
REPO = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO / "reference_fortran"
CACHE_DIR = REPO / ".pompy_build"

# -O3 as the golden pom2k build: gfortran then vectorises the grid and
# initial-condition loops with glibc's vector sin/exp (libmvec), whose last
# bits differ from the scalar ones; matching them makes the oracle equal
# the golden output bit for bit (with -O2, 1-ulp differences in dx, h and
# t at set-up grow to 1e-9 in w by cancellation in continuity). No
# fast-math, no FMA contraction; real*8 defaults as in the golden build.
FFLAGS = (
    "-O3", "-fno-fast-math", "-ffp-contract=off",
    "-fdefault-real-8", "-fdefault-double-8", "-fno-range-check",
)
GFORTRAN_HINT = (
    "gfortran was not found. The Fortran oracle needs it: on Debian/Ubuntu run "
    "`sudo apt-get install -y gfortran` (or `python3 -m pompy setup` as root)."
)


class OracleBuildError(RuntimeError):
    """The oracle could not be built; the message says why."""


def sources() -> list[Path]:
    files = sorted(SOURCE_DIR.glob("*.f90"))
    if not files:
        raise OracleBuildError(f"no Fortran sources found in {SOURCE_DIR}")
    return files


def source_hash() -> str:
    h = hashlib.sha256()
    for f in sources():
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update(" ".join(FFLAGS).encode())
    h.update(np.__version__.encode())
    h.update(sys.version.split()[0].encode())
    return h.hexdigest()[:16]


def build_dir() -> Path:
    return CACHE_DIR / source_hash()


def _extension_path(directory: Path) -> Path | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = directory / (MODULE + suffix)
    return path if path.exists() else None


def build(verbose: bool = False, force: bool = False) -> Path:
    """Compile the oracle unless a build for the current sources exists."""
    target = build_dir()
    existing = _extension_path(target)
    if existing and not force:
        if verbose:
            print(f"oracle up to date: {existing}")
        return existing
    compiler = os.environ.get("FC", "gfortran")
    if shutil.which(compiler) is None:
        raise OracleBuildError(GFORTRAN_HINT)
    work = target.with_name(target.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, FFLAGS=" ".join(FFLAGS), FC=compiler)
    cmd = [sys.executable, "-m", "numpy.f2py", "-c", "--backend", "meson",
           "-m", MODULE, "--build-dir", str(work / "meson"),
           *[str(f) for f in sources()]]
    if verbose:
        print("building oracle:", " ".join(cmd))
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or _extension_path(work) is None:
        log = work / "build.log"
        log.write_text(proc.stdout + proc.stderr)
        raise OracleBuildError(
            f"f2py build of the oracle failed (exit {proc.returncode}); "
            f"full log in {log}\n" + (proc.stdout + proc.stderr)[-3000:])
    shutil.rmtree(work / "meson", ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    for stale in CACHE_DIR.iterdir():  # keep only the current build
        if stale != target and not stale.name.endswith(".tmp"):
            shutil.rmtree(stale, ignore_errors=True)
    path = _extension_path(target)
    if verbose:
        print(f"oracle built: {path}")
    return path


_MODULE = None


def load():
    """Import the compiled oracle, building it first if needed."""
    global _MODULE
    if _MODULE is None:
        path = build()
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULE = module
    return _MODULE
