"""The dataset file's storage (pompy.generate.writer): each member's
snapshot of each variable one zlib chunk, so that a sample reads its own
snapshots and no others; a sample's start restores bit for bit from the
compressed file. An 8x7x5 seamount, 2 members, 4 snapshots 3 steps apart,
with the physics' b levels (physics dti 2 x the reference's)."""
from __future__ import annotations

import dataclasses
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
from pompy.generate.writer import SNAPSHOT_COMPRESSION

ROOT = Path(__file__).parents[1]
STEPS = 4          # reference steps of 18 s between snapshots


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("format")
    config = folder / "tiny.nml"
    dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                        kl2=3, isplit=6, dte=6.0, ispadv=3).to_namelist().write(config)
    every = repr(STEPS * 18 / 86400)
    assert main(["generate", str(config), "--days", repr(3 * STEPS * 18 / 86400), "--every",
                 every, "--output", str(folder / "data"), "--members", "2", "--reference_dti",
                 "18", "--reference_dte", "6"]) == 0
    return config, folder / "data" / "dataset.nc"


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
