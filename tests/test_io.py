"""NetCDF output and restart files: CF-1.8 compliance (the IOOS checker),
lossless compression, the size estimate, and restart files checked on
reading, each fault named with the file, the variable and the point."""
import dataclasses
import os
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from pompy import variables
from pompy.config import load_config
from pompy.core.model import to_numpy
from pompy.core.setup import set_up
from pompy.errors import InputError
from pompy.io import (HEADER_BYTES, OutputWriter, estimate_output_bytes, open_netcdf,
                      output_fields, read_restart, write_restart)

SEAMOUNT = Path(__file__).parents[1] / "configs" / "seamount.nml"


def small_config(im=8, jm=7, kb=5):
    return dataclasses.replace(load_config(SEAMOUNT), im=im, jm=jm, kb=kb, kl1=2, kl2=kb - 2)


@pytest.fixture(scope="module")
def config():
    return small_config()


@pytest.fixture(scope="module")
def state(config):
    return to_numpy(set_up(config))


def write_output(path, config, state, records=(6, 12), compress=True, attributes=None):
    writer = OutputWriter(path, config, state, compress=compress, attributes=attributes)
    for iint in records:
        writer.write(state, iint, iint * config.dti / 86400)
    writer.close()
    return path


def cf_issues(path) -> tuple[int, int, list[str]]:
    """High and medium priority issue counts of the IOOS checker's cf:1.8
    suite on ``path``, and their messages."""
    from compliance_checker.runner import CheckSuite

    suite = CheckSuite()
    with warnings.catch_warnings():         # other suites' deprecation notices, at import
        warnings.simplefilter("ignore", DeprecationWarning)
        suite.load_all_available_checkers()
    ds = suite.load_dataset(str(path))
    try:
        results, errors = suite.run_all(ds, ["cf:1.8"], skip_checks=[])["cf:1.8"]
    finally:
        ds.close()
    assert not errors, errors                       # a check that crashed checks nothing
    found = suite.build_structure("cf:1.8", results, str(path), limit=1)
    messages = [f"{r.name}: {m}" for r in found["all_priorities"] if r.weight >= 2
                and r.value[0] < r.value[1] for m in r.msgs]
    return found["high_count"], found["medium_count"], messages


def test_output_and_restart_files_pass_cf_1_8(config, state, tmp_path):
    output = write_output(tmp_path / "out.nc", config, state)
    restart = write_restart(tmp_path / "restart.nc", config, state, 12, 0.025)
    for path in (output, restart):
        high, medium, messages = cf_issues(path)
        assert (high, medium) == (0, 0), messages


def test_the_checker_counts_what_pompy_fixed(tmp_path):
    """A file as pompy wrote them before: no history, an easting with an
    axis (taken for a longitude), sigma without computed_standard_name."""
    with netCDF4.Dataset(tmp_path / "old.nc", "w") as ds:
        ds.Conventions, ds.title = "CF-1.8", "old"
        ds.createDimension("x", 3)
        ds.createDimension("sigma", 2)
        sigma = ds.createVariable("sigma", "f8", ("sigma",))
        sigma[:] = [-0.25, -0.75]
        sigma.standard_name, sigma.positive, sigma.units = "ocean_sigma_coordinate", "up", "1"
        sigma.formula_terms = "sigma: sigma eta: el depth: h"
        for name in ("east_e", "el", "h"):
            v = ds.createVariable(name, "f8", ("x",))
            v.units, v.long_name = "m", name
        ds["east_e"].axis = "X"
    high, medium, messages = cf_issues(tmp_path / "old.nc")
    assert (high, medium) == (0, 3), messages
    for issue in ("history", "longitude variable 'east_e'", "computed_standard_name"):
        assert any(issue in m for m in messages), (issue, messages)


def test_coordinates_come_from_the_grid(config, state, tmp_path):
    path = write_output(tmp_path / "out.nc", config, state, attributes={"note": "n", "level": 3})
    restart = write_restart(tmp_path / "r.nc", config, state, 1, 0.1, attributes={"note": "r"})
    with netCDF4.Dataset(restart) as ds:
        assert ds.note == "r" and ds.iint == 1
    with netCDF4.Dataset(path) as ds:
        assert (ds.note, ds.level) == ("n", 3)
        np.testing.assert_array_equal(ds["x"][:], state["east_e"][:, 0])
        np.testing.assert_array_equal(ds["y"][:], state["north_e"][0, :])
        np.testing.assert_array_equal(ds["sigma"][:], state["zz"])
        np.testing.assert_array_equal(ds["sigma_w"][:], state["z"])
        assert ds["x"].standard_name == "projection_x_coordinate" and ds["x"].units == "m"
        assert ds["t"].coordinates == "east_e north_e"
        assert ds["u"].coordinates == "east_u north_u"
        assert ds["va"].coordinates == "east_v north_v"
        assert not hasattr(ds["east_e"], "axis")           # not a longitude
        assert "written by pompy" in ds.history


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def test_compressed_output_reads_back_to_the_last_bit(config, state, tmp_path):
    rng = np.random.default_rng(7)
    odd = dict(state)
    for name in output_fields():          # every exponent, signed zeros, subnormals, NaN, inf
        a = rng.standard_normal(state[name].shape) * 10.0 ** rng.integers(-300, 300, state[name].shape)
        a.flat[:5] = [-0.0, 5e-324, np.nan, -np.inf, 1 / 3]
        odd[name] = a
    records = {6: state, 12: odd}
    for compress in (True, False):
        path = tmp_path / f"out_{compress}.nc"
        writer = OutputWriter(path, config, state, compress=compress)
        for iint, s in records.items():
            writer.write(s, iint, iint / 480)
        writer.close()
        with netCDF4.Dataset(path) as ds:
            ds.set_auto_mask(False)
            assert list(ds["iint"][:]) == [6, 12]
            for name in output_fields():
                assert ds[name].filters()["zlib"] is compress and ds[name].filters()["shuffle"] is compress
                for n, s in enumerate(records.values()):
                    np.testing.assert_array_equal(bits(ds[name][n].T), bits(s[name]), err_msg=name)


