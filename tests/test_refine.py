"""The finer-grid reference (`pompy generate --refine 2`,
pompy.generate.refine): the nesting against its stated index rule, the
depth's reconstruction against a linear field and its block means, the
coarse-graining's conservation of volume, heat and salt against direct
sums over the fine cells, and each member of a dataset as a `pompy run`
of the IC file it keeps, coarse-grained, bit for bit. An 8x7x5 seamount
(fine 14x12x5), dti = 18 s out of dte = 2 s (the fine cells' external
CFL limit is 3.4 s)."""
from __future__ import annotations

import dataclasses
import io
from contextlib import closing
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch

from pompy.cli import main
from pompy.config import CASE_PARAMS, SETUP_PARAMS, load_config
from pompy.core.explicit import ExplicitCore
from pompy.dataset import SnapshotDataset, state_fields
from pompy.generate import refine
from pompy.train.data import dataset_differences

ROOT = Path(__file__).parents[1]
EVERY_STEPS, RECORDS, MEMBERS = 3, 2, 2
EVERY = repr(EVERY_STEPS * 18 / 86400)
DAYS = repr(RECORDS * EVERY_STEPS * 18 / 86400)
SPREAD = repr(2 * EVERY_STEPS * 18 / 86400)


def tiny_config(**changes):
    return dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5,
                               kl1=2, kl2=3, isplit=9, dte=2.0, ispadv=3, **changes)


def set_up(config) -> ExplicitCore:
    core = ExplicitCore(config)
    core.run_initialization()
    return core


def blocks(n: int) -> list[list[int]]:
    """The fine cells (0-based) of each coarse cell, by the stated rule:
    1-based {1}, {2I-2, 2I-1} inside, {2n-2}."""
    return [[0]] + [[2 * i - 3, 2 * i - 2] for i in range(2, n)] + [[2 * n - 3]]


def block_sum(x: np.ndarray, im: int, jm: int) -> np.ndarray:
    return np.array([[x[np.ix_(bi, bj)].sum(axis=(0, 1)) for bj in blocks(jm)]
                     for bi in blocks(im)])


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    """A params member's coarse set-up and its fine one (from the IC file)."""
    config = tiny_config(inflow=0.25, seamount_height=0.8, strat_amplitude=12.0)
    coarse = set_up(config)
    path = tmp_path_factory.mktemp("fine") / "fine.nc"
    fine = set_up(refine.write_fine_ic(config, coarse.capture(), path))
    return config, coarse, fine


def test_the_fine_grid_nests_in_the_coarse_one(nested):
    """(2im-2) x (2jm-2) cells; dx, dy halved inside, kept at the boundary
    cells; each coarse cell's area the sum of its fine cells' to the last
    bit; the depth's block means the physics' h (measured 2.2e-16
    relative, one ulp) and every fine depth within its coarse 3 x 3 neighbourhood's
    range; the inflow and the walls as the coarse set-up's."""
    config, coarse, fine = nested
    c = {n: coarse.state[n].numpy() for n in ("dx", "dy", "art", "h", "fsm", "uab")}
    f = {n: fine.state[n].numpy() for n in ("dx", "dy", "art", "h", "fsm", "uab", "dum")}
    im, jm = config.im, config.jm
    assert f["h"].shape == (2 * im - 2, 2 * jm - 2)
    for I, bi in enumerate(blocks(im)):
        for J, bj in enumerate(blocks(jm)):
            sub = np.ix_(bi, bj)
            assert np.all(f["dx"][sub] == c["dx"][I, J] / len(bi))
            assert np.all(f["dy"][sub] == c["dy"][I, J] / len(bj))
            assert np.all(f["fsm"][sub] == c["fsm"][I, J])
            near = c["h"][max(I - 1, 0):I + 2, max(J - 1, 0):J + 2]
            if c["fsm"][I, J]:
                near = near[c["fsm"][max(I - 1, 0):I + 2, max(J - 1, 0):J + 2] > 0]
            assert near.min() - 1e-9 <= f["h"][sub].min() and f["h"][sub].max() <= near.max() + 1e-9
    assert np.array_equal(block_sum(f["art"], im, jm), c["art"])
    mean = block_sum(f["h"] * f["art"], im, jm) / c["art"]
    assert np.abs(mean / c["h"] - 1).max() < 1e-15
    assert np.array_equal(f["uab"], 0.25 * f["dum"])


