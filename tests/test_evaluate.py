"""`pompy evaluate`: a trained run's corrected and uncorrected rollouts on
held-out members against the reference (the tiny dataset of test_train,
made by the explicit core at dti = 120 s; the physics, the implicit core
at 240 s): the uncorrected rollout is a `pompy run` of the member to the
bit, the files hold what the rollouts measure, bad input is one line."""
import csv
import json
import math

import netCDF4
import numpy as np
import pytest
import torch
from test_train import (  # noqa: F401 - the fixtures made, made_reference, verified
    LOSS_WEIGHTS,
    NPOMTrainerDDP,
    certified,
    made,
    made_reference,
    made_reference_starts,
    options,
    verified,
)

from pompy import cli
from pompy.dataset import SnapshotDataset
from pompy.evaluate import TrainedModel, load_run, rollouts, verdicts

CYCLES = 3


@pytest.fixture(scope="module")
def trained(made_reference, verified, tmp_path_factory):  # noqa: F811 - fixtures
    """A run of one epoch on the reference data (the implicit core)."""
    where = tmp_path_factory.mktemp("evaluate")
    with pytest.MonkeyPatch.context() as mp:
        certified(verified, where, mp, "implicit")
        trainer = NPOMTrainerDDP(options(made_reference, where, "--lr", 1e-3,
                                         "--correction_scale", 0.01))
        try:
            trainer.train()
        finally:
            trainer.cleanup()
    return where / "out", made_reference[2]


def test_the_uncorrected_rollout_is_a_pompy_run_of_the_member(trained, tmp_path):
    """Member 0 from its initial state (the set-up): the uncorrected
    rollout, cycle by cycle, equals the records of `pompy run --core
    implicit` of the config, bit for bit; the corrected one differs."""
    run, data = trained
    body, settings = load_run(run, None, None)
    model = TrainedModel(body, settings)
    ds = SnapshotDataset(data, horizon=CYCLES)
    corrected, uncorrected, refs, lead = rollouts(model, ds, [0])
    assert lead == [480.0 * (n + 1) for n in range(CYCLES)]
    assert cli.main(["run", str(settings.config), "--core", "implicit", "--steps", str(2 * CYCLES),
                     "--output-every", repr(480 / 86400), "--output", str(tmp_path)]) == 0
    with netCDF4.Dataset(tmp_path / "implicit_output.nc") as out:
        out.set_auto_mask(False)
        assert len(out["time"]) == CYCLES
        for name in LOSS_WEIGHTS:
            got = uncorrected[name][0].numpy()                    # (N, pom2k order)
            want = np.stack([np.asarray(out[name][n]).T for n in range(CYCLES)])
            assert np.array_equal(got, want), name
    assert not torch.equal(corrected["el"], uncorrected["el"])
    assert torch.equal(refs["el"][0], ds[0]["target"]["el"])


