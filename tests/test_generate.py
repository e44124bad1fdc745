"""`pompy generate` and pompy.dataset: the dataset's layout, its snapshots
against separate normal runs, restarts from any snapshot, reproducible
perturbations, refused input, the size estimate and the torchrun split.
All on an 8x7x5 seamount (dti = 18 s), snapshots every 3 steps."""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import torch

from pompy import variables
from pompy.cli import main
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.dataset import SnapshotDataset, grid_fields, member_params, state_fields
from pompy.driver import COMPILED
from pompy.provenance import source_hash
from pompy.settings import GenerateSettings, read as read_settings
from pompy.train import collate_samples, inject_core_state

ROOT = Path(__file__).parents[1]
EVERY_STEPS, RECORDS = 3, 4                     # snapshots at iint 0, 3, 6, 9, 12
EVERY = f"{EVERY_STEPS * 18 / 86400!r}"         # 0.000625 days
DAYS = f"{RECORDS * EVERY_STEPS * 18 / 86400!r}"
MEMBERS, SEED, AMPLITUDE = 3, 7, 0.01


def tiny_config():
    return dataclasses.replace(load_config(ROOT / "configs" / "seamount.nml"), im=8, jm=7, kb=5,
                               kl1=2, kl2=3, isplit=3, ispadv=3)


def generate_args(config: Path, output: Path, *extra) -> list[str]:
    return ["generate", str(config), "--days", DAYS, "--every", EVERY, "--output", str(output),
            "--members", str(MEMBERS), "--seed", str(SEED), *map(str, extra)]