def test_a_linear_depth_is_reconstructed_exactly():
    """h = a + b i + c j on an all-wet grid: a fine cell's depth is the
    line at its centre, I +- 1/4 (in coarse cells) inside, the boundary
    cells' own; an open edge's array the same along it."""
    im, jm = 6, 5
    i, j = np.meshgrid(np.arange(im, dtype=float), np.arange(jm, dtype=float), indexing="ij")
    h = 1000.0 + 37.0 * i - 21.0 * j
    got = refine.reconstruct(h, np.ones((im, jm), bool))

    def centres(n):
        at = [0.0] + [c for k in range(1, n - 1) for c in (k - 0.25, k + 0.25)] + [n - 1.0]
        return np.array(at)

    # the boundary cells have no slope of their own: their value is the cell's
    ci, cj = centres(im), centres(jm)
    want = 1000.0 + 37.0 * ci[:, None] - 21.0 * cj[None, :]
    inner_i, inner_j = slice(1, -1), slice(1, -1)
    np.testing.assert_allclose(got[inner_i, inner_j], want[inner_i, inner_j], rtol=0, atol=1e-9)
    assert np.array_equal(got[0, 1:-1], 1000.0 - 21.0 * cj[1:-1])
    # an open edge's linear profile (the balanced boundary elevation) likewise
    edge = refine._edge(-0.05 + 0.01 * np.arange(jm, dtype=float), jm)
    np.testing.assert_allclose(edge[1:-1], -0.05 + 0.01 * cj[1:-1], rtol=0, atol=1e-15)


def test_coarse_graining_conserves_volume_heat_and_salt(nested):
    """After 30 fine steps of the params member's flow: the coarse record's
    volume (sum of d art), elevation volume, heat and salt (sum of t d art
    dz, s likewise) equal the fine cells' sums (measured 0, and 1.5e-16 of
    the elevation's absolute volume), and the transport through the open west boundary (u-face
    2) is the fine faces'."""
    config, coarse, fine = nested
    fine.run_generation_day(30, capture_interval=0)
    record = fine.snapshot()
    got = refine.Coarsening(fine.state, coarse.state)(record)
    art_f, art_c = fine.state["art"], coarse.state["art"]
    dz = fine.state["dz"]
    d_f, d_c = record["d"], got["d"]

    def rel(a, b):
        return abs(float(a) / float(b) - 1)

    assert rel((d_c * art_c).sum(), (d_f * art_f).sum()) < 1e-15
    assert abs(float((got["el"] * art_c).sum() - (record["el"] * art_f).sum())) \
        < 1e-15 * float((record["el"].abs() * art_f).sum())
    for name in ("t", "s"):
        content = lambda x, d, a: (x[..., :-1] * (d * a).unsqueeze(-1) * dz[:-1]).sum()  # noqa
        assert rel(content(got[name], d_c, art_c), content(record[name], d_f, art_f)) < 1e-14
    dy_f, dy_c = fine.state["dy"], coarse.state["dy"]
    face_f = 0.5 * (d_f[1] + d_f[0]) * dy_f[1]            # fine u-face 2
    weights = torch.tensor([float(face_f[b].sum()) for b in blocks(config.jm)],
                           dtype=torch.float64)
    flux_f = torch.tensor([float((record["ua"][1] * face_f)[b].sum()) for b in blocks(config.jm)],
                          dtype=torch.float64)
    assert torch.allclose(got["ua"][1] * weights, flux_f, rtol=1e-14, atol=1e-18)


def test_a_field_spread_onto_the_fine_cells_coarse_grains_back(nested):
    """A coarse field copied onto its fine cells (T, W, the edges) or faces
    (u on the coarse faces' fine faces) comes back as it was: the
    coarse-graining is a mean, whatever its weights."""
    config, coarse, fine = nested
    rng = np.random.default_rng(0)
    im, jm, kb = config.im, config.jm, config.kb
    co = refine.Coarsening(fine.state, coarse.state)
    weights = co.weights(fine.state["d"])
    for name, shape in (("t", (im, jm, kb)), ("el", (im, jm)), ("q2", (im, jm, kb)),
                        ("tbe", (jm, kb)), ("ele", (jm,)), ("els", (im,))):
        x = rng.normal(size=shape)
        if name in ("tbe", "ele"):
            spread = x[refine.coarse_index(2 * jm - 2)]
        elif name == "els":
            spread = x[refine.coarse_index(2 * im - 2)]
        else:
            spread = x[np.ix_(refine.coarse_index(2 * im - 2), refine.coarse_index(2 * jm - 2))]
        back = co.field(name, torch.from_numpy(spread), weights).numpy()
        np.testing.assert_allclose(back, x, rtol=1e-14, atol=1e-14, err_msg=name)
    u = rng.normal(size=(im, jm, kb))
    fine_u = np.zeros((2 * im - 2, 2 * jm - 2, kb))
    for I, first in enumerate(refine.first_fine(im)):
        fine_u[first] = u[I][refine.coarse_index(2 * jm - 2)]
    back = co.field("u", torch.from_numpy(fine_u), weights).numpy()
    np.testing.assert_allclose(back, u, rtol=1e-14, atol=1e-14)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refined")
    config = folder / "tiny.nml"
    tiny_config().to_namelist().write(config)
    assert main(["generate", str(config), "--days", DAYS, "--every", EVERY, "--output",
                 str(folder / "data"), "--members", str(MEMBERS), "--perturb", "params",
                 "--spinup_spread", SPREAD, "--seed", "5", "--refine", "2"]) == 0
    return config, folder / "data"


