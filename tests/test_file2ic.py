"""iproblem=3: the IC file (pompy.icfile), the oracle's file2ic and the torch one.

(a) torch file2ic against the oracle's on random IC files (steep land, every
optional variable or only the required ones, biases, slmax < 1): measured,
every field bit for bit but rho, 0.8-1.6e-16 (dens' ``** 1.5``, the ulp of
test_golden_calls); the bar is 1e-12; (b) an IC file written from the seamount
set-up reproduces the seamount's initial state through the oracle's
iproblem=3, every field to the last bit; without its optional variables,
only what the format's defaults change by design differs; (c) the format's
validation; (d) slpmax applied when slmax < 1.
"""
from __future__ import annotations

import dataclasses
import re

import netCDF4
import numpy as np
import pytest
import torch

from core_checks import assert_inputs_not_written
from oracle_compare import compare_call
from pompy import icfile, variables
from pompy.config import Config, ConfigError, parameters
from pompy.core.setup import check_external_cfl
from pompy.core.file2ic import file2ic
from pompy.core.grid import slpmax
from pompy.icfile import read_ic, sigma_levels, write_ic, write_ic_from_state
from pompy.io import cf_dims
from pompy.oracle.driver import new_state, run_steps
from strategies import small_config

OPTIONAL_3D = ("tclim", "sclim", "rmean", "u", "v")


def random_ic(seed: int, im: int, jm: int, kb: int, everything: bool = True) -> dict:
    """A random but physically sensible IC (pom2k order, actual T and S):
    steep bottom with land given as h <= 1 (some negative), stratified T."""
    rng = np.random.default_rng(seed)
    zz, _ = sigma_levels(small_config(im, jm, kb))
    h = rng.uniform(20.0, 4500.0, (im, jm))
    land = rng.random((im, jm)) < 0.25
    h[land] = rng.uniform(-50.0, 1.0, land.sum())
    h[0, 0] = 3000.0                                  # at least one wet point
    ic = dict(dx=rng.uniform(3000, 9000, (im, jm)), dy=rng.uniform(3000, 9000, (im, jm)), h=h,
              cor=rng.uniform(0.5e-4, 1.5e-4, (im, jm)),
              t=5 + 15 * np.exp(zz * np.maximum(h, 1)[:, :, None] / 1000)
              + rng.normal(0, 0.5, (im, jm, kb)),
              s=35 + rng.normal(0, 0.3, (im, jm, kb)))
    if everything:
        n3 = lambda scale: rng.normal(0, scale, (im, jm, kb))  # noqa: E731
        ic.update(tclim=ic["t"] + n3(0.2), sclim=ic["s"] + n3(0.1), rmean=0.03 + n3(0.003),
                  u=n3(0.3), v=n3(0.3), ua=rng.normal(0, 0.3, (im, jm)),
                  va=rng.normal(0, 0.3, (im, jm)), el=rng.normal(0, 0.2, (im, jm)),
                  east_e=rng.normal(0, 1e5, (im, jm)), north_e=rng.normal(0, 1e5, (im, jm)))
        for name, n in (("ele", jm), ("elw", jm), ("uabe", jm), ("uabw", jm),
                        ("eln", im), ("els", im), ("vabn", im), ("vabs", im)):
            ic[name] = rng.normal(0, 0.1, n)
        for q, base, scale in (("t", 12.0, 3.0), ("s", 35.0, 0.5)):
            for side, n in (("e", jm), ("w", jm), ("n", im), ("s", im)):
                ic[f"{q}b{side}"] = base + rng.normal(0, scale, (n, kb))
    return {k: np.asfortranarray(v) for k, v in ic.items()}


def ic_config(path, im, jm, kb, **overrides) -> Config:
    return small_config(im, jm, kb, iproblem=3, icfile=str(path), **overrides)


def file2ic_state(config: Config) -> dict:
    """A zero state with the IC file's arrays in it, as new_state places them."""
    state = {name: np.zeros(variables.shape(name, config.im, config.jm, config.kb), order="F")
             for name in variables.VARIABLES}
    for name, value in read_ic(config.icfile, config).items():
        state[name][...] = value
    state["aam"][...] = 500.0
    return state


