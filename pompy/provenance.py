"""What a result was made with: the hash of the model's sources (the
verification certificates of ``pompy verify`` carry it: pompy.verify.certificate).

The source hash covers pompy's physics, autodiff and safety modules, every
other pompy module a core's code runs (the call binder, the Fortran math,
the parameters, the variable table, the IC file reader, the oracle's
Python side) and the Fortran oracle's sources (:func:`physics_sources`):
any edit to a core gives a new hash, so an edited core has no certificate
until it is verified again. Datasets (``pompy generate``) and reports carry it too.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from pompy.oracle.build import SOURCE_DIR

PACKAGE = Path(__file__).resolve().parent


# pompy modules a core imports whose code does not decide a number: left out
# of the hash (tests/test_verify.py checks that nothing else is)
NOT_PHYSICS = ("pompy/__init__.py", "pompy/errors.py", "pompy/files.py", "pompy/utils/__init__.py")


def physics_sources() -> list[tuple[str, Path]]:
    """(name, file) of pompy's physics sources, sorted by name: pompy/core/**/*.py,
    pompy/ops.py, pompy/utils/safety.py, pompy/autodiff/*.py, the modules
    the cores run besides (calls, compat, config, the registry cores,
    variables, icfile, io, oracle/*.py) and the Fortran oracle's reference_fortran/*.f90 (named so
    wherever it is installed)."""
    files = [*PACKAGE.glob("core/**/*.py"), PACKAGE / "ops.py", PACKAGE / "utils" / "safety.py",
             *PACKAGE.glob("autodiff/*.py"),
             *(PACKAGE / f"{name}.py" for name in ("calls", "compat", "config", "cores",
                                                    "variables", "icfile", "io")),
             *PACKAGE.glob("oracle/*.py")]
    named = [(f"pompy/{f.relative_to(PACKAGE).as_posix()}", f) for f in files]
    named += [(f"reference_fortran/{f.name}", f) for f in SOURCE_DIR.glob("*.f90")]
    return sorted(named)


def verifier_sources() -> list[tuple[str, Path]]:
    """(name, file) of the verifier, pompy/verify/*.py, sorted by name: what
    a certificate's figures were measured by besides the physics."""
    return sorted((f"pompy/verify/{f.name}", f) for f in (PACKAGE / "verify").glob("*.py"))


def training_sources() -> list[tuple[str, Path]]:
    """(name, file) of the modules that build and step cores for training
    (pompy/train/pool.py, pompy/train/physics.py), sorted: an edit to them
    changes the physics in the trainer's loop as an edit to a core does."""
    return sorted((f"pompy/train/{name}.py", PACKAGE / "train" / f"{name}.py")
                  for name in ("pool", "physics"))


# the fields a grid hash covers: what places the points and the land
GRID_HASHED = ("h", "dx", "dy", "fsm")


def grid_hash(grid) -> str:
    """sha256 (hex, 16 digits) of a set-up's h, dx, dy and fsm (arrays or
    tensors in pom2k order, (i, j)), as float64 bytes: the same on every
    machine for the same set-up."""
    h = hashlib.sha256()
    for name in GRID_HASHED:
        a = np.ascontiguousarray(np.asarray(grid[name], dtype=np.float64))
        h.update(name.encode() + b"\0" + repr(a.shape).encode() + b"\0" + a.tobytes())
    return h.hexdigest()[:16]


def config_grid_hash(config) -> str:
    """:func:`grid_hash` of ``config``'s own set-up (pom2k's, float64 on the CPU)."""
    from pompy.core.setup import setup_grid

    return grid_hash(setup_grid(config))


def source_hash(sources: list[tuple[str, Path]] | None = None) -> str:
    """sha256 (hex) over ``sources`` (default: the physics sources): each
    file's name, length and bytes."""
    h = hashlib.sha256()
    for name, path in physics_sources() if sources is None else sources:
        data = path.read_bytes()
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