def test_each_member_is_a_pompy_run_of_its_fine_grid_coarse_grained(made, tmp_path):
    """`pompy run` of the IC file a member keeps (iproblem 3, its wind
    factor), for its last snapshot's step plus its spin-up offset: the
    restart, coarse-grained onto the member's own set-up, equals the
    member's last snapshot in every state field, to the last bit."""
    config, data = made
    with netCDF4.Dataset(data / "dataset.nc") as ds:
        ds.set_auto_mask(False)
        assert ds.reference_refine == 2 and "nested 2 x 2" in ds.target_model
        last = int(ds["iint"][-1])
        cases = [{n: float(ds[n][m]) for n in CASE_PARAMS} for m in range(MEMBERS)]
        offsets = [int(ds["spinup_offset"][m]) for m in range(MEMBERS)]
        snaps = {n: np.asarray(ds[n][:, -1]) for n in state_fields()}
    for m, case in enumerate(cases):
        ic = data / "reference_grids" / f"member_{m}.nc"
        out = tmp_path / str(m)
        assert main(["run", str(config), "--set", "iproblem=3", "--set", f"icfile='{ic}'",
                     "--set", f"im={2 * 8 - 2}", "--set", f"jm={2 * 7 - 2}", "--set",
                     f"wind_factor={case['wind_factor']!r}", "--steps", str(last + offsets[m]),
                     "--output", str(out)]) == 0
        with netCDF4.Dataset(out / "explicit_restart.nc") as r:
            r.set_auto_mask(False)
            fine = {n: torch.from_numpy(np.ascontiguousarray(np.asarray(r[n][...]).T))
                    for n in r.variables if n in state_fields() + ["art", "dx", "dy"]}
        coarse = set_up(tiny_config(**{n: case[n] for n in SETUP_PARAMS}))
        got = refine.Coarsening(fine, coarse.state)(fine)
        for name in state_fields():
            assert np.array_equal(got[name].numpy().T, snaps[name][m]), (m, name)


def test_the_trainer_takes_a_refined_dataset(made):
    """Its grid is the config's (each member's own set-up): nothing differs."""
    config, data = made
    with closing(SnapshotDataset(data, horizon=1)) as ds:
        assert dataset_differences(ds, ds.restore_record(ds[0]), load_config(config)) == []


def test_what_refine_refuses(made, tmp_path, capsys):
    config, _ = made
    assert main(["generate", str(config), "--days", DAYS, "--every", EVERY, "--output",
                 str(tmp_path / "d"), "--refine", "2", "--set", "iproblem=2"]) == 2
    assert capsys.readouterr().err == ("pompy: --refine 2: only the seamount (iproblem 1) is "
                                       "nested; iproblem 2's set-up is not an IC file's\n")


@pytest.mark.parametrize("where", ["write", "hold_fine", "lost"])
def test_an_interrupted_refined_generation_resumes_to_the_same_bits(made, tmp_path, capsys,
                                                                     monkeypatch, where):
    """SIGTERM once member 1 has written snapshot 1 (its coarse-grained
    state, which no run can go on from), before its fine state is held
    (``write``: the fine state kept is snapshot 0's, and snapshot 1 is
    written again) or after (``hold_fine``; ``lost``: then the file
    spoilt): exit 143 and the command that continues; the partial file,
    and member 1's fine state beside it (member 0 is complete: none of
    it). --resume then writes the uninterrupted generation's file
    (`made`'s), every variable to the bit, and removes the fine state; a
    fine state lost is said in one line and its member starts again."""
    from pompy.errors import Interrupted
    from pompy.generate.writer import DatasetWriter, fine_state_file
    config, whole = made
    out = tmp_path / "d"
    args = ["generate", str(config), "--days", DAYS, "--every", EVERY, "--output", str(out),
            "--members", str(MEMBERS), "--perturb", "params", "--spinup_spread", SPREAD,
            "--seed", "5", "--refine", "2"]
    method = getattr(DatasetWriter, "write" if where == "write" else "hold_fine")

    def stopping(self, member, n, *rest):
        method(self, member, n, *rest)
        if (member, n) == (1, 1):
            raise Interrupted(15)
    with monkeypatch.context() as m:
        m.setattr(DatasetWriter, method.__name__, stopping)
        assert main(args) == 143
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "member 0: 3 of 3 snapshots, member 1: 2 of 3 snapshots" in err, err
    assert err.endswith(" --resume"), err
    dataset = out / "dataset.nc"
    assert not fine_state_file(dataset, 0).exists() and fine_state_file(dataset, 1).is_file()
    record = torch.load(fine_state_file(dataset, 1), weights_only=True)
    assert record["snapshot"] == (0 if where == "write" else 1)
    if where == "lost":
        fine_state_file(dataset, 1).write_bytes(b"not a state")
    assert main([*args, "--resume"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "starts again" in line]
    assert said == ([f"pompy generate: --resume: {fine_state_file(dataset, 1)} (not a state "
                     "pompy wrote): member 1 starts again from its set-up"]
                    if where == "lost" else []), said
    assert not fine_state_file(dataset, 1).exists() and not (out / "dataset.nc.partial").exists()
    with netCDF4.Dataset(whole / "dataset.nc") as want, netCDF4.Dataset(dataset) as got:
        want.set_auto_mask(False)
        got.set_auto_mask(False)
        assert list(got.variables) == list(want.variables)
        for name in want.variables:
            assert np.array_equal(got[name][...], want[name][...]), name