CASES = [  # seed, im, jm, kb, everything, slmax, tbias, sbias
    (1, 9, 8, 7, True, 2.0, 0.0, 0.0),
    (2, 7, 10, 5, True, 0.1, 10.0, 35.0),
    (3, 11, 6, 8, False, 0.3, 0.0, 0.0),
    (4, 5, 5, 6, False, 2.0, 5.0, 30.0),
]


@pytest.mark.parametrize("seed, im, jm, kb, everything, slmax, tbias, sbias", CASES)
def test_torch_file2ic_matches_oracle(oracle, tmp_path, seed, im, jm, kb, everything, slmax,
                                      tbias, sbias):
    path = write_ic(tmp_path / "ic.nc", **random_ic(seed, im, jm, kb, everything))
    config = ic_config(path, im, jm, kb, slmax=slmax, tbias=tbias, sbias=sbias)
    errors = compare_call(file2ic, oracle, "file2ic", file2ic_state(config), parameters(config),
                          rtol=1e-12)
    assert {k for k, v in errors.items() if v} <= {"rho"}      # the rest bit for bit


def test_torch_file2ic_inputs_are_not_written(oracle, tmp_path):
    path = write_ic(tmp_path / "ic.nc", **random_ic(5, 6, 7, 5))
    config = ic_config(path, 6, 7, 5, slmax=0.2)
    assert_inputs_not_written(file2ic, oracle, "file2ic", file2ic_state(config), parameters(config))


@pytest.fixture(scope="module")
def seamount():
    config = small_config(12, 10, 7)
    return config, new_state(config)


def test_seamount_file_reproduces_the_seamount(seamount, tmp_path):
    config, want = seamount
    path = write_ic_from_state(tmp_path / "seamount_ic.nc", want, config)
    got = new_state(dataclasses.replace(config, iproblem=3, icfile=str(path)))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_seamount_file_runs_as_the_seamount(seamount, tmp_path):
    """iproblem 3 steps as the seamount does (the same surface forcing), so
    the runs from the two set-ups are the same to the last bit."""
    config, start = seamount
    path = write_ic_from_state(tmp_path / "seamount_ic.nc", start, config)
    want = {k: v.copy(order="F") for k, v in start.items()}
    run_steps(want, config, 1, 3)
    file_config = dataclasses.replace(config, iproblem=3, icfile=str(path))
    got = new_state(file_config)
    run_steps(got, file_config, 1, 3)
    for name in variables.names(restart=True):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# what the defaults change by design, from the seamount's set-up: rmean = 0
# instead of the initial density (so baropg integrates the full density, whose
# sigma-coordinate error over the seamount is no longer cancelled), and the
# east/west boundary elevations el on the edge (0) instead of the seamount's
# geostrophic ones
BY_DESIGN = {"rmean", "drhox", "drhoy", "drx2d", "dry2d", "ele", "elw"}


def test_seamount_file_with_defaults(seamount, tmp_path):
    config, want = seamount
    keep = set(icfile.REQUIRED) | {"ua", "va"}      # u, v default to ua, va at every level
    path = write_ic_from_state(tmp_path / "minimal.nc", want, config,
                               omit=tuple(set(icfile.OPTIONAL) - keep))
    with netCDF4.Dataset(path) as ds:
        assert set(ds.variables) == keep | {"sigma"}
    got = new_state(dataclasses.replace(config, iproblem=3, icfile=str(path)))
    differ = {name for name in want if not np.array_equal(got[name], want[name])}
    assert differ == BY_DESIGN
    assert (got["rmean"] == 0).all() and (got["ele"] == 0).all()


def test_biases_and_edge_defaults(tmp_path):
    """Defaults from the edges of the initial state; the set-up subtracts the biases."""
    im, jm, kb = 6, 5, 5
    ic = random_ic(8, im, jm, kb, everything=False)
    ic["ua"] = np.asfortranarray(np.arange(im * jm, dtype=float).reshape(im, jm) / 100)
    path = write_ic(tmp_path / "ic.nc", **ic)
    config = ic_config(path, im, jm, kb, tbias=10.0, sbias=35.0)
    got = read_ic(path, config)
    np.testing.assert_array_equal(got["tbe"][:, :kb - 1], ic["t"][-1, :, :kb - 1])
    np.testing.assert_array_equal(got["sbs"][:, :kb - 1], ic["s"][:, 0, :kb - 1])
    np.testing.assert_array_equal(got["uabw"], ic["ua"][1])
    np.testing.assert_array_equal(got["u"][:, :, 2], ic["ua"])
    assert (got["t"][:, :, kb - 1] == 0).all() and (got["tbe"][:, kb - 1] == 0).all()
    state = new_state(config)
    np.testing.assert_array_equal(state["t"][:, :, :kb - 1], ic["t"][:, :, :kb - 1] - 10.0)
    np.testing.assert_array_equal(state["tbe"][:, :kb - 1], ic["t"][-1, :, :kb - 1] - 10.0)
    np.testing.assert_array_equal(state["sclim"][:, :, :kb - 1], ic["s"][:, :, :kb - 1] - 35.0)
    np.testing.assert_array_equal(state["ua"], ic["ua"] * state["dum"])
    assert (state["h"] >= 1.0).all() and (state["h"][ic["h"] < 1] == 1.0).all()


