"""Run configuration: every pom2k parameter under its pom2k name, with pom2k's default.

Configs are Fortran namelists (any group name, e.g. ``&pom2k``); a file with no group that
sets a pom2k parameter (empty, YAML, binary, not namelist syntax) is refused, naming the file.
``--set NAME=VALUE`` overrides one parameter each (parse_override); namelist_literal writes a
value back as a namelist literal. A ``Config`` is checked when it is made: a wrong type or an
impossible value raises ``ConfigError`` naming the parameter, the value and what is allowed.
The external CFL limit needs the grid, so it is checked on the set-up
(pompy.core.setup.check_external_cfl), not here.

One group is not pom2k's: ``&gradient_policy`` gives the gradient policies of the run's
core (``Config.policies``, a pompy.autodiff.policies.GradientPolicyConfig): ``override``
for every layer, and a policy per layer name, each explicit for that layer::

    &gradient_policy
        override = 'project'
        profq = 'passthrough'
    /
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import math
import numbers
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import f90nml
import numpy as np

from pompy.autodiff.policies import GradientPolicyConfig
from pompy.errors import ConfigError

POLICY_GROUP = "gradient_policy"
TRAIN_GROUP = "train"               # the trainer's settings (pompy.settings reads them)
GENERATE_GROUP = "generate"         # pompy generate's settings (pompy.settings reads them)
SETTINGS_GROUPS = (TRAIN_GROUP, GENERATE_GROUP)


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Config:
    """pom2k's run parameters (the one table: each field's metadata["doc"] gives its meaning and units)."""

    title: str = _param("Run 1", "run title")
    iproblem: int = _param(1, "problem: 1 seamount, 2 conservation box, 3 grid and initial state from file")
    icfile: str = _param("", "iproblem=3 only: the NetCDF file with the grid and initial state, in pompy's IC "
                             "format (pompy.icfile); a relative path is from the working directory")
    mode: int = _param(3, "2: 2-D external mode only; 3: full 3-D; 4: 3-D with t and s held fixed")
    nadv: int = _param(1, "advection scheme for t and s: 1 centred, 2 Smolarkiewicz")
    nitera: int = _param(2, "number of Smolarkiewicz iterations (nadv=2)")
    sw: float = _param(0.5, "Smolarkiewicz smoothing parameter (1: no smoothing)")
    im: int = _param(65, "number of grid points in x (i)")
    jm: int = _param(49, "number of grid points in y (j)")
    kb: int = _param(21, "number of sigma levels (k)")
    dte: float = _param(6.0, "external (2-D) time step (s)")
    isplit: int = _param(30, "internal time step / external time step")
    days: float = _param(0.025, "run duration (days)")
    prtd1: float = _param(0.0125, "initial print interval (days)")
    prtd2: float = _param(1.0, "final print interval (days)")
    swtch: float = _param(1000.0, "time to switch from prtd1 to prtd2 (days)")
    nread: int = _param(0, "0: start from initial conditions; 1: start from a restart file")
    lramp: bool = _param(False, "ramp the forcing up over the first inertial period")
    small: float = _param(1e-9, "small value to avoid division by zero (dimensionless)")
    rhoref: float = _param(1025.0, "reference density (kg m-3)")
    tbias: float = _param(0.0, "temperature bias removed before density (deg C)")
    sbias: float = _param(0.0, "salinity bias removed before density (psu)")
    grav: float = _param(9.806, "gravity (m s-2)")
    kappa: float = _param(0.4, "von Karman's constant (dimensionless)")
    z0b: float = _param(0.01, "bottom roughness (m)")
    cbcmin: float = _param(0.0025, "minimum bottom friction coefficient (dimensionless)")
    cbcmax: float = _param(1.0, "maximum bottom friction coefficient (dimensionless)")
    horcon: float = _param(0.2, "Smagorinsky diffusivity coefficient (dimensionless)")
    tprni: float = _param(0.2, "inverse horizontal turbulent Prandtl number, aam/aah (dimensionless)")
    umol: float = _param(2e-5, "background viscosity and diffusivity (m2 s-1)")
    hmax: float = _param(4500.0, "maximum depth (m)")
    vmaxl: float = _param(100.0, "largest velocity allowed before the run stops (m s-1)")
    slmax: float = _param(2.0, "largest allowed bottom slope parameter for slpmax (dimensionless)")
    kl1: int = _param(6, "last sigma level of the logarithmic surface layer")
    kl2: int | None = _param(None, "first sigma level of the logarithmic bottom layer (default kb-2)")
    ntp: int = _param(2, "Jerlov water type for short-wave penetration: 1 i, 2 ia, 3 ib, 4 ii, 5 iii")
    nbct: int = _param(1, "surface temperature boundary condition type (1..4)")
    nbcs: int = _param(1, "surface salinity boundary condition type (1 or 3)")
    ispadv: int = _param(5, "external steps between updates of the external advection terms")
    smoth: float = _param(0.1, "Asselin time filter weight (dimensionless)")
    alpha: float = _param(0.225, "weight of the surface slope term in the external mode (dimensionless)")
    aam_init: float = _param(500.0, "initial horizontal viscosity aam (m2 s-1)")
    # pompy's forcing control (not pom2k's; the Fortran oracle refuses any other value)
    wind_factor: float = _param(1.0, "factor on the seamount's wind stress (iproblem 1 and 3; "
                                     "1: pom2k's ramp*1e-4 m2 s-2 taper; pompy generate "
                                     "--perturb wind draws one per member)")
    # the seamount's case parameters (pompy's; pom2k's constants by default, the
    # Fortran oracle refuses others): pompy generate --perturb params draws them
    inflow: float = _param(0.2, "seamount: the uniform inflow speed through the open east and "
                                "west boundaries, and the initial flow (m s-1)")
    strat_amplitude: float = _param(15.0, "seamount: the stratification's amplitude, "
                                          "T = 5 + strat_amplitude exp(z / 1000 m) (degC)")
    seamount_height: float = _param(0.9, "seamount: its height as a fraction of hmax, depth "
                                         "hmax (1 - seamount_height exp(-r2/ra2)) "
                                         "(dimensionless)")
    # the implicit core's free surface (pompy.core.external.implicit; not pom2k's)
    theta: float = _param(0.55, "implicit core: weight of the new elevation in its gravity-wave "
                                "terms (0.5 neutral, 1 fully implicit)")
    cg_tol: float = _param(1e-12, "implicit core: relative residual |b - A x|/|b| the elevation "
                                  "solver reaches (dimensionless)")
    # 1000: pompy verify's reference CG needs 657 on the seamount grid (docs/implicit-core.md)
    cg_maxiter: int = _param(1000, "implicit core: most conjugate-gradient iterations per step "
                                  "(the reference solver always runs this many, converged "
                                  "entries frozen)")
    preconditioner: str = _param("jacobi", "implicit core: the elevation solver's preconditioner, "
                                           "'jacobi' (the diagonal) or 'multigrid' (a V-cycle: "
                                           "iterations that do not grow with the grid)")
    # pompy's run controls (not pom2k's)
    output_every: float = _param(0.0, "days between NetCDF output records (0: pom2k's print "
                                      "interval, prtd1 then prtd2)")
    restart_every: float = _param(0.0, "days between restart files written during a run, each "
                                       "replacing the last (0: only at the end)")
    policies: GradientPolicyConfig = field(
        default_factory=GradientPolicyConfig,
        metadata={"doc": "gradient policies of the core (namelist group &gradient_policy)",
                  "group": POLICY_GROUP})

    def __post_init__(self) -> None:
        for f in pom2k_fields():
            object.__setattr__(self, f.name, _coerce(f, getattr(self, f.name)))
        object.__setattr__(self, "policies", _policies(self.policies))
        if self.kl2 is None:
            object.__setattr__(self, "kl2", self.kb - 2)
        validate(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """A Config from {name: value}; names are case-insensitive, unknown ones rejected."""
        known = [f.name for f in fields(cls)]
        lowered = {str(name).lower(): value for name, value in values.items()}
        for name in lowered:
            if name not in known:
                raise ConfigError(unknown_parameter(name, known))
        return cls(**lowered)

    def pom2k(self) -> dict[str, Any]:
        """pom2k's parameters by name (the policies left out)."""
        return {f.name: getattr(self, f.name) for f in pom2k_fields()}

    def to_namelist(self) -> f90nml.Namelist:
        """The config as an f90nml namelist, group ``&pom2k`` in the order of the table (and
        ``&gradient_policy`` when it sets a policy); write it with ``.write(path)``."""
        groups = OrderedDict(pom2k=OrderedDict(self.pom2k()))    # f90nml sorts a plain dict's keys
        policies = self.policies.to_dict()
        if policies["override"] is not None or policies["layers"]:
            groups[POLICY_GROUP] = OrderedDict((k, v) for k, v in (("override", policies["override"]),
                                                                   *policies["layers"].items())
                                               if v is not None)
        return f90nml.Namelist(groups)

    # pom2k's derived quantities
    @property
    def dti(self) -> float:
        """internal (3-D) time step: dte*isplit (s)"""
        return self.dte * float(self.isplit)

    @property
    def dte2(self) -> float:
        """2 dte (s)"""
        return self.dte * 2

    @property
    def dti2(self) -> float:
        """2 dti (s)"""
        return self.dti * 2

    @property
    def iend(self) -> int:
        """internal steps in the run: nint(days*86400/dti), at least 2"""
        return max(nint(self.days * 24.0 * 3600.0 / self.dti), 2)

    @property
    def iprint(self) -> int:
        """internal steps between prints before swtch: nint(prtd1*86400/dti)"""
        return nint(self.prtd1 * 24.0 * 3600.0 / self.dti)

    @property
    def iswtch(self) -> int:
        """internal step at which prints switch to prtd2: nint(swtch*86400/dti)"""
        return nint(self.swtch * 24.0 * 3600.0 / self.dti)

    @property
    def imm1(self) -> int:
        """im-1"""
        return self.im - 1

    @property
    def imm2(self) -> int:
        """im-2"""
        return self.im - 2

    @property
    def jmm1(self) -> int:
        """jm-1"""
        return self.jm - 1

    @property
    def jmm2(self) -> int:
        """jm-2"""
        return self.jm - 2

    @property
    def kbm1(self) -> int:
        """kb-1"""
        return self.kb - 1

    @property
    def kbm2(self) -> int:
        """kb-2"""
        return self.kb - 2


