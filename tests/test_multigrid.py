"""The multigrid preconditioner of the elevation solve:
the PCG with it against scipy's direct solve and against Jacobi's PCG, the
V-cycle symmetric positive definite (as a CG preconditioner must be),
gradients through a step equal to Jacobi's to the solve's tolerance, the
adjoint and tangent solves preconditioned alike, its iterations, the
output's ``cg_iterations`` and the namelist's ``preconditioner``. The
iterations against the grid (65x49 to 720x480) are
validation/multigrid.py's.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import netCDF4
import pytest
import scipy.sparse.linalg as spla
import torch
from torch.autograd import forward_ad

from pompy import cli
from pompy.config import Config, load_config, parse_override
from pompy.core.external import cg, multigrid, stencil
from pompy.core.external import implicit as scheme
from pompy.core.implicit import ImplicitCore
from pompy.errors import ConfigError
from pompy.verify.certificate import certificate_key

SEAMOUNT = Path(__file__).parents[1] / "configs" / "seamount.nml"
# iterations of the multigrid PCG to cg_tol 1e-12 on the 65x49 seamount at
# dti = 600 s: measured 12 (validation/multigrid.py: 12-14 up to 720x480;
# Jacobi's, 312)
ITERATIONS_65X49 = 16


def seamount(**changes) -> Config:
    """The seamount at dti = 600 s (dte 20, isplit 30) with t and s held
    (mode 4: the internal CFL limit of the stratification, 407 s, does
    not apply), kb 5."""
    config = load_config(SEAMOUNT)
    held = {"kb": 5, "kl1": 2, "kl2": 3, "dte": 20.0, "isplit": 30, "mode": 4}
    return dataclasses.replace(config, **{**held, **changes})


def developed(config: Config, steps: int = 2) -> ImplicitCore:
    core = ImplicitCore(config)
    core.run_initialization()
    core.iend = steps
    with torch.no_grad():
        core.run_time_loop()
    return core


def operator_of(core) -> tuple[cg.FivePoint, torch.Tensor]:
    """The elevation equation of the core's next step: (A, rhs)."""
    seen = {}

    def spy(a, b, tol, maxiter):
        seen["a"], seen["b"] = a, b
        return cg.solve(a, b, tol, maxiter)
    with torch.no_grad():
        scheme.implicit_step(dict(core.state), dict(core.params), core.routines, solver=spy)
    return seen["a"], seen["b"]


def islands(im: int, jm: int, seed: int, land: float = 0.25, dtype=torch.float64
            ) -> tuple[cg.FivePoint, torch.Tensor]:
    """A random operator of the elevation equation's form on an im x jm
    grid with land inside it (a fraction ``land`` of the interior): area
    terms of 1, face coefficients of 1 to 300 (the seamount's at dti =
    600 s: 175 median, 300 most) between active cells, and a right-hand
    side on the active cells."""
    g = torch.Generator().manual_seed(seed)
    active = torch.zeros(im, jm, dtype=torch.bool)
    active[1:-1, 1:-1] = torch.rand(im - 2, jm - 2, generator=g, dtype=dtype) > land
    cx = torch.zeros(im, jm, dtype=dtype)
    cy = torch.zeros(im, jm, dtype=dtype)
    cx[1:] = torch.where(active[1:] & active[:-1],
                         1 + 299 * torch.rand(im - 1, jm, generator=g, dtype=dtype), 0.0)
    cy[:, 1:] = torch.where(active[:, 1:] & active[:, :-1],
                            1 + 299 * torch.rand(im, jm - 1, generator=g, dtype=dtype), 0.0)
    own = 1 + torch.rand(im, jm, generator=g, dtype=dtype)
    faces = cx + torch.cat([cx[1:], cx[:1] * 0]) + cy + torch.cat([cy[:, 1:], cy[:, :1] * 0], 1)
    diag = torch.where(active, own + faces, torch.ones_like(own))
    b = torch.where(active, torch.randn(im, jm, generator=g, dtype=dtype), 0.0)
    return cg.FivePoint(diag, cx, cy, active), b


