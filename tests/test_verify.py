"""pompy verify: the certificate it writes, the trainer's
look-up of it (pompy.verify.certificate.require_certificate), and that it fails
where the core is wrong.

Where the certificates go: each test sets POMPY_HOME to a temporary folder,
so the user's ~/.cache/pompy/certificates is never touched. The oracle is
built per POMPY_HOME ($POMPY_HOME/oracle/<hash>), but pompy.oracle.build
loads it once per process: the session's ``oracle`` fixture loads it from
the usual home first, and verify (run in this process through
pompy.cli.main) then reuses the loaded module, so nothing is rebuilt; the
tests check that no oracle build appeared in the temporary home. (A verify
in a subprocess with a fresh POMPY_HOME would rebuild the oracle, about a
minute.)

The full verify runs once (module fixture) on the 8x7x5 seamount with
its defaults (2 random states per routine, 12 steps): about 40 s here,
the file about a minute.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from core_checks import wrong_gradient

from pompy import provenance
from pompy.autodiff.policies import GradientPolicy, selected_policy
from pompy.cli import main
from pompy.config import load_config
from pompy.core import stepping
from pompy.errors import InputError
from pompy.verify import certificate as certificates
from pompy.verify import cli as verify_cli
from pompy.verify import gradcheck, policies, run, states, twins
from pompy.verify import parity as verify_parity

CONFIGS = Path(__file__).parents[1] / "configs"
TINY = ["--config", str(CONFIGS / "seamount.nml"), "--set", "im=8", "--set", "jm=7", "--set", "kb=5",
        "--set", "kl1=2", "--set", "kl2=3", "--set", "isplit=3", "--set", "ispadv=3"]
SUITES = {"parity", "run", "gradcheck", "policies"}


def tiny():
    return dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=8, jm=7, kb=5, kl1=2,
                               kl2=3, isplit=3, ispadv=3)


def certificate(core="explicit", device="cpu", dtype="float64") -> dict:
    path = certificates.certificate_path(certificates.certificate_key(core, device, dtype, tiny()))
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def verified(oracle, tmp_path_factory):
    """One verify of the explicit core on the tiny seamount (CPU float64)
    into a temporary POMPY_HOME: (exit code, stdout, the home)."""
    home = tmp_path_factory.mktemp("pompy_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POMPY_HOME", str(home))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["verify", *TINY])
    return code, out.getvalue(), home


@pytest.fixture
def home(verified, tmp_path, monkeypatch):
    """A copy of the verified POMPY_HOME (a test may write certificates)."""
    path = tmp_path / "home"
    shutil.copytree(verified[2], path)
    monkeypatch.setenv("POMPY_HOME", str(path))
    return path


def test_verify_writes_a_passing_certificate(verified, home):
    code, out, _ = verified
    assert code == 0, out
    body = certificate()
    assert body["passed"] is True
    assert body["key"] == certificates.certificate_key("explicit", "cpu", "float64", tiny())
    assert body["key"]["grid"] == "8x7x5" and "cg_tol" not in body["key"]
    assert body["key"]["source_hash"] == provenance.source_hash()
    checks = body["checks"]
    assert {c["suite"] for c in checks} == SUITES
    for c in checks:
        assert c["passed"] is True and c["figure"] <= c["tolerance"], c
    names = {c["name"] for c in checks}
    # every torch routine of the cores' table has a parity case (or a set-up)
    for routine in stepping.ROUTINES:
        assert any(n.startswith(f"parity {routine}") or n == f"parity set-up {routine}"
                   for n in names), routine
    assert {"parity external_step iext 1 mode 3", "parity internal_step mode 3 nadv 1",
            "gradcheck two whole steps", "gradcheck smagorinsky"} <= names
    # each policy at each safe op, each precedence level, both kinds of isolation
    for policy in GradientPolicy:
        for op in ("safe_sqrt", "safe_abs_pow", "safe_log", "safe_reciprocal",
                   "safe_divide numerator", "safe_divide denominator"):
            assert f"policy {policy.name} {op}" in names
    assert sum(n.startswith("policy precedence") for n in names) == 6
    assert {"policy isolation across threads", "policy isolation across asyncio tasks"} <= names
    # the run against the oracle: 12 steps, within the float64 bar (measured 1.3e-12, w)
    run = next(c for c in checks if c["name"] == "run vs oracle")
    assert run["tolerance"] == 1e-10 and run["figure"] < 1e-11 and run["steps"] == 12
    assert body["run_reference"] == "oracle" and body["samples"] == 2 and body["steps"] == 12
    assert body["grid"] == {"im": 8, "jm": 7, "kb": 5, "kl1": 2, "kl2": 3}
    assert set(body["seconds"]) == SUITES | {"total"}
    assert body["seconds"]["total"] >= sum(body["seconds"][s] for s in SUITES) * 0.99
    # the table: a row per check, the figures as in the certificate
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("pass", "FAIL"))]
    assert len(rows) == len(checks) and all(r.rstrip().endswith("pass") for r in rows)
    assert f"{len(checks)} of {len(checks)} checks passed" in out
    # each suite announced with its count and where it runs (the whole 8x7 grid), and ended
    for suite in SUITES:
        count = sum(c["suite"] == suite for c in checks)
        assert f"\n-- {suite}: {count} checks (" in out, suite
        assert f"\n-- {suite}: done in " in out, suite
    assert "random states of 8x7x5; set-ups on 8x7x5" in out and "window" not in out
    # every check's whole name (the longest 87 characters), and what the figures measure
    longest = max((c["name"] for c in checks), key=len)
    assert any(line.startswith(longest + " ") for line in out.splitlines()), longest
    assert "in units of gradcheck's tolerance (1e-5 + 1e-3 x |the central difference|)" in out
    # the oracle was not rebuilt in the temporary home
    assert not (home / "oracle").exists()


def test_the_trainer_finds_the_certificate(home):
    body = certificates.require_certificate("explicit", "cpu", "float64", tiny())
    assert body == certificate()
    assert [c["name"] for c in body["checks"]] == certificates.check_names("explicit")
    with pytest.raises(InputError, match=r"no verification certificate for the explicit core on "
                                         r"cpu in float32 on the 8x7x5 grid \(dtype: float64 "
                                         r"verified, float32 here\); run: pompy verify "
                                         r"CONFIG --core explicit --device cpu --dtype float32"):
        certificates.require_certificate("explicit", "cpu", "float32", tiny())


def test_another_grid_or_solver_setting_needs_its_own_certificate(home):
    """The key holds the grid and a solving core's settings: verified on
    8x7x5, training on 9x7x5 (or another cg_tol) is refused."""
    with pytest.raises(InputError, match=r"on the 9x7x5 grid \(grid: 8x7x5 verified, 9x7x5 "
                                         r"here\)"):
        certificates.require_certificate("explicit", "cpu", "float64",
                                         dataclasses.replace(tiny(), im=9))
    key = certificates.certificate_key("implicit", "cpu", "float64", tiny())
    assert (key["theta"], key["cg_tol"], key["cg_maxiter"]) == (tiny().theta, tiny().cg_tol,
                                                                tiny().cg_maxiter)
    assert key["solver"] == "Jacobi PCG, implicitly differentiated"
    assert key != certificates.certificate_key("implicit", "cpu", "float64",
                                               dataclasses.replace(tiny(), cg_tol=1e-10))


def forged(body: dict, checks: list) -> Path:
    """The certificate ``body`` with ``checks`` instead, passed=true, under
    the current key (what a hand-made file would hold)."""
    key = certificates.certificate_key("explicit", "cpu", "float64", tiny())
    return certificates.write_certificate(key, checks, {k: v for k, v in body.items()
                                                        if k not in ("key", "passed", "checks")})


def test_a_certificate_missing_a_check_is_refused(home):
    body = certificate()
    forged(body, [{"name": "test", "figure": 0.0, "tolerance": 0.0, "passed": True}])
    with pytest.raises(InputError, match=r"lacks 156 of the checks pompy verify defines for the "
                                         r"explicit core \(parity coverage, parity advct, "):
        certificates.require_certificate("explicit", "cpu", "float64", tiny())
    forged(body, [c for c in body["checks"] if c["name"] != "gradcheck two whole steps"])
    with pytest.raises(InputError, match=r"lacks 1 of .* \(gradcheck two whole steps\)"):
        certificates.require_certificate("explicit", "cpu", "float64", tiny())


def test_an_edited_core_or_verifier_needs_a_new_certificate(home, tmp_path, monkeypatch):
    """A change of the physics sources, or of pompy verify's own (each
    simulated: one more source file)."""
    extra = tmp_path / "edit.py"
    extra.write_text("# an edit\n")
    for sources, why in (("physics_sources", "the core's sources changed since it was verified"),
                         ("verifier_sources", "pompy verify changed since the certificate was "
                                              "made")):
        with monkeypatch.context() as mp:
            real = getattr(provenance, sources)
            mp.setattr(provenance, sources, lambda real=real: real() + [("pompy/edit.py", extra)])
            with pytest.raises(InputError) as refused:
                certificates.require_certificate("explicit", "cpu", "float64", tiny(),
                                                 config_name="tiny.nml")
        message = str(refused.value)
        assert f"({why})" in message, message
        assert message.endswith("run: pompy verify tiny.nml --core explicit --device cpu "
                                "--dtype float64")


def test_the_source_hash_covers_every_module_a_core_runs():
    """Every pompy module that importing the two cores loads (in a fresh
    interpreter) is hashed, but those that decide no number
    (provenance.NOT_PHYSICS); an edit of one of them changes the hash."""
    import subprocess
    import sys
    code = ("import sys, pompy.core.explicit, pompy.core.implicit; "
            "print('\\n'.join(m.__file__ for n, m in sorted(sys.modules.items()) "
            "if n == 'pompy' or n.startswith('pompy.')))")
    files = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120).stdout.split()
    package = Path(provenance.__file__).resolve().parent
    loaded = {f"pompy/{Path(f).resolve().relative_to(package).as_posix()}" for f in files}
    hashed = {name for name, _ in provenance.physics_sources()}
    assert {"pompy/calls.py", "pompy/compat.py", "pompy/config.py"} <= loaded
    assert loaded - hashed == set(provenance.NOT_PHYSICS)


def broken(fn, field: str, offset: float):
    """``fn`` with ``offset`` added to its output ``field`` (signature kept
    for pompy.calls, which binds by the routine's parameter names)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out._replace(**{field: getattr(out, field) + offset})
    return wrapper


def test_a_broken_routine_fails_verification(oracle, tmp_path, monkeypatch, capsys):
    """dens with 1e-6 added to rho (4e-8 of rho's magnitude): verify exits
    1 naming dens's parity checks, the certificate says passed=false, and
    the trainer refuses it. The gradcheck suite is left out here (adding a
    constant changes no gradient; it is the module fixture's)."""
    monkeypatch.setenv("POMPY_HOME", str(tmp_path))
    monkeypatch.setitem(stepping.ROUTINES, "dens", broken(stepping.ROUTINES["dens"], "rhoo", 1e-6))
    monkeypatch.setattr(verify_cli, "gradcheck_suite", lambda *args: [])
    assert main(["verify", *TINY, "--samples", "1"]) == 1
    out = capsys.readouterr().out
    failed = {line[:62].strip() for line in out.splitlines() if " FAIL" in line[62:]}
    assert {"parity dens rho", "parity dens rmean"} <= failed, out
    assert "parity dens rho" in out.split("FAILED: ")[1]
    body = certificate()
    assert body["passed"] is False
    by_name = {c["name"]: c for c in body["checks"]}
    assert {n for n, c in by_name.items() if not c["passed"]} == failed
    # 1e-6 over the field's magnitude in the state verify drew (seed 0)
    _, state = states.random_state(0, tiny(), oracle)
    for name, field in (("parity dens rho", "rho"), ("parity dens rmean", "rmean")):
        c = by_name[name]
        assert not c["passed"] and c["detail"].startswith(field)
        assert c["figure"] == pytest.approx(1e-6 / abs(state[field]).max(), rel=1e-6)
    # routines that do not call dens still pass; those that do fail
    assert by_name["parity advct"]["passed"] and by_name["parity baropg"]["passed"]
    assert not by_name["parity internal_step mode 3 nadv 1"]["passed"]     # dens inside
    assert by_name["parity internal_step mode 4 nadv 1"]["passed"]         # mode 4: no dens
    assert not by_name["run vs oracle"]["passed"]
    with pytest.raises(InputError, match=r"did not pass \(parity dens rho, parity dens rmean, .*"
                                         r"fix the core, then run: pompy verify"):
        certificates.require_certificate("explicit", "cpu", "float64", tiny())


def test_bad_input_is_one_line_exit_2(oracle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POMPY_HOME", str(tmp_path))
    cases = [([*TINY, "--set", "dte=100"], "dte=100.0 breaks the external CFL limit"),
             (["--config", str(tmp_path / "missing.nml")], "missing.nml"),
             ([*TINY, "--device", "tpu"], "--device tpu: not a torch device"),
             # before the set-up allocates it (a run of it: some 3 PB)
             ([*TINY, "--set", "im=100000", "--set", "jm=100000"], "give --force to run it anyway")]
    if not torch.cuda.is_available():
        cases.append(([*TINY, "--device", "cuda"], "--device cuda: this torch has no CUDA device"))
    for args, words in cases:
        assert main(["verify", *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("pompy: ") and len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "certificates").exists()
    with pytest.raises(SystemExit) as usage:          # argparse: not a core verify checks
        main(["verify", *TINY, "--core", "oracle"])
    assert usage.value.code == 2


def test_float32_parity_within_its_bars(oracle):
    """The float32 bars (pompy.verify.parity.F32) hold on the tiny grid's
    random states, and the routines did run in float32: each shows float32 rounding
    (above 1e-9; float64 gives at most 4.5e-16 here), the set-ups aside
    (computed in float64 whatever the core's dtype), and depth (this grid's
    five sigma levels are exact in float32)."""
    checks = verify_parity.parity_suite(tiny(), "explicit", oracle, torch.device("cpu"),
                                        torch.float32, 2, 0, lambda check: None)
    for c in checks:
        assert c.passed, (c.name, c.figure, c.tolerance, c.detail)
        if "set-up" in c.name:
            assert c.figure < 1e-13 and c.tolerance == 1e-12, c
        elif c.name not in ("parity coverage", "parity depth"):
            assert c.figure > 1e-9, (c.name, c.figure, c.tolerance)


def test_the_policy_suite_catches_a_wrong_policy(monkeypatch):
    """PASSTHROUGH made to act as PROJECT: the PASSTHROUGH checks fail (the
    gradient at the guarded point is 0, not the derivative there), the
    other policies' checks pass, and so does no precedence check (each
    has PASSTHROUGH winning somewhere)."""
    import pompy.utils.safety as safety

    original = safety.apply_policy

    def wrong(grad, is_bottom, policy=None, layer=None):
        chosen = selected_policy(layer, policy)
        if chosen is GradientPolicy.PASSTHROUGH:
            chosen = GradientPolicy.PROJECT
        return original(grad, is_bottom, policy=chosen)

    monkeypatch.setattr(safety, "apply_policy", wrong)
    checks = policies.policy_suite(torch.device("cpu"), torch.float64, lambda check: None)
    failed = {c.name for c in checks if not c.passed}
    assert {f"policy PASSTHROUGH {op}" for op, *_ in policies._safe_ops()} <= failed
    assert not any(c.startswith(("policy PROJECT", "policy CLAMP", "policy REJECT"))
                   for c in failed), failed
    assert sum(name.startswith("policy precedence") for name in failed) == 6


def test_the_gradient_check_catches_a_wrong_gradient(oracle, monkeypatch):
    """smagorinsky with its forward unchanged and its gradient scaled by 1.1
    fails its gradcheck, and only the gradient: its parity passes."""
    wrong = wrong_gradient(stepping.ROUTINES["smagorinsky"], "aam")
    monkeypatch.setitem(stepping.ROUTINES, "smagorinsky", wrong)
    case = next(c for c in gradcheck.GRAD_CASES if c.label == "smagorinsky")
    check = gradcheck.gradcheck_case(case, tiny(), oracle, torch.device("cpu"), 0)
    assert not check.passed and check.measured["gradcheck"] is False
    assert check.figure > 50.0            # a 10 % error: ~100 times gradcheck's tolerance
    assert check.measured["forward_mode"] < 1e-10 and check.measured["guards_fired"] == 0
    parity = next(c for c in verify_parity.PARITY_CASES if c.label == "smagorinsky")
    params, state = states.random_state(0, tiny(), oracle)
    errors = verify_parity.compare_routine(parity, oracle, state, params, torch.float64,
                                           torch.device("cpu"))
    assert errors["aam"][0] == 0.0
    monkeypatch.undo()
    assert gradcheck.gradcheck_case(case, tiny(), oracle, torch.device("cpu"), 0).passed


def test_implicit_core_against_its_twin_or_its_self_checks(oracle, monkeypatch):
    """The implicit core's whole run against OracleModel(core="implicit")
    where the oracle has it; without it, its self-checks only."""
    config = tiny()
    checks, reference = run.run_suite(config, "implicit", oracle, torch.device("cpu"),
                                      torch.float64, 6, lambda check: None)
    names = [c.name for c in checks]
    self_checks = ["implicit continuity", "implicit operator symmetric positive definite",
                   "implicit reference CG vs scipy"]
    assert names[-3:] == self_checks and all(c.passed for c in checks), checks
    if twins.oracle_has_implicit(oracle):
        assert reference == "oracle_implicit" and names[0] == "run vs oracle_implicit"
        assert checks[0].tolerance == pytest.approx(1e-10 + 1e4 * config.cg_tol)
    monkeypatch.setattr(twins, "oracle_has_implicit", lambda oracle: False)
    checks, reference = run.run_suite(config, "implicit", oracle, torch.device("cpu"),
                                      torch.float64, 6, lambda check: None)
    assert reference.startswith("self-checks") and [c.name for c in checks] == self_checks
