"""Every shipped config's elevation solve converges on its own grid with
its own solver settings (issue 50, item 1): the implicit core set up from
the config as it ships, two steps, every PCG solve watched: its true
relative residual within cg_tol (or, stopped at its floating-point floor,
within cg.FLOOR_FACTOR x cg_tol, as the core accepts it) in fewer than
cg_maxiter iterations. Not the full ``pompy verify``: the solver settings
a verify and a training run of that config start from.

Measured (CPU, one thread, 2 steps, Jacobi PCG): train_tiny 72 iterations
a solve (multigrid 9), train_360x240 240-248 (multigrid 12-13; 1.7 s a
step with Jacobi, 1.2 s with multigrid).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pompy.config import load_config
from pompy.core.external import cg
from pompy.generate.members import set_up

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.nml"))
STEPS = 2


@pytest.fixture
def solves(monkeypatch) -> list[tuple[float, int]]:
    """Each PCG solve's (true relative residual, iterations), as run."""
    seen: list[tuple[float, int]] = []
    pcg = cg.pcg

    def watched(*args, **kwargs):
        x, residual, done = pcg(*args, **kwargs)
        seen.append((float(residual), int(done)))
        return x, residual, done
    monkeypatch.setattr(cg, "pcg", watched)
    return seen


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_each_shipped_configs_solver_converges_on_its_grid(path, solves):
    config = load_config(path)
    core = set_up("implicit", config, "cpu", "float64")
    with torch.no_grad():
        for iint in range(1, STEPS + 1):
            core.step(iint)
    assert len(solves) == STEPS, solves
    for residual, iterations in solves:
        assert iterations < config.cg_maxiter, (path.name, solves)
        assert bool(cg.accepted(residual, iterations, config.cg_tol, config.cg_maxiter)), \
            (path.name, solves)