def direct(a: cg.FivePoint, b: torch.Tensor) -> torch.Tensor:
    """scipy's sparse direct solve of the same operator."""
    im, jm = b.shape
    x = spla.spsolve(cg.to_scipy(a).tocsc(), b.numpy().ravel(order="F"))
    return torch.from_numpy(x.reshape(im, jm, order="F"))


@pytest.mark.parametrize("case", ["seamount", "islands odd", "islands even"])
def test_multigrid_pcg_gives_scipys_direct_solve_and_jacobis(case):
    if case == "seamount":
        a, b = operator_of(developed(seamount(im=33, jm=25)))
    else:
        a, b = islands(*((37, 29) if case == "islands odd" else (40, 32)), seed=3)
    tol = 1e-12
    x, residual, n = cg.pcg(a, b, tol, 200, preconditioner="multigrid")
    jacobi, jacobi_residual, n_jacobi = cg.pcg(a, b, tol, 2000)
    want = direct(a, b)
    assert float(residual) <= tol * cg.SLACK and float(jacobi_residual) <= tol * cg.SLACK
    # measured, relative to the direct solve: multigrid 1e-14 to 6e-13, Jacobi
    # 1e-13 to 8e-13; iterations 11 against 168 (seamount), 30-34 against
    # 296-312 (random coefficients on random land, far rougher than a sea's)
    assert float((x - want).norm() / want.norm()) < 1e-10
    assert float((x - jacobi).norm() / want.norm()) < 1e-10
    assert n < n_jacobi / 5
    land = ~a.active
    assert torch.equal(x[land], b[land])         # identity rows stay so


@pytest.mark.parametrize("im, jm", [(13, 11), (16, 9)])
def test_the_v_cycle_is_symmetric_positive_definite(im, jm):
    """M as a matrix (the cycle applied to each unit vector), and on random
    vectors: <x, M y> = <M x, y>, <x, M x> > 0."""
    a, _ = islands(im, jm, seed=im)
    m = multigrid.Multigrid(a)
    eye = torch.eye(im * jm, dtype=torch.float64)
    matrix = torch.stack([m(e.reshape(im, jm)).reshape(-1) for e in eye], 1)
    assert float((matrix - matrix.T).abs().max() / matrix.abs().max()) < 1e-14
    assert float(torch.linalg.eigvalsh(matrix).min()) > 0
    a, _ = islands(61, 47, seed=5)
    m = multigrid.Multigrid(a)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        x, y = torch.randn(2, 61, 47, generator=g, dtype=torch.float64)
        xmy, mxy = float((x * m(y)).sum()), float((m(x) * y).sum())
        assert abs(xmy - mxy) <= 1e-13 * float(x.norm() * m(y).norm())
        assert float((x * m(x)).sum()) > 0


def test_coarse_levels_keep_the_land_and_the_five_point_form():
    a, _ = islands(37, 29, seed=1, land=0.4)
    levels = multigrid.hierarchy(a)
    assert [tuple(lv.a.diag.shape) for lv in levels] == [(37, 29), (20, 16), (11, 9), (7, 6),
                                                        (5, 4)]
    for fine, coarse in itertools.pairwise(levels):
        c = coarse.a
        # a coarse face joins two active coarse cells, and the ring is identity rows
        assert not bool(((c.cx[1:] != 0) & ~(c.active[1:] & c.active[:-1])).any())
        assert not bool(((c.cy[:, 1:] != 0) & ~(c.active[:, 1:] & c.active[:, :-1])).any())
        assert not bool(c.active[[0, -1]].any() or c.active[:, [0, -1]].any())
        # a block is active where any of its cells is: P^T of the fine mask
        counts = multigrid.restrict(fine.a.active.double(), fine)
        assert torch.equal(c.active, counts > 0)
        # the cells' own terms (areas) add up: sum of (diag - faces) kept
        def own(op):
            v = stencil.interior_of(op)
            return float(torch.where(v.active, v.diag - (v.cx + v.cx_p + v.cy + v.cy_p), 0).sum())
        assert own(c) == pytest.approx(own(fine.a), rel=1e-12)