def test_records_written_in_the_background_are_those_given(config, state, tmp_path):
    """OutputWriter(background=True): each record holds the arrays as they
    were at write() (the caller changes them in place right after), to the
    bit, as a writer in the caller's thread writes them."""
    rng = np.random.default_rng(3)
    live = {name: np.array(value) for name, value in state.items()}
    given = []
    path = tmp_path / "background.nc"
    writer = OutputWriter(path, config, state, background=True)
    for iint in (6, 12, 18):
        for name in output_fields():
            live[name][...] = rng.standard_normal(live[name].shape)
        given.append({name: live[name].copy() for name in output_fields()})
        writer.write(live, iint, iint / 480)
    for name in output_fields():
        live[name][...] = np.nan
    writer.close()
    writer.close()                                      # closed: nothing more
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        assert list(ds["iint"][:]) == [6, 12, 18]
        for n, record in enumerate(given):
            for name, value in record.items():
                np.testing.assert_array_equal(bits(ds[name][n].T), bits(value), err_msg=name)


def test_a_background_records_error_is_raised_by_the_next_call(config, state, tmp_path, monkeypatch):
    """A record that fails in the writer's thread raises its error in the
    caller: at the next write(), or at close() for the last one; drain()
    waits without raising."""
    calls = []

    def failing(self, fields, iint, time_days):
        calls.append(iint)
        raise OSError(f"disk full at {iint}")
    for last in (False, True):
        writer = OutputWriter(tmp_path / f"failing_{last}.nc", config, state, background=True)
        monkeypatch.setattr(OutputWriter, "_write", failing)
        writer.write(state, 6, 0.1)
        writer.drain()
        if last:
            with pytest.raises(OSError, match="disk full at 6"):
                writer.close()
        else:
            with pytest.raises(OSError, match="disk full at 6"):
                writer.write(state, 12, 0.2)
            writer.close()                  # the error was raised once
        monkeypatch.undo()
    assert calls == [6, 6]


def test_compressed_restart_round_trips_bit_for_bit(config, state, tmp_path):
    rng = np.random.default_rng(3)
    noisy = {name: (a + rng.standard_normal(a.shape) * 1e-3 if name not in ("h", "fsm") else a)
             for name, a in state.items()}
    path = write_restart(tmp_path / "r.nc", config, noisy, 7, 0.5, time0=0.25)
    saved = read_restart(path, config)
    assert (saved.iint, saved.time_days, saved.time0) == (7, 0.5, 0.25)
    assert sorted(saved.state) == sorted(variables.names("restart"))
    for name, a in saved.state.items():
        np.testing.assert_array_equal(bits(a), bits(noisy[name]), err_msg=name)
        assert a.flags.f_contiguous, name          # the oracle takes Fortran-ordered arrays
    with netCDF4.Dataset(path) as ds:
        assert all(ds[name].filters()["zlib"] and ds[name].filters()["shuffle"]
                   for name in variables.names("restart"))


def test_uncompressed_estimate_is_the_file_size(tmp_path):
    config = small_config(20, 15, 11)
    state = to_numpy(set_up(config))
    path = write_output(tmp_path / "out.nc", config, state, records=(1, 2, 3), compress=False)
    with netCDF4.Dataset(path) as ds:          # the values' bytes, counted from the file
        values = sum(v.size * v.dtype.itemsize for v in ds.variables.values())
        record = sum(v.size * v.dtype.itemsize for v in ds.variables.values()
                     if v.dimensions[:1] == ("time",)) // 3
    estimate = estimate_output_bytes(config, 3, compress=False)
    assert estimate - HEADER_BYTES == values
    assert estimate_output_bytes(config, 4, compress=False) - estimate == record
    assert abs(estimate - os.path.getsize(path)) < 5_000     # HDF5's metadata, measured


