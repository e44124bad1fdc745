"""Shared fixtures: where the legacy pom2k golden data lives, and how to load it."""

import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).absolute().parents[1].parent / "shared" / "golden"


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