def test_a_long_channel_coarsens_along_its_length():
    """A 400x12 seamount channel: once the interior is 3 cells across, the
    blocks are 2x1, down to 2x3; measured 13 iterations (Jacobi 488; with
    2x2 blocks only, stopping at 3 across, 31)."""
    a, b = operator_of(developed(seamount(im=400, jm=12)))
    levels = multigrid.hierarchy(a)
    assert [lv.factors for lv in levels] == [(2, 2)] * 2 + [(2, 1)] * 6 + [(1, 1)]
    assert tuple(levels[-1].a.diag.shape) == (4, 5)
    _, residual, n = cg.pcg(a, b, 1e-12, 500, preconditioner="multigrid")
    assert float(residual) <= 1e-12 * cg.SLACK and n <= ITERATIONS_65X49


def test_restriction_is_the_transpose_of_prolongation():
    a, _ = islands(23, 8, seed=2)
    levels = multigrid.hierarchy(a)
    assert {lv.factors for lv in levels[:-1]} == {(2, 2), (2, 1)}
    g = torch.Generator().manual_seed(1)
    for fine, coarse in itertools.pairwise(levels):
        r = torch.randn(*fine.a.diag.shape, generator=g, dtype=torch.float64)
        e = torch.randn(*coarse.a.diag.shape, generator=g, dtype=torch.float64)
        lhs = float((multigrid.prolong(e, fine) * r).sum())
        rhs = float((e * multigrid.restrict(r, fine)).sum())
        assert lhs == pytest.approx(rhs, rel=1e-13)


def test_iterations_on_the_65x49_seamount_are_few():
    a, b = operator_of(developed(seamount()))
    _, residual, n = cg.pcg(a, b, 1e-12, 500, preconditioner="multigrid")
    _, _, n_jacobi = cg.pcg(a, b, 1e-12, 500)
    assert float(residual) <= 1e-12 * cg.SLACK
    assert n <= ITERATIONS_65X49 and n_jacobi > 10 * n


def test_float32_converges_to_its_tolerance():
    a, b = islands(40, 30, seed=4, dtype=torch.float32)
    x, residual, n = cg.pcg(a, b, 1e-5, 100, preconditioner="multigrid")
    assert float(residual) <= 1e-5 * cg.SLACK and x.dtype == torch.float32 and n < 20


def _gradient(config: Config) -> torch.Tensor:
    """d(sum of el^2 + ua^2 after one step)/d(el before), from a developed state."""
    core = developed(config)
    el = core.el.detach().clone().requires_grad_()
    core.el = el
    core.iend = core.iint + 1
    core.run_time_loop()
    loss = (core.el ** 2).sum() + (core.ua ** 2).sum()
    return torch.autograd.grad(loss, el)[0]


def test_gradients_through_a_step_match_jacobis_to_the_solve_tolerance(monkeypatch):
    config = seamount(im=21, jm=17)
    jacobi = _gradient(config)
    used = []
    pcg = cg.pcg

    def noted(*args, preconditioner="jacobi", **kw):
        used.append(preconditioner)
        return pcg(*args, preconditioner=preconditioner, **kw)
    monkeypatch.setattr(cg, "pcg", noted)
    mg = _gradient(dataclasses.replace(config, preconditioner="multigrid"))
    # the forward and the adjoint (backward pass) solves of the step: multigrid's
    assert used[-2:] == ["multigrid", "multigrid"]
    # each solve is within cond(A) cg_tol of the exact one (the operator's
    # condition number here 690: 7e-10); measured 1.0e-11 to 1.8e-11
    assert float((mg - jacobi).norm() / jacobi.norm()) < 1e-9


