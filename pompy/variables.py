"""Every model variable, declared once: pom2k name, dimensions, units, long
name, and whether it is prognostic, restarted and written to output.

Dimensions use pom2k's index names: ``("i", "j")`` for 2-D fields,
``("i", "j", "k")`` for 3-D fields, ``("k",)`` for sigma profiles and the
lateral boundary arrays ``("j",)``, ``("i",)``, ``("j", "k")``, ``("i", "k")``.
Grid arrays are set up once; prognostic fields are advanced by the time
loop; diagnostics hold what the last step computed; work arrays are pom2k's
shared scratch arrays (a, c, ee, ...). The same table serves the cores, the
NetCDF writer, restart files and the oracle adapter.
"""
from __future__ import annotations

from dataclasses import dataclass

I2, I3, K = ("i", "j"), ("i", "j", "k"), ("k",)


@dataclass(frozen=True)
class Var:
    dims: tuple[str, ...]
    units: str
    long_name: str
    kind: str                 # "grid", "prognostic", "diagnostic", "forcing", "boundary", "work"
    restart: bool = False
    output: bool = False

    @property
    def prognostic(self) -> bool:
        return self.kind == "prognostic"


def _g(dims, units, name):
    return Var(dims, units, name, "grid", restart=True, output=True)


def _p(dims, units, name, output=True):
    return Var(dims, units, name, "prognostic", restart=True, output=output)


def _d(dims, units, name, restart=False, output=False):
    return Var(dims, units, name, "diagnostic", restart=restart, output=output)


def _f(dims, units, name):
    return Var(dims, units, name, "forcing", restart=True, output=False)


def _b(dims, units, name):
    return Var(dims, units, name, "boundary", restart=True, output=False)


def _w(dims):
    return Var(dims, "1", "pom2k work array", "work")