def settings(config: Path, output: Path, **values) -> GenerateSettings:
    """The settings of a generation from Python (flat names, as the flags)."""
    return read_settings(GenerateSettings, {"config": config, "output": output,
                                            "days": float(DAYS), "every": float(EVERY), **values})


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The config file and one dataset generated from it in this process
    (its stderr kept for the size-estimate test)."""
    folder = tmp_path_factory.mktemp("generate")
    config = folder / "tiny.nml"
    tiny_config().to_namelist().write(config)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(generate_args(config, folder / "a")) == 0
    return config, folder / "a" / "dataset.nc", err.getvalue()


def read(path: Path) -> dict[str, np.ndarray]:
    """Every variable of a file as stored (CF order), read with netCDF4 alone."""
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        return {name: ds[name][...] for name in ds.variables}


def pom2k(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).T


def test_the_dataset_opens_with_xarray_with_the_documented_layout(made):
    xr = pytest.importorskip("xarray")
    config_path, path, _ = made
    config = load_config(config_path)
    with xr.open_dataset(path) as ds:
        assert dict(ds.sizes) == {"member": MEMBERS, "time": RECORDS + 1, "x": 8, "y": 7,
                                  "sigma": 5, "sigma_w": 5}
        assert ds["member"].values.tolist() == [0, 1, 2]
        assert ds["iint"].values.tolist() == [0, 3, 6, 9, 12]
        assert ds["time"].attrs["standard_name"] == "time"
        assert "days since" in ds["time"].encoding["units"]     # decoded by xarray
        assert ds["t"].dims == ("member", "time", "sigma", "y", "x")
        assert ds["q2"].dims == ("member", "time", "sigma_w", "y", "x")
        assert ds["ele"].dims == ("member", "time", "y")
        for name in grid_fields():
            assert "member" not in ds[name].dims and "time" not in ds[name].dims, name
        assert set(state_fields()) <= set(ds.variables)
        assert set(state_fields()) | set(grid_fields()) == set(variables.names("snapshot"))
        assert ds["t"].attrs["units"] == "degC"
        a = ds.attrs
        assert a["namelist"] == str(config.to_namelist())
        assert a["source_hash"] == source_hash() and len(a["source_hash"]) == 64
        assert a["core"] == "explicit" and a["members"] == MEMBERS and a["seed"] == SEED
        assert a["steps_between_snapshots"] == EVERY_STEPS and a["Conventions"] == "CF-1.8"
        assert a["world_size"] == 1 and a["perturb"] == "ic"


def test_member_0_is_a_normal_run_bit_for_bit(made):
    """A separate ExplicitCore run in gradient mode (run_time_loop, no fast
    path), compared at every snapshot step, grid included."""
    config_path, path, _ = made
    data = read(path)
    assert np.array_equal(data["time"], data["iint"] * 18.0 / 86400)
    core = ExplicitCore(load_config(config_path))
    core.run_initialization()
    for name in grid_fields():
        assert np.array_equal(pom2k(data[name]), core.state[name].numpy()), name
    for n, iint in enumerate(data["iint"]):
        core.iend = int(iint)
        core.run_time_loop()
        for name in state_fields():
            assert np.array_equal(pom2k(data[name][0, n]), core.state[name].numpy()), (iint, name)


def test_a_core_restored_from_any_snapshot_continues_bit_for_bit(made):
    """Every sample of every member: a fresh core, never set up, restored
    from the Dataset's record, run 3 steps normally, equals the next
    snapshot in every field."""
    config_path, path, _ = made
    config = load_config(config_path)
    ds = SnapshotDataset(path, horizon=1, fields=state_fields())
    assert len(ds) == MEMBERS * RECORDS
    for i in range(len(ds)):
        sample = ds[i]
        core = ExplicitCore(config)
        core.restore(ds.restore_record(sample))
        assert core.iint == sample["iint"]
        core.iend = core.iint + EVERY_STEPS
        core.run_time_loop()
        assert core.iint == int(sample["target_iint"][0])
        for name in state_fields():
            assert torch.equal(core.state[name], sample["target"][name][0]), (i, name)


def test_a_float32_dataset_restores_a_float32_core_bit_for_bit(made, tmp_path):
    """float32 values are stored as float64 (exactly) and restored back."""
    config_path, _, _ = made
    assert main(generate_args(config_path, tmp_path, "--dtype", "float32", "--members", 2)) == 0
    ds = SnapshotDataset(tmp_path, horizon=1, fields=state_fields())
    for i in range(len(ds)):
        sample = ds[i]
        core = ExplicitCore(load_config(config_path), dtype=torch.float32)
        core.restore(ds.restore_record(sample))
        core.iend = core.iint + EVERY_STEPS
        core.run_time_loop()
        for name in state_fields():
            assert torch.equal(core.state[name].double(), sample["target"][name][0]), (i, name)


def test_samples_never_cross_members_and_are_in_pom2k_order(made):
    _, path, _ = made
    data = read(path)
    ds = SnapshotDataset(path, horizon=2)
    assert len(ds) == MEMBERS * (RECORDS + 1 - 2) and ds.members == [0, 1, 2]
    sample = ds[len(ds) - 1]                   # the last start of the last member
    assert sample["member"] == 2 and sample["iint"] == 6
    assert sample["target_iint"].tolist() == [9, 12]
    assert set(sample["target"]) == set(variables.names("prognostic"))
    assert sample["target"]["t"].shape == (2, 8, 7, 5) and sample["state"]["u"].shape == (8, 7, 5)
    assert np.array_equal(sample["target"]["t"][1].numpy(), pom2k(data["t"][2, 4]))
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert len(SnapshotDataset(path, horizon=RECORDS + 1)) == 0
    with pytest.raises(ValueError, match="nope"):
        SnapshotDataset(path, fields=["t", "nope"])


def test_a_pickled_dataset_opens_its_own_files(made):
    """What a DataLoader worker gets: no open file, the same samples; forked
    workers (after the parent opened the file) batch them as (B, T, ...)."""
    _, path, _ = made
    ds = SnapshotDataset(path, horizon=2)
    want = [ds[i] for i in range(4)]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._handles == {}
    assert all(torch.equal(copy[3]["target"][n], want[3]["target"][n]) for n in want[3]["target"])
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2)
    batch = next(iter(loader))
    assert batch["target"]["u"].shape == (2, 2, 8, 7, 5) and batch["member"].tolist() == [0, 0]
    assert torch.equal(batch["target"]["u"][1], want[1]["target"]["u"])


def _descriptors_of(path: Path) -> set[int]:
    fds = Path("/proc/self/fd")
    return {int(fd.name) for fd in fds.iterdir()
            if os.path.realpath(fd) == os.path.realpath(path)}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_a_forked_child_never_closes_the_parents_files(made):
    """Closing (or freeing) in a forked child the HDF5 handles it inherited
    corrupted HDF5's state there: DataLoader workers crashed (4 of 6 runs
    of 60 two-worker loaders). The parent's descriptors of the file must
    stay open in the child through a read, close() and a garbage
    collection."""
    _, path, _ = made
    ds = SnapshotDataset(path, horizon=2)
    ds[0]
    inherited = _descriptors_of(path)
    assert inherited
    pid = os.fork()
    if pid == 0:                                         # the child
        ok = False
        try:
            ds[1]
            ds.close()
            del ds
            gc.collect()
            ok = inherited <= _descriptors_of(path)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ds[1]["member"] == 0
    ds.close()


def test_perturbed_members_differ_and_follow_from_the_seed(made):
    """Member m's initial t is member 0's plus amplitude * the normal draws
    of numpy's default_rng seeded from SeedSequence([seed, m]), computed
    here independently; its later snapshots differ from member 0's."""
    _, path, _ = made
    data = read(path)
    fsm = pom2k(data["fsm"])
    wet = fsm[:, :, None] * (np.arange(5) < 4)
    assert data["perturbation_seed"][0] == -1
    for m in (1, 2):
        seed = int(np.random.SeedSequence([SEED, m]).generate_state(1, np.uint64)[0] >> np.uint64(1))
        assert data["perturbation_seed"][m] == seed
        noise = np.random.default_rng(seed).standard_normal((8, 7, 5))
        t0 = pom2k(data["t"][0, 0])
        assert np.array_equal(pom2k(data["t"][m, 0]), t0 + AMPLITUDE * (noise * wet))
        assert np.array_equal(pom2k(data["tb"][m, 0]), pom2k(data["tb"][0, 0]) + AMPLITUDE * (noise * wet))
        assert not np.array_equal(data["rho"][m, 0], data["rho"][0, 0])     # recomputed
        for name in ("u", "t", "el"):
            assert not np.array_equal(data[name][m, -1], data[name][0, -1]), (m, name)
    assert not np.array_equal(data["t"][1, -1], data["t"][2, -1])


