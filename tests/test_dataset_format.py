"""The dataset file's storage (pompy.generate.writer): each member's
snapshot of each variable one zlib chunk, so that a sample reads its own
snapshots and no others; a sample's start restores bit for bit from the
compressed file. With ``--starts_every 2`` the snapshots between starts
hold the targets alone (ub, vb as the physics' b levels alone), their other
chunks unwritten; samples start only where the whole state is, restore bit
for bit from it, and --resume goes on from the last one; a file written
before the file said what it holds there reads as before. An 8x7x5
seamount, 2 members, 4 snapshots 4 steps apart, with the physics' b levels
(physics dti 2 x the reference's)."""
from __future__ import annotations

import dataclasses
import shutil
import zlib
from contextlib import closing
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch

from pompy.cli import main
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.dataset import NonFiniteData, SnapshotDataset, b_level_name, state_fields
from pompy.generate.writer import HEADER_BYTES, SNAPSHOT_COMPRESSION, estimate_dataset_bytes
from pompy.train.losses import LOSS_FIELDS

ROOT = Path(__file__).parents[1]
STEPS = 4          # reference steps of 18 s between snapshots
SNAPSHOTS = 4
LEVELS = ("ub", "vb", "tb", "sb", "q2b", "q2lb")      # the physics' b levels the files hold


def generate_args(config: Path, output: Path, *extra: str) -> list[str]:
    return ["generate", str(config), "--days", repr((SNAPSHOTS - 1) * STEPS * 18 / 86400),
            "--every", repr(STEPS * 18 / 86400), "--output", str(output), "--members", "2",
            "--reference_dti", "18", "--reference_dte", "6", *extra]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("format")
    config = folder / "tiny.nml"
    dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                        kl2=3, isplit=6, dte=6.0, ispadv=3).to_namelist().write(config)
    assert main(generate_args(config, folder / "data")) == 0
    return config, folder / "data" / "dataset.nc"


@pytest.fixture(scope="module")
def starts(made, tmp_path_factory):
    """The same generation with --starts_every 2: snapshots 0 and 2 whole."""
    folder = tmp_path_factory.mktemp("starts")
    assert main(generate_args(made[0], folder, "--starts_every", "2")) == 0
    return folder / "dataset.nc"


def test_each_snapshot_of_each_variable_is_one_compressed_chunk(made):
    _, path = made
    with netCDF4.Dataset(path) as ds:
        assert ds.physics_step_ratio == 2
        names = state_fields() + [b_level_name(n) for n in ("ub", "vb", "tb", "sb", "q2b", "q2lb")]
        for name in names:
            v = ds[name]
            assert v.chunking() == [1, 1, *v.shape[2:]], name
            filters = v.filters()
            assert filters["zlib"] and filters["shuffle"], name
            assert filters["complevel"] == SNAPSHOT_COMPRESSION["complevel"], name


def test_a_sample_reads_its_own_snapshots_and_no_others(made, tmp_path):
    """NaN written into member 0's last snapshot: the sample of snapshots 0
    and 1 reads as before, bit for bit; the sample that holds the last
    snapshot is refused, naming it."""
    _, path = made
    with closing(SnapshotDataset(path, horizon=1)) as ds:
        before = ds[0]
    copy = tmp_path / "dataset.nc"
    copy.write_bytes(path.read_bytes())
    with netCDF4.Dataset(copy, "a") as ds:
        ds["t"][0, 3] = np.full(ds["t"].shape[2:], np.nan)
    with closing(SnapshotDataset(copy, horizon=1)) as ds:
        after = ds[0]
        for name in before["state"]:
            assert torch.equal(after["state"][name], before["state"][name]), name
        for name in before["target"]:
            assert torch.equal(after["target"][name], before["target"][name]), name
        with pytest.raises(NonFiniteData, match="member 0"):
            ds[2]