def test_the_tangent_solve_takes_the_same_preconditioner(monkeypatch):
    a, b = islands(19, 15, seed=6)
    used = []
    pcg = cg.pcg

    def noted(*args, preconditioner="jacobi", **kw):
        used.append(preconditioner)
        return pcg(*args, preconditioner=preconditioner, **kw)
    monkeypatch.setattr(cg, "pcg", noted)
    tangent = torch.ones_like(b)
    with forward_ad.dual_level():
        x, _ = cg.solve_auto(a, forward_ad.make_dual(b, tangent), 1e-12, 200, "multigrid")
        x_t = forward_ad.unpack_dual(x).tangent
    assert used == ["multigrid", "multigrid"]
    want = direct(a, tangent)
    assert float((x_t - want).norm() / want.norm()) < 1e-10


def test_a_run_records_each_records_iterations(tmp_path):
    for preconditioner in ("jacobi", "multigrid"):
        assert cli.main(["run", str(SEAMOUNT), "--core", "implicit", "--set", "dte=13",
                         "--set", f"preconditioner={preconditioner}",
                         "--output", str(tmp_path / preconditioner)]) == 0
    with netCDF4.Dataset(tmp_path / "jacobi" / "implicit_output.nc") as ds:
        jacobi = ds["cg_iterations"][:]
        assert ds["cg_iterations"].dimensions == ("time",) and len(jacobi) == len(ds["iint"][:])
    with netCDF4.Dataset(tmp_path / "multigrid" / "implicit_output.nc") as ds:
        mg = ds["cg_iterations"][:]
    # measured: Jacobi 256 and 264 (a multiple of its 8 between reads), multigrid 12
    assert len(mg) == 2 and all(1 <= n <= ITERATIONS_65X49 for n in mg)
    assert all(n % 8 == 0 and 10 * m < n <= 500 for n, m in zip(jacobi, mg))
    # checks read once every 3 steps (Core._block): the record step's too
    assert cli.main(["run", str(SEAMOUNT), "--core", "implicit", "--set", "dte=13", "--set",
                     "preconditioner=multigrid", "--check-every", "3", "--output",
                     str(tmp_path / "every")]) == 0
    with netCDF4.Dataset(tmp_path / "every" / "implicit_output.nc") as ds:
        assert list(ds["cg_iterations"][:]) == list(mg)
    assert cli.main(["run", str(SEAMOUNT), "--steps", "2", "--output", str(tmp_path / "ex")]) == 0
    with netCDF4.Dataset(tmp_path / "ex" / "explicit_output.nc") as ds:
        assert "cg_iterations" not in ds.variables          # no solve, no count


def test_a_bad_preconditioner_is_refused_in_one_line(capsys):
    assert parse_override("preconditioner=multigrid") == ("preconditioner", "multigrid")
    assert Config(preconditioner="multigrid").preconditioner == "multigrid"
    with pytest.raises(ConfigError, match="preconditioner='ilu' is out of range: must be "
                                          "'jacobi' or 'multigrid'"):
        Config(preconditioner="ilu")
    assert cli.main(["run", str(SEAMOUNT), "--core", "implicit", "--set",
                     "preconditioner=ilu"]) == 2
    assert capsys.readouterr().err == ("pompy: preconditioner='ilu' is out of range: must be "
                                       "'jacobi' or 'multigrid'\n")


def test_the_certificate_key_names_the_preconditioner():
    key = certificate_key("implicit", "cpu", "float64", Config(preconditioner="multigrid"))
    assert key["solver"] == "multigrid PCG, implicitly differentiated"
    key = certificate_key("implicit", "cpu", "float64", Config())
    assert key["solver"] == "Jacobi PCG, implicitly differentiated"     # as before it
