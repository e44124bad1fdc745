"""What a report was made with: versions, machine, checkout and hashes."""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import matplotlib
import netCDF4
import numpy as np
import torch

from pompy import __version__
from pompy.oracle import build
from pompy.provenance import physics_sources, source_hash

REPO = Path(__file__).resolve().parents[2]


def _first_line(command: list[str]) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> tuple[str | None, bool | None]:
    """(HEAD, whether tracked files differ from it) when pompy runs from a
    git checkout; (None, None) otherwise."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return None, None
    head = _first_line(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True)
    return head, (bool(status.stdout.strip()) if status.returncode == 0 else None)


def environment() -> dict:
    """Every item of the page's environment table, by its JSON name."""
    commit, modified = git_commit()
    compiler = shutil.which("gfortran")
    return {
        "pompy": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "netCDF4": f"{netCDF4.__version__} (netCDF {netCDF4.__netcdf4libversion__}, "
                   f"HDF5 {netCDF4.__hdf5libversion__})",
        "matplotlib": matplotlib.__version__,
        "gfortran": (_first_line([compiler, "--version"]) if compiler else None) or "not found",
        "os": platform.platform(),
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (runs on CPU)",
        "threads": torch.get_num_threads(),
        "git_commit": commit,
        "git_modified": modified,
        "source_hash": source_hash(),
        "source_hash_covers": [name for name, _ in physics_sources()],
        "oracle_build_hash": build.source_hash(),
    }