def test_a_samples_start_restores_bit_for_bit(made):
    """The reference itself (the explicit core at the data's dti) restored
    from a sample's start and run to the next snapshot equals it, every
    state field, to the last bit."""
    config, path = made
    reference = dataclasses.replace(load_config(config), dte=6.0, isplit=3)
    with closing(SnapshotDataset(path, horizon=1, fields=state_fields())) as ds:
        for index in (1, 4):                          # member 0 and member 1, snapshot 1
            sample = ds[index]
            core = ExplicitCore(reference)
            core.run_initialization()
            core.restore(ds.restore_record(sample))
            core.run_generation_day(STEPS, capture_interval=0)
            for name in state_fields():
                assert torch.equal(core.state[name], sample["target"][name][0]), (index, name)


# ------------------------------------------------------------------ --starts_every 2
# what a snapshot between starts holds: the trainer's loss fields, ub and vb
# as the physics' b levels alone (the trainer reads those)
BETWEEN = ["u", "ub_dti", "v", "vb_dti", "t", "s", "el", "ua", "uab", "va", "vab"]
# the loss fields the reference's own levels give at every snapshot
OWN = ["u", "v", "t", "s", "el", "ua", "uab", "va", "vab"]
WHOLE = [*state_fields(), *map(b_level_name, LEVELS)]


def held(n: int) -> list[str]:
    """What snapshot n of a --starts_every 2 file holds."""
    return WHOLE if n % 2 == 0 else BETWEEN


@pytest.mark.parametrize("physics_levels, fields", [(False, OWN), (True, LOSS_FIELDS)])
def test_samples_start_only_where_the_whole_state_is(made, starts, physics_levels, fields):
    """Horizon 1: starts 0 and 2; horizon 2: start 0 alone (2 + 2 > 3).
    Each sample, state and targets, is the every-snapshot file's sample of
    the same member and start, to the bit."""
    _, whole = made
    for horizon, want in ((1, [0, 2]), (2, [0])):
        with closing(SnapshotDataset(starts, horizon, fields, physics_levels)) as ds, \
                closing(SnapshotDataset(whole, horizon, fields, physics_levels)) as every:
            assert len(ds) == 2 * len(want)
            for i in range(len(ds)):
                member, n = i // len(want), want[i % len(want)]
                got, ref = ds[i], every[member * (SNAPSHOTS - horizon) + n]
                assert (got["member"], got["iint"]) == (ref["member"], ref["iint"]) \
                    == (member, n * STEPS)
                for part in ("state", "target"):
                    assert got[part].keys() == ref[part].keys()
                    for name in ref[part]:
                        assert torch.equal(got[part][name], ref[part][name]), (i, part, name)


def test_targets_are_what_every_snapshot_holds(starts):
    """By default the prognostic fields among the targets as read (ub, vb
    with the physics' levels alone); a field held only at the starts is
    refused as a target, saying which are held."""
    with closing(SnapshotDataset(starts, 1)) as ds:
        assert sorted(ds.fields) == sorted(OWN)
    with closing(SnapshotDataset(starts, 1, physics_levels=True)) as ds:
        assert sorted(ds.fields) == sorted(LOSS_FIELDS)
    with pytest.raises(ValueError, match="tb are held only where a sample starts .* ua, uab, va"):
        SnapshotDataset(starts, 1, fields=["u", "tb"])


def test_the_references_own_ub_is_refused_between_starts_saying_what_to_do(made, starts):
    """ub, vb without the physics' levels: one message naming what to do,
    where the every-snapshot file gives them."""
    with pytest.raises(ValueError) as err:
        SnapshotDataset(starts, 1, fields=["u", "ub", "vb"])
    assert str(err.value) == (
        "fields ub, vb are held between starts only as the physics' b levels (ub_dti, "
        "vb_dti): read them with physics_levels=True (as pompy train and pompy evaluate do), "
        "or generate with --starts_every 1 for the reference's own")
    with closing(SnapshotDataset(made[1], 1, fields=["u", "ub", "vb"])) as ds:
        assert ds[1]["target"].keys() == {"u", "ub", "vb"}


