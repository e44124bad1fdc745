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