VARIABLES: dict[str, Var] = {
    # vertical grid
    "z": _g(K, "1", "sigma at w levels (k=1 surface, 0 to -1)"),
    "zz": _g(K, "1", "sigma at t levels"),
    "dz": _g(K, "1", "z(k)-z(k+1)"),
    "dzz": _g(K, "1", "zz(k)-zz(k+1)"),
    # horizontal grid and masks
    "h": _g(I2, "m", "bottom depth"),
    "dx": _g(I2, "m", "grid spacing along i"),
    "dy": _g(I2, "m", "grid spacing along j"),
    "art": _g(I2, "m2", "area of t cell"),
    "aru": _g(I2, "m2", "area of u cell"),
    "arv": _g(I2, "m2", "area of v cell"),
    "cor": _g(I2, "s-1", "Coriolis parameter"),
    "fsm": _g(I2, "1", "free surface (t-point) mask: 1 wet, 0 land"),
    "dum": _g(I2, "1", "u-point mask"),
    "dvm": _g(I2, "1", "v-point mask"),
    "cbc": _g(I2, "1", "bottom drag coefficient"),
    "rot": _g(I2, "rad", "rotation angle of the grid"),
    "east_c": _g(I2, "m", "easting of cell corner"),
    "north_c": _g(I2, "m", "northing of cell corner"),
    "east_e": _g(I2, "m", "easting of elevation point"),
    "north_e": _g(I2, "m", "northing of elevation point"),
    "east_u": _g(I2, "m", "easting of u point"),
    "north_u": _g(I2, "m", "northing of u point"),
    "east_v": _g(I2, "m", "easting of v point"),
    "north_v": _g(I2, "m", "northing of v point"),
    # external (2-D) mode
    "el": _p(I2, "m", "surface elevation (external mode), level n"),
    "elb": _p(I2, "m", "surface elevation (external mode), level n-1"),
    "et": _p(I2, "m", "surface elevation (internal mode), level n"),
    "etb": _p(I2, "m", "surface elevation (internal mode), level n-1"),
    "egb": _p(I2, "m", "time-averaged elevation of the previous internal step", output=False),
    "ua": _p(I2, "m s-1", "depth-averaged x velocity, level n"),
    "uab": _p(I2, "m s-1", "depth-averaged x velocity, level n-1"),
    "va": _p(I2, "m s-1", "depth-averaged y velocity, level n"),
    "vab": _p(I2, "m s-1", "depth-averaged y velocity, level n-1"),
    "utb": _p(I2, "m2 s-1", "time-averaged x transport of the previous internal step", output=False),
    "vtb": _p(I2, "m2 s-1", "time-averaged y transport of the previous internal step", output=False),
    "d": _d(I2, "m", "h+el", restart=True),
    "dt": _d(I2, "m", "h+et", restart=True),
    "adx2d": _d(I2, "m4 s-2", "vertical integral of advx minus advua", restart=True),
    "ady2d": _d(I2, "m4 s-2", "vertical integral of advy minus advva", restart=True),
    "drx2d": _d(I2, "m4 s-2", "vertical integral of drhox", restart=True),
    "dry2d": _d(I2, "m4 s-2", "vertical integral of drhoy", restart=True),
    "aam2d": _d(I2, "m2 s-1", "vertical average of aam", restart=True),
    "advua": _d(I2, "m4 s-2", "2-D advection and diffusion of ua", restart=True),
    "advva": _d(I2, "m4 s-2", "2-D advection and diffusion of va", restart=True),
    "wubot": _d(I2, "m2 s-2", "x bottom stress (momentum flux)", restart=True, output=True),
    "wvbot": _d(I2, "m2 s-2", "y bottom stress (momentum flux)", restart=True, output=True),
    # surface forcing
    "wusurf": _f(I2, "m2 s-2", "x surface stress (momentum flux, negative for eastward wind)"),
    "wvsurf": _f(I2, "m2 s-2", "y surface stress (momentum flux)"),
    "wtsurf": _f(I2, "K m s-1", "surface heat flux"),
    "wssurf": _f(I2, "m s-1", "surface salinity flux (psu m s-1)"),
    "swrad": _f(I2, "K m s-1", "short wave radiation (negative into the ocean)"),
    "vfluxf": _f(I2, "m s-1", "surface freshwater flux, level n+1 (negative into the ocean)"),
    "vfluxb": _f(I2, "m s-1", "surface freshwater flux, level n-1"),
    "e_atmos": _f(I2, "m", "atmospheric pressure as elevation"),
    "tsurf": _f(I2, "degC", "prescribed surface temperature (nbct 3, 4)"),
    "ssurf": _f(I2, "1e-3", "prescribed surface salinity (nbcs 3)"),
    # internal (3-D) mode
    "u": _p(I3, "m s-1", "x velocity, level n"),
    "ub": _p(I3, "m s-1", "x velocity, level n-1"),
    "v": _p(I3, "m s-1", "y velocity, level n"),
    "vb": _p(I3, "m s-1", "y velocity, level n-1"),
    "w": _d(I3, "m s-1", "sigma-coordinate vertical velocity", restart=True, output=True),
    "t": _p(I3, "degC", "potential temperature (minus tbias), level n"),
    "tb": _p(I3, "degC", "potential temperature (minus tbias), level n-1"),
    "s": _p(I3, "1e-3", "salinity (minus sbias), level n"),
    "sb": _p(I3, "1e-3", "salinity (minus sbias), level n-1"),
    "rho": _d(I3, "1", "density anomaly (rho-1000)/rhoref", restart=True, output=True),
    "rmean": _g(I3, "1", "horizontally averaged initial density anomaly"),
    "tclim": _g(I3, "degC", "climatological temperature (diffusion reference)"),
    "sclim": _g(I3, "1e-3", "climatological salinity (diffusion reference)"),
    "q2": _p(I3, "m2 s-2", "twice the turbulent kinetic energy, level n"),
    "q2b": _p(I3, "m2 s-2", "twice the turbulent kinetic energy, level n-1"),
    "q2l": _p(I3, "m3 s-2", "q2 times turbulent length scale, level n"),
    "q2lb": _p(I3, "m3 s-2", "q2 times turbulent length scale, level n-1"),
    "l": _d(I3, "m", "turbulence length scale", restart=True, output=True),
    "km": _d(I3, "m2 s-1", "vertical kinematic viscosity", restart=True, output=True),
    "kh": _d(I3, "m2 s-1", "vertical diffusivity", restart=True, output=True),
    "kq": _d(I3, "m2 s-1", "vertical diffusivity of q2, q2l", restart=True, output=True),
    "aam": _d(I3, "m2 s-1", "horizontal kinematic viscosity", restart=True, output=True),
    "advx": _d(I3, "m4 s-2", "x horizontal advection and diffusion", restart=True),
    "advy": _d(I3, "m4 s-2", "y horizontal advection and diffusion", restart=True),
    "drhox": _d(I3, "m4 s-2", "x baroclinic pressure gradient", restart=True),
    "drhoy": _d(I3, "m4 s-2", "y baroclinic pressure gradient", restart=True),
    # lateral boundary values (pom2k's bdry block)
    "ele": _b(("j",), "m", "elevation, east boundary"),
    "elw": _b(("j",), "m", "elevation, west boundary"),
    "eln": _b(("i",), "m", "elevation, north boundary"),
    "els": _b(("i",), "m", "elevation, south boundary"),
    "uabe": _b(("j",), "m s-1", "depth-averaged u, east boundary"),
    "uabw": _b(("j",), "m s-1", "depth-averaged u, west boundary"),
    "vabn": _b(("i",), "m s-1", "depth-averaged v, north boundary"),
    "vabs": _b(("i",), "m s-1", "depth-averaged v, south boundary"),
    "tbe": _b(("j", "k"), "degC", "temperature, east boundary"),
    "tbw": _b(("j", "k"), "degC", "temperature, west boundary"),
    "tbn": _b(("i", "k"), "degC", "temperature, north boundary"),
    "tbs": _b(("i", "k"), "degC", "temperature, south boundary"),
    "sbe": _b(("j", "k"), "1e-3", "salinity, east boundary"),
    "sbw": _b(("j", "k"), "1e-3", "salinity, west boundary"),
    "sbn": _b(("i", "k"), "1e-3", "salinity, north boundary"),
    "sbs": _b(("i", "k"), "1e-3", "salinity, south boundary"),
}

# pom2k's scratch arrays: their values between routines are not state, but
# the oracle and the cores pass them so a call can be compared one to one.
WORK = {name: _w(I2) for name in ("elf", "etf", "egf", "uaf", "vaf", "utf", "vtf",
                                  "fluxua", "fluxva", "tps")}
WORK.update({name: _w(I3) for name in ("uf", "vf", "a", "c", "ee", "gg", "dtef", "zflux")})


def shape(name: str, im: int, jm: int, kb: int) -> tuple[int, ...]:
    """The array shape of a declared variable on an im x jm x kb grid."""
    var = VARIABLES.get(name) or WORK.get(name)
    if var is None:
        raise KeyError(f"{name!r} is not a declared pompy variable")
    sizes = {"i": im, "j": jm, "k": kb}
    return tuple(sizes[d] for d in var.dims)


def names(kind: str | None = None, restart: bool | None = None,
          output: bool | None = None) -> list[str]:
    """Declared variable names, filtered by kind, restart and output flags."""
    return [n for n, v in VARIABLES.items()
            if (kind is None or v.kind == kind)
            and (restart is None or v.restart == restart)
            and (output is None or v.output == output)]
