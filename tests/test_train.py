"""The trainer (pompy.train): the seed's DDP training pipeline on a tiny
seamount dataset, in one process and in two gloo processes on 127.0.0.1.

The dataset: an 8x7x5 seamount on the implicit core at dti = 240 s (dte 8,
isplit 30: under the grid's internal CFL limit, which pompy generate
checks), 3 members, snapshots every 2 steps (one correction
cycle of steps_per_correction = 2 physics steps of 240 s). The trainer
runs on the certificate a real ``pompy verify`` of the tiny config wrote
(about 20 s a core), each test on its own copy of that POMPY_HOME.
"""
import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch

from pompy import cli, provenance, variables
from pompy.config import load_config, namelist_literal
from pompy.dataset import SnapshotDataset
from pompy.generate import generate
from pompy import train
from pompy.train import (CSV_COLUMNS, LOSS_WEIGHTS, NPOMTrainerDDP, apply_correction_to_pom,
                         collate_samples, pack_pom_batch, parse_settings)
from pompy.settings import TrainSettings, from_parsed, leaves
from pompy.train.physics import PhysicsRunner
from pompy.verify import certificate

ROOT = Path(__file__).parents[1]
DTI = 240.0
SNAPSHOTS = 4                    # iint 0, 2, 4, 6 per member
MEMBERS = 3


def tiny_config():
    return dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5,
                               kl1=2, kl2=3, dte=8.0, isplit=30, cg_maxiter=60,
                               cg_tol=1e-14)


def tiny_dataset(folder: Path, core: str, **settings) -> tuple[Path, Path, Path]:
    """(folder, pom2k config file, dataset folder) of the tiny config on
    ``core`` (and the &generate ``settings`` given)."""
    config = tiny_config()
    config.to_namelist().write(folder / "tiny.nml")
    every = 2 * DTI / 86400
    from pompy.settings import GenerateSettings, read
    generate(config, read(GenerateSettings, {
        "config": folder / "tiny.nml", "output": folder / "data", "days": (SNAPSHOTS - 1) * every,
        "every": every, "core": core, "members": MEMBERS, **settings}),
        log=open(os.devnull, "w"))
    return folder, folder / "tiny.nml", folder / "data"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The implicit core's dataset. cg_tol 1e-14: two runs that differ in
    round-off (one batch of 2 against 2 ranks of 1) agree to 1e-12 only
    when the elevation solver converges past it."""
    return tiny_dataset(tmp_path_factory.mktemp("train"), "implicit")


@pytest.fixture(scope="module")
def verified(made, tmp_path_factory):
    """A POMPY_HOME holding what ``pompy verify`` wrote for the tiny config,
    per core verified when first asked for (a function of the core)."""
    folder = tmp_path_factory.mktemp("verified")
    done = set()

    def home(core: str) -> Path:
        if core not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("POMPY_HOME", str(folder))
                assert cli.main(["verify", "--config", str(made[1]), "--core", core,
                                 "--samples", "1"]) == 0
            done.add(core)
        return folder
    return home


def certified(verified, where: Path, monkeypatch, *names: str) -> Path:
    """POMPY_HOME = a copy, under ``where``, of the verified home with the
    certificates of the cores ``names``."""
    for core in names:
        source = verified(core)
    path = where / "home"
    shutil.copytree(source, path, dirs_exist_ok=True)
    monkeypatch.setenv("POMPY_HOME", str(path))
    return path


def recertified(core: str, config) -> dict:
    """The certificate of ``core`` under the current key (after a monkeypatched
    edit), its checks those pompy verify measured before the edit: what
    verifying the edited core again writes when the edit changes no figure."""
    old = json.loads(next((certificate.certificate_dir()).glob(f"{core}-*.json")).read_text())
    key = certificate.certificate_key(core, "cpu", "float64", config)
    certificate.write_certificate(key, old["checks"], {"created": "later"})
    return key


@pytest.fixture
def home(verified, tmp_path, monkeypatch):
    """POMPY_HOME with the implicit core's certificate for the tiny config."""
    return certified(verified, tmp_path, monkeypatch, "implicit")


TRAIN_GROUP = dict(hidden_channels=4,
                   horizon=1, batch_size=2, test_fraction=0.34, reuse_core_pool=True,
                   progress=False)


def train_config(made, where: Path, **changes) -> Path:
    """The tiny config with a &train group (TRAIN_GROUP, changed)."""
    lines = (made[1]).read_text().rstrip() + "\n&train\n"
    for name, value in {**TRAIN_GROUP, **changes}.items():
        lines += f"    {name} = {namelist_literal(value)}\n"
    where.mkdir(parents=True, exist_ok=True)
    path = where / "train.nml"
    path.write_text(lines + "/\n")
    return path


def options(made, where: Path, *argv, **changes):
    config = train_config(made, where, **changes)
    return parse_settings(["--config", str(config), "--data", str(made[2]),
                            "--output", str(where / "out"), *map(str, argv)])


def read_csv(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ packing
def test_pack_pom_batch_channel_order_and_correction(made, home, tmp_path):
    trainer = NPOMTrainerDDP(options(made, tmp_path))
    try:
        kb, (im, jm) = 5, (8, 7)
        sample = trainer.data.train[0]
        ics, _ = collate_samples(trainer.data.dataset, [sample])
        (pom,) = trainer.physics.borrow(1)
        train.inject_core_state(pom, ics, 0)
        packed = pack_pom_batch([pom], trainer.normalizer)
        assert packed.shape == (1, 4 * (kb - 1) + 5, jm, im) == (1, 21, 7, 8)
        norm = trainer.normalizer
        fsm, dum, dvm = (sample["state"][n] if n in sample["state"] else trainer.data.grid[n]
                         for n in ("fsm", "dum", "dvm"))
        # channel c of field f at level k: (f[:, :, k].T - mean_c) / std_c on its wet points
        for c, (name, k, mask) in {0: ("u", 1 - 1, dum), 5: ("v", 2 - 1, dvm), 11: ("t", 4 - 1, fsm),
                                   12: ("s", 0, fsm), 16: ("el", None, fsm), 17: ("ua", None, dum),
                                   18: ("va", None, dvm), 19: ("uab", None, dum),
                                   20: ("vab", None, dvm)}.items():
            field = sample["state"][name]
            plane = field[:, :, k] if k is not None else field
            want = (plane.T - norm.mean[c]) / norm.std[c] * mask.T
            assert torch.allclose(packed[0, c], want, rtol=1e-13, atol=1e-13), (c, name)
        # a one-hot correction of channel 11 (t at k = 4) changes t(:, :, 4)
        # alone, by scale * std on the wet points
        before = {n: pom.state[n].clone() for n in variables.names("packed")}
        one = torch.zeros_like(packed[0])
        one[11] = 1.0
        apply_correction_to_pom(pom, one, norm, scale_factor=1e-3)
        for n in before:
            delta = pom.state[n] - before[n]
            if n != "t":
                assert torch.equal(delta, torch.zeros_like(delta)), n
        want = torch.zeros_like(before["t"])
        want[:, :, 3] = 1e-3 * norm.std[11] * fsm
        assert torch.allclose(pom.state["t"] - before["t"], want, rtol=1e-12, atol=1e-18)
    finally:
        trainer.cleanup()


# ------------------------------------------------------------------ one process
def test_without_corrections_the_physics_reproduces_the_dataset(made, home, tmp_path):
    """correction_scale 0: each prediction is the generator's own next
    snapshot (inject, step counter and time as generation had them); the
    reference CG (under grad) and the PCG (generation) differ in round-off."""
    trainer = NPOMTrainerDDP(options(made, tmp_path, "--correction_scale", 0.0, "--horizon", 2))
    try:
        ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 1)])
        values = trainer.train_batch(ics, refs)
        fields = dict(zip(CSV_COLUMNS[4:], values[1:]))
        scale = {n: float((refs[n] ** 2).mean()) for n in LOSS_WEIGHTS}
        for name, mse in zip(LOSS_WEIGHTS, values[1:]):
            assert mse <= 1e-18 * max(scale[name], 1e-30) + 1e-30, (name, mse, scale[name])
        assert set(fields) == {f"{n.upper()}_MSE" for n in LOSS_WEIGHTS}
    finally:
        trainer.cleanup()