DERIVED = ("dti", "dte2", "dti2", "iend", "iprint", "iswtch", "imm1", "imm2", "jmm1", "jmm2", "kbm1", "kbm2")


def nint(x: float) -> int:
    """Fortran NINT: the nearest integer, halves away from zero (Python's round() goes to even)."""
    whole = math.trunc(x)
    return whole + int(math.copysign(1, x)) if abs(x - whole) >= 0.5 else whole


_KINDS = {"bool": bool, "int": int, "int | None": int, "float": float, "str": str}  # field annotation -> type
_TYPE_NAMES = {bool: "a logical (.true./.false.)", int: "an integer", float: "a real number", str: "a string"}


def pom2k_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of Config that are pom2k parameters."""
    return tuple(f for f in fields(Config) if "group" not in f.metadata)


def unknown_parameter(name: str, known: Iterable[str]) -> str:
    """The message for a name that is not a parameter: the closest known name, or all of them."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known parameters: {', '.join(known)}"
    return f"unknown parameter {name!r}{hint}"


def _policies(value: Any) -> GradientPolicyConfig:
    """The &gradient_policy group as a GradientPolicyConfig: 'override' and
    one entry per layer, or a GradientPolicyConfig / its to_dict() form."""
    if isinstance(value, GradientPolicyConfig):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"&{POLICY_GROUP}: expected a group of NAME = 'policy' entries, "
                          f"got {value!r}")
    data = dict(value)
    if "layers" not in data:           # the namelist form: layers at the top level
        data = {"override": data.pop("override", None), "layers": data}
    try:
        return GradientPolicyConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"&{POLICY_GROUP}: {err}") from err


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    """The value converted to the field's type (None stays None where that is the default)."""
    kind = _KINDS[f.type]
    if value is None and f.default is None:
        return None
    is_bool = isinstance(value, (bool, np.bool_))
    if kind is bool and is_bool:
        return bool(value)
    if kind is int and isinstance(value, numbers.Integral) and not is_bool:
        return int(value)
    if kind is float and isinstance(value, numbers.Real) and not is_bool:
        if math.isfinite(value):
            return float(value)
        raise ConfigError(f"{f.name}={value!r} is out of range: must be finite")
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"{f.name}={value!r} has the wrong type: must be {_TYPE_NAMES[kind]}")


