"""The registry of torch cores: one entry per core, the one place a core's
name is tied to what it is.

    spec = cores.get("implicit")
    core = spec.make(config, device="cpu", dtype=torch.float64)
    spec.check_cfl(config, core.state)     # its CFL limit on the set-up

A :class:`CoreSpec` holds the core's class and free-surface part, the CFL
check its time steps must pass, its Fortran twin (the oracle's scheme and
the name its runs carry) and what it supports. Drivers (run, generate,
train, verify, report, the oracle's driver) ask the registry rather than
compare names. ``pompy run --core oracle`` names the explicit core's twin
(:data:`ORACLE`), a model of its own rather than a torch core.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pompy.config import Config
from pompy.core.explicit import ExplicitCore
from pompy.core.external.implicit import SemiImplicit
from pompy.core.external.split import SplitExplicit
from pompy.core.implicit import ImplicitCore
from pompy.core.model import Core
from pompy.core.setup import check_external_cfl, check_internal_cfl
from pompy.errors import InputError


@dataclass(frozen=True)
class CoreSpec:
    """What a core is, for the drivers."""
    name: str                                        # --core NAME
    core: type[Core]                                 # cls(config, device=, dtype=, ...)
    free_surface: type                               # its external-mode part
    check_cfl: Callable[[Config, Mapping | None], None]   # its time steps' CFL limit
    twin: int                                        # its Fortran twin: run_steps' scheme
    twin_name: str                                   # the name the twin's runs carry
    twin_description: str                            # what the twin is, for reports
    solver: bool                                     # solves for the elevation (cg_tol, ...)
    description: str                                 # one line, for help and reports
    fortran_math: bool = True                        # bit for bit with its twin (compat)
    compile: bool = True                             # whole-step graphs (core.compiled)
    ensembles: bool = True       # members batched (core.ensemble), each its single run's bits
    gradients: bool = True                           # gradients through its steps
    golden: bool = False          # pom2k's own algorithm: golden pom2k output applies

    def make(self, config: Config, **options) -> Core:
        """The core, not yet set up (``run_initialization``)."""
        return self.core(config, **options)


CORES: dict[str, CoreSpec] = {spec.name: spec for spec in (
    CoreSpec("explicit", ExplicitCore, SplitExplicit, check_external_cfl, twin=1,
             twin_name="oracle", twin_description="the Fortran oracle (pom2k's algorithm)",
             solver=False, golden=True,
             description="pom2k's split-explicit free surface (isplit passes of dte)"),
    CoreSpec("implicit", ImplicitCore, SemiImplicit, check_internal_cfl, twin=2,
             twin_name="oracle_implicit",
             twin_description="the implicit core's Fortran twin (reference_fortran/implicit.f90)",
             solver=True, ensembles=False,
             description="a semi-implicit free surface (one CG solve per internal step)"),
)}
NAMES = tuple(CORES)
DEFAULT = NAMES[0]                 # pom2k's own
# training's default: the semi-implicit core, one elevation solve a step
# instead of isplit external passes, the cheaper graph to differentiate through
TRAINING = "implicit"
ORACLE = "oracle"                  # `pompy run --core oracle`: the default core's Fortran twin
RUNNABLE = (*NAMES, ORACLE)        # what `pompy run --core` can run


def get(name: str) -> CoreSpec:
    """The core named ``name``; InputError naming the choices otherwise."""
    try:
        return CORES[name]
    except KeyError:
        raise InputError(f"unknown core {name!r}: one of {', '.join(NAMES)}") from None


def is_twin(name: str) -> bool:
    """Whether ``name`` is a Fortran twin's (a run's name: "oracle", or a
    core's ``twin_name``) rather than a torch core's."""
    return name == ORACLE or any(spec.twin_name == name for spec in CORES.values())
