import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from pompy.autodiff.policies import GradientPolicyConfig
from pompy.config import Config, ConfigError, load_config, nint, parse_overrides
from pompy.core.setup import check_external_cfl
from pompy.icfile import write_ic

CONFIGS = Path(__file__).parents[1] / "configs"

POM2K_DEFAULTS = dict(
    im=65, jm=49, kb=21, iproblem=1, mode=3, nadv=1, nitera=2, sw=0.5, dte=6.0, isplit=30,
    days=0.025, prtd1=0.0125, prtd2=1.0, swtch=1000.0, nread=0, lramp=False, title="Run 1",
    small=1e-9, rhoref=1025.0, tbias=0.0, sbias=0.0, grav=9.806, kappa=0.4, z0b=0.01,
    cbcmin=0.0025, cbcmax=1.0, horcon=0.2, tprni=0.2, umol=2e-5, hmax=4500.0, vmaxl=100.0,
    slmax=2.0, kl1=6, kl2=19, ntp=2, nbct=1, nbcs=1, ispadv=5, smoth=0.1, alpha=0.225,
    aam_init=500.0, icfile="",
)


def rejected(**values) -> str:
    with pytest.raises(ConfigError) as err:
        Config.from_dict(values)
    return str(err.value)


def test_defaults_are_pom2k_defaults():
    assert Config().pom2k() == POM2K_DEFAULTS
    assert all(f.metadata["doc"] for f in dataclasses.fields(Config))
    assert Config().policies == GradientPolicyConfig()


def test_derived_quantities():
    c = Config()
    assert (c.dti, c.dte2, c.dti2) == (180.0, 12.0, 360.0)
    assert (c.iend, c.iprint, c.iswtch) == (12, 6, 480000)  # 0.025*86400/180 = 12, 0.0125*86400/180 = 6
    assert (c.imm1, c.imm2, c.jmm1, c.jmm2, c.kbm1, c.kbm2) == (64, 63, 48, 47, 20, 19)
    assert Config(days=0.001).iend == 2  # at least 2 steps
    assert Config(kb=11).kl2 == 9


def test_nint_rounds_halves_away_from_zero():
    assert [nint(x) for x in (0.5, 1.5, 2.5, -2.5, 2.4999, -0.4)] == [1, 2, 3, -3, 2, 0]
    assert Config(days=2.5 * 180 / 86400).iend == 3  # round() would give 2


def test_unknown_name_suggests_closest():
    msg = rejected(dtee=3.0)
    assert "'dtee'" in msg and "did you mean 'dte'" in msg


def test_names_are_case_insensitive():
    assert Config.from_dict({"DTE": 3.0, "Im": 33}) == Config(dte=3.0, im=33)


@pytest.mark.parametrize("name, value", [("dte", "six"), ("nitera", 2.5), ("im", 65.0), ("lramp", 1),
                                         ("kb", True), ("title", 3), ("im", [1, 2])])
def test_wrong_type(name, value):
    msg = rejected(**{name: value})
    assert msg.startswith(f"{name}={value!r} has the wrong type")


def test_int_is_accepted_for_a_real():
    assert Config(dte=3).dte == 3.0 and isinstance(Config(dte=3).dte, float)


def test_im_below_3():
    assert rejected(im=2) == "im=2 is out of range: must be >= 3"


def test_kb_below_3():
    assert rejected(kb=2, kl1=2, kl2=3).startswith("kb=2 is out of range: must be >= 3")


@pytest.mark.parametrize("dte", [0.0, -6.0])
def test_dte_not_positive(dte):
    assert rejected(dte=dte) == f"dte={dte!r} is out of range: must be > 0"


def test_isplit_below_3():
    assert rejected(isplit=2).startswith("isplit=2 is out of range: must be >= 3")


@pytest.mark.parametrize("mode", [1, 5])
def test_mode_not_2_3_4(mode):
    assert rejected(mode=mode) == f"mode={mode} is out of range: must be 2, 3 or 4"


def test_nadv_not_1_2():
    assert rejected(nadv=3) == "nadv=3 is out of range: must be 1 or 2"


