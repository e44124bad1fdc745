"""A core's Fortran twin (pompy.cores: ``twin``, ``twin_name``) as the
verification uses it: whether the oracle has it, and the twin as a
driver's model. The one place verify builds an oracle model for a core."""
from __future__ import annotations

from pompy.config import Config
from pompy.cores import CoreSpec


def oracle_has_implicit(oracle) -> bool:
    """Whether the oracle has the implicit free surface (its Fortran
    implicit_step, and its run_steps with the semi-implicit scheme)."""
    try:
        oracle.signature("implicit_step")
    except AttributeError:
        return False
    return True


def has_twin(oracle, spec: CoreSpec) -> bool:
    """Whether the oracle has ``spec``'s twin: pom2k's split-explicit mode
    always, the elevation solver's where the oracle was built with it."""
    return not spec.solver or oracle_has_implicit(oracle)


def oracle_model(config: Config, spec: CoreSpec):
    """``spec``'s Fortran twin on ``config`` (pompy.oracle.driver.OracleModel),
    set up by the oracle."""
    from pompy.oracle.driver import OracleModel

    return OracleModel(config, spec.name)
