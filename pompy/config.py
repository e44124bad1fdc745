"""Run configuration: every pom2k parameter under its pom2k name, with pom2k's default.

Configs are Fortran namelists (any group name, e.g. ``&pom2k``). A ``Config`` is checked
when it is made: a wrong type or an impossible value raises ``ConfigError`` naming the
parameter, the value and what is allowed. The external CFL limit needs the grid, so it is
checked on the set-up (pompy.core.setup.check_external_cfl), not here.

One group is not pom2k's: ``&gradient_policy`` gives the gradient policies of the run's
core (``Config.policies``, a pompy.autodiff.policies.GradientPolicyConfig): ``override``
for every layer, and a policy per layer name, each explicit for that layer::

    &gradient_policy
        override = 'project'
        profq = 'passthrough'
    /
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import f90nml
import numpy as np

from pompy.autodiff.policies import GradientPolicyConfig
from pompy.errors import ConfigError

POLICY_GROUP = "gradient_policy"


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
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known parameters: {', '.join(known)}"
                raise ConfigError(f"unknown parameter {name!r}{hint}")
        return cls(**lowered)

    def pom2k(self) -> dict[str, Any]:
        """pom2k's parameters by name (the policies left out)."""
        return {f.name: getattr(self, f.name) for f in pom2k_fields()}

    def to_namelist(self) -> f90nml.Namelist:
        """The config as an f90nml namelist, group ``&pom2k`` (and ``&gradient_policy``
        when it sets a policy); write it with ``.write(path)``."""
        groups = {"pom2k": self.pom2k()}
        policies = self.policies.to_dict()
        if policies["override"] is not None or policies["layers"]:
            groups[POLICY_GROUP] = {k: v for k, v in (("override", policies["override"]),
                                                      *policies["layers"].items()) if v is not None}
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
# checked in this order, so kl1 and kl2 are checked against a valid kb
_RULES: dict[str, tuple[Callable[[Any, Config], bool], str | Callable[[Config], str]]] = {
    "im": (lambda v, c: v >= 3, ">= 3"),
    "jm": (lambda v, c: v >= 3, ">= 3"),
    "kb": (lambda v, c: v >= 3, ">= 3"),
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
    "kl1": (lambda v, c: 2 <= v < c.kl2 and v <= 13,
            lambda c: f"in 2..min(kl2-1, 13) = 2..{min(c.kl2 - 1, 13)} (pom2k's depth makes levels "
                      "2..kl1 logarithmic from its 12 spacings and needs kl1 < kl2)"),
    "kl2": (lambda v, c: c.kl1 < v <= c.kb - 1 and c.kb - v <= 12,
            lambda c: f"in max(kl1+1, kb-12)..kb-1 = {max(c.kl1 + 1, c.kb - 12)}..{c.kb - 1} (pom2k's "
                      "depth makes levels kl2..kb-1 logarithmic from its 12 spacings)"),
    "ntp": (lambda v, c: 1 <= v <= 5, "in 1..5"),
    "nbct": (lambda v, c: 1 <= v <= 4, "in 1..4"),
    "nbcs": (lambda v, c: v in (1, 3), "1 or 3"),
    "ispadv": (lambda v, c: v >= 1, ">= 1"),
    "smoth": (lambda v, c: 0 <= v <= 1, "in [0, 1]"),
    "alpha": (lambda v, c: 0 <= v <= 0.5, "in [0, 0.5]"),
    "aam_init": (lambda v, c: v >= 0, ">= 0"),
}


# Open-boundary radiation factors of pom2k's bdry block (1 in every problem).
BOUNDARY_FACTORS = {"rfe": 1.0, "rfw": 1.0, "rfn": 1.0, "rfs": 1.0}


def parameters(config: Config) -> dict:
    """The scalars the model routines take, by pom2k name: every parameter,
    the derived time steps and the boundary factors (ramp=1 until a step sets it)."""
    params = config.pom2k()
    params.update(BOUNDARY_FACTORS, lramp=int(config.lramp), dti=config.dti,
                  dti2=config.dti2, dte2=config.dte2, ramp=1.0)
    return params


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


def read_namelist(path: str | Path) -> dict[str, Any]:
    """All parameters of a namelist file, every group merged; a name set twice is an error."""
    try:
        nml = f90nml.read(str(path))
    except (OSError, ValueError, StopIteration) as err:
        raise ConfigError(f"cannot read config {path}: {err}") from err
    values: dict[str, Any] = {}
    for group, bodies in nml.items():
        if group == POLICY_GROUP:
            values["policies"] = {name: value for body in _bodies(bodies)
                                  for name, value in body.items()}
            continue
        for body in _bodies(bodies):
            for name, value in body.items():
                if name in values:
                    raise ConfigError(f"{name} is set more than once in {path} (group &{group})")
                values[name] = value
    return values


def _bodies(bodies) -> list:
    return bodies if isinstance(bodies, list) else [bodies]


def parse_overrides(overrides: Mapping[str, Any] | Iterable[str] | None) -> dict[str, Any]:
    """{name: value} from a dict, or from "NAME=VALUE" strings whose values are namelist literals."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(name).lower(): value for name, value in overrides.items()}
    values = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            raise ConfigError(f"cannot parse {item!r}: expected NAME=VALUE, e.g. dte=3")
        try:
            values[name] = f90nml.reads(f"&set v={text} /")["set"].get("v")
        except (ValueError, StopIteration) as err:
            raise ConfigError(f"{name}={text}: not a namelist value ({err})") from err
    return values


def load_config(path: str | Path, overrides: Mapping[str, Any] | Iterable[str] | None = None) -> Config:
    """The Config of a namelist file with overrides applied, checked
    parameter by parameter (the CFL limit is checked on the set-up)."""
    values = read_namelist(path) | parse_overrides(overrides)
    return Config.from_dict(values)