def test_a_start_restores_bit_for_bit_to_the_next_start(made, starts):
    """The reference restored from member 1's start 0 and run on: the
    targets at snapshot 1 and the whole state at snapshot 2, the next
    start, to the last bit."""
    config, _ = made
    reference = dataclasses.replace(load_config(config), dte=6.0, isplit=3)
    with closing(SnapshotDataset(starts, horizon=1, fields=OWN)) as ds:
        first, second = ds[2], ds[3]
        assert (first["member"], first["iint"], second["member"], second["iint"]) == \
            (1, 0, 1, 2 * STEPS)
        core = ExplicitCore(reference)
        core.run_initialization()
        core.restore(ds.restore_record(first))
        core.run_generation_day(STEPS, capture_interval=0)
        for name in OWN:
            assert torch.equal(core.state[name], first["target"][name][0]), name
        core.run_generation_day(STEPS, capture_interval=0)
        for name in state_fields():
            assert torch.equal(core.state[name], second["state"][name]), name


def test_between_starts_only_the_targets_take_space(made, starts):
    """At snapshots 1 and 3 every variable but BETWEEN (the file says which:
    between_starts_variables) reads as the fill value (its chunk never
    written), BETWEEN are the every-snapshot file's; the file is smaller
    than that file by the chunks left out as HDF5 stores them (shuffled,
    then deflated at level 1: zlib here), within 1 % (measured: to the
    byte). The size estimate drops by their values' bytes."""
    config, whole = made
    saved = values = 0
    with netCDF4.Dataset(whole) as every, netCDF4.Dataset(starts) as ds:
        every.set_auto_mask(False)
        ds.set_auto_mask(False)
        assert ds.between_starts_variables.split() == BETWEEN
        assert ds.target_variables.split() == list(LOSS_FIELDS)
        for name in WHOLE:
            for member in (0, 1):
                for n in (1, 3):
                    if name in BETWEEN:
                        assert np.array_equal(ds[name][member, n], every[name][member, n])
                        continue
                    assert (ds[name][member, n] == netCDF4.default_fillvals["f8"]).all(), name
                    a = np.ascontiguousarray(every[name][member, n], dtype="<f8")
                    shuffled = a.view(np.uint8).reshape(-1, 8).T.tobytes()
                    saved += len(zlib.compress(shuffled, SNAPSHOT_COMPRESSION["complevel"]))
                    values += a.nbytes
    shrank = whole.stat().st_size - starts.stat().st_size
    assert abs(shrank - saved) < 0.01 * saved, (shrank, saved)
    c = load_config(config)
    assert estimate_dataset_bytes(c, 2, SNAPSHOTS, True) - \
        estimate_dataset_bytes(c, 2, SNAPSHOTS, True, 2) == values


def written_bytes(path: Path) -> int:
    """The bytes of the values a file holds, uncompressed: every variable's,
    but of a per-snapshot variable only its chunks not the fill value (written)."""
    total = 0
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        for v in ds.variables.values():
            if v.dimensions[:2] != ("member", "time"):
                total += v[...].nbytes
                continue
            for member in range(v.shape[0]):
                for n in range(v.shape[1]):
                    chunk = v[member, n]
                    total += 0 if (chunk == netCDF4.default_fillvals["f8"]).all() else chunk.nbytes
    return total


@pytest.mark.parametrize("every", [1, 2])
def test_the_estimate_counts_the_values_written(made, starts, every):
    """The size estimate less HDF5's own bytes (HEADER_BYTES) is the values'
    bytes the file holds, written chunks alone, to the byte."""
    config, whole = made
    path = {1: whole, 2: starts}[every]
    assert estimate_dataset_bytes(load_config(config), 2, SNAPSHOTS, True, every) - \
        HEADER_BYTES == written_bytes(path)


