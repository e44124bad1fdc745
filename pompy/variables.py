"""Every model variable, declared once: pom2k name, dimensions, grid
location, units, long name, and the categories it belongs to.

Dimensions use pom2k's index names: ``("i", "j")`` for 2-D fields,
``("i", "j", "k")`` for 3-D fields, ``("k",)`` for sigma profiles and the
lateral boundary arrays ``("j",)``, ``("i",)``, ``("j", "k")``, ``("i", "k")``.
The location is the C-grid point a value sits on: ``T`` (elevation,
tracers; the cell centre at the sigma t-levels zz), ``U`` and ``V`` (the
faces between i-1 and i, j-1 and j), ``W`` (the cell centre at the w-levels
z, where the turbulence closure lives) and ``corner``.

Kinds: grid arrays are set up once; prognostic fields are advanced by the
time loop; diagnostics hold what the last step computed; forcing and
boundary arrays drive it; work arrays are pom2k's shared scratch arrays
(a, c, ee, ...). Every other category is derived here and nowhere else
(:data:`CATEGORIES`): restart files, snapshots, output, the loop inputs a
core clones, the W-level fields, the IC-file fields, the trainer's channels.
The same table serves the cores, the NetCDF writer, restart files, IC files,
the oracle adapter and the tests' random states.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

I2, I3, K = ("i", "j"), ("i", "j", "k"), ("k",)
LOCATIONS = ("T", "U", "V", "W", "corner")


@dataclass(frozen=True)
class Var:
    location: str             # one of LOCATIONS
    dims: tuple[str, ...]
    units: str
    long_name: str
    kind: str                 # "grid", "prognostic", "diagnostic", "forcing", "boundary", "work"
    restart: bool = False     # in restart files and snapshots: what a step reads from before
    output: bool = False      # written to the NetCDF output at each print step

    @property
    def prognostic(self) -> bool:
        return self.kind == "prognostic"


def _g(loc, dims, units, name):
    return Var(loc, dims, units, name, "grid", restart=True, output=True)


def _p(loc, dims, units, name, output=True):
    return Var(loc, dims, units, name, "prognostic", restart=True, output=output)


def _d(loc, dims, units, name, restart=False, output=False):
    return Var(loc, dims, units, name, "diagnostic", restart=restart, output=output)


def _f(loc, dims, units, name):
    return Var(loc, dims, units, name, "forcing", restart=True, output=False)


def _b(loc, dims, units, name):
    return Var(loc, dims, units, name, "boundary", restart=True, output=False)


def _w(dims):
    return Var("T", dims, "1", "pom2k work array", "work")


VARIABLES: dict[str, Var] = {
    # vertical grid
    "z": _g("W", K, "1", "sigma at w levels (k=1 surface, 0 to -1)"),
    "zz": _g("T", K, "1", "sigma at t levels"),
    "dz": _g("W", K, "1", "z(k)-z(k+1)"),
    "dzz": _g("T", K, "1", "zz(k)-zz(k+1)"),
    # horizontal grid and masks
    "h": _g("T", I2, "m", "bottom depth"),
    "dx": _g("T", I2, "m", "grid spacing along i"),
    "dy": _g("T", I2, "m", "grid spacing along j"),
    "art": _g("T", I2, "m2", "area of t cell"),
    "aru": _g("U", I2, "m2", "area of u cell"),
    "arv": _g("V", I2, "m2", "area of v cell"),
    "cor": _g("T", I2, "s-1", "Coriolis parameter"),
    "fsm": _g("T", I2, "1", "free surface (t-point) mask: 1 wet, 0 land"),
    "dum": _g("U", I2, "1", "u-point mask"),
    "dvm": _g("V", I2, "1", "v-point mask"),
    "cbc": _g("T", I2, "1", "bottom drag coefficient"),
    "rot": _g("T", I2, "rad", "rotation angle of the grid"),
    "east_c": _g("corner", I2, "m", "easting of cell corner"),
    "north_c": _g("corner", I2, "m", "northing of cell corner"),
    "east_e": _g("T", I2, "m", "easting of elevation point"),
    "north_e": _g("T", I2, "m", "northing of elevation point"),
    "east_u": _g("U", I2, "m", "easting of u point"),
    "north_u": _g("U", I2, "m", "northing of u point"),
    "east_v": _g("V", I2, "m", "easting of v point"),
    "north_v": _g("V", I2, "m", "northing of v point"),
    # external (2-D) mode
    "el": _p("T", I2, "m", "surface elevation (external mode), level n"),
    "elb": _p("T", I2, "m", "surface elevation (external mode), level n-1"),
    "et": _p("T", I2, "m", "surface elevation (internal mode), level n"),
    "etb": _p("T", I2, "m", "surface elevation (internal mode), level n-1"),
    "egb": _p("T", I2, "m", "time-averaged elevation of the previous internal step", output=False),
    "ua": _p("U", I2, "m s-1", "depth-averaged x velocity, level n"),
    "uab": _p("U", I2, "m s-1", "depth-averaged x velocity, level n-1"),
    "va": _p("V", I2, "m s-1", "depth-averaged y velocity, level n"),
    "vab": _p("V", I2, "m s-1", "depth-averaged y velocity, level n-1"),
    "utb": _p("U", I2, "m2 s-1", "time-averaged x transport of the previous internal step", output=False),
    "vtb": _p("V", I2, "m2 s-1", "time-averaged y transport of the previous internal step", output=False),
    "d": _d("T", I2, "m", "h+el", restart=True),
    "dt": _d("T", I2, "m", "h+et", restart=True),
    "adx2d": _d("T", I2, "m4 s-2", "vertical integral of advx minus advua", restart=True),
    "ady2d": _d("T", I2, "m4 s-2", "vertical integral of advy minus advva", restart=True),
    "drx2d": _d("T", I2, "m4 s-2", "vertical integral of drhox", restart=True),
    "dry2d": _d("T", I2, "m4 s-2", "vertical integral of drhoy", restart=True),
    "aam2d": _d("T", I2, "m2 s-1", "vertical average of aam", restart=True),
    "advua": _d("U", I2, "m4 s-2", "2-D advection and diffusion of ua", restart=True),
    "advva": _d("V", I2, "m4 s-2", "2-D advection and diffusion of va", restart=True),
    "wubot": _d("U", I2, "m2 s-2", "x bottom stress (momentum flux)", restart=True, output=True),
    "wvbot": _d("V", I2, "m2 s-2", "y bottom stress (momentum flux)", restart=True, output=True),
    # surface forcing
    "wusurf": _f("T", I2, "m2 s-2", "x surface stress (momentum flux, negative for eastward wind)"),
    "wvsurf": _f("T", I2, "m2 s-2", "y surface stress (momentum flux)"),
    "wtsurf": _f("T", I2, "K m s-1", "surface heat flux"),
    "wssurf": _f("T", I2, "m s-1", "surface salinity flux (psu m s-1)"),
    "swrad": _f("T", I2, "K m s-1", "short wave radiation (negative into the ocean)"),
    "vfluxf": _f("T", I2, "m s-1", "surface freshwater flux, level n+1 (negative into the ocean)"),
    "vfluxb": _f("T", I2, "m s-1", "surface freshwater flux, level n-1"),
    "e_atmos": _f("T", I2, "m", "atmospheric pressure as elevation"),
    "tsurf": _f("T", I2, "degC", "prescribed surface temperature (nbct 3, 4)"),
    "ssurf": _f("T", I2, "1e-3", "prescribed surface salinity (nbcs 3)"),
    # internal (3-D) mode
    "u": _p("U", I3, "m s-1", "x velocity, level n"),
    "ub": _p("U", I3, "m s-1", "x velocity, level n-1"),
    "v": _p("V", I3, "m s-1", "y velocity, level n"),
    "vb": _p("V", I3, "m s-1", "y velocity, level n-1"),
    "w": _d("W", I3, "m s-1", "sigma-coordinate vertical velocity", restart=True, output=True),
    "t": _p("T", I3, "degC", "potential temperature (minus tbias), level n"),
    "tb": _p("T", I3, "degC", "potential temperature (minus tbias), level n-1"),
    "s": _p("T", I3, "1e-3", "salinity (minus sbias), level n"),
    "sb": _p("T", I3, "1e-3", "salinity (minus sbias), level n-1"),
    "rho": _d("T", I3, "1", "density anomaly (rho-1000)/rhoref", restart=True, output=True),
    "rmean": _g("T", I3, "1", "horizontally averaged initial density anomaly"),
    "tclim": _g("T", I3, "degC", "climatological temperature (diffusion reference)"),
    "sclim": _g("T", I3, "1e-3", "climatological salinity (diffusion reference)"),
    "q2": _p("W", I3, "m2 s-2", "twice the turbulent kinetic energy, level n"),
    "q2b": _p("W", I3, "m2 s-2", "twice the turbulent kinetic energy, level n-1"),
    "q2l": _p("W", I3, "m3 s-2", "q2 times turbulent length scale, level n"),
    "q2lb": _p("W", I3, "m3 s-2", "q2 times turbulent length scale, level n-1"),
    "l": _d("W", I3, "m", "turbulence length scale", restart=True, output=True),
    "km": _d("W", I3, "m2 s-1", "vertical kinematic viscosity", restart=True, output=True),
    "kh": _d("W", I3, "m2 s-1", "vertical diffusivity", restart=True, output=True),
    "kq": _d("W", I3, "m2 s-1", "vertical diffusivity of q2, q2l", restart=True, output=True),
    "aam": _d("T", I3, "m2 s-1", "horizontal kinematic viscosity", restart=True, output=True),
    "advx": _d("U", I3, "m4 s-2", "x horizontal advection and diffusion", restart=True),
    "advy": _d("V", I3, "m4 s-2", "y horizontal advection and diffusion", restart=True),
    "drhox": _d("U", I3, "m4 s-2", "x baroclinic pressure gradient", restart=True),
    "drhoy": _d("V", I3, "m4 s-2", "y baroclinic pressure gradient", restart=True),
    # lateral boundary values (pom2k's bdry block)
    "ele": _b("T", ("j",), "m", "elevation, east boundary"),
    "elw": _b("T", ("j",), "m", "elevation, west boundary"),
    "eln": _b("T", ("i",), "m", "elevation, north boundary"),
    "els": _b("T", ("i",), "m", "elevation, south boundary"),
    "uabe": _b("U", ("j",), "m s-1", "depth-averaged u, east boundary"),
    "uabw": _b("U", ("j",), "m s-1", "depth-averaged u, west boundary"),
    "vabn": _b("V", ("i",), "m s-1", "depth-averaged v, north boundary"),
    "vabs": _b("V", ("i",), "m s-1", "depth-averaged v, south boundary"),
    "tbe": _b("T", ("j", "k"), "degC", "temperature, east boundary"),
    "tbw": _b("T", ("j", "k"), "degC", "temperature, west boundary"),
    "tbn": _b("T", ("i", "k"), "degC", "temperature, north boundary"),
    "tbs": _b("T", ("i", "k"), "degC", "temperature, south boundary"),
    "sbe": _b("T", ("j", "k"), "1e-3", "salinity, east boundary"),
    "sbw": _b("T", ("j", "k"), "1e-3", "salinity, west boundary"),
    "sbn": _b("T", ("i", "k"), "1e-3", "salinity, north boundary"),
    "sbs": _b("T", ("i", "k"), "1e-3", "salinity, south boundary"),
}

# pom2k's scratch arrays: their values between routines are not state, but
# the oracle and the cores pass them so a call can be compared one to one.
WORK = {name: _w(I2) for name in ("elf", "etf", "egf", "uaf", "vaf", "utf", "vtf",
                                  "fluxua", "fluxva", "tps")}
WORK.update({name: _w(I3) for name in ("uf", "vf", "a", "c", "ee", "gg", "dtef", "zflux")})
ALL = {**VARIABLES, **WORK}

# What a core reports of each step besides its state (pompy.core.model.Core.series),
# written with each output record where the core has it; not state, so no
# restart, snapshot or comparison reads it.
SERIES = {"cg_iterations": _d("T", (), "1", "iterations of the record step's elevation solve "
                                            "(implicit core; the reference CG of --fortran-math: "
                                            "its fixed budget, cg_maxiter)", output=True)}

# The fields of pompy's IC file (pompy.icfile, iproblem 3): required, then optional.
IC_REQUIRED = ("dx", "dy", "h", "cor", "t", "s")
IC_OPTIONAL = ("tclim", "sclim", "rmean", "u", "v", "ua", "va", "el", "east_e", "north_e",
               "ele", "elw", "eln", "els", "uabe", "uabw", "vabn", "vabs",
               "tbe", "tbw", "tbn", "tbs", "sbe", "sbw", "sbn", "sbs")
# The fields a trainer packs into network channels, in channel order: the
# 3-D ones at k = 1..kb-1, then the 2-D ones (4*(kb-1)+5 channels).
PACKED = ("u", "v", "t", "s", "el", "ua", "va", "uab", "vab")

CATEGORIES: dict[str, Callable[[str, Var], bool]] = {
    **{kind: (lambda kind: lambda n, v: v.kind == kind)(kind)
       for kind in ("grid", "prognostic", "diagnostic", "forcing", "boundary", "work")},
    "restart": lambda n, v: v.restart,
    "output": lambda n, v: v.output,
    # what a core's capture() holds and restore() needs to continue bit for bit
    "snapshot": lambda n, v: v.restart,
    # what run_time_loop clones at entry, so any may be a leaf with requires_grad
    "loop_input": lambda n, v: v.restart and v.kind != "grid",
    "w_level": lambda n, v: v.location == "W",
    "ic_required": lambda n, v: n in IC_REQUIRED,
    "ic_optional": lambda n, v: n in IC_OPTIONAL,
    "packed": lambda n, v: n in PACKED,
}


def shape(name: str, im: int, jm: int, kb: int) -> tuple[int, ...]:
    """The array shape of a declared variable on an im x jm x kb grid."""
    var = ALL.get(name)
    if var is None:
        raise KeyError(f"{name!r} is not a declared pompy variable")
    sizes = {"i": im, "j": jm, "k": kb}
    return tuple(sizes[d] for d in var.dims)


def names(category: str | None = None, restart: bool | None = None,
          output: bool | None = None, kind: str | None = None) -> list[str]:
    """Declared variable names (work arrays only for category "work") in
    table order, filtered by a category of :data:`CATEGORIES` and by the
    restart and output flags; "ic_*" and "packed" in their own order."""
    if category is not None and category not in CATEGORIES:
        raise KeyError(f"unknown variable category {category!r}: one of {', '.join(CATEGORIES)}")
    category = category or kind
    table = WORK if category == "work" else VARIABLES
    chosen = [n for n, v in table.items()
              if (category is None or CATEGORIES[category](n, v))
              and (restart is None or v.restart == restart)
              and (output is None or v.output == output)]
    order = {"ic_required": IC_REQUIRED, "ic_optional": IC_OPTIONAL, "packed": PACKED}.get(category)
    return [n for n in order if n in chosen] if order else chosen