@pytest.mark.parametrize("nitera", [0, 5])
def test_nitera_outside_1_to_4(nitera):
    assert rejected(nitera=nitera) == f"nitera={nitera} is out of range: must be in 1..4"


@pytest.mark.parametrize("values, start", [
    (dict(kl1=1), "kl1=1 is out of range: must be in 2..min(kl2-1, 13) = 2..13"),
    (dict(kl1=14), "kl1=14 is out of range"),
    (dict(kb=25, kl2=12), "kl2=12 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 13..24"),
    (dict(kl1=19), "kl1=19 is out of range"),
    (dict(kl2=21), "kl2=21 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 9..20"),
    (dict(kb=6), "kl1=6 is out of range: must be in 2..min(kl2-1, 13) = 2..3"),
])
def test_kl1_kl2_inside_the_column(values, start):
    assert rejected(**values).startswith(start)


@pytest.mark.parametrize("name, value", [
    ("iproblem", 4), ("ntp", 6), ("nbct", 0), ("nbcs", 2), ("nread", 2), ("grav", 0.0), ("rhoref", -1.0),
    ("umol", -1e-5), ("hmax", 0.0), ("vmaxl", 0.0), ("days", 0.0), ("smoth", 1.5), ("alpha", 0.6),
    ("sw", -0.1), ("ispadv", 0), ("z0b", 0.0), ("cbcmax", 0.001), ("small", 0.0), ("dte", math.inf),
])
def test_other_impossible_values(name, value):
    assert rejected(**{name: value}).startswith(f"{name}={value!r} is out of range")


def cfl_limit_by_hand(i, j):
    """pom2k's tps at seamount cell (i, j) of the default 65 x 49 grid, from the formulas alone."""
    im, jm = 65, 49

    def dx(i):
        return 8000 - 4000 * math.sin(math.pi * i / im)

    def dy(j):
        return 8000 - 4000 * math.sin(math.pi * j / jm)

    # seamount centre: the west face of i = 33, the south face of j = 25
    east, north = sum(dx(k) for k in range(i, 33)), sum(dy(k) for k in range(j, 25))
    h = 4500 * (1 - 0.9 * math.exp(-(east**2 + north**2) / 25000**2))
    return 0.5 / math.sqrt(1 / dx(i) ** 2 + 1 / dy(j) ** 2) / math.sqrt(9.806 * (h + 1e-9))


def test_external_cfl_limit_of_the_seamount():
    limit = cfl_limit_by_hand(22, 24)  # the smallest tps, where dx and dy are small and h is still deep
    assert limit == pytest.approx(7.2284487942511255, rel=1e-12)
    assert limit < min(cfl_limit_by_hand(32, 24), cfl_limit_by_hand(22, 2), cfl_limit_by_hand(2, 24))
    check_external_cfl(Config(dte=limit * (1 - 1e-9)))
    with pytest.raises(ConfigError, match=r"\(i=22, j=24\)") as err:
        check_external_cfl(Config(dte=limit * (1 + 1e-9)))
    assert f"{limit:.6g}" in str(err.value)


def test_external_cfl_violation(tmp_path):
    path = tmp_path / "fast.nml"
    path.write_text("&pom2k dte=100 /\n")
    config = load_config(path)            # the parameters alone are valid
    with pytest.raises(ConfigError) as err:
        check_external_cfl(config)
    assert str(err.value).startswith("dte=100.0 breaks the external CFL limit: dte must be < 7.22845 s")


def test_box_cfl_limit():
    limit = 0.5 / math.sqrt(2 / 8000**2) / math.sqrt(9.806 * (4500 + 1e-9))
    with pytest.raises(ConfigError, match=f"dte must be < {limit:.6g} s"):
        check_external_cfl(Config(iproblem=2, im=21, jm=21, kb=11, dte=14.0))


def write_basin_ic(path, dx=5000.0, depth=1000.0, im=8, jm=7, kb=6):
    """A flat basin walled on all sides, in pompy's IC format."""
    h = np.full((im, jm), depth)
    h[0, :] = h[-1, :] = h[:, 0] = h[:, -1] = 0.0
    return write_ic(path, dx=np.full((im, jm), dx), dy=np.full((im, jm), dx), h=h,
                    cor=np.full((im, jm), 1e-4), t=np.full((im, jm, kb), 10.0),
                    s=np.full((im, jm, kb), 35.0))


