"""validation/gpu_check.py's CPU path, end to end on tiny grids, so that
the GPU check is known to run before a GPU is lent: its four parts (a: a
second CPU run against the first, exactly equal; b: the oracle and the
eager cores timed, the CUDA-graph modes reported as not runnable on the
CPU; c: pompy generate and two training batches in a gloo group of one,
the trainer's gate answered by the stand-in as on the GPU's 360x240 grid;
d: pompy verify), its Markdown tables and its JSON; a unit killed at its
time box is reported, not fatal; what the CUDA-graph modes run (the step
a graph captures, the stepping of Inductor's graphs) steps as the core
does, to the bit, here without a GPU; (c)'s gate (gpu_train.CheckedGate)
answers with a stand-in or refuses, as asked.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import f90nml
import pytest

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "validation" / "gpu_check.py"


@pytest.fixture
def home(oracle, tmp_path):
    """A POMPY_HOME of this test's own (its certificates), the oracle's
    build shared with the user's."""
    from pompy.oracle.build import cache_dir

    path = tmp_path / "home"
    path.mkdir()
    (path / "oracle").symlink_to(cache_dir(), target_is_directory=True)
    return path


def tiny_config(folder: Path, name: str, **pom2k) -> Path:
    """configs/train_tiny.nml on an 8x7x5 grid, a network of 4 channels."""
    nml = f90nml.read(ROOT / "configs" / "train_tiny.nml")
    nml["pom2k"].update(im=8, jm=7, kb=5, kl1=2, kl2=3, cg_maxiter=60, **pom2k)
    nml["train"].update(hidden_channels=4, device="cpu")
    path = folder / name
    nml.write(path, force=True)
    return path


