import dataclasses
import math
from pathlib import Path

import f90nml
import numpy as np
import pytest

from pompy.autodiff.policies import GradientPolicy, GradientPolicyConfig
from pompy.config import (Config, ConfigError, load_config, namelist_literal, nint, parse_override,
                          parse_overrides, read_namelist)
from pompy.errors import InputError
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
    wind_factor=1.0,                          # pompy's: pom2k's wind stress
    inflow=0.2, strat_amplitude=15.0, seamount_height=0.9,   # pompy's: pom2k's seamount constants
    theta=0.55, cg_tol=1e-12, cg_maxiter=1000, preconditioner="jacobi",    # the implicit core's
    output_every=0.0, restart_every=0.0,      # pompy's run controls
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


def accepted(**values) -> bool:
    try:
        Config.from_dict(values)
    except ConfigError:
        return False
    return True


LAYERS = ("pom2k's depth makes levels 2..kl1 and kl2..kb-1 logarithmic with 2 <= kl1 < kl2 <= kb-1, "
          "so kb={kb} is too small for these layers")


def test_the_least_kb_is_4():
    """Searched over every kl1 and kl2: no pair fits kb=3, kl1=2, kl2=3 fits kb=4."""
    fitting = {(kb, kl1, kl2) for kb in range(2, 6) for kl1 in range(0, 15) for kl2 in range(0, kb + 2)
               if accepted(kb=kb, kl1=kl1, kl2=kl2)}
    assert min(fitting) == (4, 2, 3)


def test_kb_too_small_for_the_default_layers():
    """kb=3 with pom2k's kl1=6 (the old message was "kl1=6 ... must be in 2..0")."""
    assert rejected(kb=3) == ("kb=3 is out of range: must be >= kl1+2 = 8 for kl1=6 (>= 9 with the default "
                              f"kl2 = kb-2): {LAYERS.format(kb=3)}; kb=3 fits no kl1 (the least kb is 4, "
                              "with kl1=2, kl2=3)")
    assert rejected(kb=2, kl1=2, kl2=3).startswith("kb=2 is out of range: must be >= kl1+2 = 4 for kl1=2 "
                                                   "(>= 5 with the default kl2 = kb-2)")


@pytest.mark.parametrize("kb, fits", [
    (4, "kb=4 fits no kl1 with the default kl2 = 2, kl1=2 with kl2 = 3"),
    (5, "kb=5 fits kl1=2 with the default kl2 = 3, kl1 in 2..3 with kl2 = 4"),
    (6, "kb=6 fits kl1 in 2..3 with the default kl2 = 4, kl1 in 2..4 with kl2 = 5"),
])
def test_kb_too_small_says_what_fits(kb, fits):
    assert rejected(kb=kb) == ("kb=%d is out of range: must be >= kl1+2 = 8 for kl1=6 (>= 9 with the "
                               "default kl2 = kb-2): %s; %s" % (kb, LAYERS.format(kb=kb), fits))


def test_what_the_kb_message_offers_is_what_fits():
    """The numbers of the kb=6 message, tried: kb 8 with kl2=7, kb 9 with the default kl2,
    kl1 up to 3 with the default kl2 and up to 4 with kl2=5."""
    assert accepted(kb=8, kl2=7) and not accepted(kb=7, kl2=6)
    assert accepted(kb=9) and not accepted(kb=8)
    assert [kl1 for kl1 in range(1, 7) if accepted(kb=6, kl1=kl1)] == [2, 3]
    assert [kl1 for kl1 in range(1, 7) if accepted(kb=6, kl1=kl1, kl2=5)] == [2, 3, 4]
    assert rejected(kb=8) == ("kl2=6 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 7..7 (pom2k's "
                              "depth makes levels kl2..kb-1 logarithmic from its 12 spacings; kl2 is kb-2 "
                              "unless set)")


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
    (dict(kl1=1), "kl1=1 is out of range: must be in 2..13 (pom2k's depth makes levels 2..kl1 logarithmic "
                  "from its 12 spacings)"),
    (dict(kl1=14), "kl1=14 is out of range"),
    (dict(kb=25, kl2=12), "kl2=12 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 13..24"),
    (dict(kl1=19), "kl1=19 is out of range"),
    (dict(kl2=21), "kl2=21 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 9..20"),
    (dict(kl1=6, kl2=6), "kl2=6 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 9..20"),
    (dict(kb=30, kl1=13, kl2=13), "kl2=13 is out of range: must be in max(kl1+1, kb-12)..kb-1 = 18..29"),
    (dict(kb=6), "kb=6 is out of range: must be >= kl1+2 = 8"),
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