def test_the_same_seed_gives_the_same_data_and_another_seed_other_members(made, tmp_path):
    config, path, _ = made
    assert main(generate_args(config, tmp_path / "same")) == 0
    assert main(generate_args(config, tmp_path / "other", "--seed", SEED + 1)) == 0
    first, same, other = (read(p) for p in (path, tmp_path / "same" / "dataset.nc",
                                             tmp_path / "other" / "dataset.nc"))
    for name in first:
        assert np.array_equal(first[name], same[name]), name
    assert np.array_equal(first["t"][0], other["t"][0])
    assert not np.array_equal(first["t"][1], other["t"][1])


@pytest.mark.parametrize("args, message", [
    (("--every", "0.0006"), "pompy: --every 0.0006: not a multiple of dti = 18 s; "
                            "nearest: 0.000416667 or 0.000625 days"),
    (("--days", "0.0026"), "pompy: --days 0.0026: not a multiple of --every = 0.000625 days "
                           "(3 steps of dti = 18 s); nearest: 0.0025 or 0.003125 days"),
    (("--every", "0.0001"), "pompy: --every 0.0001: not a multiple of dti = 18 s; "
                            "nearest: 0.000208333 days"),
])
def test_bad_every_or_days_is_one_line(made, tmp_path, capsys, args, message):
    config, _, _ = made
    argv = generate_args(config, tmp_path / "bad")
    for flag, value in zip(args[::2], args[1::2]):
        argv[argv.index(flag) + 1] = value
    assert main(argv) == 2
    assert capsys.readouterr().err == message + "\n"
    assert not (tmp_path / "bad" / "dataset.nc").exists()


def test_the_nearest_value_named_is_accepted(made, tmp_path, capsys):
    config, _, _ = made
    argv = generate_args(config, tmp_path / "near", "--members", 1)
    argv[argv.index("--every") + 1] = "0.000416667"        # 2 steps, as printed above
    argv[argv.index("--days") + 1] = "0.000833333"
    assert main(argv) == 0
    assert read(tmp_path / "near" / "dataset.nc")["iint"].tolist() == [0, 2, 4]