# name -> (allowed(value, config), what is allowed: text, or text made from the config);
# checked in this order: kb against a valid kl1, then kl2 against both
_RULES: dict[str, tuple[Callable[[Any, Config], bool], str | Callable[[Config], str]]] = {
    "im": (lambda v, c: v >= 3, ">= 3"),
    "jm": (lambda v, c: v >= 3, ">= 3"),
    "iproblem": (lambda v, c: v in (1, 2, 3), "1, 2 or 3"),
    "icfile": (lambda v, c: (v == "") if c.iproblem != 3 else (v != "" and Path(v).is_file()),
               lambda c: _icfile_rule(c)),
    "mode": (lambda v, c: v in (2, 3, 4), "2, 3 or 4"),
    "nadv": (lambda v, c: v in (1, 2), "1 or 2"),
    "nitera": (lambda v, c: 1 <= v <= 4, "in 1..4"),
    "sw": (lambda v, c: 0 <= v <= 1, "in [0, 1]"),
    "dte": (lambda v, c: v > 0, "> 0"),
    "isplit": (lambda v, c: v >= 3, ">= 3 (the external mode filters etf over its last three passes)"),
    "days": (lambda v, c: v > 0, "> 0"),
    "prtd1": (lambda v, c: v > 0, "> 0"),
    "prtd2": (lambda v, c: v > 0, "> 0"),
    "nread": (lambda v, c: v in (0, 1), "0 or 1"),
    "small": (lambda v, c: v > 0, "> 0"),
    "rhoref": (lambda v, c: v > 0, "> 0"),
    "grav": (lambda v, c: v > 0, "> 0"),
    "kappa": (lambda v, c: v > 0, "> 0"),
    "z0b": (lambda v, c: v > 0, "> 0"),
    "cbcmin": (lambda v, c: v >= 0, ">= 0"),
    "cbcmax": (lambda v, c: v >= c.cbcmin, lambda c: f">= cbcmin = {c.cbcmin!r}"),
    "horcon": (lambda v, c: v >= 0, ">= 0"),
    "tprni": (lambda v, c: v >= 0, ">= 0"),
    "umol": (lambda v, c: v >= 0, ">= 0"),
    "hmax": (lambda v, c: v > 0, "> 0"),
    "vmaxl": (lambda v, c: v > 0, "> 0"),
    "slmax": (lambda v, c: v > 0, "> 0"),
    "kl1": (lambda v, c: 2 <= v <= 13, "in 2..13 (pom2k's depth makes levels 2..kl1 logarithmic "
                                        "from its 12 spacings)"),
    "kb": (lambda v, c: v >= c.kl1 + 2, lambda c: _kb_rule(c)),
    "kl2": (lambda v, c: max(c.kl1 + 1, c.kb - 12) <= v <= c.kb - 1,
            lambda c: f"in max(kl1+1, kb-12)..kb-1 = {max(c.kl1 + 1, c.kb - 12)}..{c.kb - 1} (pom2k's "
                      "depth makes levels kl2..kb-1 logarithmic from its 12 spacings; kl2 is kb-2 "
                      "unless set)"),
    "ntp": (lambda v, c: 1 <= v <= 5, "in 1..5"),
    "nbct": (lambda v, c: 1 <= v <= 4, "in 1..4"),
    "nbcs": (lambda v, c: v in (1, 3), "1 or 3"),
    "ispadv": (lambda v, c: v >= 1, ">= 1"),
    "smoth": (lambda v, c: 0 <= v <= 1, "in [0, 1]"),
    "alpha": (lambda v, c: 0 <= v <= 0.5, "in [0, 0.5]"),
    "aam_init": (lambda v, c: v >= 0, ">= 0"),
    "inflow": (lambda v, c: abs(v) <= 5, "in [-5, 5] m s-1"),
    "strat_amplitude": (lambda v, c: 0 <= v <= 100, "in [0, 100] degC"),
    "seamount_height": (lambda v, c: 0 <= v < 1, "in [0, 1)"),
    "theta": (lambda v, c: 0.5 <= v <= 1, "in [0.5, 1] (below 0.5 the scheme is unstable)"),
    "cg_tol": (lambda v, c: 0 < v < 1, "in (0, 1)"),
    "cg_maxiter": (lambda v, c: v >= 1, ">= 1"),
    "preconditioner": (lambda v, c: v in ("jacobi", "multigrid"), "'jacobi' or 'multigrid'"),
    "output_every": (lambda v, c: v >= 0, ">= 0 (0: pom2k's print interval)"),
    "restart_every": (lambda v, c: v >= 0, ">= 0 (0: a restart at the end only)"),
}


