"""Build the Fortran oracle with numpy.f2py (meson backend), cached by source hash.

The Fortran sources are ``reference_fortran/*.f90`` of the checkout when pompy
runs from one (the repository, an editable install), else the copy a wheel
ships as package data (``pompy/_fortran/``). The extension is built into
``$POMPY_HOME/oracle/<hash>/`` (POMPY_HOME defaults to ``~/.cache/pompy``),
where the hash covers every source file, the compiler flags, and the numpy and
Python versions; a changed source gives a new hash and a rebuild, and only the
current build is kept. A build happens in a temporary folder of its own and is
renamed into place when finished, so processes building at once (torchrun)
never see a half-built oracle: the first rename wins and the others use it.
``python -m pompy.oracle build`` builds on demand; ``load()`` builds if needed.

A leaf module: it imports nothing from pompy.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

MODULE = "_pom2k_oracle"
PACKAGE = Path(__file__).resolve().parents[1]      # the installed or checked-out pompy/
CHECKOUT_SOURCES = PACKAGE.parent / "reference_fortran"
PACKAGED_SOURCES = PACKAGE / "_fortran"            # reference_fortran/ as shipped in a wheel


def _source_dir() -> Path:
    """The checkout's reference_fortran/ when running from one, else the package data."""
    if any(CHECKOUT_SOURCES.glob("*.f90")):
        return CHECKOUT_SOURCES
    return PACKAGED_SOURCES


SOURCE_DIR = _source_dir()
DEFAULT_HOME = "~/.cache/pompy"
TMP_SUFFIX = ".tmp"          # builds in progress (or failed, with their build.log)
TMP_MAX_AGE_S = 24 * 3600    # older temporary folders are left-overs and removed

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


class BuildEnvironmentError(OracleBuildError):
    """The machine's part (POMPY_HOME not a folder or not writable,
    gfortran or meson missing): the
    command line says it in one line and exits 4, as for
    pompy.errors.EnvironmentFault (this module imports nothing of pompy's)."""


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


def pompy_home() -> Path:
    """$POMPY_HOME, default ~/.cache/pompy (read at each call);
    EnvironmentFault if it is there and not a folder."""
    home = Path(os.environ.get("POMPY_HOME") or DEFAULT_HOME).expanduser().absolute()
    if home.exists() and not home.is_dir():
        raise BuildEnvironmentError(f"POMPY_HOME {home} is not a folder (pompy keeps the oracle's "
                               "build and the certificates there); remove it, or set POMPY_HOME "
                               "to a folder")
    return home


def build_env(compiler: str) -> dict:
    """The build's environment: the running Python's own bin folder first
    on PATH, where pip put meson and ninja (a venv's python called by its
    path, without the venv activated, has them there only);
    EnvironmentFault if meson is nowhere."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if shutil.which("meson", path=path) is None:
        raise BuildEnvironmentError("meson is not installed (numpy.f2py builds the oracle with it): "
                               f"{sys.executable} -m pip install meson ninja")
    return dict(os.environ, FFLAGS=" ".join(FFLAGS), FC=compiler, PATH=path)


def cache_dir() -> Path:
    """Where oracle builds live: $POMPY_HOME/oracle."""
    return pompy_home() / "oracle"


def build_dir() -> Path:
    return cache_dir() / source_hash()


def extension_path(directory: Path) -> Path | None:
    """The built oracle module in ``directory``, or None."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = directory / (MODULE + suffix)
    return path if path.exists() else None


def _discard(path: Path) -> None:
    """Remove a folder by first renaming it out of the way (atomic), then deleting it."""
    trash = Path(tempfile.mkdtemp(prefix=f"{path.name}.old.", suffix=TMP_SUFFIX, dir=path.parent))
    try:
        path.rename(trash / path.name)
    except FileNotFoundError:
        pass
    shutil.rmtree(trash, ignore_errors=True)


def _install(work: Path, target: Path, replace: bool) -> None:
    """Rename the finished build WORK to TARGET. If another process installed
    a complete build there meanwhile, keep that one (unless REPLACE)."""
    for attempt in range(2):
        if replace or (target.exists() and extension_path(target) is None):
            _discard(target)
            replace = False
        try:
            work.rename(target)
            return
        except OSError:
            if extension_path(target) is not None:     # another process won the race
                shutil.rmtree(work, ignore_errors=True)
                return
            if attempt:
                raise


def _remove_stale(cache: Path, keep: Path) -> None:
    """Keep only the current build; leave other processes' builds in progress."""
    now = time.time()
    for entry in cache.iterdir():
        if entry == keep or not entry.is_dir():
            continue
        if entry.name.endswith(TMP_SUFFIX):
            try:
                if now - entry.stat().st_mtime < TMP_MAX_AGE_S:
                    continue
            except OSError:
                continue
        shutil.rmtree(entry, ignore_errors=True)


def build(verbose: bool = False, force: bool = False) -> Path:
    """Compile the oracle unless a build for the current sources exists."""
    target = build_dir()
    existing = extension_path(target)
    if existing and not force:
        if verbose:
            print(f"oracle up to date: {existing}")
        return existing
    compiler = os.environ.get("FC", "gfortran")
    if shutil.which(compiler) is None:
        raise BuildEnvironmentError(GFORTRAN_HINT)
    env = build_env(compiler)                  # before any folder is made
    cache = target.parent
    try:
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=TMP_SUFFIX, dir=cache))
    except OSError as exc:
        raise BuildEnvironmentError(
            f"cannot write the oracle build cache {cache} ({exc.strerror or exc}); "
            "set POMPY_HOME to a writable folder") from None
    work.chmod(0o755)
    cmd = [sys.executable, "-m", "numpy.f2py", "-c", "--backend", "meson",
           "-m", MODULE, "--build-dir", str(work / "meson"),
           *[str(f.absolute()) for f in sources()]]
    if verbose:
        n = len(sources())
        print(f"building the oracle: {n} Fortran source{'s' * (n != 1)} with {compiler} through "
              f"f2py (meson) in {work} (about a minute)", flush=True)
    started = time.perf_counter()
    proc = _compile(cmd, work, env, TICK if verbose else None)
    if verbose:
        print(f"compiled in {time.perf_counter() - started:.0f} s", flush=True)
    if proc.returncode != 0 or extension_path(work) is None:
        log = work / "build.log"
        log.write_text(proc.stdout + proc.stderr)
        raise OracleBuildError(
            f"f2py build of the oracle failed (exit {proc.returncode}); "
            f"full log in {log}\n" + (proc.stdout + proc.stderr)[-3000:])
    shutil.rmtree(work / "meson", ignore_errors=True)
    _install(work, target, replace=force)
    _remove_stale(cache, keep=target)
    path = extension_path(target)
    if verbose:
        print(f"oracle built: {path}")
    return path


TICK = 10.0      # s between the lines that say the build is still going


def _compile(cmd: list[str], work: Path, env: dict, tick: float | None
             ) -> subprocess.CompletedProcess:
    """Run the build, its output kept; every ``tick`` s (None: never) a
    line that it is still going, with the time so far."""
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        child = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 text=True)
        while True:
            try:
                child.wait(timeout=tick)
                break
            except subprocess.TimeoutExpired:
                print(f"  still compiling: {time.perf_counter() - started:.0f} s", flush=True)
        out.seek(0)
        return subprocess.CompletedProcess(cmd, child.returncode, out.read(), "")


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