def test_data_whole_every_other_snapshot_trains_on_the_same_samples(made, home, tmp_path):
    """Data generated with starts_every 2: a sample of horizon 2 starts at
    snapshot 0 alone (2 + 2 > 3), and its initial state and targets are
    the every-snapshot data's, to the bit; the physics reproduces them."""
    _, _, data = tiny_dataset(tmp_path, "implicit", starts_every=2)
    config = train_config(made, tmp_path / "run")
    trainer = NPOMTrainerDDP(parse_settings(["--config", str(config), "--data", str(data),
                                             "--output", str(tmp_path / "out"), "--horizon", "2",
                                             "--correction_scale", "0.0"]))
    try:
        ics, refs = same_samples(trainer, made[2])
        values = trainer.train_batch(ics, refs)
        scale = {n: float((refs[n] ** 2).mean()) for n in LOSS_WEIGHTS}
        for name, mse in zip(LOSS_WEIGHTS, values[1:]):
            assert mse <= 1e-18 * max(scale[name], 1e-30) + 1e-30, (name, mse, scale[name])
    finally:
        trainer.cleanup()


def test_data_with_the_physics_levels_alone_between_starts_trains_on_the_same_samples(
        made_reference, made_reference_starts, home, tmp_path):
    """The reference's data (the physics' b levels held) with starts_every 2:
    snapshot 1 holds ub and vb as the physics' b levels alone, and the
    trainer's samples, initial states and targets, are those of the
    every-snapshot data of the same run, to the bit."""
    with netCDF4.Dataset(made_reference_starts / "dataset.nc") as ds:
        ds.set_auto_mask(False)
        assert (ds["ub"][0, 1] == netCDF4.default_fillvals["f8"]).all()
        assert np.isfinite(ds["ub_dti"][0, 1]).all()
    where = (*made_reference[:2], made_reference_starts)
    trainer = NPOMTrainerDDP(options(where, tmp_path, "--horizon", 2))
    try:
        same_samples(trainer, made_reference[2])
    finally:
        trainer.cleanup()


def same_samples(trainer: NPOMTrainerDDP, every_snapshot: Path) -> tuple[dict, dict]:
    """The trainer's samples of members 0 and 1 (of horizon 2: start 0 alone,
    its data's starts_every 2), asserted equal to the bit to those of the
    every-snapshot data ``every_snapshot`` of the same run: (ics, refs)."""
    assert len(trainer.data.dataset) == MEMBERS and trainer.data.train_indices == [0, 1]
    ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 1)])
    with closing(SnapshotDataset(every_snapshot, horizon=2, fields=train.LOSS_FIELDS,
                                 physics_levels=True)) as every:
        want_ics, want_refs = collate_samples(every, [every[m * (SNAPSHOTS - 2)] for m in (0, 1)])
    for name in want_ics["state"]:
        assert torch.equal(ics["state"][name], want_ics["state"][name]), name
    assert torch.equal(ics["iint"], want_ics["iint"]) and ics["iint"].tolist() == [0, 0]
    assert refs.keys() == want_refs.keys()
    for name in want_refs:
        assert torch.equal(refs[name], want_refs[name]), name
    return ics, refs


def test_gradients_reach_both_networks_and_learned_parameters(made, home, tmp_path):
    """Finite non-zero gradients for the encoder, the decoder and the learned
    horcon and umol; the learned parameter's gradient equals a central
    difference of the loss (networks fixed, in training mode)."""
    trainer = NPOMTrainerDDP(options(made, tmp_path, "--learn", "horcon,umol", "--grad_clip_norm", 0,
                                     "--correction_scale", 0.05))
    try:
        ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 3)])
        trainer.optim.optimizer.param_groups[0]["lr"] = 0.0          # keep the parameters
        trainer.train_batch(ics, refs)
        grads = {name: p.grad for name, p in trainer.correctors.named_parameters()}
        for label in ("encoder", "decoder"):
            mine = [g for n, g in grads.items() if n.startswith(label)]
            assert all(g is not None and torch.isfinite(g).all() for g in mine), label
            assert sum(float(g.abs().sum()) for g in mine) > 0, label
            head = [g for n, g in grads.items() if n.startswith(label) and "head.weight" in n]
            assert head and float(head[0].abs().max()) > 0, label
        for name in ("horcon", "umol"):
            g = grads[f"physics.log_values.{name}"]
            assert g is not None and torch.isfinite(g) and float(g) != 0.0, name

        # d loss / d log horcon by central differences, batch statistics as in training
        param = trainer.correctors.plain()["physics"].log_values["horcon"]

        def loss_at(value: float) -> float:
            with torch.no_grad():
                param.fill_(value)
                preds = trainer.forward(ics, 1)
                return float(trainer.total_loss(
                    trainer.component_losses(preds, refs)))
        x0, h = float(param.detach()), 1e-4
        fd = (loss_at(x0 + h) - loss_at(x0 - h)) / (2 * h)
        g = float(grads["physics.log_values.horcon"])
        assert fd != 0 and abs(g - fd) <= 1e-5 * abs(fd), (g, fd)
    finally:
        trainer.cleanup()


def test_core_pool_restore_leaves_no_graph_history(made, home, tmp_path):
    trainer = NPOMTrainerDDP(options(made, tmp_path, "--learn", "horcon"))
    try:
        ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 1)])
        trainer.train_batch(ics, refs)
        used = trainer.physics.pool.cores[:2]
        # the batch's cores let go of their graph once its predictions were taken
        assert all(t.grad_fn is None for t in used[0].state.values())
        assert torch.is_tensor(used[0].params["horcon"])
        cores = trainer.physics.borrow(2)
        assert cores == used                                          # the same objects, reset
        for core, snapshot in zip(cores, trainer.physics.pool.snapshots):
            for name, t in core.state.items():
                assert t.grad_fn is None and not t.requires_grad, name
            for name in variables.names("snapshot"):
                assert torch.equal(core.state[name], snapshot[name]), name
                assert core.state[name].data_ptr() != snapshot[name].data_ptr(), name
            assert core.params["horcon"] == tiny_config().horcon and \
                not torch.is_tensor(core.params["horcon"])
            assert core.iint == snapshot["iint"]
    finally:
        trainer.cleanup()


@pytest.fixture(scope="module")
def made_explicit(tmp_path_factory):
    """The tiny dataset on the explicit core, whose batches step as one
    ensemble (pompy.core.ensemble)."""
    return tiny_dataset(tmp_path_factory.mktemp("train_explicit"), "explicit")


@pytest.mark.parametrize("core", ["explicit", "implicit"])
def test_a_batch_of_cores_steps_as_one_ensemble_to_the_last_bit(core, request, verified, tmp_path,
                                                                monkeypatch):
    """A batch's physics as one ensemble (the implicit core's members
    solving with the PCG all at once, cg.pcg_members): the losses and every
    gradient (the networks') equal those of the cores stepped one by one to
    the last bit, and so do they where a member's stop makes the cores step
    again one by one; a batch with a sample at a cold start and one not (a
    step that differs) steps one by one, and so does one with a learned
    parameter (its gradient would sum the members' parts in another order:
    pompy.core.ensemble.mismatch)."""
    from pompy.core.ensemble import Ensemble
    from pompy.errors import CFLViolation

    made = request.getfixturevalue("made_explicit" if core == "explicit" else "made")
    certified(verified, tmp_path, monkeypatch, core)
    advanced, stops = [], []
    real = Ensemble.advance

    def advance(self, *args, **kwargs):
        advanced.append(self.members)
        real(self, *args, **kwargs)
        if stops:                           # a member stopped: the cores step one by one
            raise CFLViolation(self.iint, 9.9, 1, 1, 1.0)
    monkeypatch.setattr(Ensemble, "advance", advance)

    def batch(batched: bool, which, *more) -> tuple:
        monkeypatch.setattr(PhysicsRunner, "batch_physics", batched)
        where = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        trainer = NPOMTrainerDDP(options(made, where, "--core", core,
                                         "--grad_clip_norm", 0, "--correction_scale",
                                         0.05, "--batch_size", 3, *more))
        try:
            samples = [trainer.data.train[i] for i in range(len(trainer.data.train))]
            chosen = which(samples)
            ics, refs = collate_samples(trainer.data.dataset, chosen)
            trainer.optim.optimizer.param_groups[0]["lr"] = 0.0
            values = trainer.train_batch(ics, refs)
            return values, {name: p.grad.clone() for name, p in trainer.correctors.named_parameters()}
        finally:
            trainer.cleanup()

    warm = lambda samples: [s for s in samples if int(s["iint"]) > 0][:3]    # noqa: E731
    got, got_grads = batch(True, warm)
    assert advanced == [3]
    want, want_grads = batch(False, warm)
    assert advanced == [3]
    assert got == want and got_grads.keys() == want_grads.keys()
    for name, g in want_grads.items():
        assert torch.equal(got_grads[name], g), name
    assert any(float(g.abs().max()) > 0 for g in want_grads.values())

    stops.append(True)
    fallen, fallen_grads = batch(True, warm)
    assert advanced == [3, 3] and fallen == want
    assert all(torch.equal(fallen_grads[name], g) for name, g in want_grads.items())

    mixed = lambda samples: ([s for s in samples if int(s["iint"]) == 0][:1]   # noqa: E731
                             + [s for s in samples if int(s["iint"]) > 0][:1])
    batch(True, mixed)
    assert advanced == [3, 3]
    batch(True, warm, "--learn", "horcon")
    assert advanced == [3, 3]


