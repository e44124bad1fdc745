"""ExplicitCore, whole runs: against the oracle, golden pom2k, itself in
float32, across a restart, and when it blows up.

Measured on this machine (float64 CPU):
- torch against the oracle, 240 internal steps, every mode/nadv/problem
  below, with pompy.compat.fortran_math (dens takes the oracle's |s|**1.5):
  every variable equal to the last bit. With torch's own pow (the default)
  the only difference is that pow: libmvec's is up to 4 ulp from correctly
  rounded, torch's is correctly rounded, and rho differs by an ulp at some
  points; 240 steps later that is 1.6e-11 of the prognostic fields on the
  65x49x21 seamount and 1.4e-8 (q2lb, near the summit) on the 21x17x11 one.
- golden pom2k, the torch core's own set-up and time loop with fortran_math
  (pom2k's sin, exp, log and pow): every model field equal to the last bit
  at iint 0, 1, 2, 3, 10, 120. With torch's own functions the set-up is an
  ulp off in dx, h, t and cbc (3.6e-16 at iint 0) and the ulps grow in w,
  the small residual of continuity, to 8.6e-10 of its magnitude at iint 2
  (the oracle built at -O2, with libm instead of libmvec, shows 7.6e-10).
"""
import contextlib
import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_fields_close, load_golden, relative_error, require_golden
from pompy import variables
from pompy.cli import main
from pompy.compat import fortran_math
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore
from pompy.core.external import split
from pompy.core.external.split import to_host
from pompy.core.model import forward_only
from pompy.io import Restart, read_restart, write_restart
from pompy.oracle.driver import new_state, run_steps
from pompy.driver import run_case
from pompy.errors import CFLViolation, InputError, NonFiniteState

CONFIGS = Path(__file__).parents[1] / "configs"
PROGNOSTIC = variables.names("prognostic")
GOLDEN_STEPS = (1, 2, 3, 10, 120)


def small_seamount(**changes):
    config = load_config(CONFIGS / "seamount.nml")
    return dataclasses.replace(config, im=21, jm=17, kb=11, kl2=9, **changes)


def box(**changes):
    return dataclasses.replace(load_config(CONFIGS / "box.nml"), **changes)


def torch_run(config, steps, state=None, forward=False, **kw):
    """The torch core's set-up and ``steps`` steps; ``forward``: stepped as
    ``pompy run`` steps (forward_only: the external passes on host arrays,
    pompy.core.external.split.to_host), else with autograd on, as a
    gradient run steps (nothing requires grad here, so nothing is kept)."""
    core = ExplicitCore(config, **kw)
    core.run_initialization()
    if state is not None:
        core.load_state(core.numpy_state() | state, iint=0)
    core.iend = steps
    with forward_only(core) if forward else contextlib.nullcontext():
        core.run_time_loop()
    return core


def _assert_oracle_bit_for_bit(config, steps: int, label: str, forward: bool = False) -> None:
    """Set-up and ``steps`` steps of the torch core with pom2k's elementary
    functions (fortran_math) against the oracle's: every variable equal."""
    want = new_state(config)
    with fortran_math():
        got = torch_run(config, steps, forward=forward).numpy_state()
    run_steps(want, config, 1, steps)
    errors = assert_fields_close(got, want, 1e-10, names=list(variables.VARIABLES), label=label)
    assert max(errors.values()) == 0.0, {n: e for n, e in errors.items() if e}


CASES = [pytest.param(small_seamount, m, n, id=f"seamount-mode{m}-nadv{n}")
         for m, n in ((2, 1), (3, 1), (3, 2), (4, 1))]
CASES += [pytest.param(box, m, n, id=f"box-mode{m}-nadv{n}") for m, n in ((2, 1), (3, 1), (3, 2), (4, 2))]


@pytest.fixture
def host_passes(monkeypatch):
    """The number of external modes run on host arrays."""
    ran = []

    def counted(s):
        ran.append(1)
        return to_host(s)
    monkeypatch.setattr(split, "to_host", counted)
    return ran