def test_depth_mean_default(tmp_path):
    im, jm, kb = 5, 4, 6
    ic = random_ic(9, im, jm, kb, everything=False)
    ic["u"] = np.asfortranarray(np.random.default_rng(0).normal(0, 0.2, (im, jm, kb)))
    path = write_ic(tmp_path / "ic.nc", **ic)
    config = ic_config(path, im, jm, kb)
    _, dz = sigma_levels(config)
    got = read_ic(path, config)
    np.testing.assert_allclose(got["ua"], (ic["u"][:, :, :-1] * dz[:-1]).sum(axis=2), rtol=1e-14)
    assert (got["va"] == 0).all() and (got["v"] == 0).all()


def test_coordinates_from_the_file_replace_the_computed_ones(tmp_path):
    im, jm, kb = 6, 5, 5
    ic = random_ic(10, im, jm, kb, everything=False)
    ic["east_e"] = np.asfortranarray(np.full((im, jm), 7.0))
    ic["north_e"] = np.asfortranarray(np.full((im, jm), -3.0))
    config = ic_config(write_ic(tmp_path / "ic.nc", **ic), im, jm, kb)
    state = new_state(config)
    assert (state["east_e"] == 7.0).all() and (state["north_e"] == -3.0).all()
    assert state["east_c"][1, 0] == ic["dx"][0, 0]                   # computed, as seamount's


# (c) validation --------------------------------------------------------------

@pytest.fixture
def valid(tmp_path):
    im, jm, kb = 6, 5, 5
    return tmp_path, random_ic(11, im, jm, kb), small_config(im, jm, kb)


def raw_write(path, arrays: dict, extra: dict | None = None):
    """An IC file written without write_ic's checks: ``arrays`` on the
    format's dims (pom2k order), ``extra`` {name: (dims, CF-ordered array)}."""
    im, jm, kb = arrays["t"].shape
    with netCDF4.Dataset(path, "w") as ds:
        for dim, size in (("x", im), ("y", jm), ("sigma", kb)):
            ds.createDimension(dim, size)
        for name, value in arrays.items():
            ds.createVariable(name, "f8", cf_dims(name))[:] = value.T
        for name, (dims, value) in (extra or {}).items():
            ds.createVariable(name, "f8", dims)[:] = value
    return path


def test_missing_required_variable(valid):
    tmp_path, ic, config = valid
    without_h = {k: v for k, v in ic.items() if k != "h"}
    path = raw_write(tmp_path / "ic.nc", without_h, {"x": (("x",), np.arange(6.0))})
    with pytest.raises(ValueError, match=re.escape(
            "required variable 'h' (bottom depth, m) is missing")):
        read_ic(path, config)
    path = raw_write(tmp_path / "depth.nc", without_h, {"depth": (("y", "x"), ic["h"].T)})
    with pytest.raises(ValueError, match="unknown variable 'depth'"):
        read_ic(path, config)
    with pytest.raises(ValueError, match=r"required variables \['h'\] are missing"):
        write_ic(tmp_path / "w.nc", **without_h)


@pytest.mark.parametrize("size, message", [
    ((6, 5, 6), "variable 't' has dims ('sigma', 'y', 'x') and shape (6, 5, 6); expected dims "
                "('sigma', 'y', 'x') and shape (5, 5, 6) = (sigma=5, y=5, x=6) for the config "
                "(im=6, jm=5, kb=5)"),
    ((5, 5, 5), "variable 'dx' has dims ('y', 'x') and shape (5, 5); expected dims ('y', 'x') "
                "and shape (5, 6)"),
])
def test_file_for_another_grid(valid, size, message):
    tmp_path, _, config = valid
    path = write_ic(tmp_path / "ic.nc", **random_ic(11, *size))
    with pytest.raises(ValueError, match=re.escape(message)):
        read_ic(path, config)