# Open-boundary radiation factors of pom2k's bdry block (1 in every problem).
BOUNDARY_FACTORS = {"rfe": 1.0, "rfw": 1.0, "rfn": 1.0, "rfs": 1.0}


# the run parameters that may differ between the members of one ensemble or
# dataset (pompy's, not pom2k's): numbers the core's routines only multiply by
MEMBER_PARAMS = ("wind_factor",)
# the case parameters a member of a dataset may draw (pompy generate --perturb
# params): MEMBER_PARAMS, and those that shape the set-up (a member's core is
# set up from the config with its values: SETUP_PARAMS)
SETUP_PARAMS = ("inflow", "strat_amplitude", "seamount_height")
CASE_PARAMS = MEMBER_PARAMS + SETUP_PARAMS


def case_of(config: Config | None = None, names: tuple[str, ...] = CASE_PARAMS
            ) -> dict[str, float]:
    """The case parameters ``names`` of ``config`` (None: the built-in
    defaults, pom2k's constants), as floats."""
    return {name: float(getattr(config, name) if config is not None
                        else Config.__dataclass_fields__[name].default) for name in names}


# The parameters that say how long a run goes, what it writes and when it
# gives up: a continued run may change them. Every other pom2k parameter
# shapes the state (grid, steps, physics, forcing) and must be the one the
# restart was made with (pompy.driver.check_continuation).
RUN_CONTROL = ("title", "days", "prtd1", "prtd2", "swtch", "nread", "vmaxl", "cg_maxiter",
               "output_every", "restart_every")