@pytest.mark.parametrize("forward", [False, True], ids=["autograd on", "forward_only"])
@pytest.mark.parametrize("make, mode, nadv", CASES)
def test_240_steps_match_the_oracle(oracle, host_passes, make, mode, nadv, forward):
    """With pom2k's elementary functions (fortran_math) the torch core is the
    oracle's algorithm to the last bit: set-up and 240 steps, every variable
    equal; stepped with autograd on (the tensors' passes) and as ``pompy
    run`` steps (forward_only: the passes on host arrays)."""
    _assert_oracle_bit_for_bit(make(mode=mode, nadv=nadv), 240, f"mode {mode} nadv {nadv}", forward)
    assert len(host_passes) == (240 if forward else 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode, nadv", [(2, 1), (3, 2)])
def test_host_passes_are_the_tensor_passes_bits(monkeypatch, host_passes, dtype, mode, nadv):
    """The external passes on host arrays (forward_only on the CPU) against
    the same passes on tensors, 60 steps with torch's own functions, in
    float32 (which fortran_math does not serve) and float64: every variable
    equal to the bit."""
    config = small_seamount(mode=mode, nadv=nadv)
    on_host = torch_run(config, 60, forward=True, dtype=dtype).numpy_state()
    assert len(host_passes) == 60
    monkeypatch.setattr(split.SplitExplicit, "host_passes", False)
    tensors = torch_run(config, 60, forward=True, dtype=dtype).numpy_state()
    assert len(host_passes) == 60
    for name in variables.VARIABLES:
        assert np.asarray(on_host[name]).tobytes() == np.asarray(tensors[name]).tobytes(), name


@pytest.mark.parametrize("im, jm, kb", [(3, 3, 6), (4, 3, 5), (3, 5, 4)])
def test_the_smallest_grids_match_the_oracle(oracle, im, jm, kb):
    """im or jm = 3 (config's least): pom2k's loops from i = 3 to imm1 are
    empty there (the curvature terms of advct and advave), which the
    routines' ranges must skip as the Fortran does, to the last bit."""
    config = dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=im, jm=jm, kb=kb,
                                 kl1=2, kl2=max(kb - 2, 3))
    _assert_oracle_bit_for_bit(config, 12, f"{im}x{jm}x{kb}")


def test_240_steps_with_torch_pow_stay_close_to_the_oracle(oracle):
    """The default torch pow in dens: rho differs from the oracle's by an ulp
    here and there from the first step on. On the 65x49x21 seamount that
    stays at 1.6e-11 of the prognostic fields after 240 steps; on this small
    seamount the turbulence closure amplifies it near the summit, to 1.4e-8
    of q2lb (measured), and 7.9e-10 of v. Bar: 5e-8."""
    config = small_seamount(mode=3, nadv=1)
    want = new_state(config)
    got = torch_run(config, 240, state=want).numpy_state()
    run_steps(want, config, 1, 240)
    assert_fields_close(got, want, 5e-8, names=PROGNOSTIC, label="torch pow")


@pytest.mark.parametrize("changes, time0", [(dict(lramp=True), 0.0), ({}, 0.5)],
                         ids=["lramp", "time0"])
def test_ramp_and_time0_match_the_oracle(oracle, changes, time0):
    """The forcing ramp (lramp: wind times time/inertial period) and a start
    at model time time0 != 0 (the internal mode then runs at iint=1 too),
    20 steps against the oracle's driver, with the oracle's pow: exact."""
    config = small_seamount(**changes)
    want = new_state(config)
    core = ExplicitCore(config)
    core.load_state(want, iint=0, time0=time0)
    core.iend = 20
    with fortran_math():
        core.run_time_loop()
    run_steps(want, config, 1, 20, time0=time0)
    errors = assert_fields_close(core.numpy_state(), want, 1e-12, names=list(variables.VARIABLES))
    assert max(errors.values()) == 0.0, {n: e for n, e in errors.items() if e}


