"""What training reads is checked as a restart is (issue 49, items 1-3):
a dataset made for other settings, a damaged dataset (a NaN written into
a copy), too few members for a test split, a checkpoint trained with
other physics, a certificate of another bathymetry, gradient policy or
trainer code. Each fault is made for real on test_train's tiny dataset
and run through the command line: exit 2 (3 for a run that learns
nothing), one line, nothing lost."""
import dataclasses
import shutil
from contextlib import closing
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch
from test_train import (  # noqa: F401 - the fixtures made, verified, home
    TRAIN_GROUP,
    certified,
    home,
    made,
    tiny_config,
    verified,
)

from pompy import provenance, train
from pompy.config import load_config, namelist_literal
from pompy.dataset import NonFiniteData, SnapshotDataset
from pompy.errors import InputError
from pompy.train.data import Normalizer, dataset_differences
from pompy.verify import certificate


def config_file(where: Path, pom2k: dict | None = None, **changes) -> Path:
    """The tiny config with ``pom2k`` changed and a &train group
    (test_train.TRAIN_GROUP with ``changes``)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "train.nml"
    dataclasses.replace(tiny_config(), **(pom2k or {})).to_namelist().write(path, force=True)
    lines = path.read_text().rstrip() + "\n&train\n"
    for name, value in {**TRAIN_GROUP, **changes}.items():
        lines += f"    {name} = {namelist_literal(value)}\n"
    path.write_text(lines + "/\n")
    return path


def run(capsys, config: Path, data: Path, out: Path, *argv) -> tuple[int, list[str]]:
    """``python -m pompy.train``: its exit code and its stderr lines but the
    warning that the data's targets are the physics' own."""
    code = train.main(["--config", str(config), "--data", str(data), "--output", str(out),
                       *map(str, argv)])
    lines = [line for line in capsys.readouterr().err.splitlines()
             if "the targets were made by the physics in the loop itself" not in line]
    return code, lines


def one_line(lines: list[str], *words: str) -> str:
    assert len(lines) == 1 and lines[0].startswith("pompy: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def damaged(made, where: Path, member: int, snapshot: int, field: str) -> Path:
    """A copy of the dataset with one NaN in ``field`` of ``member`` at
    ``snapshot``, at (i, j, k) = (3, 4, 2)."""
    copy = where / "damaged"
    shutil.copytree(made[2], copy)
    with netCDF4.Dataset(copy / "dataset.nc", "a") as ds:
        local = list(ds["member"][:]).index(member)
        ds[field][local, snapshot, 1, 3, 2] = np.nan
    return copy


# ------------------------------------------------------------------ item 1
def test_a_config_other_than_the_datasets_is_refused_naming_each_difference(made, home, tmp_path,
                                                                            capsys):
    """horcon and umol are not in the certificate's key: the data refuses."""
    config = config_file(tmp_path, {"horcon": 0.3, "umol": 3e-5})
    code, lines = run(capsys, config, made[2], tmp_path / "out")
    assert code == 2
    one_line(lines, f"--data {made[2]} was made for other settings than the config's",
             "horcon: 0.2 (dataset) -> 0.3", "umol: 2e-05 (dataset) -> 3e-05")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_another_bathymetry_is_refused_by_the_certificate_and_by_the_data(made, home, tmp_path,
                                                                          capsys):
    """hmax 1500 against 4500 on the same 8x7x5: no certificate (its grid
    hash), and the data names hmax."""
    config = config_file(tmp_path, {"hmax": 1500.0})
    code, lines = run(capsys, config, made[2], tmp_path / "out")
    assert code == 2
    one_line(lines, "no verification certificate", "the grid's h, dx, dy or fsm differ")
    c = load_config(config)
    with closing(SnapshotDataset(made[2], horizon=1)) as ds:
        assert dataset_differences(ds, ds.restore_record(ds[0]), c) == [
            "hmax: 4500.0 (dataset) -> 1500.0"]


def test_case_parameters_and_the_reference_steps_may_differ(made):
    """Members record their own case parameters; the reference may step
    otherwise than the physics (its dte and isplit, not the physics' dti)."""
    with closing(SnapshotDataset(made[2], horizon=1)) as ds:
        record = ds.restore_record(ds[0])
        for changes in ({"wind_factor": 2.0, "seamount_height": 0.6}, {"dte": 4.0, "isplit": 60}):
            assert dataset_differences(ds, record, dataclasses.replace(tiny_config(), **changes)) \
                == []
        assert dataset_differences(ds, record, dataclasses.replace(tiny_config(), isplit=15)) \
            == ["dti: 240 s (dataset's physics) -> 120 s"]