def test_evaluate_writes_the_table_the_figure_and_the_ratios(trained, capsys):
    """The JSON's ratio_to_baseline is, by lead, the corrected loss over the
    uncorrected (the run's weights on the per-field MSEs, whose roots are
    the RMSEs of the CSV); the worst is printed last."""
    run, data = trained
    assert cli.main(["evaluate", str(run), "--data", str(data), "--cycles", str(CYCLES),
                     "--overwrite"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads((run / "evaluation.json").read_text())
    assert result["members"] == [2] and result["cycles"] == CYCLES        # the held-out member
    assert len(result["ratio_to_baseline"]) == CYCLES
    for label in ("corrected", "uncorrected"):
        rmse = result["rmse"][label]
        for n in range(CYCLES):
            loss = sum(w * rmse[f][n] ** 2 for f, w in LOSS_WEIGHTS.items())
            assert math.isclose(result[f"{label}_loss"][n], loss, rel_tol=1e-12)
    for n, ratio in enumerate(result["ratio_to_baseline"]):
        assert ratio == result["corrected_loss"][n] / result["uncorrected_loss"][n]
    worst = max(result["headline_ratio"])
    assert out[-1].startswith(f"pompy evaluate: worst headline ratio {worst:.4g} at lead ")
    assert f"held-out member(s) [2]" in out[1]
    with open(run / "evaluation.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * CYCLES and rows[0]["model"] == "corrected" \
        and rows[2]["model"] == "ratio"
    assert float(rows[1]["el_rmse"]) == result["rmse"]["uncorrected"]["el"][0]
    assert float(rows[2]["el_rmse"]) == result["field_ratio"]["el"][0]
    assert (run / "evaluation.png").read_bytes()[:4] == b"\x89PNG"
    assert "explicit core" in result["data_model"] and result["certificate"]


def test_data_whole_every_other_snapshot_evaluates_as_the_every_snapshot_data(
        trained, made_reference_starts, tmp_path):  # noqa: F811 - a fixture
    """The same run's data with starts_every 2 (between starts, ub and vb as
    the physics' b levels alone): the same errors at every lead, to the bit."""
    run, data = trained
    results = []
    for where, folder in ((data, "every"), (made_reference_starts, "starts")):
        assert cli.main(["evaluate", str(run), "--data", str(where), "--cycles", str(CYCLES),
                         "--output", str(tmp_path / folder)]) == 0
        results.append(json.loads((tmp_path / folder / "evaluation.json").read_text()))
    assert results[0]["rmse"] == results[1]["rmse"]
    assert results[0]["members"] == results[1]["members"] == [2]


MASKS = {"u": "dum", "ub": "dum", "ua": "dum", "uab": "dum", "v": "dvm", "vb": "dvm",
         "va": "dvm", "vab": "dvm"}


def test_the_rmse_is_that_of_two_pompy_runs_and_the_headline_their_geometric_mean(trained,
                                                                                tmp_path, capsys):
    """Member 0 (a training member; its snapshot 0 is the set-up): each
    field's uncorrected RMSE by lead equals the RMSE between the records of
    `pompy run --core implicit` (the physics) and of `pompy run --core
    explicit` at the data's reference steps (dti 120 s = dte 4 s x 30),
    over the wet points and levels 1..kb-1, for every field but ub and vb
    (their targets are the physics' own b levels, built from the
    reference's transports too: test_case_members checks them against the
    internal step). The headline is the geometric mean of the seven current-level fields'
    ratios; --output gets the files, the epoch is printed and the members
    are not called held-out."""
    run, data = trained
    config = load_run(run, None, None)[1].config
    for core, every, extra in (("implicit", 480, []),
                               ("explicit", 480, ["--set", "dte=4.0", "--set", "isplit=30"])):
        steps = CYCLES * (2 if core == "implicit" else 4)
        assert cli.main(["run", str(config), "--core", core, "--steps", str(steps), *extra,
                         "--output-every", repr(every / 86400), "--output",
                         str(tmp_path / core)]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--data", str(data), "--cycles", str(CYCLES),
                     "--members", "0", "--output", str(tmp_path / "eval")]) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert "epoch 0" in out.splitlines()[0] and "TRAINING" in result["members_are"]
    assert "held-out" not in out
    with netCDF4.Dataset(tmp_path / "implicit" / "implicit_output.nc") as phys, \
            netCDF4.Dataset(tmp_path / "explicit" / "explicit_output.nc") as ref:
        phys.set_auto_mask(False)
        ref.set_auto_mask(False)
        kb = len(phys["sigma"])
        for name in (n for n in LOSS_WEIGHTS if n not in ("ub", "vb")):
            mask = np.asarray(phys[MASKS.get(name, "fsm")][...])
            for n in range(CYCLES):
                p, r = np.asarray(phys[name][n]), np.asarray(ref[name][n])
                if p.ndim == 3:                                     # (sigma, y, x)
                    p, r, m = p[:kb - 1], r[:kb - 1], np.broadcast_to(mask, p[:kb - 1].shape)
                else:
                    m = mask
                want = math.sqrt(((p - r) ** 2 * m).sum() / m.sum())
                got = result["rmse"]["uncorrected"][name][n]
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15), (name, n, got, want)
    ratios = result["field_ratio"]
    for n in range(CYCLES):
        logs = [math.log(result["rmse"]["corrected"][f][n] / result["rmse"]["uncorrected"][f][n])
                for f in ("u", "v", "t", "s", "el", "ua", "va")]
        assert math.isclose(result["headline_ratio"][n], math.exp(sum(logs) / 7), rel_tol=1e-12)
        assert ratios["uab"][n] == result["rmse"]["corrected"]["uab"][n] / \
            result["rmse"]["uncorrected"]["uab"][n]


def test_a_ratio_above_one_is_said_plainly():
    """The verdicts: the headline above 1 at a cycle, a field more than 10 %
    worse, each a line; none where the corrector helps."""
    fields = ("u", "v", "t", "s", "el", "ua", "va")
    good = {"lead_cycles": [1, 2], "headline_ratio": [0.5, 0.9], "training_horizon": 2,
            "field_ratio": {f: [0.5, 0.9] for f in fields}}
    assert verdicts(good) == []
    bad = dict(good, headline_ratio=[0.9, 1.3],
               field_ratio={**good["field_ratio"], "ua": [1.05, 2.5]})
    lines = verdicts(bad)
    assert lines[0].startswith("pompy evaluate: WORSE than the physics alone") and \
        "cycle(s) 2 " in lines[0]
    assert lines[1].startswith("pompy evaluate: ua is made more than 10 % worse at cycle(s) 2 ")


@pytest.mark.parametrize("argv, message", [
    (["nowhere"], "nowhere: not a folder"),
    (["{data}"], "holds no checkpoint (checkpoint_last.pt or checkpoint_epoch<E>.pt): not a "
                 "training run's --output folder"),
    (["{run}", "--cycles", "4"], "no sample of horizon 4"),
    (["{run}", "--members", "9", "--cycles", "3"], "--members: 9 not in the data"),
    (["{run}", "--cycles", "0"], "--cycles 0: must be >= 1"),
    (["{run}", "--cycles", "2", "--output", "{run}/checkpoint_last.pt"],
     "checkpoint_last.pt is a file; give another --output"),
])
def test_bad_input_is_one_line(trained, capsys, argv, message):
    run, data = trained
    argv = [a.format(run=run, data=data) for a in argv]
    assert cli.main(["evaluate", *argv, "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: ") and err.count("\n") == 1 and message in err, err


def test_an_earlier_evaluation_is_kept_without_overwrite(trained, tmp_path, capsys):
    """A second evaluation into a folder holding one is refused before its
    rollouts, the files as they were; --overwrite replaces them."""
    run, data = trained
    out = tmp_path / "eval"
    args = ["evaluate", str(run), "--data", str(data), "--cycles", "2", "--output", str(out)]
    assert cli.main(args) == 0
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    capsys.readouterr()
    assert cli.main([*args[:4], "--cycles", "3", *args[6:]]) == 2
    err = capsys.readouterr().err
    assert err == (f"pompy: {out} already holds evaluation.csv, evaluation.png, evaluation.json "
                   "(from an earlier run); give --overwrite to replace them, or another "
                   "--output\n"), err
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert cli.main([*args[:4], "--cycles", "3", *args[6:], "--overwrite"]) == 0
    assert json.loads((out / "evaluation.json").read_text())["cycles"] == 3


def test_pompy_report_shows_a_training_run(trained, capsys):
    """`pompy report RUN`: the loss curves (epoch_log's baseline and ratio),
    the evaluation's figure and table, the certificate id and the data's
    provenance, in RUN/training_report.html and .json."""
    run, data = trained
    assert cli.main(["evaluate", str(run), "--data", str(data), "--cycles", str(CYCLES),
                     "--overwrite"]) == 0
    # its progress in a log: a line per cycle of each rollout, the last at 100 %
    lines = [line for line in capsys.readouterr().err.splitlines() if "rollout, cycle" in line]
    assert len(lines) == 2 * CYCLES and "ETA " in lines[-1], lines
    assert lines[-1].startswith(f"pompy evaluate: uncorrected rollout, cycle {CYCLES} of "
                                f"{CYCLES} (100%), elapsed "), lines[-1]
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{run / 'training_report.html'}" in out and "worst ratio_to_baseline" in out
    body = json.loads((run / "training_report.json").read_text())
    evaluation = json.loads((run / "evaluation.json").read_text())
    assert body["evaluation"]["ratio_to_baseline"] == evaluation["ratio_to_baseline"]
    assert body["curves"]["BaselineLoss"][0] > 0 and body["epochs"] == [0]
    assert body["certificate"]["id"] == evaluation["certificate"]
    assert body["provenance"]["core"] == "explicit" and body["provenance"]["dti"] == 120.0
    assert "explicit core" in body["provenance"]["target_model"]
    page = (run / "training_report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and evaluation["certificate"] in page
    assert "ratio_to_baseline" in page and "target_model" in page
    assert "headline_ratio" in page and "held-out member(s) [2]" in page
    assert f"worst headline ratio {max(evaluation['headline_ratio']):.4g}" in page
    # the certificate as a table, a row per key entry; the evaluation of the latest checkpoint
    assert "<td>grid</td><td>8x7x5</td>" in page and "<td>source_hash</td>" in page
    assert '{"' not in page.split("<h2>certificate</h2>")[1].split("<h2>")[0]
    assert "class='stale'" not in page and body["latest_epoch"] == evaluation["epoch"] == 0


def test_the_report_fits_the_window_and_marks_an_older_evaluation(trained, tmp_path, capsys):
    """At 1000 and 1600 px the page scrolls not sideways (measured in
    headless chromium); an evaluation of an earlier epoch than the run's
    last checkpoint is marked as such on the page and in the output."""
    from test_report import chromium, overflow
    run, data = trained
    if not (run / "evaluation.json").is_file():
        assert cli.main(["evaluate", str(run), "--data", str(data), "--cycles", str(CYCLES),
                     "--overwrite"]) == 0
    assert cli.main(["report", str(run), "--output", str(tmp_path / "now")]) == 0
    browser = chromium()
    for width in (1000, 1600):
        assert overflow(browser, tmp_path / "now" / "training_report.html", width, tmp_path) <= 0
    older = json.loads((run / "evaluation.json").read_text())
    older["epoch"] = -1                        # as an evaluation made before the last epoch
    (tmp_path / "older").mkdir()
    for name in run.iterdir():                 # the run, its evaluation from earlier
        if name.is_file():
            (tmp_path / "older" / name.name).write_bytes(name.read_bytes())
    (tmp_path / "older" / "evaluation.json").write_text(json.dumps(older))
    capsys.readouterr()
    assert cli.main(["report", str(tmp_path / "older")]) == 0
    said = capsys.readouterr().out
    page = (tmp_path / "older" / "training_report.html").read_text()
    marked = "this evaluation is of epoch -1"
    assert marked in said and "not of the run's latest checkpoint, epoch 0" in said
    assert "class='stale'" in page and marked in page


@pytest.mark.parametrize("changes, message", [
    ({"im": 10, "jm": 9}, "was trained on the 8x7x5 grid, the config {config} is 10x9x5"),
    ({"horcon": 0.3}, "was trained with other physics than the config {config}: horcon: 0.2 "
                      "(checkpoint) -> 0.3"),
])
def test_evaluate_with_the_config_of_other_physics_is_one_line(trained, tmp_path, capsys,
                                                               changes, message):
    import dataclasses

    from test_train import tiny_config
    run, data = trained
    config = tmp_path / "other.nml"
    dataclasses.replace(tiny_config(), **changes).to_namelist().write(config)
    assert cli.main(["evaluate", str(run), "--data", str(data), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pompy: ") and err.count("\n") == 1, err
    assert message.format(config=config) in err, err