def test_a_non_finite_gradient_skips_the_step(made, home, tmp_path, monkeypatch):
    trainer = NPOMTrainerDDP(options(made, tmp_path))
    try:
        ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 1)])
        before = [p.detach().clone() for _, p in trainer.correctors.named_parameters()]
        real = trainer.component_losses

        def poisoned(preds, refs):
            losses = real(preds, refs)
            return dict(losses, el=losses["el"] * float("inf") * 0.0)      # NaN, in the graph
        monkeypatch.setattr(trainer, "component_losses", poisoned)
        values = trainer.train_batch(ics, refs)
        assert math.isnan(values[0]) and trainer.optim.skipped_steps == 1
        for (name, p), b in zip(trainer.correctors.named_parameters(), before):
            assert torch.equal(p.detach(), b), name
        monkeypatch.setattr(trainer, "component_losses", real)
        trainer.train_batch(ics, refs)
        assert trainer.optim.skipped_steps == 1
        assert any(not torch.equal(p.detach(), b)
                   for (_, p), b in zip(trainer.correctors.named_parameters(), before))
    finally:
        trainer.cleanup()


def test_a_log_gets_the_epochs_progress(made, home, tmp_path, capsys):
    """--progress (the default; these tests' config turns it off) not on a
    terminal (a log): a line at each tenth of an epoch's batches, the last
    at 100 %, for training, test and baseline alike; --no-progress none."""
    for more, lines in ((("--progress",), True), (("--no-progress",), False)):
        trainer = NPOMTrainerDDP(options(made, tmp_path / str(lines), "--epochs", 1, *more))
        try:
            trainer.train()
            train, test = len(trainer.data.train_loader), len(trainer.data.test_loader)
        finally:
            trainer.cleanup()
        err = [line for line in capsys.readouterr().err.splitlines()
               if line.startswith("pompy train: ") and ": batch " in line]
        if not lines:
            assert err == [], err
            continue
        assert (train, test) == (3, 2)
        for desc, total in (("baseline", test), ("epoch 0 train", train), ("epoch 0 test", test)):
            mine = [line for line in err if line.startswith(f"pompy train: {desc}: batch ")]
            assert [line.split(" (")[0] for line in mine] == [
                f"pompy train: {desc}: batch {n} of {total}" for n in range(1, total + 1)], err
            assert "(100%), elapsed " in mine[-1] and ", ETA 0:00:00" in mine[-1], mine


def test_csv_checkpoint_and_resume_equals_uninterrupted(made, home, tmp_path):
    """Two epochs straight, and one epoch then --resume from its checkpoint
    in a new process-like trainer: the same CSV, line for line."""
    a = NPOMTrainerDDP(options(made, tmp_path / "a", "--epochs", 2))
    try:
        a.train()
    finally:
        a.cleanup()
    rows = read_csv(tmp_path / "a" / "out" / "train_log.csv")
    assert tuple(rows[0]) == CSV_COLUMNS == (
        "Epoch", "Step", "Phase", "TotalLoss", "U_MSE", "UB_MSE", "V_MSE", "VB_MSE", "T_MSE",
        "S_MSE", "EL_MSE", "UA_MSE", "UAB_MSE", "VA_MSE", "VAB_MSE")
    # 2 training members x 3 samples / batch 2 = 3 train batches; the test split (1 member):
    # one row, its whole average
    assert [(r[0], r[1], r[2]) for r in rows[1:]] == [
        ("0", "0", "Train"), ("0", "1", "Train"), ("0", "2", "Train"), ("0", "0", "Test"),
        ("1", "0", "Train"), ("1", "1", "Train"), ("1", "2", "Train"), ("1", "0", "Test")]
    for r in rows[1:]:
        values = [float(v) for v in r[3:]]
        total = sum(w * v for w, v in zip(LOSS_WEIGHTS.values(), values[1:]))
        assert math.isclose(values[0], total, rel_tol=1e-12)
    # tensors and plain containers alone: it loads under weights_only
    body = torch.load(tmp_path / "a" / "out" / "checkpoint_epoch0.pt", weights_only=True)
    assert body["epoch"] == 0 and set(body) >= {"networks", "optimizer", "scheduler", "normalizer",
                                                "rng", "certificate", "skipped_steps"}
    assert body["certificate"]["key"]["source_hash"] == provenance.source_hash()
    assert not list((tmp_path / "a" / "out").glob("*.tmp"))
    # the cosine schedule: after epoch 0 of 2, lr = eta_min + (lr0 - eta_min)/2
    assert math.isclose(body["scheduler"]["_last_lr"][0], 1e-7 + (1e-4 - 1e-7) / 2, rel_tol=1e-12)

    b = NPOMTrainerDDP(options(made, tmp_path / "b", "--epochs", 2))
    try:
        b.train(stop_after=1)
    finally:
        b.cleanup()
    # interrupted in epoch 1: a row of it logged and a row cut short
    log = tmp_path / "b" / "out" / "train_log.csv"
    with open(log, "a") as f:
        f.write(",".join(rows[5]) + "\n" + ",".join(rows[6])[:20])
    c = NPOMTrainerDDP(options(made, tmp_path / "b", "--epochs", 2, "--resume",
                               tmp_path / "b" / "out" / "checkpoint_epoch0.pt"))
    try:
        assert c.start_epoch == 1
        c.train()
    finally:
        c.cleanup()
    assert read_csv(log) == rows

    # a fresh run into a folder of an earlier run: refused, unless --overwrite
    with pytest.raises(train.InputError, match=r"--output .*/a/out holds an earlier run "
                                               r"\(checkpoint_epoch0.pt, checkpoint_epoch1.pt"):
        NPOMTrainerDDP(options(made, tmp_path / "a"))
    # another folder's checkpoint into a folder with a run of its own, whose logs it would
    # cut: refused, the logs as they were; into a fresh folder it starts a run from it
    other = tmp_path / "b" / "out" / "checkpoint_epoch0.pt"
    with pytest.raises(train.InputError, match=r"--resume .*/b/out/checkpoint_epoch0.pt is "
                                               r"another folder's checkpoint and --output "
                                               r".*/a/out holds an earlier run"):
        NPOMTrainerDDP(options(made, tmp_path / "a", "--resume", other))
    assert read_csv(tmp_path / "a" / "out" / "train_log.csv") == rows
    for _ in range(2):      # the second: the fork stopped before a checkpoint, its log made
        fork = NPOMTrainerDDP(options(made, tmp_path / "fork", "--epochs", 2, "--resume", other))
        try:
            assert fork.start_epoch == 1
        finally:
            fork.cleanup()
    NPOMTrainerDDP(options(made, tmp_path / "a", "--overwrite")).cleanup()