def test_file_problem_needs_its_file(tmp_path):
    assert rejected(iproblem=3) == ("icfile='' is out of range: must be the NetCDF file with the grid and "
                                    "initial state when iproblem=3 (format: pompy.icfile)")
    missing = tmp_path / "nowhere.nc"
    assert rejected(iproblem=3, icfile=str(missing)) == (
        f"icfile={str(missing)!r} is out of range: must be an existing file when iproblem=3: "
        f"there is no file {str(missing)!r}")
    path = write_basin_ic(tmp_path / "basin.nc")
    assert rejected(icfile=str(path)).startswith(f"icfile={str(path)!r} is out of range: must be '' "
                                                 "when iproblem=1 (only iproblem=3 reads an IC file)")
    assert rejected(iproblem=3, icfile=3).startswith("icfile=3 has the wrong type: must be a string")


def test_file_grid_is_cfl_checked(tmp_path):
    """The limit of the file's grid: 0.5/sqrt(2/dx**2)/sqrt(grav*(h+small)) at every wet point."""
    path = write_basin_ic(tmp_path / "basin.nc")
    limit = 0.5 / math.sqrt(2 / 5000.0**2) / math.sqrt(9.806 * (1000.0 + 1e-9))
    config = dict(iproblem=3, icfile=str(path), im=8, jm=7, kb=6, kl1=2, kl2=4)
    check_external_cfl(Config(dte=limit * (1 - 1e-9), **config))
    nml = tmp_path / "basin.nml"
    Config(dte=limit * 1.01, **config).to_namelist().write(nml)
    with pytest.raises(ConfigError) as err:
        check_external_cfl(load_config(nml))
    assert str(err.value).startswith(f"dte={limit * 1.01!r} breaks the external CFL limit: dte must be "
                                     f"< {limit:.6g} s")
    assert "at (i=2, j=2) where dx=5000 m, dy=5000 m, h=1000 m" in str(err.value)


def test_bad_ic_file_is_a_config_error(tmp_path):
    path = write_basin_ic(tmp_path / "basin.nc", im=9)
    with pytest.raises(ConfigError, match=r"icfile='.*basin.nc': IC file .*: variable 'dx' has dims "
                                          r"\('y', 'x'\) and shape \(7, 9\)"):
        check_external_cfl(Config(iproblem=3, icfile=str(path), im=8, jm=7, kb=6, kl1=2, kl2=4))


def test_shipped_configs_load():
    assert load_config(CONFIGS / "seamount.nml") == Config()
    box = load_config(CONFIGS / "box.nml")
    assert (box.iproblem, box.im, box.jm, box.kb, box.kl2, box.title, box.iend, box.iprint) == (
        2, 21, 21, 11, 9, "box", 480, 120)


def test_namelist_round_trip(tmp_path):
    config = Config(iproblem=2, im=21, jm=21, kb=11, days=1.0, prtd1=0.25, title="box run", lramp=True)
    path = tmp_path / "out.nml"
    config.to_namelist().write(path)
    assert load_config(path) == config


def test_any_group_names_merge(tmp_path):
    path = tmp_path / "two.nml"
    path.write_text("&grid IM=33 jm=25 /\n&time dte=3.0 days=0.5 /\n")
    assert load_config(path) == Config(im=33, jm=25, dte=3.0, days=0.5)
    path.write_text("&grid im=33 /\n&more im=35 /\n")
    with pytest.raises(ConfigError, match="im is set more than once"):
        load_config(path)


def test_overrides():
    assert load_config(CONFIGS / "seamount.nml", ["dte=3"]).dte == 3.0
    assert load_config(CONFIGS / "seamount.nml", {"dte": 3}).dte == 3.0
    assert parse_overrides(["DTE = 3.5d0", "title='a b'", "lramp=.true."]) == dict(dte=3.5, title="a b", lramp=True)
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        parse_overrides(["dte"])
    with pytest.raises(ConfigError, match="nitera=2.5 has the wrong type"):
        load_config(CONFIGS / "seamount.nml", ["nitera=2.5"])


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(CONFIGS / "no_such.nml")