def run(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, POMPY_HOME=str(home), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def finite(*values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def test_the_cpu_path_runs_every_part(home, tmp_path):
    verified = tiny_config(tmp_path, "verified.nml")
    # trained with a tolerance never verified: the gate answered by the stand-in (as
    # where (d) failed; by default (d) verifies (c)'s own config)
    trained = tiny_config(tmp_path, "trained.nml", cg_tol=1e-13)
    out = tmp_path / "check.json"
    result = run(home, "--grids", "16x12x6", "--parity-grid", "16x12x6", "--steps", "4",
                 "--bench-steps", "2", "--rounds", "2",
                 "--modes", "eager,cuda-graph,reduce-overhead",
                 "--train-config", str(trained), "--verify-config", str(verified),
                 "--verify-options", "--samples 1 --steps 1", "--json", str(out),
                 "--work", str(tmp_path / "work"))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    parts = report["parts"]
    assert set(parts) == {"a", "b", "c", "d"}
    assert {p: parts[p]["status"] for p in parts} == dict.fromkeys("abcd", "ok"), \
        (parts, result.stderr[-3000:])
    assert report["elapsed_s"] < report["budget_s"]

    a = parts["a"]
    assert a["grid"] == "16x12x6" and a["steps"] == 4 and a["goal"] == 1e-9
    assert set(a["cores"]) == {"explicit", "implicit"}
    for row in a["cores"].values():      # the same CPU run twice: equal to the bit
        assert row["worst"] == 0.0 and row["passed"] is True
        assert row["fields"] and set(row["fields"].values()) == {0.0}
        assert {"u", "v", "t", "s", "el", "q2"} <= set(row["fields"])
        assert finite(row["cpu_s"], row["device_s"])

    b = parts["b"]
    assert {(o["grid"], o["core"]) for o in b["oracle"]} == {("16x12x6", "explicit"),
                                                             ("16x12x6", "implicit")}
    assert all(finite(o["ms"]) and o["ms"] > 0 for o in b["oracle"])
    rows = {(r["core"], r["mode"]): r for r in b["rows"]}
    assert set(rows) == {(c, m) for c in ("explicit", "implicit")
                         for m in ("eager", "cuda-graph", "reduce-overhead")}
    for core in ("explicit", "implicit"):
        eager = rows[core, "eager"]
        assert eager["status"] == "ok" and finite(eager["ms"], eager["ratio"], eager["warmup_s"])
        assert eager["ms"] > 0 and len(eager["times"]) == 2
        for mode in ("cuda-graph", "reduce-overhead"):
            assert rows[core, mode]["status"] == "not run"
            assert "need a CUDA device" in rows[core, mode]["reason"]

    d = parts["d"]
    assert d["exit_code"] == 0 and d["passed"] == d["checks"] > 100
    assert d["command"].startswith("pompy verify ") and "--device cpu" in d["command"]
    assert finite(d["seconds"]) and d["grid"] == "8x7x5"
    assert Path(d["certificate"]).is_file() and Path(d["certificate"]).is_relative_to(home)

    c = parts["c"]
    assert c["grid"] == "8x7x5" and c["certified"] is False
    assert c["refusal"].startswith("no verification certificate for the implicit core") \
        and "cg_tol" in c["refusal"], c["refusal"]
    assert c["backend"] == "gloo" and c["world_size"] == 1 and c["ddp"] is True
    assert c["generate_exit"] == 0 and finite(c["generate_s"], c["build_s"])
    assert len(c["batches"]) == 2
    for batch in c["batches"]:
        assert finite(batch["seconds"], batch["peak_rss_gb"], batch["loss"])
        assert batch["seconds"] > 0 and batch["peak_rss_gb"] > 0

    text = result.stdout
    for header in ("| core | worst field | largest difference |", "| grid | core | mode |",
                   "| batch | seconds | peak memory (GB) |", "| checks passed | seconds |"):
        assert header in text, text
    assert "| explicit | el | 0.00e+00 | 1e-09 | pass |" in text


def test_a_unit_past_its_box_is_killed_and_reported(home, tmp_path):
    out = tmp_path / "check.json"
    result = run(home, "--parts", "a", "--parity-grid", "16x12x6", "--steps", "100000",
                 "--cores", "explicit", "--budget", "6", "--json", str(out), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    a = json.loads(out.read_text())["parts"]["a"]
    assert a["status"] == "incomplete" and a["problem"].startswith("killed at its box of 6 s")
    assert a["seconds"] < 20
    assert "killed at its box" in result.stdout


def load(name: str = "gpu_check"):
    """validation/NAME.py as a module (gpu_check, the driver; gpu_units,
    gpu_train, the units its children run)."""
    import importlib

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPT.parent))


@pytest.mark.parametrize("core,lramp", [("explicit", False), ("implicit", False),
                                        ("explicit", True)])
def test_what_cuda_graph_mode_captures_steps_as_the_core(core, lramp):
    """What the cuda-graph mode captures (step_in_place), run here without
    a capture: each call one more step, the state equal to the core's own
    steps to the bit, every field; with the forcing ramp too (lramp: the
    step's ramp as the core fixes it)."""
    import dataclasses

    import torch

    from pompy.core.model import forward_only

    units = load("gpu_units")
    config = dataclasses.replace(units.grid_config("16x12x6"), lramp=lramp)
    model = units.make_core(core, config, "cpu")
    units.benchmark.run(model, 2, "cpu")
    if lramp:
        assert 0 < units.forcing_ramp(model, model.iint + 1) < 1
    step, state = units.step_in_place(model)
    with forward_only(model):
        for _ in range(3):
            assert bool(step())
    units.benchmark.run(model, 3, "cpu")
    assert model.iint == 5 and set(state) == set(model.state)
    assert [n for n in state if not torch.equal(state[n], model.state[n])] == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")     # torch._inductor's import
def test_reduce_overhead_modes_stepping_steps_as_the_core():
    """reduce-overhead mode's stepping (each step's state cloned, a new
    CUDA-graph step begun) on an eager core: the states of benchmark.run's."""
    import torch

    units = load("gpu_units")
    config = units.grid_config("16x12x6")
    models = [units.make_core("explicit", config, "cpu") for _ in range(2)]
    units.with_callback(units.next_cudagraph_step)(models[0], 2, "cpu", untimed=1)
    units.benchmark.run(models[1], 2, "cpu", untimed=1)
    assert models[0].iint == models[1].iint == 3
    assert all(torch.equal(models[0].state[n], models[1].state[n]) for n in models[1].state)


def test_the_trainers_gate_answers_with_a_stand_in_or_refuses(tmp_path, monkeypatch):
    """(c)'s gate, where the set-up has no certificate (a POMPY_HOME without
    any): a stand-in of the set-up's key, not passed, the refusal kept;
    with --train-gate strict the refusal itself (the trainer's InputError)."""
    import torch

    from pompy.config import load_config
    from pompy.errors import InputError

    monkeypatch.setenv("POMPY_HOME", str(tmp_path))
    gpu_train = load("gpu_train")
    config = load_config(ROOT / "configs" / "train_tiny.nml")
    asked = ("implicit", torch.device("cpu"), "float64", config)
    gate = gpu_train.CheckedGate(strict=False)
    assert gate.certified is None
    found = gate(*asked, config_name="train_tiny.nml")
    assert found["passed"] is False and found["stand_in"] == gpu_train.CheckedGate.STAND_IN
    assert found["key"]["core"] == "implicit" and found["key"]["device"] == "cpu"
    assert found["key"]["grid"] == f"{config.im}x{config.jm}x{config.kb}"
    assert gate.certified is False
    assert gate.refusal.startswith("no verification certificate for the implicit core")
    strict = gpu_train.CheckedGate(strict=True)
    with pytest.raises(InputError, match="no verification certificate"):
        strict(*asked, config_name="train_tiny.nml")
    assert strict.certified is False and strict.refusal == gate.refusal


def test_bad_options_are_refused():
    gpu_check = load()
    for argv in (["--parts", "a,z"], ["--modes", "eager,fast"], ["--cores", "pom"],
                 ["--grids", "16x12"], ["--steps", "0"], ["--train-config", "no.nml"]):
        with pytest.raises(SystemExit) as stop:
            gpu_check.parse_args(["--device", "cpu", *argv])
        assert stop.value.code == 2, argv
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as stop:
            gpu_check.parse_args([])           # --device cuda by default
        assert stop.value.code == 2


def test_samples_that_fit_a_gpu():
    """(c)'s samples per 80 GB: what is held before a batch once, each
    sample's own peak above it (the largest of the batches)."""
    sys.path.insert(0, str(ROOT / "validation"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "validation"))
    batches = [{"peak_gb": 12.0, "before_gb": 2.0}, {"peak_gb": 9.5, "before_gb": 2.5}]
    assert gpu_check.samples_in(80.0, batches) == 7          # (80 - 2.5) // 10
    assert gpu_check.samples_in(80.0, [{"peak_rss_gb": 5.0}]) is None     # the CPU's RSS