def test_host_passes_take_numpy_numbers_as_torch_does_and_give_back_the_fields_they_keep(
        host_passes):
    """A numpy float64 among the parameters (the ramp of a time0 read from
    a file) is a number to torch: the float32 host passes read it so too,
    and give the tensor passes' bits. The fields the passes leave as they
    were (the grid) come back as the tensors given, not new ones."""
    config = small_seamount(lramp=True)
    runs = []
    for on in (True, False):
        core = ExplicitCore(config, dtype=torch.float32)
        core.run_initialization()
        core.external.host_passes = on
        core.load_state(core.numpy_state(), iint=0, time0=np.float64(0.3))
        h = core.state["h"]
        core.iend = 5
        with forward_only(core):
            core.run_time_loop()
        assert core.state["h"] is h and not h.is_inference()
        runs.append(core.numpy_state())
    assert len(host_passes) == 5
    for name in variables.VARIABLES:
        assert np.asarray(runs[0][name]).tobytes() == np.asarray(runs[1][name]).tobytes(), name


def test_a_blow_up_on_host_arrays_stops_the_run_without_a_numpy_warning():
    """Past the CFL limit with no velocity check to stop it (vmaxl 1e300)
    the box overflows: the run stops at the non-finite state, and numpy's
    overflow and invalid-value warnings stay as silent as torch's."""
    config = box(dte=40.0, vmaxl=1e300, days=10.0)
    core = ExplicitCore(config)
    core.run_initialization()
    core.iend = 60
    with warnings.catch_warnings(), forward_only(core), pytest.raises(NonFiniteState):
        warnings.simplefilter("error")
        core.run_time_loop()


def test_own_setup_matches_the_oracle_setup(oracle):
    config = small_seamount()
    want = new_state(config)
    # torch's sin, exp and log: an ulp here and there, measured 6.7e-16 (tps)
    assert_fields_close(torch_run(config, 0).numpy_state(), want, 1e-15, label="set-up")
    with fortran_math():
        errors = assert_fields_close(torch_run(config, 0).numpy_state(), want, 0.0, label="set-up")
    assert max(errors.values()) == 0.0


COORDINATES = {"east_c", "north_c", "east_e", "north_e", "east_u", "north_u", "east_v", "north_v"}


def test_golden_seamount_bit_for_bit_with_fortran_math(oracle):
    """The torch core from its own set-up, with pom2k's elementary functions
    (fortran_math), at iint 0, 1, 2, 3, 10, 120: every model field equal to
    golden pom2k's to the last bit; the post-processing coordinates within
    2.2e-16 of their magnitude (as the oracle's)."""
    require_golden()
    core = ExplicitCore(load_config(CONFIGS / "seamount.nml"))
    with fortran_math():
        core.run_initialization()
        for step in (0,) + GOLDEN_STEPS:
            core.iend = step
            core.run_time_loop()
            golden = load_golden(f"seamount/iint_{step:06d}")
            golden.pop("time_days")
            errors = assert_fields_close(core.numpy_state(), golden, 1e-12, label=f"iint={step}")
            model = {n: e for n, e in errors.items() if n not in COORDINATES and e}
            assert not model, f"iint={step}: {model}"
            assert max(errors[n] for n in COORDINATES) <= 2.3e-16


def test_golden_seamount_from_the_torch_setup(oracle):
    require_golden()
    config = load_config(CONFIGS / "seamount.nml")
    core = ExplicitCore(config)
    core.run_initialization()
    golden = load_golden("seamount/iint_000000")
    golden.pop("time_days")
    errors = assert_fields_close(core.numpy_state(), golden, 1e-12, label="iint=0")
    assert max(errors.values()) <= 4e-16
    core.iend = 2
    core.run_time_loop()
    golden = load_golden("seamount/iint_000002")
    golden.pop("time_days")
    # libmvec's ulps in the set-up, amplified by continuity's cancellation in w
    assert_fields_close(core.numpy_state(), golden, 2e-9, label="iint=2")


def test_float32_stays_close_to_float64():
    """120 steps of the small seamount in float32 against float64, relative
    to each field's magnitude. Measured: v, vb 6.9e-4; u, q2l 5.4e-4; el, et
    2.9e-4; q2 2.4e-4; ua, va 1e-4 to 2e-4; t 7.7e-5; s 1.1e-5. The external
    mode carries the elevation inside d = h + el and (h + elf)*aru: one
    float32 ulp of h = 4500 m is 4.9e-4 m, against an el of O(0.1..1) m, and
    the velocities inherit it through the surface slope. Bar: 2e-3 on every
    prognostic field (3x the worst measured)."""
    config = small_seamount()
    f64 = torch_run(config, 120).numpy_state()
    f32 = torch_run(config, 120, dtype=torch.float32).numpy_state()
    errors = {name: relative_error(f32[name], f64[name]) for name in PROGNOSTIC}
    assert max(errors.values()) <= 2e-3, errors
    assert errors["t"] <= 3e-4 and errors["s"] <= 1e-4, errors