def test_resume_refuses_a_checkpoint_of_another_certificate(made, home, tmp_path, monkeypatch,
                                                            capsys):
    """A checkpoint trained on a core since edited (and verified again):
    exit 2, one line naming both certificate ids and what to do. Verifying
    the same core again keeps the id."""
    trainer = NPOMTrainerDDP(options(made, tmp_path))
    try:
        old_id = trainer.certificate_id
        trainer.save_checkpoint(0)
    finally:
        trainer.cleanup()
    capsys.readouterr()             # the warning that the targets are the physics's own
    checkpoint = tmp_path / "out" / "checkpoint_epoch0.pt"
    recertified("implicit", tiny_config())
    assert train.certificate_id(certificate.require_certificate("implicit", "cpu", "float64",
                                                                tiny_config())) == old_id
    # the core edited and certified
    extra = tmp_path / "edit.py"
    extra.write_text("# an edit\n")
    real = provenance.physics_sources
    monkeypatch.setattr(provenance, "physics_sources",
                        lambda: real() + [("pompy/core/edit.py", extra)])
    new_key = recertified("implicit", tiny_config())
    new_id = train.certificate_id({"key": new_key})
    assert new_id != old_id
    config = train_config(made, tmp_path / "again")
    argv = ["--config", str(config), "--data", str(made[2]), "--output",
            str(tmp_path / "again" / "out"), "--resume", str(checkpoint)]
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pompy: --resume {checkpoint}: trained under certificate {old_id}, "
                          f"this core has certificate {new_id} (source_hash ") and "\n" not in err
    assert err.endswith("resume with the core it was trained on, or start a new run without "
                        "--resume"), err
    assert not (tmp_path / "again" / "out").exists()
    # not a checkpoint
    argv[-1] = str(config)
    assert train.main(argv) == 2
    assert capsys.readouterr().err.startswith(f"pompy: --resume {config}: not a pompy.train "
                                              f"checkpoint")



class _Makedirs:
    """A pickled object whose unpickling runs code (here: makes a folder)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.makedirs, (self.path,)


def test_checkpoints_load_under_weights_only_and_others_are_refused(made, home, tmp_path,
                                                                    capsys):
    """The trainer's checkpoint loads under torch.load(weights_only=True)
    (RNG states, normaliser, optimiser, schedule: tensors and plain
    containers); one carrying another pickled object is refused, one line
    naming it and exit 2 (an InputError inside), and its code never runs.
    Writing it takes no float of a tensor that requires grad (torch warns,
    once a process, of the learned values)."""
    floats, real = [], torch.Tensor.__float__

    def watched(t):
        floats.append(t.requires_grad)
        return real(t)
    trainer = NPOMTrainerDDP(options(made, tmp_path, "--learn", "horcon"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch.Tensor, "__float__", watched)
            trainer.save_checkpoint(0)
    finally:
        trainer.cleanup()
    capsys.readouterr()             # the warning that the targets are the physics's own
    assert floats and not any(floats)
    body = torch.load(tmp_path / "out" / "checkpoint_epoch0.pt", weights_only=True)
    assert isinstance(body["rng"][0]["numpy"]["keys"], list) and body["learned"]["horcon"] > 0
    marker = tmp_path / "ran"
    bad = tmp_path / "bad.pt"
    torch.save(dict(body, extra=_Makedirs(marker)), bad)
    with pytest.raises(train.InputError, match="refused: it carries a pickled os.makedirs"):
        train.load_resume(bad, trainer.certificate, trainer.config)
    config = train_config(made, tmp_path / "again")
    argv = ["--config", str(config), "--data", str(made[2]), "--output",
            str(tmp_path / "again" / "out"), "--resume", str(bad)]
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pompy: --resume {bad}: refused: it carries a pickled os.makedirs")
    assert err.count("\n") == 1 and not marker.exists(), err


def test_an_interrupted_run_names_its_checkpoint_and_its_command(made, home, tmp_path, capsys,
                                                                 monkeypatch):
    """Ctrl-C in epoch 1: exit 130 and one line naming epoch 0's checkpoint
    and the command, as typed, that resumes from it (``pompy train`` or
    ``python -m pompy.train``)."""
    from pompy import cli
    from pompy.train.cli import run_parsed

    def interrupt(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt
    monkeypatch.setattr(NPOMTrainerDDP, "test_epoch", interrupt)

    def pompy_train(argv):              # as pompy.cli.main parses it (which then leaves)
        parsed = cli.build_parser().parse_args(["train", *argv])
        parsed.words = ["train", *argv]
        return run_parsed(parsed)
    for command, run in (("python -m pompy.train", train.main), ("pompy train", pompy_train)):
        where = tmp_path / command.replace(" ", "_")
        argv = ["--config", str(train_config(made, where)), "--data", str(made[2]), "--output",
                str(where / "out"), "--epochs", "2"]
        try:
            assert run(argv) == 130
        except KeyboardInterrupt:               # would end the test session
            pytest.fail(f"{command}: the KeyboardInterrupt escaped")
        saved = where / "out" / "checkpoint_epoch0.pt"
        *warned, last = capsys.readouterr().err.splitlines()
        assert last == (f"pompy: interrupted (SIGINT); {saved} holds epoch 0: continue with "
                        f"{command} {shlex.join(argv)} --resume {saved}")
        assert all("the targets were made by the physics in the loop itself" in w
                   for w in warned) and len(warned) == 1


def test_data_and_output_may_come_from_the_train_group(made, tmp_path):
    """As the refusal says: --data and --output, or &train's data and output."""
    config = train_config(made, tmp_path, data=str(made[2]), output=str(tmp_path / "out"))
    args = parse_settings(["--config", str(config)])
    assert (args.data.data, args.checkpoint.output) == (made[2], tmp_path / "out")
    assert parse_settings(["--config", str(config), "--output", "o"]).checkpoint.output == Path("o")
    with pytest.raises(train.InputError, match=re.escape(
            "--data and --output are required (or set them in &train)")):
        parse_settings(["--config", str(train_config(made, tmp_path / "none"))])


def test_amp_bf16_runs_the_networks_alone_in_bfloat16(made, home, tmp_path, monkeypatch):
    """--amp bf16: every convolution computes in bfloat16 under autocast,
    the physics outside autocast in float64 (its state, the corrections it
    gets); the losses are finite and both networks and the learned horcon
    get finite non-zero gradients."""
    trainer = NPOMTrainerDDP(options(made, tmp_path, "--amp", "bf16", "--learn", "horcon",
                                     "--correction_scale", 0.05))
    try:
        convs = {}
        for label in ("encoder", "decoder"):
            for name, m in trainer.correctors.wrapped[label].named_modules():
                if isinstance(m, torch.nn.Conv2d):
                    m.register_forward_hook(lambda m, i, o, key=f"{label}.{name}":
                                            convs.setdefault(key, set()).add(o.dtype))
        physics = []
        poms = trainer.physics.pool.cores

        def watched(pom, run):
            def loop(*a, **k):
                run(*a, **k)
                physics.append((torch.is_autocast_enabled("cpu"),
                                {t.dtype for t in pom.state.values()}))
            return loop
        for pom in poms:
            monkeypatch.setattr(pom, "run_time_loop", watched(pom, pom.run_time_loop))
        ics, refs = collate_samples(trainer.data.dataset, [trainer.data.train[i] for i in (0, 1)])
        values = trainer.train_batch(ics, refs)
        assert all(math.isfinite(v) for v in values) and values[0] > 0
        assert len(convs) == 2 * 5 and all(d == {torch.bfloat16} for d in convs.values()), convs
        assert physics and all(not amp and dtypes == {torch.float64} for amp, dtypes in physics)
        assert all(t.dtype == torch.float64 for pom in poms for t in pom.state.values())
        grads = {name: p.grad for name, p in trainer.correctors.named_parameters()}
        for label in ("encoder", "decoder"):
            mine = [g for n, g in grads.items() if n.startswith(label)]
            assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all()
                       for g in mine), label
            assert sum(float(g.abs().sum()) for g in mine) > 0, label
        g = grads["physics.log_values.horcon"]
        assert g.dtype == torch.float64 and torch.isfinite(g) and float(g) != 0.0
    finally:
        trainer.cleanup()