def test_a_dataset_of_another_grid_with_the_same_parameters_is_refused(made, home, tmp_path,
                                                                       capsys):
    """h changed in a copy of the data, its recorded hash made to match:
    the grid itself is compared, h named with its largest difference."""
    copy = tmp_path / "other_grid"
    shutil.copytree(made[2], copy)
    with netCDF4.Dataset(copy / "dataset.nc", "a") as ds:
        h = ds["h"][...]
        h[3, 4] += 250.0
        ds["h"][...] = h
        grid = {n: np.ascontiguousarray(ds[n][...].T) for n in provenance.GRID_HASHED}
        ds.grid_hash = provenance.grid_hash(grid)
    code, lines = run(capsys, config_file(tmp_path), copy, tmp_path / "out")
    assert code == 2
    one_line(lines, "was made for other settings than the config's", "h: up to 250 m apart",
             "at (i, j) = (5, 4)")


def test_a_dataset_whose_grid_was_edited_after_it_was_written_is_refused(made, home, tmp_path,
                                                                         capsys):
    copy = tmp_path / "edited"
    shutil.copytree(made[2], copy)
    with netCDF4.Dataset(copy / "dataset.nc", "a") as ds:
        dx = ds["dx"][...]
        dx[0, 0] *= 1.5
        ds["dx"][...] = dx
    code, lines = run(capsys, config_file(tmp_path), copy, tmp_path / "out")
    assert code == 2
    one_line(lines, "its grid's hash is", "the file was changed after it was written")


# ------------------------------------------------------------------ item 2
@pytest.mark.parametrize("member", [0, 2], ids=["training member", "test member"])
def test_a_nan_in_the_data_is_refused_naming_member_snapshot_and_field(made, home, tmp_path,
                                                                       capsys, member):
    data = damaged(made, tmp_path, member, 2, "t")
    code, lines = run(capsys, config_file(tmp_path), data, tmp_path / "out")
    assert code == 2
    one_line(lines, f"member {member}, snapshot 2 (iint 4), field t is NaN at (i, j, k) = "
                    "(3, 4, 2)", "the data is damaged")
    assert not list((tmp_path / "out").glob("checkpoint_*"))


def test_a_sample_holding_a_nan_is_refused_when_it_is_read(made, tmp_path):
    data = damaged(made, tmp_path, 1, 3, "u")
    ds = SnapshotDataset(data, horizon=1)
    try:
        per_member = len(ds) // len(ds.members)
        ds[per_member + 0]                          # member 1 from snapshot 0: targets 1
        with pytest.raises(NonFiniteData, match=r"member 1, snapshot 3 \(iint 6\), field u is "
                                                r"NaN at \(i, j, k\) = \(3, 4, 2\)"):
            ds[per_member + 2]                      # its target is snapshot 3
        with pytest.raises(NonFiniteData, match="member 1, snapshot 3"):
            ds.check_finite()
        ds.check_finite([0, 2])                     # the other members are whole
    finally:
        ds.close()


def test_a_normaliser_that_is_not_finite_stops_the_run(made):
    ds = SnapshotDataset(made[2], horizon=1)
    try:
        state = dict(ds[0]["state"])
        record = ds.restore_record(ds[0])
    finally:
        ds.close()
    grid = {n: record[n] for n in ("fsm", "dum", "dvm")}
    state["el"] = state["el"].clone()
    state["el"][3, 3] = float("inf")
    with pytest.raises(InputError, match=r"the normaliser fitted on the training split is not "
                                         r"finite: channel 16 \(el\)"):
        Normalizer.fit([state], grid, 5).checked()
    Normalizer.fit([dict(state, el=torch.zeros_like(state["el"]))], grid, 5).checked()


def test_too_few_members_for_a_test_split_is_refused(made, home, tmp_path, capsys):
    code, lines = run(capsys, config_file(tmp_path, test_fraction=0.25), made[2],
                      tmp_path / "out")
    assert code == 2
    one_line(lines, "test_fraction = 0.25 of 3 members keeps no whole member for the test "
                    "split", "at least 4 members")


def test_test_fraction_zero_trains_with_a_warning(made, home, tmp_path, capsys):
    code, lines = run(capsys, config_file(tmp_path, test_fraction=0.0), made[2],
                      tmp_path / "out")
    assert code == 0
    assert ("pompy train: warning: test_fraction = 0: no test split, so no test loss and no "
            "baseline are measured") in lines