@pytest.mark.parametrize("name, dims, message", [
    ("h", ("x", "y"), "variable 'h' has dims ('x', 'y') and shape (6, 5); expected dims ('y', 'x')"),
    ("ele", ("x",), "variable 'ele' has dims ('x',) and shape (6,); expected dims ('y',) and shape (5,)"),
    ("tbn", ("sigma", "y"), "variable 'tbn' has dims ('sigma', 'y') and shape (5, 5); expected dims "
                            "('sigma', 'x') and shape (5, 6)"),
])
def test_wrong_dimensions(valid, name, dims, message):
    tmp_path, ic, config = valid
    sizes = {"x": 6, "y": 5, "sigma": 5}
    path = raw_write(tmp_path / "ic.nc", {k: v for k, v in ic.items() if k != name},
                     {name: (dims, np.ones([sizes[d] for d in dims]))})
    with pytest.raises(ValueError, match=re.escape(message)):
        read_ic(path, config)


def test_unknown_variable_suggests_the_closest(valid):
    tmp_path, ic, config = valid
    path = write_ic(tmp_path / "ic.nc", **ic)
    with netCDF4.Dataset(path, "a") as ds:
        ds.createVariable("tclimm", "f8", ("sigma", "y", "x"))[:] = 0.0
    with pytest.raises(ValueError, match="unknown variable 'tclimm'; did you mean 'tclim'?"):
        read_ic(path, config)


@pytest.mark.parametrize("name, index, value, where", [
    ("t", (2, 3, 1), np.nan, "(i=3, j=4, k=2)"),
    ("h", (0, 4), np.inf, "(i=1, j=5)"),
    ("tbs", (5, 0), np.nan, "(i=6, k=1)"),
])
def test_non_finite_values(valid, name, index, value, where):
    tmp_path, ic, config = valid
    ic[name] = ic[name].copy()
    ic[name][index] = value
    with pytest.raises(ValueError, match=rf"variable '{name}' has 1 non-finite or missing "
                                         rf"values, the first \S+ at {re.escape(where)}"):
        read_ic(write_ic(tmp_path / "ic.nc", **ic), config)


def test_missing_values_are_refused(valid):
    tmp_path, ic, config = valid
    path = write_ic(tmp_path / "ic.nc", **ic)
    with netCDF4.Dataset(path, "a") as ds:
        ds["cor"][2, 1] = np.ma.masked
    with pytest.raises(ValueError, match=r"'cor' has 1 non-finite or missing values, the first "
                                         r"missing \(fill\) at \(i=2, j=3\)"):
        read_ic(path, config)


@pytest.mark.parametrize("name", ["dx", "dy"])
def test_spacing_must_be_positive(valid, name):
    tmp_path, ic, config = valid
    ic[name] = ic[name].copy()
    ic[name][3, 2] = 0.0
    with pytest.raises(ValueError, match=rf"'{name}' must be > 0 m; it is 0.0 at \(i=4, j=3\)"):
        read_ic(write_ic(tmp_path / "ic.nc", **ic), config)


def test_other_checks(valid):
    tmp_path, ic, config = valid
    with pytest.raises(ValueError, match="'h' has no wet point"):
        read_ic(write_ic(tmp_path / "dry.nc", **dict(ic, h=np.ones((6, 5)))), config)
    with pytest.raises(ValueError, match="'east_e' is given without 'north_e'"):
        read_ic(write_ic(tmp_path / "e.nc", **{k: v for k, v in ic.items() if k != "north_e"}),
                config)
    with pytest.raises(ValueError, match="are not the config's t-levels zz of depth"):
        read_ic(write_ic(tmp_path / "sig.nc", sigma=np.linspace(-0.1, -0.9, 5), **ic), config)
    zz, _ = sigma_levels(config)
    read_ic(write_ic(tmp_path / "sig_ok.nc", sigma=zz, **ic), config)
    (tmp_path / "text.nc").write_text("not netcdf")
    with pytest.raises(ValueError, match="cannot read it as NetCDF"):
        read_ic(tmp_path / "text.nc", config)
    with pytest.raises(ValueError, match="unknown variables"):
        write_ic(tmp_path / "w.nc", temperature=ic["t"], **ic)