def refused(path, overrides=None) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    assert isinstance(err.value, InputError)
    return str(err.value)


def test_missing_file(tmp_path):
    assert refused(tmp_path / "no_such.nml") == f"config {tmp_path / 'no_such.nml'} does not exist"


def test_a_directory_is_not_a_config(tmp_path):
    assert refused(tmp_path) == f"config {tmp_path} is a directory, not a namelist file"


NOT_A_CONFIG = "{} is not a pom2k namelist: no &group ... / with a pom2k parameter (im, jm, dte, ...)"


@pytest.mark.parametrize("name, content, why", [
    ("x.yaml", b"im: 30\njm: 20\n", ""),
    ("empty.nml", b"", "; the file is empty"),
    ("blank.nml", b"  \n! only a comment\n", ""),
    ("garbage.bin", bytes(range(256)) * 4, "; it is not text (byte 0x80 at offset 128 is not UTF-8)"),
    ("latin1.nml", "&pom2k title='café' /\n".encode("latin-1"),
     "; it is not text (byte 0xe9 at offset 17 is not UTF-8)"),
    ("control.bin", b"\x00\x01\x02" * 10, "; invalid namelist syntax"),
    ("unended.nml", b"&pom2k im=33\n", "; invalid namelist syntax: End-of-file reached before end of namelist"),
    ("paren.nml", b"&pom2k im=(3 /\n", "; invalid namelist syntax"),
    ("empty_group.nml", b"&pom2k /\n", "; nothing is set in &pom2k"),
    ("no_equals.nml", b"&pom2k im 33 /\n&time /\n", "; nothing is set in &pom2k, &time"),
    ("policies_only.nml", b"&gradient_policy override = 'project' /\n", "; it has only &gradient_policy"),
    ("typo.nml", b"&pom2k dtee=3 /\n", "; &pom2k: unknown parameter 'dtee'; did you mean 'dte'?"),
])
def test_a_file_without_a_pom2k_parameter_is_refused(tmp_path, capsys, name, content, why):
    """Not a namelist, or a namelist that sets no pom2k parameter: refused, naming the file,
    instead of running the default seamount; and quietly (f90nml's scanner prints its
    state table to stdout on control characters)."""
    path = tmp_path / name
    path.write_bytes(content)
    assert refused(path) == NOT_A_CONFIG.format(path) + why
    assert capsys.readouterr().out == ""


def test_other_unknown_names_are_listed(tmp_path):
    path = tmp_path / "other.nml"
    path.write_text("&model bar=1 /\n")
    assert refused(path).startswith(NOT_A_CONFIG.format(path) + "; &model: unknown parameter 'bar'; known "
                                    "parameters: title, iproblem, icfile, ")


def test_one_pom2k_parameter_makes_a_config(tmp_path):
    path = tmp_path / "one.nml"
    path.write_bytes(b"\xef\xbb\xbf&pom2k\n  im = 33  ! a comment\n/\n")   # with a UTF-8 byte-order mark
    assert read_namelist(path) == {"im": 33}
    assert load_config(path) == Config(im=33)
    path.write_text("&pom2k im=33 dtee=3 /\n")                                   # one unknown among them
    assert refused(path) == "unknown parameter 'dtee'; did you mean 'dte'?"


# ------------------------------------------------------------------------------ --set