def test_compressed_estimate_bounds_a_resting_state(tmp_path):
    config = small_config(20, 15, 11)
    state = to_numpy(set_up(config))
    path = write_output(tmp_path / "out.nc", config, state, records=(1, 2, 3))
    estimate = estimate_output_bytes(config, 3)
    assert os.path.getsize(path) <= estimate < estimate_output_bytes(config, 3, compress=False)


# --- restart files checked on reading -------------------------------------

@pytest.fixture
def restart(config, state, tmp_path):
    return write_restart(tmp_path / "R.nc", config, state, 12, 0.025)


def test_a_missing_variable_is_named(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds.renameVariable("s", "salinity")
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == f"restart file {restart} lacks variable s"


def test_nan_is_named_with_its_point(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds["t"][1, 3, 2] = np.nan                  # CF (k, j, i) = pom2k (i, j, k) = (3, 4, 2)
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == f"restart file {restart}: t is NaN at (i, j, k) = (3, 4, 2)"


def test_infinity_in_a_boundary_array_is_named(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds["tbe"][4, 2] = -np.inf                  # CF (k, j) = pom2k (j, k) = (3, 5)
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == f"restart file {restart}: tbe is -inf at (j, k) = (3, 5)"


def test_negative_depth_at_a_wet_point(restart, state):
    i, j = np.argwhere(state["fsm"] == 1)[0]
    with netCDF4.Dataset(restart, "a") as ds:
        ds["h"][j, i] = -5.0
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == (f"restart file {restart}: h = -5 at (i, j) = ({i + 1}, {j + 1}) "
                              "where fsm = 1")


def test_depth_on_land_is_not_checked(restart, state):
    i, j = np.argwhere(state["fsm"] == 0)[0]
    with netCDF4.Dataset(restart, "a") as ds:
        ds["h"][j, i] = -5.0
    assert read_restart(restart).state["h"][i, j] == -5.0


def test_grid_must_match_the_config(restart):
    with pytest.raises(InputError) as err:
        read_restart(restart, small_config(9, 7, 5))
    assert str(err.value) == (f"restart file {restart}: grid im, jm, kb = 8, 7, 5 differs from "
                              "the config's 9, 7, 5")


def test_a_variable_of_the_wrong_shape(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds.renameVariable("el", "el_old")
        ds.createVariable("el", "f8", ("y",))[:] = np.zeros(7)
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == (f"restart file {restart}: el has shape (7,), "
                              "expected (i, j) = (8, 7)")


def test_swapped_dimensions(tmp_path):
    config = small_config(7, 7, 5)
    path = write_restart(tmp_path / "R.nc", config, to_numpy(set_up(config)), 1, 0.1)
    with netCDF4.Dataset(path, "a") as ds:
        ds.renameVariable("cor", "cor_old")
        ds.createVariable("cor", "f8", ("x", "y"))[:] = ds["cor_old"][:].T
    with pytest.raises(InputError) as err:
        read_restart(path)
    assert str(err.value) == f"restart file {path}: cor has dims (x, y), expected (y, x)"


def test_a_missing_attribute(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds.delncattr("iint")
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == f"restart file {restart} lacks attribute iint"


def test_a_negative_step_is_refused(restart):
    with netCDF4.Dataset(restart, "a") as ds:
        ds.iint = -5
    with pytest.raises(InputError) as err:
        read_restart(restart)
    assert str(err.value) == f"restart file {restart}: iint = -5; a restart is of a step >= 0"


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "garbage", "scribbled"])
def test_a_file_that_is_not_a_whole_netcdf_file(restart, damage):
    size = restart.stat().st_size
    if damage == "truncated":
        with open(restart, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "empty":
        restart.write_bytes(b"")
    elif damage == "text":
        restart.write_text("&pom2k\n im = 8\n/\n")
    elif damage == "garbage":
        restart.write_bytes(np.random.default_rng(0).bytes(4096))
    else:                                   # the same size, a stretch in the middle overwritten
        with open(restart, "r+b") as f:
            f.seek(size // 3)
            f.write(b"\xff" * (size // 3))
    with pytest.raises(InputError) as err:
        read_restart(restart)
    message = str(err.value)
    assert message.startswith(f"restart file {restart} ") and "\n" not in message
    if damage != "scribbled":               # HDF5 finds a scribble at open or at a read
        assert "is not a readable NetCDF file" in message


def test_a_read_failing_in_hdf5_names_the_file(restart):
    """What HDF5 raises reading a damaged chunk (as a seamount restart
    scribbled anywhere past its first 2 % does) becomes an InputError."""
    with pytest.raises(InputError) as err:
        with open_netcdf(restart, "restart file") as ds:
            assert ds["t"].shape == (5, 7, 8)
            raise RuntimeError("NetCDF: HDF error")
    assert str(err.value) == f"restart file {restart} is damaged: NetCDF: HDF error"


def test_a_missing_file(tmp_path):
    with pytest.raises(InputError) as err:
        read_restart(tmp_path / "none.nc")
    assert str(err.value) == f"restart file {tmp_path / 'none.nc'} does not exist"