# (d) slpmax -----------------------------------------------------------------------

@pytest.mark.parametrize("slmax", [0.05, 0.2, 2.0])
def test_slpmax_applied_when_slmax_below_1(oracle, tmp_path, slmax):
    im, jm, kb = 9, 8, 6
    ic = random_ic(12, im, jm, kb, everything=False)
    config = ic_config(write_ic(tmp_path / "ic.nc", **ic), im, jm, kb, slmax=slmax)
    got = new_state(config)["h"]
    h = np.asfortranarray(np.maximum(ic["h"], 1.0))
    fsm = np.asfortranarray((h > 1.0).astype(float))
    if slmax < 1:
        want = oracle.call("slpmax", dict(h=h, fsm=fsm), dict(slmax=slmax))["h"]
        np.testing.assert_array_equal(
            want, slpmax(slmax, torch.tensor(fsm), torch.tensor(h)).h.numpy())
        assert np.abs(want - h).max() > 1.0               # the limiter did something
    else:
        want = h
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("slmax", [2.0, 0.1])
def test_cfl_check_reads_the_file(oracle, tmp_path, slmax):
    """The limit is the smallest tps over wet points of the oracle's own
    set-up from the file (slpmax included)."""
    im, jm, kb = 6, 5, 5
    ic = random_ic(13, im, jm, kb, everything=False)
    config = ic_config(write_ic(tmp_path / "ic.nc", **ic), im, jm, kb, slmax=slmax)
    state = new_state(config)
    limit = state["tps"][state["fsm"] > 0].min()
    check_external_cfl(dataclasses.replace(config, dte=limit * (1 - 1e-9)))
    with pytest.raises(ConfigError, match=f"dte must be < {limit:.6g} s"):
        check_external_cfl(dataclasses.replace(config, dte=limit * (1 + 1e-9)))


def test_explicit_core_runs_an_ic_file_as_the_oracle(oracle, tmp_path):
    """ExplicitCore with iproblem 3: the set-up from the file, then 20 steps,
    against the oracle's. With the oracle's pow (fortran_math), the only
    difference is cbc's log at set-up (measured 2.9e-17); the 20 steps then
    end equal to the last bit (measured 0, bar 1e-12)."""
    from conftest import assert_fields_close
    from pompy.compat import fortran_math
    from pompy.core.explicit import ExplicitCore

    ic = random_ic(7, 10, 9, 6)
    ic["h"] = np.maximum(ic["h"], 200.0 * (ic["h"] > 1))   # CFL-safe depths
    path = write_ic(tmp_path / "ic.nc", **ic)
    config = ic_config(path, 10, 9, 6, dte=3.0)
    want = new_state(config)
    core = ExplicitCore(config)
    with fortran_math():
        core.run_initialization()
        assert_fields_close(core.numpy_state(), want, 2e-16, names=list(variables.VARIABLES),
                            label="set-up")
        core.iend = 20
        core.run_time_loop()
    run_steps(want, config, 1, 20)
    assert_fields_close(core.numpy_state(), want, 1e-12, names=variables.names("prognostic"),
                        label="20 steps")


@pytest.mark.parametrize("command", [["run"], ["run", "--core", "oracle"],
                                     ["report", "--days", "0.01"]])
@pytest.mark.parametrize("bad", ["not NetCDF", "another grid"])
def test_the_commands_refuse_a_bad_ic_file_in_one_line(valid, capsys, command, bad):
    """An IC file that is no NetCDF, or of another grid than the config's:
    `pompy run` (a torch core and the oracle) and `pompy report` exit 2
    with one line naming the file, and leave no output folder behind."""
    from pompy.cli import main
    tmp_path, ic, config = valid
    path = tmp_path / "ic.nc"
    if bad == "not NetCDF":
        path.write_text("&pom2k /\n")
    else:
        write_ic(path, **random_ic(11, config.im + 1, config.jm, config.kb))
    nml = tmp_path / "case.nml"
    dataclasses.replace(config, iproblem=3, icfile=str(path)).to_namelist().write(nml)
    out = tmp_path / "out"
    assert main([command[0], str(nml), "--output", str(out), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pompy: ") and f"IC file {path}" in err, err
    assert not out.exists()