@pytest.mark.parametrize("item, message", [
    ("im=30 jm=20", "--set im=30 jm=20: '30 jm=20' is not one namelist value (one NAME=VALUE per --set)"),
    ("dte=1,2", "--set dte=1,2: '1,2' is not one namelist value (one NAME=VALUE per --set)"),
    ("dte=3/4", "--set dte=3/4: '3/4' is not one namelist value"),
    ("dte=2*3", "--set dte=2*3: '2*3' is not one namelist value"),
    ("dte=+", "--set dte=+: '+' is not one namelist value"),
    ("dte=6.0 ! fast", "--set dte=6.0 ! fast: '6.0 ! fast' is not one namelist value (one NAME=VALUE per --set)"),
    ("dte=", "--set dte=: no value"),
    ("title=", "--set title=: no value"),
    ("dte", "--set dte: expected NAME=VALUE, e.g. dte=3"),
    ("=3", "--set =3: expected NAME=VALUE, e.g. dte=3"),
    ("d te=3", "--set d te=3: expected NAME=VALUE, e.g. dte=3"),
    ("dtee=3", "unknown parameter 'dtee'; did you mean 'dte'?"),
])
def test_a_bad_set_names_its_text(capsys, item, message):
    with pytest.raises(ConfigError) as err:
        parse_overrides(["dte=3", item])
    assert str(err.value) == message
    assert capsys.readouterr().out == ""


def test_set_takes_pom2k_parameters_only():
    """The policies come from their group (&gradient_policy), not from --set."""
    with pytest.raises(ConfigError) as err:
        parse_overrides(["Policies='x'"])
    assert str(err.value).startswith("unknown parameter 'policies'; known parameters: title, iproblem, icfile, ")


@pytest.mark.parametrize("item, value", [
    ("title=a/b", "a/b"),
    ("title=a b", "a b"),
    ("title='a b'", "a b"),
    ('title="it\'s"', "it's"),
    ("title='x", "'x"),
    ("title=x jm=20", "x jm=20"),
    ("TITLE = 'a'' b' ", "a'' b"),
])
def test_a_string_takes_the_text_as_given(item, value):
    assert parse_override(item) == ("title", value)
    assert parse_override("icfile=''") == ("icfile", "")


@pytest.mark.parametrize("item, value", [
    ("dte=3", 3), ("dte=-2.5d-1", -0.25), ("DTE = 3.5e0 ", 3.5), ("lramp=.true.", True), ("lramp=F", False),
])
def test_a_number_or_logical_is_one_namelist_literal(item, value):
    name, got = parse_override(item)
    assert (name, got, type(got)) == (item.split("=")[0].strip().lower(), value, type(value))


def test_set_reaches_the_config():
    config = load_config(CONFIGS / "seamount.nml", ["title=a/b", "im=33", "lramp=T"])
    assert (config.title, config.im, config.lramp) == ("a/b", 33, True)
    assert refused(CONFIGS / "seamount.nml", ["dte=abc"]) == "dte='abc' has the wrong type: must be a real number"


# ------------------------------------------------------------------------------ namelist_literal

@pytest.mark.parametrize("value, literal", [
    (True, ".true."), (False, ".false."), (np.bool_(True), ".true."), (21, "21"), (np.int64(-7), "-7"),
    (6.0, "6.0"), (1e-9, "1e-09"), (0.0125, "0.0125"), (2e-5, "2e-05"), (1e16, "1e+16"),
    (math.inf, "Infinity"), (-math.inf, "-Infinity"), ("Run 1", "'Run 1'"), ("it's", "'it''s'"), ("", "''"),
])
def test_namelist_literal(value, literal):
    assert namelist_literal(value) == literal


@pytest.mark.parametrize("value", [None, [1, 2], 1j])
def test_namelist_literal_of_other_types(value):
    with pytest.raises(TypeError, match="no namelist literal for"):
        namelist_literal(value)


def read_back(value):
    return f90nml.reads(f"&g v = {namelist_literal(value)}\n/\n")["g"]["v"]