def _written(namelist: str) -> dict[str, Any]:
    """The pom2k parameters a namelist text sets, as written."""
    written: dict[str, Any] = {}
    for group, bodies in _reads(namelist).items():
        if group != POLICY_GROUP:
            for body in _bodies(bodies):
                written.update(body)
    return written


def namelist_case(namelist: str) -> dict[str, float]:
    """The case parameters (CASE_PARAMS) a namelist text stores; one it
    lacks (a file from before it existed) is its default."""
    written = _written(namelist)
    return {name: float(written.get(name, default)) for name, default in case_of().items()}


def state_differences(config: Config, namelist: str, made_by: str = "restart",
                      skip: tuple[str, ...] = ()) -> list[str]:
    """'name: A (restart) -> B' for each state parameter (not RUN_CONTROL,
    nor ``skip``) where ``config`` differs from the namelist text a file
    stores (``made_by``: what it is, in the words); a parameter the text
    lacks (a file from before it existed) counts as its default."""
    written = _written(namelist)
    changed = []
    for f in pom2k_fields():
        if f.name in RUN_CONTROL or f.name in skip:
            continue
        before = _coerce(f, written[f.name]) if f.name in written else f.default
        if f.name == "kl2" and before is None:
            before = int(written.get("kb", config.kb)) - 2
        now = getattr(config, f.name)
        if before != now:
            changed.append(f"{f.name}: {namelist_literal(before)} ({made_by}) -> "
                           f"{namelist_literal(now)}")
    return changed


def parameters(config: Config) -> dict:
    """The scalars the model routines take, by pom2k name: every parameter,
    the derived time steps and the boundary factors (ramp=1 until a step sets it)."""
    params = config.pom2k()
    params.update(BOUNDARY_FACTORS, lramp=int(config.lramp), dti=config.dti,
                  dti2=config.dti2, dte2=config.dte2, ramp=1.0)
    return params