def test_an_epoch_whose_every_step_is_skipped_stops_with_the_last_good_checkpoint(
        made, home, tmp_path, capsys):
    """Epoch 0 trains; then with vmaxl (a run control: the same physics and
    certificate) below the flow's speed every sample's physics stops, every
    step of epoch 1 is skipped: exit 3, epoch 0's checkpoints whole."""
    out = tmp_path / "out"
    code, _ = run(capsys, config_file(tmp_path / "a", epochs=2), made[2], out, "--epochs", 1)
    assert code == 0
    before = (out / "checkpoint_last.pt").read_bytes()
    config = config_file(tmp_path / "b", {"vmaxl": 1e-9}, epochs=2)
    code, lines = run(capsys, config, made[2], out, "--resume")
    assert code == 3
    last = lines[-1]
    assert last == (f"pompy: every one of the 3 optimiser steps of epoch 1 was skipped (each "
                    "with a sample whose physics stopped: the lines above say why); the "
                    "correctors learned nothing, so training stops; "
                    f"{out / 'checkpoint_last.pt'} (epoch 0) is the last good checkpoint")
    assert any("CFL" in line or "vmaxl" in line for line in lines[:-1]), lines
    assert (out / "checkpoint_last.pt").read_bytes() == before
    assert not (out / "checkpoint_epoch1.pt").exists()
    assert not list(out.glob("*.tmp"))


# ------------------------------------------------------------------ item 3
def test_resume_refuses_other_physics(made, home, tmp_path, capsys):
    out = tmp_path / "out"
    code, _ = run(capsys, config_file(tmp_path / "a", epochs=2), made[2], out, "--epochs", 1)
    assert code == 0
    body = torch.load(out / "checkpoint_last.pt", weights_only=True)
    assert "horcon = 0.2" in body["physics"]["namelist"]
    assert body["physics"]["policies"] == {"override": None, "layers": {}}
    # horcon is not in the certificate's key: the checkpoint's record refuses
    config = config_file(tmp_path / "b", {"horcon": 0.3}, epochs=2)
    code, lines = run(capsys, config, made[2], out, "--resume")
    assert code == 2
    one_line(lines, "was trained with other physics than the config's",
             "horcon: 0.2 (checkpoint) -> 0.3")


def test_the_certificate_key_covers_bathymetry_policies_and_the_trainers_core_code(
        tmp_path, monkeypatch):
    config = tiny_config()
    key = certificate.certificate_key("implicit", "cpu", "float64", config)
    assert key["grid_hash"] == provenance.config_grid_hash(config)
    assert key["grid_hash"] != certificate.certificate_key(
        "implicit", "cpu", "float64", dataclasses.replace(config, hmax=1500.0))["grid_hash"]
    from pompy.autodiff.policies import GradientPolicyConfig
    rejecting = dataclasses.replace(config, policies=GradientPolicyConfig.from_dict(
        {"override": "reject"}))
    assert certificate.certificate_key("implicit", "cpu", "float64", rejecting)["policies"] == \
        {"override": "reject", "layers": {}}
    names = [name for name, _ in provenance.training_sources()]
    assert names == ["pompy/train/physics.py", "pompy/train/pool.py"]
    # an edited pool.py (horcon x3 where it builds cores) is another key
    edited = tmp_path / "pool.py"
    edited.write_text(Path(provenance.PACKAGE / "train" / "pool.py").read_text()
                      + "\nHORCON_FACTOR = 3.0\n")
    monkeypatch.setattr(provenance, "training_sources",
                        lambda: [("pompy/train/physics.py",
                                  provenance.PACKAGE / "train" / "physics.py"),
                                 ("pompy/train/pool.py", edited)])
    assert certificate.certificate_key("implicit", "cpu", "float64", config)["training_hash"] \
        != key["training_hash"]


def test_an_edited_trainer_core_module_has_no_certificate(made, home, tmp_path, monkeypatch,
                                                          capsys):
    edited = tmp_path / "pool.py"
    edited.write_text(Path(provenance.PACKAGE / "train" / "pool.py").read_text() + "\n# x3\n")
    sources = provenance.training_sources()
    monkeypatch.setattr(provenance, "training_sources",
                        lambda: [s if s[0] != "pompy/train/pool.py" else (s[0], edited)
                                 for s in sources])
    code, lines = run(capsys, config_file(tmp_path), made[2], tmp_path / "out")
    assert code == 2
    one_line(lines, "no verification certificate", "the trainer's core-building code")
