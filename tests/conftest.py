"""Shared fixtures: where the legacy pom2k golden data lives, and how to
load it; and how the suite shares the machine's cores (pytest-xdist)."""

import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).absolute().parents[1].parent / "shared" / "golden"

# pyproject's addopts run the suite in WORKERS processes (pytest-xdist, a
# test file to a worker): on the build machine's 2 cores 18.3 minutes
# (19.5 with the files in their order) against 35.0 in one process,
# measured the same day. Each worker's torch
# (and the subprocesses it starts) runs one thread, so two workers fill two
# cores instead of four threads contending for them. More workers would
# multiply the memory of the heavy tests (a few GB each) for cores that
# the multi-process tests (two torchrun ranks) already fill.
WORKERS = 2
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# the files that take longest (seconds of the serial run, in this order),
# handed out first so that no worker is left alone with one at the end
LONGEST_FIRST = ("test_train.py", "test_training_path.py", "test_compiled_core.py",
                 "test_docs.py", "test_train_faults.py", "test_explicit_core.py",
                 "test_generate.py")


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: WORKERS, or fewer on a machine with fewer cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(WORKERS, cores or 1))


def pytest_collection_modifyitems(session, config, items) -> None:
    """Under xdist, the longest files first (LONGEST_FIRST), the rest in
    their order: xdist hands a worker the next file as it finishes one."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def require_golden() -> Path:
    """The golden folder; skip the test when it is absent, fail instead if POMPY_REQUIRE_GOLDEN=1."""
    if not GOLDEN.is_dir():
        reason = f"golden data not found at {GOLDEN} (it lives in ../shared/golden beside the repo)"
        if os.environ.get("POMPY_REQUIRE_GOLDEN") == "1":
            pytest.fail(reason + " and POMPY_REQUIRE_GOLDEN=1")
        pytest.skip(reason)
    return GOLDEN


def load_golden(name: str) -> dict[str, np.ndarray]:
    """Every array of golden file NAME, e.g. "seamount/iint_000000" (".npz" optional)."""
    path = require_golden() / name
    with np.load(path if path.suffix == ".npz" else path.with_name(path.name + ".npz")) as npz:
        return dict(npz)


@pytest.fixture
def golden_dir() -> Path:
    return require_golden()


def in_ci() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("POMPY_REQUIRE_GOLDEN") == "1"


@pytest.fixture(scope="session")
def oracle():
    """The compiled Fortran oracle (built on first use); skipped with build
    instructions when it cannot be built, a failure in CI."""
    from pompy.oracle import Oracle, OracleBuildError

    try:
        return Oracle()
    except OracleBuildError as exc:
        if in_ci():
            pytest.fail(f"the Fortran oracle could not be built: {exc}")
        pytest.skip(f"Fortran oracle unavailable ({exc}); build it with "
                    "`python3 -m pompy setup`")


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| relative to max |want| (absolute where want is all zero)."""
    scale = float(np.abs(want).max()) if np.size(want) else 0.0
    err = float(np.abs(np.asarray(got) - np.asarray(want)).max()) if np.size(want) else 0.0
    return err / scale if scale > 0 else err


def assert_fields_close(got: dict, want: dict, rtol: float, names=None, label: str = "") -> dict:
    """Every field of ``want`` (or ``names``) within rtol of its max magnitude;
    the message names each failing field and its worst (i, j, k), 1-based."""
    errors, failures = {}, []
    for name in sorted(names if names is not None else want):
        assert name in got, f"{label}: field {name} missing"
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.shape == w.shape, f"{label}: {name} shape {g.shape} != {w.shape}"
        errors[name] = e = relative_error(g, w)
        if not e <= rtol:   # a NaN error fails too
            where = np.unravel_index(np.abs(g - w).argmax(), w.shape)
            failures.append(f"{name}: {e:.2e} at {tuple(int(x) + 1 for x in where)}")
    assert not failures, f"{label}: fields beyond {rtol:g} of their max magnitude: " + "; ".join(failures)
    return errors