@pytest.mark.parametrize("value", [0.1, 1 / 3, 0.1 + 0.2, 5e-324, 2.2250738585072014e-308,
                                   1.7976931348623157e308, -0.0, 123456789.123456789, 1e22, 1e23,
                                   float(np.float32(0.1)), 7.2284487942511255, -2.5e-5])
def test_a_real_reads_back_as_the_same_float(value):
    got = read_back(value)
    assert type(got) is float and got.hex() == value.hex()


@pytest.mark.parametrize("value", ["a'b\"c", "a/b", "x ! not a comment", "&g v=1 /", "  padded  "])
def test_a_string_reads_back_the_same(value):
    assert read_back(value) == value


def test_nan_reads_back_as_nan():
    assert math.isnan(read_back(math.nan))


def printed(config: Config) -> str:
    """config as `pompy config` prints it: one NAME = literal line per parameter, in its groups."""
    return "".join(f"&{group}\n" + "".join(f"    {name} = {namelist_literal(value)}\n"
                                          for name, value in body.items()) + "/\n"
                   for group, body in config.to_namelist().items())


@pytest.mark.parametrize("name", ["seamount.nml", "box.nml"])
def test_every_parameter_printed_reads_back_equal(name, tmp_path):
    config = load_config(CONFIGS / name)
    back = f90nml.reads(printed(config))["pom2k"]
    assert list(back) == list(config.pom2k())
    for key, value in config.pom2k().items():
        assert (key, back[key], type(back[key])) == (key, value, type(value))
    path = tmp_path / name
    path.write_text(printed(config))
    assert load_config(path) == config


def test_printed_policies_read_back(tmp_path):
    config = Config(kb=11, title="it's a/b", policies=GradientPolicyConfig(
        override=GradientPolicy.PROJECT, layers={"profq": GradientPolicy.REJECT}))
    path = tmp_path / "printed.nml"
    path.write_text(printed(config))
    assert load_config(path) == config


def test_wind_factor_is_any_finite_real_and_reaches_the_parameters():
    """pompy's wind_factor (not pom2k's): 1 by default, set by --set."""
    from pompy.config import parameters
    assert Config().wind_factor == 1.0 and parameters(Config())["wind_factor"] == 1.0
    assert load_config(CONFIGS / "seamount.nml", ["wind_factor=1.25"]).wind_factor == 1.25
    assert Config(wind_factor=-0.5).wind_factor == -0.5          # a reversed wind
    assert rejected(wind_factor=math.inf) == "wind_factor=inf is out of range: must be finite"


@pytest.mark.parametrize("group, meant", [("trian", "train"), ("generat", "generate"),
                                          ("gradient_polcy", "gradient_policy")])
def test_a_near_miss_of_pompys_own_groups_is_refused(tmp_path, capsys, group, meant):
    """pom2k's parameters may sit in any group, so a misspelt &train would
    hand its settings over as pom2k parameters: refused, naming the group
    and what was meant, by run and by train's --print-config alike; another
    group name (&domain, &general, &terrain) still holds pom2k parameters."""
    from pompy.cli import main
    from pompy.train.cli import main as train_main     # pompy.cli's `train` ends its process
    path = tmp_path / "c.nml"
    path.write_text(f"&pom2k\n im = 20 /\n&{group}\n batch_size = 2 /\n")
    with pytest.raises(ConfigError, match=rf"group &{group} in .*c.nml: did you mean &{meant}\?"):
        load_config(path)
    assert main(["run", str(path), "--steps", "1", "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith(f"pompy: group &{group} in ")
    assert train_main(["--config", str(path), "--print-config"]) == 2
    assert capsys.readouterr().err.startswith(f"pompy: group &{group} in ")
    assert not (tmp_path / "o").exists()
    for other in ("domain", "general", "terrain"):      # more than one edit from pompy's own
        path.write_text(f"&pom2k\n im = 20 /\n&{other}\n jm = 30 /\n")
        assert (load_config(path).im, load_config(path).jm) == (20, 30)
