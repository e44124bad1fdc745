"""Every shipped config's elevation solve converges on its own grid with
its own solver settings (issue 50, item 1): the implicit core set up from
the config as it ships, two steps, every PCG solve watched: its true
relative residual within cg_tol (or, stopped at its floating-point floor,
within cg.FLOOR_FACTOR x cg_tol, as the core accepts it) in fewer than
cg_maxiter iterations. And ``pompy verify``'s implicit_step sections
(the reference CG, the Fortran twin's algorithm, on a random state of the
grid at dti up to 2000 s) pass with the config's cg_tol and cg_maxiter.
Not the full ``pompy verify``: the solver settings a verify and a training
run of that config start from.

Measured (CPU, one thread, 2 steps, Jacobi PCG): train_tiny 72 iterations
a solve (multigrid 9), train_360x240 240-248 (multigrid 12-13). Jacobi
stays the default preconditioner: a step takes as long or less with it on
every shipped config (one thread, the least of 3 windows of 3 steps, load
3.3: train_tiny 17 ms against multigrid's 28, seamount 59 against 79,
train_360x240 1641 against 1650), the solve being a small part of a step
at these dti. The reference CG of the verify's
sections at 360x240: 67 iterations at dti 60 s, 1046 at 600 s, 1672 at
2000 s (with cg_maxiter 500 two sections failed: issue 50).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pompy.config import load_config
from pompy.core.external import cg
from pompy.generate.members import set_up
from pompy.verify import parity
from pompy.verify.states import random_state

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


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_each_shipped_configs_verify_sections_converge(path, oracle):
    config = load_config(path)
    states = [(0,) + random_state(0, config, oracle)]
    for section in parity.SECTIONS[parity.SemiImplicit]:
        check = parity._section_check(section, oracle, states, torch.float64,
                                      torch.device("cpu"))
        assert check.passed, (path.name, section.label, check.figure, check.detail)