def _kb_rule(config: Config) -> str:
    """What kb must be for kl1 (pom2k's depth: 2 <= kl1 < kl2 <= kb-1), and what kl1 fits this kb."""
    kb, kl1 = config.kb, config.kl1
    if kb >= 4:
        fits = (f"kb={kb} fits {_range('kl1', 2, kb - 3)} with the default kl2 = {kb - 2}, "
                f"{_range('kl1', 2, kb - 2)} with kl2 = {kb - 1}")
    else:
        fits = f"kb={kb} fits no kl1 (the least kb is 4, with kl1=2, kl2=3)"
    return (f">= kl1+2 = {kl1 + 2} for kl1={kl1} (>= {kl1 + 3} with the default kl2 = kb-2): pom2k's "
            "depth makes levels 2..kl1 and kl2..kb-1 logarithmic with 2 <= kl1 < kl2 <= kb-1, so "
            f"kb={kb} is too small for these layers; {fits}")


def _range(name: str, first: int, last: int) -> str:
    """'name in first..last', 'name=first' or 'no name' (an empty range)."""
    if last < first:
        return f"no {name}"
    return f"{name}={first}" if first == last else f"{name} in {first}..{last}"


def _icfile_rule(config: Config) -> str:
    if config.iproblem != 3:
        return f"'' when iproblem={config.iproblem} (only iproblem=3 reads an IC file)"
    if config.icfile == "":
        return "the NetCDF file with the grid and initial state when iproblem=3 (format: pompy.icfile)"
    return f"an existing file when iproblem=3: there is no file {str(Path(config.icfile).absolute())!r}"


def validate(config: Config) -> None:
    """pom2k's static limits on each parameter (Config runs this when it is made)."""
    for name, (allowed, what) in _RULES.items():
        value = getattr(config, name)
        if not allowed(value, config):
            what = what(config) if callable(what) else what
            raise ConfigError(f"{name}={value!r} is out of range: must be {what}")


_EXPECTED = "no &group ... / with a pom2k parameter (im, jm, dte, ...)"

# what f90nml's parser raises on text that is not namelist syntax
_SYNTAX_ERRORS = (ValueError, AssertionError, StopIteration, IndexError, KeyError, TypeError)


def read_namelist(path: str | Path) -> dict[str, Any]:
    """All parameters of a namelist file, every group merged; a name set twice is an error,
    and so is a file with no group that sets a pom2k parameter (it is not a config)."""
    text = _read_text(path)
    nml = _parse_namelist(path, text)
    values: dict[str, Any] = {}
    for group, bodies in nml.items():
        if group == POLICY_GROUP:
            values["policies"] = {name: value for body in _bodies(bodies)
                                  for name, value in body.items()}
            continue
        if group in SETTINGS_GROUPS:             # pompy.settings reads them
            continue
        for body in _bodies(bodies):
            for name, value in body.items():
                if name in values:
                    raise ConfigError(f"{name} is set more than once in {path} (group &{group})")
                values[name] = value
    if not values.keys() & {f.name for f in pom2k_fields()}:
        raise _not_a_config(path, _why_no_parameter(text, nml))
    return values


def read_group(path: str | Path, group: str) -> dict[str, Any]:
    """One group of a config file, names lower-case ({} where it has none);
    a file that cannot be read or parsed is a ConfigError naming it."""
    nml = _parse_namelist(path, _read_text(path))
    return {str(name).lower(): value for body in _bodies(nml.get(group, {}))
            for name, value in dict(body).items()}


def _read_text(path: str | Path) -> str:
    """The text of a config file (UTF-8)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"config {path} is a directory, not a namelist file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from err
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _not_a_config(path, f"it is not text (byte {data[err.start]:#04x} at offset "
                                  f"{err.start} is not UTF-8)") from err


def _parse_namelist(path: str | Path, text: str) -> f90nml.Namelist:
    """The namelist in the text of the config file path; a group whose
    name is a near miss of pompy's own (&trian) a ConfigError, as its
    settings would be read as pom2k parameters."""
    try:
        nml = _reads(text)
    except ValueError as err:
        raise _not_a_config(path, "invalid namelist syntax" + (f": {err}" if str(err) else "")) from err
    own = (POLICY_GROUP, *SETTINGS_GROUPS)
    for group in nml:
        near = [name for name in own if _one_edit_apart(group, name)]
        if near:
            raise ConfigError(f"group &{group} in {path}: did you mean &{near[0]}? (pom2k's "
                              "parameters may be in any group, so its names would be read as "
                              "pom2k parameters)")
    return nml


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one letter left out, added, changed or two
    neighbours swapped (&trian, &generat), not ``b`` itself."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return (a[i + 1:] == b[i:] or a[i:] == b[i + 1:] or a[i + 1:] == b[i + 1:]
            or (a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:]))


def _reads(text: str) -> f90nml.Namelist:
    """f90nml.reads, every syntax error a ValueError, and quiet: f90nml's scanner prints
    its state table to stdout on some bad input."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return f90nml.reads(text)
    except _SYNTAX_ERRORS as err:
        raise ValueError(str(err).rstrip(".")) from err


