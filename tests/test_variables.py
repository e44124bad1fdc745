"""The variable table agrees with the oracle and with the golden data."""
import pytest

from conftest import load_golden
from pompy import variables


def test_every_oracle_array_is_declared_with_its_shape(oracle):
    """The table against the Fortran declarations, as f2py reports them."""
    sizes = {"im": 7, "jm": 6, "kb": 5}
    for routine in ("initialize", "run_steps"):
        for name, bounds in oracle.signature(routine).bounds.items():
            assert variables.shape(name, 7, 6, 5) == tuple(sizes[b] for b in bounds), name


def test_golden_state_is_exactly_the_restart_set():
    """A golden file is 'what a restart written at that point would hold'."""
    golden = set(load_golden("seamount/iint_000000")) - {"time_days"}
    restart = set(variables.names(restart=True))
    assert golden - restart == set(), "golden fields not restarted"
    missing = restart - golden - {n for n, v in variables.VARIABLES.items() if v.kind == "boundary"}
    assert missing <= {"tsurf", "ssurf"}, missing


def test_unknown_name_is_refused():
    with pytest.raises(KeyError, match="'nosuch' is not a declared"):
        variables.shape("nosuch", 3, 3, 3)