def test_a_file_from_before_between_starts_variables_reads_as_before(made, starts, tmp_path):
    """A file as written before the attribute (ub, vb and their b levels
    between starts, no between_starts_variables): ub and vb are targets
    without the physics' levels, each sample the every-snapshot file's to
    the bit, and the whole check reads ub there (NaN in it is found)."""
    old = tmp_path / "dataset.nc"
    shutil.copyfile(starts, old)
    with netCDF4.Dataset(made[1]) as every, netCDF4.Dataset(old, "a") as ds:
        every.set_auto_mask(False)
        ds.delncattr("between_starts_variables")
        for name in ("ub", "vb"):
            ds[name][:, 1] = every[name][:, 1]
            ds[name][:, 3] = every[name][:, 3]
    with closing(SnapshotDataset(old, 1, LOSS_FIELDS)) as ds, \
            closing(SnapshotDataset(made[1], 1, LOSS_FIELDS)) as whole:
        for i, n in enumerate((0, 2, 3, 5)):              # members 0 and 1, starts 0 and 2
            for name in LOSS_FIELDS:
                assert torch.equal(ds[i]["target"][name], whole[n]["target"][name]), name
        ds.check_finite()
    with netCDF4.Dataset(old, "a") as ds:
        ds["ub"][0, 1] = np.full(ds["ub"].shape[2:], np.nan)
    with closing(SnapshotDataset(old, 1)) as ds, \
            pytest.raises(NonFiniteData, match="member 0, snapshot 1 .*, field ub "):
        ds.check_finite()


def test_a_sample_reads_no_chunk_it_does_not_hold(starts, tmp_path):
    """In a copy, NaN into w and ub at member 0's snapshot 1 (between starts,
    where their chunks are unwritten) and into t at its snapshot 3: the
    sample of start 0 reads as before, the one of start 2 is refused naming
    snapshot 3, and so is the whole check, which never reads w or ub there."""
    with closing(SnapshotDataset(starts, horizon=1)) as ds:
        before = ds[0]
    copy = tmp_path / "dataset.nc"
    shutil.copyfile(starts, copy)
    with netCDF4.Dataset(copy, "a") as ds:
        for name, n in (("w", 1), ("ub", 1), ("t", 3)):
            ds[name][0, n] = np.full(ds[name].shape[2:], np.nan)
    with closing(SnapshotDataset(copy, horizon=1)) as ds:
        after = ds[0]
        for part in ("state", "target"):
            for name in before[part]:
                assert torch.equal(after[part][name], before[part][name]), name
        with pytest.raises(NonFiniteData, match="member 0, snapshot 3 .*, field t "):
            ds[1]
        with pytest.raises(NonFiniteData, match="member 0, snapshot 3 .*, field t "):
            ds.check_finite()


@pytest.mark.parametrize("core", ["explicit", "implicit"])     # members together, one by one
def test_resume_goes_on_from_the_last_start(made, tmp_path, capsys, core):
    """A partial file whose member 0 ends at snapshot 2, a start, and member
    1 at snapshot 1, between starts (what each holds beyond that spoilt
    with NaN): --resume without --starts_every 2 is refused, with it
    writes the uninterrupted generation's file, every variable to the
    bit."""
    config = made[0]
    args = ("--starts_every", "2", "--core", core)
    assert main(generate_args(config, tmp_path / "whole", *args)) == 0
    whole = tmp_path / "whole" / "dataset.nc"
    partial = tmp_path / "resumed" / "dataset.nc.partial"
    partial.parent.mkdir()
    shutil.copyfile(whole, partial)
    with netCDF4.Dataset(partial, "a") as ds:
        ds["snapshots"][:] = [3, 2]
        for member, n in ((0, 3), (1, 2), (1, 3)):
            for name in held(n):
                ds[name][member, n] = np.full(ds[name].shape[2:], np.nan)
    assert main(generate_args(config, partial.parent, "--core", core, "--resume")) == 2
    assert "made with starts_every = 2, this generation has 1" in capsys.readouterr().err
    assert main(generate_args(config, partial.parent, *args, "--resume")) == 0
    with netCDF4.Dataset(whole) as want, netCDF4.Dataset(partial.parent / "dataset.nc") as got:
        want.set_auto_mask(False)
        got.set_auto_mask(False)
        assert list(got.variables) == list(want.variables)
        for name in want.variables:
            assert np.array_equal(got[name][...], want[name][...]), name