def test_restart_continues_bit_for_bit(tmp_path):
    config = small_seamount()
    whole = run_case(config, tmp_path / "w", steps=6, progress=False).numpy_state()
    run_case(config, tmp_path / "a", steps=3, progress=False)
    resumed = run_case(config, tmp_path / "b", steps=3, restart=tmp_path / "a" / "explicit_restart.nc",
                       progress=False).numpy_state()
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)
    _, iint, _, _ = read_restart(tmp_path / "b" / "explicit_restart_from_000003.nc")
    assert iint == 6


def test_cfl_blow_up_names_step_field_place_and_keeps_the_last_good_state(oracle, tmp_path):
    """dte=20 s is past the box's external CFL limit (13.5 s): the oracle
    stops at step 6, and so does the torch core, at the same (i, j). The
    growing instability amplifies any difference, so the run uses pom2k's
    elementary functions (fortran_math), and it starts from the oracle's
    set-up given as a restart file (the --restart path); its last good
    state is then the oracle's to the last bit."""
    config = box(dte=20.0, days=10.0)
    start = write_restart(tmp_path / "setup.nc", config, new_state(config), 0, 0.0)
    with pytest.raises(CFLViolation) as info, fortran_math():
        run_case(config, tmp_path, steps=50, restart=start, progress=False)
    err = info.value
    state = new_state(config)
    with pytest.raises(CFLViolation) as want:
        run_steps(state, config, 1, 50)
    assert (err.iint, err.imax, err.jmax) == (want.value.iint, want.value.imax, want.value.jmax)
    assert err.iint == 6 and "iint=6" in str(err) and "vaf" in str(err)
    assert f"({err.imax}, {err.jmax})" in str(err) and err.vamax == want.value.vamax
    assert err.restart == tmp_path / "explicit_restart.nc" and "last good state" in str(err)
    saved, iint, _, _ = read_restart(err.restart)
    straight = new_state(config)
    run_steps(straight, config, 1, 5)
    assert iint == 5
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(saved[name], straight[name], err_msg=name)


def test_nan_stops_the_run_naming_field_and_place(tmp_path):
    config = small_seamount()
    core = ExplicitCore(config)
    core.run_initialization()
    core.iend = 5
    core.run_time_loop()
    good = core.numpy_state()
    t = core.t.clone()
    t[9, 7, 3] = float("nan")
    core.t = t
    core.iend = 8
    with pytest.raises(NonFiniteState) as info:
        core.run_time_loop()
    err = info.value
    assert err.iint == 6 and err.field in PROGNOSTIC
    assert "iint=6" in str(err) and err.field in str(err)
    # the last good state is the one the step started from, untouched
    np.testing.assert_array_equal(core.last_good["el"].numpy(), good["el"])
    assert torch.isnan(core.last_good["t"][9, 7, 3])


def test_nan_in_the_external_mode_stops_the_run():
    """A NaN that reaches vaf makes vamax NaN: pom2k's check would skip it;
    pompy stops at that step."""
    config = small_seamount()
    core = ExplicitCore(config)
    core.run_initialization()
    va = core.va.clone()
    va[9, 7] = float("nan")
    core.va = va
    core.iend = 3
    with pytest.raises(NonFiniteState) as info:
        core.run_time_loop()
    assert info.value.iint == 1 and np.isnan(core.vamax)


