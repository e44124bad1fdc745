"""The variable table agrees with the oracle and with the golden data."""
import pytest

from conftest import load_golden
from pompy import variables
from pompy.config import Config
from pompy.oracle.run import array_shapes


def test_every_oracle_array_is_declared_with_its_shape(oracle):
    config = Config(im=7, jm=6, kb=5, kl1=2, kl2=3)
    shapes = array_shapes("run_steps", config, oracle.module)
    shapes.update(array_shapes("initialize", config, oracle.module))
    for name, shape in shapes.items():
        assert variables.shape(name, 7, 6, 5) == shape, name


def test_golden_state_is_exactly_the_restart_set():
    """A golden file is 'what a restart written at that point would hold'."""
    golden = set(load_golden("seamount/iint_000000")) - {"time_days"}
    restart = set(variables.names(restart=True))
    assert golden - restart == set(), "golden fields not restarted"
    missing = restart - golden - {n for n, v in variables.VARIABLES.items() if v.kind == "boundary"}
    assert missing <= {"tsurf", "ssurf"}, missing


def test_prognostic_fields_have_both_time_levels():
    for name in variables.names(kind="prognostic"):
        if name.endswith("b"):
            continue
        partner = {"el": "elb", "et": "etb", "ua": "uab", "va": "vab", "u": "ub",
                   "v": "vb", "t": "tb", "s": "sb", "q2": "q2b", "q2l": "q2lb"}.get(name)
        assert partner is None or variables.VARIABLES[partner].prognostic, name


def test_unknown_name_is_refused():
    with pytest.raises(KeyError, match="'nosuch' is not a declared"):
        variables.shape("nosuch", 3, 3, 3)