# ------------------------------------------------------------------ the command
def test_the_command_refuses_without_a_certificate_and_after_an_edit(made, verified, tmp_path,
                                                                      monkeypatch, capsys):
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "empty"))
    config = train_config(made, tmp_path)
    argv = ["--config", str(config), "--data", str(made[2]), "--output", str(tmp_path / "out")]
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pompy: no verification certificate for the implicit core on cpu in "
                          "float64") and "pompy verify " in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    # certified, then a core source edited (here: one more physics source)
    certified(verified, tmp_path, monkeypatch, "implicit")
    extra = tmp_path / "edit.py"
    extra.write_text("# an edit\n")
    real = provenance.physics_sources
    monkeypatch.setattr(provenance, "physics_sources",
                        lambda: real() + [("pompy/core/edit.py", extra)])
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert "the core's sources changed since it was verified" in err


def test_a_retired_setting_is_refused_with_its_reason(made, home, tmp_path, capsys):
    """physics_step_seconds restated the config's dti: a config that still
    sets it is told so, in one line."""
    config = train_config(made, tmp_path, physics_step_seconds=600.0)
    assert train.main(["--config", str(config), "--data", str(made[2]),
                       "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "&train physics_step_seconds: the physics step is the " \
        "config's dti = dte*isplit; remove it" in err, err


def test_options_come_from_the_train_group_then_the_command_line(made, tmp_path):
    args = options(made, tmp_path, "--lr", "3e-4", "--loss_weights", "el=5,u=1",
                   "--no-reuse_core_pool", lr=1e-3, epochs=7)
    o = args.optimizer
    assert (o.lr, o.epochs, args.data.batch_size, args.physics.reuse_core_pool) == (3e-4, 7, 2, False)
    assert o.weights == {**LOSS_WEIGHTS, "el": 5.0, "u": 1.0}
    assert (args.model.correction_scale, o.grad_clip_norm, args.data.steps_per_correction) == \
        (1e-3, 1.0, 2)
    with pytest.raises(train.InputError, match="unknown setting 'batchsize'"):
        options(made, tmp_path, batchsize=3)
    # the config still loads as a pom2k config, &train aside
    assert load_config(train_config(made, tmp_path)) == load_config(made[1])


def _flags(parser) -> dict[str, str]:
    """{option string: its help} of a parser's options (-h aside)."""
    return {flag: action.help for action in parser._actions for flag in action.option_strings
            if flag not in ("-h", "--help")}


def test_pompy_train_and_the_module_take_the_same_options_each_with_help(made, tmp_path):
    """``pompy train`` and ``python -m pompy.train`` list the same options
    (from one table), each with its help; a flag overrides the &train
    group, which overrides the default, through either."""
    helps = {}
    for command in (["-m", "pompy", "train"], ["-m", "pompy.train"]):
        out = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        invocations = [line.split("  ")[1] for line in out.stdout.splitlines()
                       if re.match("  -", line)]
        helps[command[-1]] = {flag for line in invocations
                              for flag in re.findall(r"--[a-z][a-z_-]*", line)} - {"--help"}
    assert helps["train"] == helps["pompy.train"]
    subparser = cli.build_parser()._subparsers._group_actions[0].choices["train"]
    module, command = _flags(train.build_parser()), _flags(subparser)
    assert module == command and set(module) == helps["train"]
    assert all(text and text.strip() for text in module.values()), module
    assert {leaf.flag for leaf in leaves(TrainSettings)} <= set(module)
    assert all(leaf.meta["help"].strip() for leaf in leaves(TrainSettings))

    config = train_config(made, tmp_path, lr=1e-3, epochs=7)
    argv = ["--config", str(config), "--data", str(made[2]), "--output", str(tmp_path / "out"),
            "--lr", "3e-4"]
    got = [train.parse_settings(argv),
           from_parsed(TrainSettings, cli.build_parser().parse_args(["train", *argv]))]
    for args in got:
        # the flag over the group, the group over the default, the default
        assert (args.optimizer.lr, args.optimizer.epochs, args.data.normalizer_samples) == \
            (3e-4, 7, 64)
    assert got[0] == got[1]


def test_print_config_shows_each_value_and_where_it_comes_from(made, tmp_path, capsys):
    """--print-config: the values a run would use, each with its source
    (default, the config's &train group, a flag), as a namelist group."""
    config = train_config(made, tmp_path, lr=1e-3, epochs=7)
    assert train.main(["--config", str(config), "--data", str(made[2]), "--output", "o",
                       "--epochs", "3", "--print-config"]) == 0
    out = capsys.readouterr().out
    lines = {line.split("=")[0].strip(): line for line in out.splitlines() if "=" in line}
    assert out.startswith("&train") and out.rstrip().endswith("/")
    assert re.search(r"lr = 0\.001 +! config$", lines["lr"])
    assert re.search(r"epochs = 3 +! flag$", lines["epochs"])
    assert re.search(r"normalizer_samples = 64 +! default$", lines["normalizer_samples"])
    assert not (tmp_path / "o").exists()
    # before --data and --output are known: the values, and what a run still needs
    assert train.main(["--config", str(config), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "epochs = 7" in out and out.rstrip().endswith(
        "! a run needs more: --data and --output are required (or set them in &train)")


# ------------------------------------------------------------------ two processes
WORKER = textwrap.dedent("""
    import json, sys, torch
    from pompy import train
    out = sys.argv[1]
    args = train.parse_settings(sys.argv[2:])
    trainer = train.NPOMTrainerDDP(args)
    rank = trainer.dist.rank
    # the sampler: each rank's indices for two epochs
    seen = {}
    for epoch in (0, 1):
        trainer.data.sampler.set_epoch(epoch)
        seen[epoch] = list(trainer.data.sampler)
    # SyncBatchNorm on rank-dependent data
    bn = train.convert_sync_batchnorm(torch.nn.BatchNorm2d(3), "cpu").double()
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(10 + rank),
                    dtype=torch.float64)
    y = bn(x)
    # and on a bfloat16 input (--amp bf16), float32 weights
    bn16 = train.convert_sync_batchnorm(torch.nn.BatchNorm2d(3), "cpu")
    y16 = bn16(x.to(torch.bfloat16))
    # one training batch: sample `rank` of the training split on this rank
    ics, refs = train.collate_samples(trainer.data.dataset, [trainer.data.train[rank]])
    values = trainer.train_batch(ics, refs)
    grads = {n: p.grad for n, p in trainer.correctors.named_parameters()}
    torch.save({"seen": seen, "bn_mean": bn.running_mean, "bn_var": bn.running_var, "y": y,
                "bn16_mean": bn16.running_mean, "bn16_var": bn16.running_var, "y16": y16,
                "values": values, "grads": grads, "world": trainer.dist.world_size},
               f"{out}/rank{rank}.pt")
    trainer.cleanup()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_match_one_process(made, home, tmp_path):
    """2 ranks x 1 sample, 2 correction cycles (each network runs twice
    under DDP before the backward): the DDP gradient equals the gradient of
    the averaged loss over both samples in one process (1e-12 of the
    largest gradient); SyncBatchNorm's statistics are the global batch's;
    the sampler partitions the training split without overlap, reshuffled
    per epoch; the logged losses are the ranks' average."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    horizon = 2
    config = train_config(made, tmp_path, batch_size=1, test_fraction=0.0, horizon=horizon)
    argv = ["--config", str(config), "--data", str(made[2]), "--output", str(tmp_path / "out"),
            "--learn", "horcon", "--grad_clip_norm", "0", "--correction_scale", "0.05"]
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path), *argv], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=240)[0])
        finally:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert ranks[0]["world"] == 2

    # sampler: disjoint halves of the 6 samples, new order per epoch
    n = MEMBERS * (SNAPSHOTS - horizon)
    for epoch in (0, 1):
        a, b = (set(r["seen"][epoch]) for r in ranks)
        assert not a & b and len(a) == len(b) == n // 2 and a | b <= set(range(n))
    assert ranks[0]["seen"][0] != ranks[0]["seen"][1]

    # SyncBatchNorm: the global batch's statistics
    xs = torch.cat([torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(10 + r),
                                dtype=torch.float64) for r in (0, 1)])
    bn = torch.nn.BatchNorm2d(3).double()
    y = bn(xs)
    for r, rank in enumerate(ranks):
        assert torch.allclose(rank["bn_mean"], bn.running_mean, rtol=1e-13, atol=1e-15)
        assert torch.allclose(rank["bn_var"], bn.running_var, rtol=1e-13, atol=1e-15)
        assert torch.allclose(rank["y"], y[2 * r:2 * r + 2], rtol=1e-12, atol=1e-12)
    # bfloat16 in, bfloat16 out, the statistics of the bf16 values summed in
    # float32 (against float64 statistics, computed for this batch: running
    # mean 1.5e-10 absolute, running variance 5.8e-9 relative; summed in
    # bfloat16 they are 7.4e-5 and 1.7e-4 off)
    bn16 = torch.nn.BatchNorm2d(3).double()
    y16 = bn16(xs.to(torch.bfloat16).double())
    for r, rank in enumerate(ranks):
        assert rank["y16"].dtype == torch.bfloat16
        assert torch.allclose(rank["bn16_mean"].double(), bn16.running_mean, rtol=1e-6, atol=1e-7)
        assert torch.allclose(rank["bn16_var"].double(), bn16.running_var, rtol=1e-6, atol=1e-7)
        assert torch.allclose(rank["y16"].double(), y16[2 * r:2 * r + 2], rtol=1e-2, atol=1e-2)

    # one process, both samples in one batch (same seed: same initial weights)
    single = NPOMTrainerDDP(parse_settings(argv[:6] + ["--output", str(tmp_path / "one"),
                                                        *argv[6:], "--batch_size", "2"]))
    try:
        ics, refs = collate_samples(single.data.dataset, [single.data.train[0], single.data.train[1]])
        values = single.train_batch(ics, refs)
        want = {n: p.grad for n, p in single.correctors.named_parameters()}
    finally:
        single.cleanup()
    assert set(want) == set(ranks[0]["grads"])
    # the ranks' gradients are bit for bit the same (DDP's average)
    for name in want:
        assert torch.equal(ranks[0]["grads"][name], ranks[1]["grads"][name]), name
    # norm-wise over the whole gradient (max norm): 1e-12 (measured 4.1e-13)
    largest = max(float(g.abs().max()) for g in want.values())
    worst = max(float((ranks[0]["grads"][n] - g).abs().max()) for n, g in want.items())
    assert worst <= 1e-12 * largest, worst / largest
    # Each parameter against its own largest entry: not 1e-12. Without the
    # networks (--learn horcon alone) DDP's gradient is bit for bit the
    # one-process one: the all-reduce of the learned parameter is exact.
    # With them, the batch norms' statistics are summed in another order
    # (each rank's sum, then the all-reduce, against one sum over the batch),
    # which moves the corrections, and so the whole trajectory, by round-off.
    # The one-process gradient itself moves as much when only the order of
    # its two samples is swapped (measured at horizon 1 / 2: networks up to
    # 7.4e-13 / 7.4e-13, horcon 3.0e-12 / 1.4e-12 of their own size). DDP
    # against one process measured: networks up to 1.5e-12 (batch-norm
    # weights, whose gradients are 10-20x smaller than the largest), horcon
    # 7.7e-12 (its gradient, 2000x smaller than the networks', is what is
    # left of a sum over the grid and the steps that cancels). Bars: 5e-12
    # and 2e-11. A conv bias just before a batch norm has an exact zero
    # gradient: its round-off (1e-18) is held to 1e-12 of the largest.
    for name, g in want.items():
        err, scale = float((ranks[0]["grads"][name] - g).abs().max()), float(g.abs().max())
        if name.endswith(".0.bias") and "physics" not in name:
            assert scale <= 1e-12 * largest and err <= 1e-12 * largest, name
            continue
        bar = 2e-11 if name.startswith("physics.") else 5e-12
        assert err <= bar * scale, (name, err / scale)
    # the logged losses: the ranks' average, each its own sample's loss
    for r in ranks:
        assert r["values"] == ranks[0]["values"]
    assert np.allclose(ranks[0]["values"], values, rtol=1e-12, atol=0)