def test_oracle_runs_stop_on_nan_too(oracle, tmp_path):
    """The oracle's driver runs on through a NaN (pom2k's check skips it);
    the runner finds the first non-finite step and keeps the one before."""
    config = small_seamount()
    state = new_state(config)
    run_steps(state, config, 1, 2)
    state["t"][9, 7, 3] = np.nan
    # given as a Restart (a restart file with a NaN is refused: read_restart checks it)
    start = Restart(state, 2, config.dti * 2 / 86400, 0.0)
    with pytest.raises(NonFiniteState) as info:
        run_case(config, tmp_path, core="oracle", steps=5, restart=start, progress=False)
    err = info.value
    assert err.iint == 3 and err.field == "t" and "iint=3" in str(err) and "(i, j, k)" in str(err)
    assert err.restart.name == "oracle_restart_from_000002.nc"
    # the state kept is the one step 3 started from, NaN included (which a
    # restart read then refuses, naming it)
    with pytest.raises(InputError, match=r"t is NaN at \(i, j, k\) = \(10, 8, 4\)"):
        read_restart(err.restart)


def test_nread_1_continues_in_the_same_folder(tmp_path):
    nml = str(CONFIGS / "seamount.nml")
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(["run", nml, "--steps", "6", "--output", str(whole)]) == 0
    assert main(["run", nml, "--steps", "3", "--output", str(part)]) == 0
    before = (part / "explicit_restart.nc").read_bytes()
    assert main(["run", nml, "--steps", "2", "--output", str(part), "--set", "nread=1"]) == 0
    assert main(["run", nml, "--steps", "1", "--output", str(part), "--set", "nread=1"]) == 0
    # each continuation has its own output and restart (_from_<N>); the
    # restarts it continued from are not touched
    assert (part / "explicit_restart.nc").read_bytes() == before
    assert read_restart(part / "explicit_restart_from_000003.nc").iint == 5
    a, ia, _, _ = read_restart(part / "explicit_restart_from_000005.nc")
    b, ib, _, _ = read_restart(whole / "explicit_restart.nc")
    assert ia == ib == 6
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert {p.name for p in part.glob("explicit_output*.nc")} == {
        "explicit_output.nc", "explicit_output_from_000003.nc", "explicit_output_from_000005.nc"}


def test_pompy_run_writes_cf_netcdf(tmp_path):
    xr = pytest.importorskip("xarray")
    assert main(["run", str(CONFIGS / "seamount.nml"), "--output", str(tmp_path)]) == 0
    ds = xr.open_dataset(tmp_path / "explicit_output.nc")
    assert list(ds["iint"].values) == [6, 12]
    assert ds["t"].dims == ("time", "sigma", "y", "x") and ds["t"].shape == (2, 21, 49, 65)
    assert ds["q2"].dims == ("time", "sigma_w", "y", "x")
    assert ds["el"].attrs["units"] == "m" and ds["u"].attrs["units"] == "m s-1"
    assert set(variables.names(kind="prognostic", output=True)) <= set(ds.data_vars)
    restart, iint, _, _ = read_restart(tmp_path / "explicit_restart.nc")
    assert iint == 12
    np.testing.assert_array_equal(ds["t"].values[-1].T, restart["t"])


def test_a_leaf_initial_condition_with_requires_grad_runs():
    """The seed's pitfall 1: a leaf tensor that requires grad, given as an
    initial condition, goes through run_time_loop without an in-place error."""
    config = small_seamount()
    core = ExplicitCore(config)
    core.run_initialization()
    el0 = core.el.clone().requires_grad_(True)
    core.el = el0
    core.iend = 2
    core.run_time_loop()
    core.el.sum().backward()
    assert el0.grad is not None and torch.isfinite(el0.grad).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    """Not yet measured (no GPU in the sessions so far). CUDA's pow, exp and
    sqrt may differ from the CPU's by an ulp like libmvec's do; on the CPU
    such ulps in dens grow to 1.4e-8 in 240 steps of this grid, so 10 steps
    get a bar of 1e-9."""
    config = small_seamount()
    cpu = torch_run(config, 10).numpy_state()
    gpu = torch_run(config, 10, device="cuda").numpy_state()
    assert_fields_close(gpu, cpu, 1e-9, names=PROGNOSTIC, label="cuda")


def test_bad_dtype_and_shapes_are_rejected():
    with pytest.raises(ValueError, match="float64 or torch.float32"):
        ExplicitCore(small_seamount(), dtype=torch.float16)
    core = ExplicitCore(small_seamount())
    with pytest.raises(ValueError, match="el: shape"):
        core.load_state({"el": np.zeros((3, 3))}, iint=0)
    with pytest.raises(RuntimeError, match="run_initialization"):
        core.run_time_loop()