def test_an_existing_dataset_is_refused_without_overwrite(made, capsys):
    config, path, _ = made
    before = path.read_bytes()
    assert main(generate_args(config, path.parent)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dataset.nc" in err and "--overwrite" in err
    assert path.read_bytes() == before


def test_overwrite_replaces_it(made, tmp_path):
    config, _, _ = made
    assert main(generate_args(config, tmp_path, "--members", 1)) == 0
    assert main(generate_args(config, tmp_path, "--overwrite")) == 0
    assert read(tmp_path / "dataset.nc")["member"].tolist() == [0, 1, 2]


def test_a_member_that_blows_up_leaves_no_dataset(made, tmp_path, capsys):
    config, _, _ = made
    assert main(generate_args(config, tmp_path, "--set", "vmaxl=1e-9")) == 3
    assert "member 0" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_size_estimate_is_printed_first_and_bounds_the_file(made):
    """The estimate is the file's size uncompressed (the values' bytes are
    exact, HDF5's metadata a measured constant): the compressed file is
    below it (measured 1.45 times here)."""
    _, path, err = made
    first = err.splitlines()[0]
    assert first.startswith(f"pompy generate: {path} will take at most ")
    estimate = float(first.split("at most ")[1].split(" MB")[0]) * 1e6
    assert 1.2 < estimate / path.stat().st_size < 3


def test_the_size_line_counts_what_starts_every_writes(made, tmp_path, capsys):
    """--starts_every 2, one member: the line says so, in the singular, its
    estimate below a member's share of the every-snapshot estimate (by the
    values left out: tests/test_dataset_format.py measures the file)."""
    config, _, err = made
    assert main(generate_args(config, tmp_path, "--members", 1, "--starts_every", 2)) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert f"(1 member x {RECORDS + 1} snapshots, every {EVERY_STEPS} steps" in first, first
    assert first.endswith("; the whole state every 2 snapshots, the targets between)"), first
    assert f"({MEMBERS} members x {RECORDS + 1} snapshots" in err.splitlines()[0]

    def estimate(line: str) -> float:
        return float(line.split("at most ")[1].split(" MB")[0]) * 1e6
    assert estimate(first) < estimate(err.splitlines()[0]) / MEMBERS


def test_generation_reports_its_progress_by_snapshot(made):
    """In a log (not a terminal): a line at each 5 % of the snapshots to
    write, naming member and snapshot, with the time so far and left; the
    last at 100 %, after the last member's last snapshot."""
    _, _, err = made
    lines = [line for line in err.splitlines() if " snapshot " in line and "ETA " in line]
    total = MEMBERS * (RECORDS + 1)
    assert 1 <= len(lines) <= min(total, 20), err
    assert all(line.startswith("pompy generate: member ") for line in lines), lines
    member, snapshot = lines[-1].split(": member ")[1].split(" (")[0].split(" snapshot ")
    assert int(snapshot) == RECORDS and "(100%), elapsed 0:" in lines[-1], lines[-1]
    percents = [int(line.split(" (")[1].split("%")[0]) for line in lines]
    assert percents == sorted(percents) and len(set(percents)) == len(percents)


def test_help_documents_the_perturbations(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "member 0 is unperturbed" in out and "SeedSequence([S, m])" in out
    assert "--perturb wind" in out and "wind_factor * (1 + A z)" in out and "rank m % K" in out
    assert "relative for wind (default 0.1)" in out


def test_torchrun_ranks_split_the_members_and_their_union_is_the_dataset(made, tmp_path):
    """Two `python -m pompy.generate` processes as torchrun starts them
    (RANK, WORLD_SIZE; no process group): rank 0 has members 0 and 2, rank 1
    member 1, and together they hold a single process's dataset to the bit."""
    config, path, _ = made
    argv = [sys.executable, "-m", "pompy.generate", *generate_args(config, tmp_path)[1:]]
    procs = [subprocess.Popen(argv, env=os.environ | {"RANK": str(r), "WORLD_SIZE": "2"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["dataset_rank0.nc", "dataset_rank1.nc"]
    ranks = [read(tmp_path / f"dataset_rank{r}.nc") for r in (0, 1)]
    assert ranks[0]["member"].tolist() == [0, 2] and ranks[1]["member"].tolist() == [1]
    single = read(path)
    for data in ranks:
        for local, m in enumerate(data["member"]):
            for name in state_fields() + ["perturbation_seed"]:
                assert np.array_equal(data[name][local], single[name][m]), (m, name)
    union = SnapshotDataset(tmp_path, horizon=1)
    assert sorted(union.members) == [0, 1, 2] and len(union) == MEMBERS * RECORDS
    with pytest.raises(ValueError, match="member 0"):
        SnapshotDataset([path, tmp_path / "dataset_rank0.nc"])


def test_any_core_on_the_scheme_independent_core_generates(made, tmp_path, monkeypatch):
    """A core registered by one entry of the registry (here Core with
    pom2k's split free surface, built directly; no compile option) writes
    the same data as --core explicit."""
    from pompy import cores
    from pompy import generate as gen
    from pompy.core.external.split import SplitExplicit
    from pompy.core.model import Core

    class Plain(Core):
        def __init__(self, config, device="cpu", dtype=torch.float64):
            super().__init__(config, SplitExplicit(), device=device, dtype=dtype)

    monkeypatch.setitem(cores.CORES, "plain", cores.CoreSpec(
        "plain", Plain, SplitExplicit, lambda config, state: None, twin=1, twin_name="oracle",
        twin_description="", solver=False, description="a test core", compile=False))
    config_path, path, _ = made
    got = gen.generate(load_config(config_path),
                       settings(config_path, tmp_path, core="plain", members=2, seed=SEED),
                       log=io.StringIO())
    mine, want = read(got), read(path)
    assert mine["t"].shape[0] == 2
    with pytest.raises(gen.InputError, match="--compile: the core 'plain' takes no compile option"):
        gen.generate(load_config(config_path), settings(config_path, tmp_path / "c", core="plain",
                                                        members=2, seed=SEED, compile=True),
                     log=io.StringIO())
    for name in state_fields():
        assert np.array_equal(mine[name], want[name][:2]), name


def test_the_implicit_core_generates_too(tmp_path):
    """--core implicit: member 0 is the implicit core's own run (without
    gradients, as run_generation_day runs it) at the snapshot steps."""
    from pompy.core.implicit import ImplicitCore

    config = tmp_path / "tiny.nml"
    tiny_config().to_namelist().write(config)
    assert main(["generate", str(config), "--days", repr(4 * 18 / 86400), "--every",
                 repr(2 * 18 / 86400), "--core", "implicit", "--output", str(tmp_path / "d")]) == 0
    sample = SnapshotDataset(tmp_path / "d", horizon=2)[0]
    core = ImplicitCore(tiny_config())
    core.run_initialization()
    with torch.no_grad():
        core.iend = 4
        core.run_time_loop()
    assert torch.equal(sample["target"]["t"][-1], core.t)


# ------------------------------------------------------------------ --perturb wind

WIND_AMPLITUDE = 0.1          # the default for wind


def wind_seed(m: int) -> int:
    return int(np.random.SeedSequence([SEED, m]).generate_state(1, np.uint64)[0] >> np.uint64(1))


@pytest.fixture(scope="module")
def wind(made):
    """A --perturb wind dataset of the same config, members and seed."""
    config, path, _ = made
    folder = path.parent.parent / "wind"
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(generate_args(config, folder, "--perturb", "wind")) == 0
    return folder / "dataset.nc"


def test_the_wind_factor_scales_pom2ks_wind_stress(oracle):
    """surface_forcing with wind_factor W against the Fortran (which has no
    factor) times W: the wusurf it sets within 2 roundings (W multiplies
    ramp first; measured at most 2.19e-16 of the largest, 6 states, 4 W),
    every other output and W = 1 equal to the bit."""
    from oracle_compare import torch_call
    from pompy.core import stepping
    from strategies import random_state

    _, params, state = random_state(3, 9, 8, 5, oracle)
    params = dict(params, iproblem=1)
    want = oracle.call("surface_forcing", state, params)
    rows = np.s_[1:8, 1:7]                  # i = 2..imm1, j = 2..jmm1: what it sets
    for factor in (1.0, 1.3, -0.7):
        got = torch_call(stepping.surface_forcing, oracle, "surface_forcing", state,
                         dict(params, wind_factor=factor))
        for name, value in got.items():
            value = value.numpy()
            if name == "wusurf" and factor != 1.0:
                expected = factor * want[name][rows]
                assert np.abs(value[rows] - expected).max() <= 4.5e-16 * np.abs(expected).max()
                value[rows] = want[name][rows]          # the rest is the input, kept
            assert np.array_equal(value, want[name]), (factor, name)


def test_wind_members_have_their_own_factor_from_the_seed(made, wind):
    """Member m's wind_factor is 1 + 0.1 z, z numpy's default_rng draw from
    SeedSequence([seed, m]) (computed here); member 0's is the config's 1.0
    and its run is the ic dataset's member 0 (a normal run) to the bit; the
    members start from the same state and then differ."""
    _, path, _ = made
    data, ic = read(wind), read(path)
    assert data["perturbation_seed"].tolist() == [-1, wind_seed(1), wind_seed(2)]
    assert data["wind_factor"][0] == 1.0 and ic["wind_factor"].tolist() == [1.0] * MEMBERS
    for m in (1, 2):
        z = np.random.default_rng(wind_seed(m)).standard_normal()
        assert data["wind_factor"][m] == 1.0 * (1.0 + WIND_AMPLITUDE * z)
        assert abs(data["wind_factor"][m] - 1.0) > 1e-3
        for name in state_fields():
            assert np.array_equal(data[name][m, 0], data[name][0, 0]), (m, name)
        for name in ("u", "t", "el", "wusurf"):
            assert not np.array_equal(data[name][m, -1], data[name][0, -1]), (m, name)
    for name in state_fields():
        assert np.array_equal(data[name][0], ic[name][0]), name
    with netCDF4.Dataset(wind) as ds:
        assert ds.perturb == "wind" and ds.amplitude == WIND_AMPLITUDE
        assert "wind_factor[m]" in ds.perturbation


def test_a_wind_member_restarts_bit_for_bit_with_its_factor(wind):
    """Every sample of a wind member: a fresh core whose config carries
    the member's stored wind_factor continues bit for bit to the next
    snapshot; with the namelist's factor (1.0) it does not."""
    config = tiny_config()
    factors = read(wind)["wind_factor"]
    ds = SnapshotDataset(wind, horizon=1, fields=state_fields())
    for i in range(len(ds)):
        sample = ds[i]
        m = int(sample["member"])
        assert sample["wind_factor"] == factors[m]
        results = {}
        for label, factor in (("member's", factors[m]), ("namelist's", 1.0),
                              ("sample's params", None)):
            core = ExplicitCore(dataclasses.replace(config, wind_factor=float(factor or 1.0)))
            core.restore(ds.restore_record(sample))
            if factor is None:      # the documented way: the config's core, the member's params
                core.params = dict(core.params, **member_params(sample))
            core.iend = core.iint + EVERY_STEPS
            core.run_time_loop()
            results[label] = all(torch.equal(core.state[name], sample["target"][name][0])
                                 for name in state_fields())
        assert results["member's"] and results["sample's params"], i
        assert results["namelist's"] == (m == 0), i


def test_the_implicit_core_generates_wind_members_that_restart(tmp_path):
    """--core implicit --perturb wind: member 1 restarts from its snapshot
    at iint 2 bit for bit with its wind factor, injected as the trainer
    injects a batch into a pooled core (collate_samples, inject_core_state)."""
    from pompy.core.implicit import ImplicitCore

    config = tmp_path / "tiny.nml"
    tiny_config().to_namelist().write(config)
    assert main(["generate", str(config), "--days", repr(4 * 18 / 86400), "--every",
                 repr(2 * 18 / 86400), "--core", "implicit", "--perturb", "wind", "--members", "2",
                 "--seed", str(SEED), "--output", str(tmp_path / "d")]) == 0
    factor = float(read(tmp_path / "d" / "dataset.nc")["wind_factor"][1])
    ds = SnapshotDataset(tmp_path / "d", horizon=1, fields=state_fields())
    sample = next(ds[i] for i in range(len(ds)) if ds[i]["member"] == 1 and ds[i]["iint"] == 2)
    assert sample["wind_factor"] == factor != 1.0
    core = ImplicitCore(tiny_config())       # as the trainer: a pooled core, the sample injected
    core.run_initialization()
    inject_core_state(core, collate_samples(ds, [sample])[0], 0)
    assert core.params["wind_factor"] == factor
    core.iend = core.iint + 2                 # to the snapshot at iint 4
    core.run_time_loop()
    for name in state_fields():
        assert torch.equal(core.state[name], sample["target"][name][0]), name


def test_wind_is_refused_for_the_box(tmp_path, capsys):
    config = tmp_path / "box.nml"
    load_config(ROOT / "configs" / "box.nml").to_namelist().write(config)
    assert main(["generate", str(config), "--days", "1", "--every", "1", "--perturb", "wind",
                 "--output", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == ("pompy: --perturb wind: the box (iproblem=2) has no wind "
                                       "stress to perturb; use --perturb ic\n")
    assert not (tmp_path / "d").exists()


def test_the_fortran_oracle_refuses_a_wind_factor(made, tmp_path, capsys):
    """The oracle has no wind factor: its drivers refuse one rather than
    ignore it (pompy run --core oracle: one line, exit 2)."""
    from pompy.errors import ConfigError
    from pompy.oracle.driver import OracleModel, main_loop, new_state, run_steps

    config = dataclasses.replace(tiny_config(), wind_factor=1.1)
    for scheme in ("explicit", "implicit"):
        with pytest.raises(ConfigError, match=r"^wind_factor=1.1: the Fortran oracle has no wind"):
            OracleModel(config, core=scheme)
    state = new_state(tiny_config())
    for run in (lambda: run_steps(state, config, 1, 2),
                lambda: run_steps(state, config, 1, 2, core="implicit"),
                lambda: main_loop(state, config, 1, 2, core="implicit")):
        with pytest.raises(ConfigError, match="wind_factor"):
            run()
    config_path, _, _ = made
    for core in (["--core", "oracle"], ["--core", "implicit", "--oracle"]):
        assert main(["run", str(config_path), *core, "--set", "wind_factor=1.1",
                     "--output", str(tmp_path / "run"), "--steps", "2"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pompy: wind_factor=1.1: the Fortran oracle") and err.count("\n") == 1


def test_members_run_together_give_the_single_runs_dataset(made, wind, tmp_path, monkeypatch):
    """The explicit core's ic members, and in float64 its wind members (a
    factor each), run as one Ensemble (generate.batched); forcing them one
    at a time gives the same files' every state value to the last bit."""
    import pompy.generate
    import pompy.generate.generation

    config_path, path, err = made
    config = tiny_config()
    assert pompy.generate.batched(config, "explicit", "ic", MEMBERS, "float64") and "together" in err
    assert pompy.generate.batched(config, "explicit", "wind", MEMBERS, "float64")
    assert pompy.generate.batched(config, "explicit", "ic", MEMBERS, "float32")
    assert not pompy.generate.batched(config, "explicit", "wind", MEMBERS, "float32")
    assert not pompy.generate.batched(config, "implicit", "ic", MEMBERS, "float64")
    monkeypatch.setattr(pompy.generate.generation, "batched", lambda *args: False)
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(generate_args(config_path, tmp_path / "single")) == 0
        assert main(generate_args(config_path, tmp_path / "wind", "--perturb", "wind")) == 0
    for batch, one in ((path, tmp_path / "single" / "dataset.nc"),
                       (wind, tmp_path / "wind" / "dataset.nc")):
        together, single = read(batch), read(one)
        assert together["wind_factor"].tolist() == single["wind_factor"].tolist()
        for name in state_fields():
            assert np.array_equal(together[name], single[name]), (batch, name)
    assert len(set(read(wind)["wind_factor"].tolist())) == MEMBERS


def test_members_of_a_large_cpu_grid_step_one_after_another(made, tmp_path, monkeypatch):
    """Past generate.BATCH_CELLS grid cells (where a batch measured slower
    per member than single runs) a CPU process steps its members one after
    another, so its memory check counts one member's run; a GPU batches
    them whatever the grid."""
    import pompy.generate
    from pompy.resources import estimate_run_bytes

    small = tiny_config()
    edge = dataclasses.replace(small, im=40, jm=40, kb=25, kl2=23)   # 40,000 cells: still batched
    large = dataclasses.replace(small, im=41, jm=40, kb=25, kl2=23)
    assert pompy.generate.batched(edge, "explicit", "ic", MEMBERS, "float64")
    assert not pompy.generate.batched(large, "explicit", "ic", MEMBERS, "float64")
    assert pompy.generate.batched(large, "explicit", "ic", MEMBERS, "float64", device="cuda")
    assert not pompy.generate.batched(large, "explicit", "ic", MEMBERS, "float64", device="cuda",
                                      compile=True)
    one, three = estimate_run_bytes(large), estimate_run_bytes(large, members=MEMBERS)
    monkeypatch.setenv("POMPY_MEMORY_AVAILABLE", str((one + three) // 2))
    p = pompy.generate.plan(large, settings(made[0], tmp_path, days=1.0, every=1.0,
                                            members=MEMBERS), {})
    assert p.members == list(range(MEMBERS)) and not p.together


def test_members_run_together_need_their_memory(made, tmp_path, monkeypatch, capsys):
    """The memory check counts every member of an ensemble: memory for one
    member's run but not for three is refused (exit 2, nothing written)."""
    from pompy.resources import estimate_run_bytes

    config_path, _, _ = made
    config = load_config(config_path)
    one, three = estimate_run_bytes(config), estimate_run_bytes(config, members=MEMBERS)
    assert three > one
    monkeypatch.setenv("POMPY_MEMORY_AVAILABLE", str((one + three) // 2))
    assert main(generate_args(config_path, tmp_path / "d")) == 2
    assert "(3 members together) of the explicit core" in capsys.readouterr().err
    assert not (tmp_path / "d" / "dataset.nc").exists()


def test_compiled_members_give_the_uncompiled_dataset(made, wind, tmp_path, monkeypatch):
    """--compile: one compiled core steps the members in turn (not as an
    ensemble), through graphs (Dynamo's, run op by op as eager), and the
    files hold the uncompiled datasets' every state value to the last bit.
    A wind member's factor is a graph input: the wind members make no more
    graphs than the ic members do."""
    from pompy.core import compiled

    made_graphs = []
    inner = torch._dynamo.lookup_backend("eager")
    monkeypatch.setattr(compiled, "BACKEND", lambda gm, inputs: made_graphs.append(gm) or inner(gm, inputs))
    counts = []
    torch._dynamo.reset()
    try:
        for folder, extra in (("ic", ()), ("wind", ("--perturb", "wind"))):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                assert main(generate_args(made[0], tmp_path / folder, "--compile", *extra)) == 0
            assert "compiling the step graphs" in err.getvalue() and "together" not in err.getvalue()
            counts.append(len(made_graphs))
    finally:
        torch._dynamo.reset()
    assert counts[0] > 0 and counts[1] - counts[0] == counts[0]
    for want, folder in ((made[1], "ic"), (wind, "wind")):
        got, expected = read(tmp_path / folder / "dataset.nc"), read(want)
        with netCDF4.Dataset(tmp_path / folder / "dataset.nc") as a, netCDF4.Dataset(want) as b:
            assert (a.torch_compile, b.torch_compile) == (COMPILED, "none")
        assert got["wind_factor"].tolist() == expected["wind_factor"].tolist()
        for name in state_fields():
            assert np.array_equal(got[name], expected[name]), (folder, name)


# ------------------------------------------------------------------ a reference, &generate

def test_reference_targets_equal_a_pompy_run_of_the_reference_core(made, tmp_path):
    """--reference_dti 9 --reference_dte 3: member 0's snapshots are, bit
    for bit, the records of `pompy run` of the explicit core with dte = 3,
    isplit = 3 from the set-up (time 0: the set-up itself, as the physics's
    at dti 18 s), and the file says which model made them."""
    config_path, _, _ = made
    assert main(generate_args(config_path, tmp_path / "d", "--members", 1, "--reference_dti", 9,
                              "--reference_dte", 3)) == 0
    data = read(tmp_path / "d" / "dataset.nc")
    assert data["iint"].tolist() == [0, 6, 12, 18, 24]              # steps of 9 s
    assert main(["run", str(config_path), "--set", "dte=3", "--set", "isplit=3", "--steps", "24",
                 "--output-every", EVERY, "--output", str(tmp_path / "run")]) == 0
    with netCDF4.Dataset(tmp_path / "run" / "explicit_output.nc") as run:
        run.set_auto_mask(False)
        assert np.array_equal(run["time"][:], data["time"][1:])
        compared = [n for n in state_fields() if n in run.variables]
        assert {"el", "u", "v", "t", "s", "ua", "uab", "q2"} <= set(compared)
        for name in compared:
            assert np.array_equal(run[name][:], data[name][0, 1:]), name
    setup = ExplicitCore(load_config(config_path))
    setup.run_initialization()
    for name in state_fields():
        assert np.array_equal(pom2k(data[name][0, 0]), setup.state[name].numpy()), name
    with netCDF4.Dataset(tmp_path / "d" / "dataset.nc") as ds:
        assert ds.core == "explicit" and ds.dti == 9.0 and ds.config_dti == 18.0
        assert "explicit core" in ds.target_model and "dti = 9 s" in ds.target_model
        assert "dte = 3 s x isplit = 3" in ds.target_model
        described = ds.target_model
    assert SnapshotDataset(tmp_path / "d").model == {"core": "explicit", "dti": 9.0,
                                                     "description": described}


def with_generate_group(config: Path, where: Path, **settings) -> Path:
    from pompy.config import namelist_literal

    text = config.read_text().rstrip() + "\n&generate\n" + "".join(
        f"    {k} = {namelist_literal(v)}\n" for k, v in settings.items()) + "/\n"
    path = where / "with_generate.nml"
    path.write_text(text)
    return path


def test_the_generate_group_needs_no_flags_and_flags_override_it(made, tmp_path):
    """&generate gives the settings (the config's pom2k parameters load
    alike); a flag given wins over the group."""
    config_path, path, _ = made
    config = with_generate_group(config_path, tmp_path, members=MEMBERS, seed=SEED,
                                 days=float(DAYS), every=float(EVERY), core="explicit")
    assert load_config(config) == load_config(config_path)
    assert main(["generate", str(config), "--output", str(tmp_path / "a")]) == 0
    want, got = read(path), read(tmp_path / "a" / "dataset.nc")
    for name in state_fields():
        assert np.array_equal(got[name], want[name]), name
    assert main(["generate", str(config), "--output", str(tmp_path / "b"), "--members", "1"]) == 0
    assert read(tmp_path / "b" / "dataset.nc")["member"].tolist() == [0]


@pytest.mark.parametrize("settings, message", [
    ({"membres": 2}, "&generate has unknown setting 'membres'"),
    ({"starts_every": 0}, "--starts_every 0: must be >= 1"),
    ({"members": "two"}, "&generate members = 'two': expected an integer"),
    ({"reference_dti": 10.0, "reference_dte": 3.0}, "reference_dti = 10 s is not a whole number"),
    ({}, "--days: give it, or set days in the config's &generate group"),
])
def test_bad_generate_settings_are_one_line(made, tmp_path, capsys, settings, message):
    config_path, _, _ = made
    days = {} if not settings else {"days": float(DAYS), "every": float(EVERY)}
    config = with_generate_group(config_path, tmp_path, **days, **settings)
    assert main(["generate", str(config), "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_the_shipped_training_configs_generate_from_their_group():
    """train_tiny's &generate: the explicit core at a quarter of the
    physics's 240 s, snapshots one correction cycle apart."""
    from pompy.generate import reference_config

    for name in ("train_tiny", "train_360x240"):
        path = ROOT / "configs" / f"{name}.nml"
        s = read_settings(GenerateSettings, {"config": path, "output": "data"})
        config = load_config(path)
        assert s.reference.core == "explicit" and config.dti == 240.0
        ref = reference_config(config, s.reference.reference_dti, s.reference.reference_dte)
        assert (ref.dti, ref.dte, ref.isplit) == (60.0, 2.0, 30)
        assert round(s.schedule.every * 86400, 6) == 2 * config.dti


# ------------------------------------------------------------------ interrupts, --resume

def _slow_args(config: Path, output: Path, *extra) -> list[str]:
    """Members one after another (the implicit core does not batch them),
    each of 240 steps of 18 s, 9 snapshots."""
    return ["generate", str(config), "--days", repr(240 * 18 / 86400), "--every",
            repr(30 * 18 / 86400), "--core", "implicit", "--members", "3", "--seed", str(SEED),
            "--output", str(output), *extra]


@pytest.fixture(scope="module")
def uninterrupted(made, tmp_path_factory):
    """The uninterrupted generation's file, by the extra flags given (each made once)."""
    files = {}

    def of(*extra: str) -> dict[str, np.ndarray]:
        if extra not in files:
            folder = tmp_path_factory.mktemp("uninterrupted")
            assert main(_slow_args(made[0], folder, *extra)) == 0
            files[extra] = read(folder / "dataset.nc")
        return files[extra]
    return of


@pytest.mark.parametrize("signum, extra", [(signal.SIGTERM, ()), (signal.SIGINT, ()),
                                           (signal.SIGTERM, ("--starts_every", "2"))])
def test_an_interrupted_generation_keeps_its_snapshots_and_resumes_to_the_same_bits(
        made, uninterrupted, tmp_path, signum, extra):
    """The signal sent for real to a `python -m pompy generate` process once
    member 0 is done: exit 128 + signal, one line saying what was kept and
    the command that continues, no temporary file, no dataset.nc, member 0
    whole in dataset.nc.partial; --resume then writes the uninterrupted
    run's dataset to the bit (every variable) and removes the partial file.
    With --starts_every 2 too, where member 1 may stop between starts
    (tests/test_dataset_format.py makes that case for certain)."""
    out = tmp_path / "d"
    uninterrupted = uninterrupted(*extra)
    proc = subprocess.Popen([sys.executable, "-m", "pompy", *_slow_args(made[0], out, *extra)],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("pompy generate: member 0:"):
            proc.send_signal(signum)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signum, (lines, rest)
    last = rest.strip().splitlines()[-1]
    name = signal.Signals(signum).name
    assert last.startswith(f"pompy generate: interrupted ({name}); kept {out}/dataset.nc.partial "
                           "(member 0: 9 of 9 snapshots, member 1: "), last
    assert "continue with: pompy generate " in last and last.endswith(" --resume"), last
    assert sorted(p.name for p in out.iterdir()) == ["dataset.nc.partial"]
    partial = read(out / "dataset.nc.partial")
    assert partial["snapshots"][0] == 9 and partial["snapshots"][2] < 9
    for name in state_fields():
        assert np.array_equal(partial[name][0], uninterrupted[name][0]), name
    assert main(_slow_args(made[0], out, *extra, "--resume")) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dataset.nc"]
    resumed = read(out / "dataset.nc")
    assert resumed.keys() == uninterrupted.keys()
    for name, values in uninterrupted.items():
        assert np.array_equal(resumed[name], values), name


def test_resume_needs_a_partial_file_and_the_same_settings(made, tmp_path, capsys):
    config = made[0]
    assert main(_slow_args(config, tmp_path, "--resume")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no interrupted generation" in err
    # a partial file: a fresh run refuses it, --resume with other settings too
    assert main(_slow_args(config, tmp_path)) == 0
    (tmp_path / "dataset.nc").rename(tmp_path / "dataset.nc.partial")
    assert main(_slow_args(config, tmp_path)) == 2
    assert "--resume continues it" in capsys.readouterr().err
    assert main(_slow_args(config, tmp_path, "--resume", "--seed", "8")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made with seed = 7" in err, err
    assert main(_slow_args(config, tmp_path, "--resume", "--starts_every", "2")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made with starts_every = 1, this generation has 2" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset.nc.partial"]


def test_signals_raise_an_interrupt_that_is_found_through_a_wrapping_error():
    """raising_signals: SIGTERM raises pompy.errors.Interrupted where the
    program is, the previous handler back on exit. An error raised from it
    (as torch.compile raises a TorchRuntimeError from one that stops its
    tracing, measured) still counts as the interrupt: pompy.signals.interruption.
    One that code drops is raised again at the next raise_pending."""
    from pompy.errors import Interrupted
    from pompy.signals import interruption, raise_pending, raising_signals

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as caught, raising_signals():
        signal.raise_signal(signal.SIGTERM)
    assert caught.value.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is before
    try:
        try:
            raise Interrupted(signal.SIGTERM)
        except Exception:
            raise RuntimeError("a tracer's own error") from None
    except RuntimeError as wrapped:
        assert interruption(wrapped).signum == signal.SIGTERM
    assert interruption(RuntimeError("no signal")) is None
    assert isinstance(interruption(KeyboardInterrupt()), KeyboardInterrupt)
    raise_pending()                                  # no block, no signal: nothing
    with pytest.raises(Interrupted) as caught, raising_signals():
        raise_pending()                              # no signal yet: nothing
        try:
            signal.raise_signal(signal.SIGTERM)
        except BaseException:                        # dropped, as netCDF4's attribute probes do
            pass
        raise_pending()
    assert caught.value.signum == signal.SIGTERM
    raise_pending()                                  # the block is over