def _why_no_parameter(text: str, nml: f90nml.Namelist) -> str:
    """Why the namelist of a file's text sets no pom2k parameter: the file is empty, has
    no group, has empty groups, or only names that are not parameters (the first named)."""
    groups = [group for group in nml if group not in (POLICY_GROUP, *SETTINGS_GROUPS)]
    names = [(group, name) for group in groups for body in _bodies(nml[group]) for name in body]
    if names:
        group, name = names[0]
        return f"&{group}: {unknown_parameter(name, (f.name for f in pom2k_fields()))}"
    if groups:
        return f"nothing is set in {', '.join('&' + group for group in groups)}"
    if nml:
        return f"it has only &{' and &'.join(group for group in nml)}"
    return "the file is empty" if not text.strip() else ""


def _not_a_config(path: str | Path, why: str = "") -> ConfigError:
    return ConfigError(f"{path} is not a pom2k namelist: {_EXPECTED}" + (f"; {why}" if why else ""))


def _bodies(bodies) -> list:
    return bodies if isinstance(bodies, list) else [bodies]


def parse_overrides(overrides: Mapping[str, Any] | Iterable[str] | None) -> dict[str, Any]:
    """{name: value} from a dict, or from --set items, one "NAME=VALUE" each (see parse_override)."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(name).lower(): value for name, value in overrides.items()}
    return dict(parse_override(item) for item in overrides)


# one integer, real or logical literal (1, -2.5d-3, .true.), no separator, group end or repeat
_ONE_LITERAL = re.compile(r"[A-Za-z0-9_.+-]+")


def parse_override(item: str) -> tuple[str, Any]:
    """(name, value) of one --set item "NAME=VALUE": a string parameter takes the text as
    given (less one pair of matching quotes), any other one namelist literal (3, 2.5d0, .true.)."""
    name, sep, text = item.partition("=")
    name, text = name.strip().lower(), text.strip()
    if not sep or not name.isidentifier():
        raise ConfigError(f"--set {item}: expected NAME=VALUE, e.g. dte=3")
    kinds = {f.name: _KINDS[f.type] for f in pom2k_fields()}
    if name not in kinds:
        raise ConfigError(unknown_parameter(name, kinds))     # as for a name in a file
    if not text:
        raise ConfigError(f"--set {item}: no value")
    if kinds[name] is str:
        return name, _unquoted(text)
    value = _literal(text) if _ONE_LITERAL.fullmatch(text) else None
    if value is None or isinstance(value, list):
        hint = " (one NAME=VALUE per --set)" if re.search(r"[\s,=]", text) else ""
        raise ConfigError(f"--set {item}: {text!r} is not one namelist value{hint}")
    return name, value


def _literal(text: str) -> Any:
    """What f90nml reads from text as a value (a list for several), None where it reads nothing."""
    try:
        return _reads(f"&set v={text} /").get("set", {}).get("v")
    except ValueError:
        return None


def _unquoted(text: str) -> str:
    """text without one pair of matching quotes around it, if it has them."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def namelist_literal(value: Any) -> str:
    """value as a Fortran namelist literal that reads back as the same value: .true./.false.,
    an integer, a real in repr's shortest exact form (1e-09, 0.0125), a quoted string."""
    if isinstance(value, (bool, np.bool_)):
        return ".true." if value else ".false."
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isfinite(value):
            return repr(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no namelist literal for {value!r} ({type(value).__name__})")


def load_config(path: str | Path, overrides: Mapping[str, Any] | Iterable[str] | None = None) -> Config:
    """The Config of a namelist file with overrides applied, checked
    parameter by parameter (the CFL limit is checked on the set-up)."""
    values = read_namelist(path) | parse_overrides(overrides)
    return Config.from_dict(values)