def test_torchrun_two_processes_rank_zero_writes_the_log(made, home, tmp_path):
    """README's command, `torchrun --nproc_per_node=2 -m pompy train` (gloo):
    exit 0, one CSV (rank 0's) with the header and every rank's batches
    averaged."""
    config = train_config(made, tmp_path, batch_size=1)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "pompy", "train",
         "--config", str(config), "--data", str(made[2]), "--output", str(out)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_csv(out / "train_log.csv")
    # 6 training samples over 2 ranks, batch 1: 3 steps; the test split: one row
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r[0], r[1], r[2]) for r in rows[1:]] == [
        ("0", "0", "Train"), ("0", "1", "Train"), ("0", "2", "Train"), ("0", "0", "Test")]
    assert "epoch 0: train loss" in result.stdout and result.stdout.count("train loss") == 1
    assert (out / "checkpoint_epoch0.pt").is_file()
    json.dumps(rows)



def test_the_test_split_is_evaluated_whole_on_one_process_and_two(made, home, tmp_path, capsys):
    """3 test samples: one process (batches of 2 and 1) and torchrun's 2
    gloo ranks (2 samples and 1) each evaluate every one once, and log one
    Test row, the whole split's average, equal to 1e-12 in every column
    (measured: 2e-16) and to each sample evaluated alone (from the
    epoch's checkpoint). Training is the same on both (a global batch of
    2, the same samples: the sampler's order split by rank) but for
    round-off, which Adam's steps, each about lr whatever the gradient,
    carry into the weights: at lr 1e-4 the two test losses differ by up to
    5.6e-11 (measured); at lr 1e-30 the steps are below the weights'
    round-off, and the batch norms' running statistics differ in round-off
    alone."""
    config = train_config(made, tmp_path, batch_size=1, lr=1e-30)
    argv = ["--config", str(config), "--data", str(made[2])]
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "pompy", "train",
         *argv, "--output", str(tmp_path / "two")],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert train.main([*argv, "--output", str(tmp_path / "one"), "--batch_size", "2"]) == 0
    one_out = capsys.readouterr().out
    n_test = SNAPSHOTS - 1                       # the last member's samples (horizon 1)
    for out in (result.stdout, one_out):
        assert re.search(rf"epoch 0: test loss \S+ \({n_test} samples\)", out), out
    rows = {}
    for run in ("one", "two"):
        tests = [r for r in read_csv(tmp_path / run / "train_log.csv")[1:]
                 if r[2] == "Test"]
        assert [(r[0], r[1]) for r in tests] == [("0", "0")], tests
        rows[run] = np.array([float(v) for v in tests[0][3:]])
    assert np.allclose(rows["two"], rows["one"], rtol=1e-12, atol=0), rows["two"] / rows["one"] - 1

    # each test sample alone, from the networks the test phase ran
    trainer = NPOMTrainerDDP(parse_settings([*argv, "--output", str(tmp_path / "alone")]))
    try:
        body = torch.load(tmp_path / "one" / "checkpoint_epoch0.pt", weights_only=True)
        for name, net in trainer.correctors.plain().items():
            if net is not None:
                net.load_state_dict(body["networks"][name])
        assert len(trainer.data.test_indices) == n_test
        trainer.correctors.set_mode(False)
        alone = []
        for i in trainer.data.test_indices:
            ics, refs = collate_samples(trainer.data.dataset, [trainer.data.dataset[i]])
            with torch.no_grad():
                preds = trainer.forward(ics, 1)
                losses = trainer.component_losses(preds, refs)
            alone.append([float(trainer.total_loss(losses))]
                         + [float(losses[n]) for n in LOSS_WEIGHTS])
    finally:
        trainer.cleanup()
    want = np.mean(alone, axis=0)
    assert np.allclose(rows["one"], want, rtol=1e-12, atol=0), rows["one"] / want - 1


def test_torchrun_every_rank_refuses_without_a_certificate(made, tmp_path, monkeypatch):
    """Each rank checks the certificate, then the ranks agree: both exit 2
    with rank 0's line, said once by the node's first rank (nothing waits
    for a rank that is gone); no output.
    torchrun stops the other ranks once it sees one fail: it looks every 10 s
    here (0.1 s by default, which once stopped rank 0 before it had said
    why: a race of the launcher's, not of pompy's ranks; 3 s once stopped
    rank 1 so, on 2 cores with a compilation running beside the suite)."""
    monkeypatch.setenv("POMPY_HOME", str(tmp_path / "empty"))
    config = train_config(made, tmp_path, batch_size=1)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--monitor-interval=10",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "pompy.train",
         "--config", str(config), "--data", str(made[2]), "--output", str(tmp_path / "out")],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    said = re.findall(r"^pompy: rank 0 of 2 \(.+\): no verification certificate for the implicit "
                      r"core", output, re.M)
    assert len(said) == 1 and output.count("no verification certificate") == 1, output
    assert "exitcode  : 2" in output, output
    assert not (tmp_path / "out").exists()


REFUSING_RANK = textwrap.dedent("""
    import os, sys
    from pompy import train
    from pompy.errors import InputError
    from pompy.verify.certificate import require_certificate

    def gate(*args, **kwargs):        # rank 1 alone is refused (its own certificate folder)
        if os.environ["RANK"] == "1":
            raise InputError("rank 1 has no certificate here")
        return require_certificate(*args, **kwargs)

    try:
        train.NPOMTrainerDDP(train.parse_settings(sys.argv[1:]), gate=gate)
    except InputError as err:
        sys.stdout.write(f"pompy: {err}\\n")    # one write: the ranks share the pipe
        sys.stdout.flush()
        # as pompy.train.cli leaves: the group destroyed, no Python teardown
        # (with gloo's threads up it aborted once in 4 runs: "terminate called")
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(2)
""")


def test_a_refusal_on_one_rank_stops_every_rank(made, home, tmp_path):
    """The ranks agree before anything is built: a gate that refuses on rank
    1 alone stops rank 0 too, each with rank 1's line (naming rank 1) and
    exit 2, at once (not after a collective's timeout), and nothing is
    written."""
    worker = tmp_path / "worker.py"
    worker.write_text(REFUSING_RANK)
    config = train_config(made, tmp_path, batch_size=1)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--monitor-interval=10", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
         str(worker), "--config", str(config), "--data", str(made[2]),
         "--output", str(tmp_path / "out")],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    said = re.findall(r"^pompy: rank 1 of 2 \(.+\): rank 1 has no certificate here$", output, re.M)
    assert len(said) == 2 and said[0] == said[1], output
    assert result.returncode != 0 and "exitcode  : 2" in output, output
    assert not (tmp_path / "out").exists()


def test_the_shipped_training_configs():
    """Their pom2k part loads (&train aside), their options resolve, and each
    one's physics step is its dti, as the trainer requires."""
    for name, grid, channels, dti, epochs in (("train_tiny.nml", (16, 12, 6), 25, 240.0, 6),
                                              ("train_seamount.nml", (65, 49, 21), 85, 180.0, 3),
                                              ("train_360x240.nml", (360, 240, 25), 101, 240.0,
                                               None)):
        path = ROOT / "configs" / name
        config = load_config(path)
        args = parse_settings(["--config", str(path), "--data", "d", "--output", "o"])
        m = args.model
        assert (config.im, config.jm, config.kb) == grid and 4 * (config.kb - 1) + 5 == channels
        assert config.dti == dti and args.data.steps_per_correction == 2
        assert (args.optimizer.grad_clip_norm, args.physics.core) == (1.0, "implicit")
        assert args.physics.reuse_core_pool
        if name == "train_360x240.nml":              # the design's
            assert m.correction_scale == 1e-3 and m.encoder and m.decoder and m.norm == "batch"
        else:                # measured (validation/corrector_generalisation.py)
            assert (m.correction_scale, m.norm, args.optimizer.epochs) == (1e-3, "group", epochs)
            assert m.decoder and not m.encoder and m.zero_head and args.data.horizon == 8
            assert args.optimizer.weights["uab"] == args.optimizer.weights["ub"] == 0


# ------------------------------------------------------------------ a reference, the baseline
@pytest.fixture(scope="module")
def made_reference(made, tmp_path_factory):
    """The tiny config's data made by a reference: the explicit core at dti
    = 120 s (dte 4 s, isplit 30), snapshots a correction cycle (480 s) apart."""
    return made[0], made[1], reference_dataset(made, tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def made_reference_starts(made, tmp_path_factory):
    """The folder of made_reference's data with starts_every 2."""
    return reference_dataset(made, tmp_path_factory.mktemp("reference_starts"), starts_every=2)


def reference_dataset(made, folder: Path, **settings) -> Path:
    """The folder of made_reference's data (with the &generate ``settings`` given)."""
    every = 2 * DTI / 86400
    from pompy.settings import GenerateSettings, read
    generate(tiny_config(), read(GenerateSettings, {
        "config": made[1], "output": folder / "data", "days": (SNAPSHOTS - 1) * every,
        "every": every, "core": "explicit", "members": MEMBERS, "reference_dti": 120.0,
        "reference_dte": 4.0, **settings}), log=open(os.devnull, "w"))
    return folder / "data"


def _masked_mse(pred: np.ndarray, ref: np.ndarray, mask: np.ndarray, kb: int) -> float:
    if pred.ndim == 3:
        pred, ref = pred[..., :kb - 1], ref[..., :kb - 1]
        mask = np.repeat(mask[..., None], kb - 1, axis=2)
    return float(((pred - ref) ** 2 * mask).sum() / mask.sum())


def test_the_baseline_is_the_physics_alone_against_the_reference(made_reference, home, tmp_path,
                                                                 capsys):
    """The trainer's baseline (before epoch 0) is the test split's loss of
    the implicit core alone, each sample run here as a direct run: a fresh
    core restored from the snapshot (its leapfrog b levels the physics'
    own, one 240 s step back: pompy.dataset), its step counter in its own steps of
    240 s (the reference's snapshot is at iint of 120 s), stepped on
    without a break to the horizon, the masked MSEs and the seed's weights
    computed with numpy: equal to 1e-12. The data says its model, and the
    trainer does not warn (the physics is not the reference)."""
    from pompy.core.implicit import ImplicitCore
    from pompy.dataset import SnapshotDataset

    trainer = NPOMTrainerDDP(options(made_reference, tmp_path, "--horizon", 2))
    try:
        baseline = trainer.baseline_loss()
        indices = list(trainer.data.test_indices)
    finally:
        trainer.cleanup()
    out, err = capsys.readouterr()
    assert "warning" not in err
    assert re.search(r"baseline \(the physics alone, implicit core at dti = 240 s, against pompy "
                     r"explicit core .* at dti = 120 s \(dte = 4 s x isplit = 30\), 8x7x5\): test "
                     rf"loss \S+ \({len(indices)} samples\)", out), out
    ds = SnapshotDataset(made_reference[2], horizon=2, physics_levels=True)
    config, kb = tiny_config(), 5
    totals = []
    for i in indices:
        sample = ds[i]
        record = ds.restore_record(sample)
        steps = round(float(sample["time"]) * 86400 / DTI)
        core = ImplicitCore(config)
        core.restore(dict(record, iint=steps, time0=0.0))
        grid = {n: record[n].numpy() for n in ("fsm", "dum", "dvm")}
        masks = {"T": grid["fsm"], "U": grid["dum"], "V": grid["dvm"]}
        mse = {n: 0.0 for n in LOSS_WEIGHTS}
        with torch.no_grad():
            for t in range(2):
                core.iend = steps + 2 * (t + 1)
                core.run_time_loop()
                for n in LOSS_WEIGHTS:
                    mse[n] += _masked_mse(core.state[n].numpy(), sample["target"][n][t].numpy(),
                                          masks[variables.ALL[n].location], kb) / 2
        totals.append(mse)
    want = sum(LOSS_WEIGHTS[n] * np.mean([m[n] for m in totals]) for n in LOSS_WEIGHTS)
    assert want > 1e-6                      # the reference differs: something to learn
    assert math.isclose(baseline, want, rel_tol=1e-12), (baseline, want)


def test_the_trainer_warns_when_the_targets_are_the_physics_itself(made, home, tmp_path, capsys):
    trainer = NPOMTrainerDDP(options(made, tmp_path))
    trainer.cleanup()
    err = capsys.readouterr().err
    assert "warning: the targets were made by the physics in the loop itself (implicit core at " \
           "dti = 240 s)" in err, err


def test_each_epoch_prints_its_ratio_and_logs_it_beside_the_seeds_csv(made_reference, home,
                                                                      tmp_path, capsys):
    """epoch_log.csv: a row per epoch (lr, gradient norms, skipped steps,
    wall time, losses, the baseline and the ratio) whose test loss is the
    seed's CSV's Test row; train_log.csv keeps exactly the seed's columns.
    --resume alone continues from the latest checkpoint in --output, with
    the baseline it measured (not measured again)."""
    from pompy.train.losses import EPOCH_COLUMNS

    trainer = NPOMTrainerDDP(options(made_reference, tmp_path, "--epochs", 2, "--lr", 1e-3))
    try:
        trainer.train(stop_after=1)
    finally:
        trainer.cleanup()
    out = capsys.readouterr().out
    rows = read_csv(tmp_path / "out" / "epoch_log.csv")
    assert tuple(rows[0]) == EPOCH_COLUMNS
    seed_rows = read_csv(tmp_path / "out" / "train_log.csv")
    assert tuple(seed_rows[0]) == CSV_COLUMNS
    (test_row,) = [r for r in seed_rows[1:] if r[2] == "Test"]
    row = dict(zip(EPOCH_COLUMNS, rows[1]))
    assert row["Epoch"] == "0" and float(row["LearningRate"]) == 1e-3
    assert float(row["TestLoss"]) == float(test_row[3])
    assert float(row["RatioToBaseline"]) == float(row["TestLoss"]) / float(row["BaselineLoss"])
    assert float(row["GradNorm"]) > 0 and float(row["GradNormMax"]) >= float(row["GradNorm"])
    assert row["SkippedSteps"] == "0" and float(row["WallSeconds"]) > 0
    ratio = float(row["RatioToBaseline"])
    assert f"x the baseline {float(row['BaselineLoss']):.6e}" in out
    assert f"{ratio:.4g} x the baseline" in out

    resumed = NPOMTrainerDDP(options(made_reference, tmp_path, "--epochs", 2, "--lr", 1e-3,
                                     "--resume"))
    try:
        assert resumed.settings.checkpoint.resume == tmp_path / "out" / "checkpoint_last.pt"
        assert resumed.start_epoch == 1 and resumed.baseline == float(row["BaselineLoss"])
        resumed.train()
    finally:
        resumed.cleanup()
    assert "baseline (the physics alone" not in capsys.readouterr().out
    rows = read_csv(tmp_path / "out" / "epoch_log.csv")
    assert [r[0] for r in rows[1:]] == ["0", "1"] and rows[1] == list(row.values())


def test_resume_alone_needs_a_checkpoint_in_the_output(made, tmp_path):
    with pytest.raises(train.InputError, match=r"--resume: --output .* holds no checkpoint"):
        options(made, tmp_path, "--resume")


def test_compiled_physics_gives_the_same_batch(made_explicit, verified, tmp_path, monkeypatch):
    """--compile: the explicit core's recorded steps run through whole-step
    graphs with their backward traced by AOT autograd (backend aot_eager
    here, Inductor's compiling takes minutes), the gradient policies fixed
    in the forward pass (PROJECT, what the eager backward picks): a
    training batch's losses equal eager's to the last bit and every
    gradient to 1e-15 of the largest (measured 2.9e-16: a graph's backward
    hands each input its gradient in one piece, which the enclosing graph
    adds to the correctors' share in another order than eager's step by
    step sums), the graphs serving both the forward and the recorded
    steps. With --physics_checkpoint it is refused."""
    from pompy.core import compiled

    certified(verified, tmp_path, monkeypatch, "explicit")

    def batch(*more) -> tuple:
        where = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        trainer = NPOMTrainerDDP(options(made_explicit, where, "--core", "explicit",
                                         "--grad_clip_norm", 0, "--correction_scale", 0.05,
                                         "--batch_size", 2, *more))
        try:
            samples = [trainer.data.train[i] for i in range(2)]
            ics, refs = collate_samples(trainer.data.dataset, samples)
            trainer.optim.optimizer.param_groups[0]["lr"] = 0.0
            values = trainer.train_batch(ics, refs)
            graphs = [pom.graphs for pom in trainer.physics.borrow(2)]
            return values, {name: p.grad.clone() for name, p in trainer.correctors.named_parameters()}, graphs
        finally:
            trainer.cleanup()

    want, want_grads, plain = batch()
    assert plain == [None, None]
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    try:
        got, got_grads, graphs = batch("--compile", "--reuse_core_pool")
    finally:
        torch._dynamo.reset()
    recorded = [key for g in graphs for key in g._graphs if key[-1] is not None]
    assert all(g is not None for g in graphs) and recorded
    assert got == want and got_grads.keys() == want_grads.keys()
    largest = max(g.abs().max() for g in want_grads.values())
    for name, g in want_grads.items():
        assert got_grads[name].sub(g).abs().max() <= 1e-15 * largest, name
    with pytest.raises(train.InputError, match=r"^--compile and --physics_checkpoint steps do not "
                       r"go together: a compiled step's backward keeps what it saves; drop one$"):
        options(made_explicit, tmp_path / "refused", "--compile", "--physics_checkpoint", "steps")


@pytest.mark.parametrize("value", ["steps:0", "steps:", "steps:x", "routines:2", "all"])
def test_physics_checkpoint_refuses_what_it_does_not_know(made, tmp_path, value):
    with pytest.raises(train.InputError, match=rf"^--physics_checkpoint {value}: none, routines, "
                       r"steps or steps:K \(K >= 1 steps per segment\)$"):
        options(made, tmp_path, "--physics_checkpoint", value)


@pytest.mark.parametrize("core", ["explicit", "implicit"])
def test_checkpointed_physics_gives_the_same_batch_to_the_last_bit(made, made_explicit, verified,
                                                                   tmp_path, monkeypatch, core):
    """--physics_checkpoint routines and steps: a training batch's losses and
    every gradient equal the unchecked physics' to the last bit (the
    recomputation repeats the same operations; a step keeps its graph, so
    the networks' gradient terms add up in the same order), with new cores
    each batch and with the pool. (Steps as one node each, the core's
    leanest checkpoint, gave the encoder's weights gradients that differ in
    the last bits.)"""
    certified(verified, tmp_path, monkeypatch, core)
    data = made_explicit if core == "explicit" else made

    def batch(*more) -> tuple:
        where = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        trainer = NPOMTrainerDDP(options(data, where, "--core", core, "--grad_clip_norm", 0,
                                         "--correction_scale", 0.05, "--batch_size", 2, *more))
        try:
            samples = [trainer.data.train[i] for i in range(2)]
            ics, refs = collate_samples(trainer.data.dataset, samples)
            trainer.optim.optimizer.param_groups[0]["lr"] = 0.0
            values = trainer.train_batch(ics, refs)
            kinds = {pom.checkpoint for pom in trainer.physics.borrow(2)}
            return values, {name: p.grad.clone() for name, p in trainer.correctors.named_parameters()}, kinds
        finally:
            trainer.cleanup()

    want, want_grads, plain = batch()
    assert plain == {None} and all(g.abs().max() > 0 for g in want_grads.values())
    for kind, more in (("routines", ["--physics_checkpoint", "routines"]),
                       ("routines", ["--physics_checkpoint", "routines", "--reuse_core_pool"]),
                       ("steps", ["--physics_checkpoint", "steps"]),
                       ("steps", ["--physics_checkpoint", "steps:2", "--reuse_core_pool"])):
        got, got_grads, kinds = batch(*more)
        assert kinds == {kind} and got == want and got_grads.keys() == want_grads.keys()
        for name, g in want_grads.items():
            assert torch.equal(got_grads[name], g), (more, name)
