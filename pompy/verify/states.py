"""Random but physically valid pom2k states for the parity suite
(re-implemented from tests/strategies.py: pompy code does not import
tests): :func:`random_state` (steep random topography with land and walls,
noisy spacings, masks from the oracle's areas_masks, stratified T/S, flows
of both signs) and the variants some routines need (open boundaries,
smol_adif's inputs, grid_coordinates' arrays); Fortran-ordered float64
numpy, moved to torch by :func:`as_tensors`."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from pompy.config import Config, parameters

# The largest grid the routine and section checks draw their random states
# on (pom2k's own seamount grid). A routine is a local stencil whose code
# branches only at the grid's edges (i = 1, 2, im-1, im and likewise in j)
# and over the levels: a window with all four edges, an interior, every
# level and the config's parameters runs every branch the whole grid runs;
# the grid's size only lengthens the index ranges. What depends on the
# whole grid is checked on it: the set-ups, the whole run against the twin,
# the elevation solver's self-checks, two whole steps' gradients.
WINDOW = (65, 49)


def window(config: Config) -> Config:
    """``config`` on at most WINDOW columns (its levels and parameters):
    the grid the routine and section checks draw their states on."""
    im, jm = min(config.im, WINDOW[0]), min(config.jm, WINDOW[1])
    return config if (im, jm) == (config.im, config.jm) else \
        dataclasses.replace(config, im=im, jm=jm)


def windowed(config: Config) -> bool:
    """Whether the routine checks of ``config`` run on a window of its grid."""
    return window(config) is not config

TWO_D = ("el elb elf et etb etf egf egb d ua uab uaf va vab vaf utb utf vtb vtf "
         "adx2d ady2d drx2d dry2d aam2d advua advva fluxua fluxva wubot wvbot "
         "wusurf wvsurf wtsurf wssurf swrad vfluxf vfluxb e_atmos tps tsurf ssurf").split()
THREE_D = ("u ub uf v vb vf w t tb s sb rho rmean tclim sclim q2 q2b q2l q2lb l "
           "km kh kq aam advx advy drhox drhoy a c ee gg dtef zflux").split()


def random_state(seed: int, config: Config, oracle, land: float = 0.2
                 ) -> tuple[dict, dict[str, np.ndarray]]:
    """(params, state): a random but physically valid pom2k state on the
    config's grid, Fortran-ordered float64 numpy, indexed (i, j, k): the
    oracle's sigma levels (depth), spacings 3-9 km, depths up to hmax with
    a fraction ``land`` of dry points (h = 1) and walls on the north and
    south edges, masks from the oracle's areas_masks, elevations and
    velocities of both signs masked, a stratified T/S with rho and rmean
    from the oracle's dens, positive turbulence fields and viscosities,
    small random work arrays and boundary values; the config's parameters
    with a random ramp."""
    im, jm, kb = config.im, config.jm, config.kb
    rng = np.random.default_rng(seed)
    params = parameters(config)

    def f(shape):
        return np.zeros(shape, order="F")

    def n2(scale):
        return scale * rng.standard_normal((im, jm))

    def n3(scale):
        return scale * rng.standard_normal((im, jm, kb))

    s = {name: f((kb,)) for name in ("z", "zz", "dz", "dzz")}
    s.update(oracle.call("depth", s, params))
    s["dx"] = np.asfortranarray(rng.uniform(3000, 9000, (im, jm)))
    s["dy"] = np.asfortranarray(rng.uniform(3000, 9000, (im, jm)))
    h = rng.uniform(20, config.hmax, (im, jm))
    h[rng.random((im, jm)) < land] = 1.0
    h[:, 0] = h[:, -1] = 1.0
    s["h"] = np.asfortranarray(h)
    s["cor"] = np.asfortranarray(rng.uniform(0.5e-4, 1.5e-4, (im, jm)))
    for name in ("art", "aru", "arv", "fsm", "dum", "dvm"):
        s[name] = f((im, jm))
    s.update(oracle.call("areas_masks", s, params))
    fsm, dum, dvm = s["fsm"], s["dum"], s["dvm"]
    for name in TWO_D:
        s[name] = np.asfortranarray(n2(1e-3))
    for name in THREE_D:
        s[name] = np.asfortranarray(n3(1e-3))
    s["cbc"] = np.asfortranarray(rng.uniform(0.0025, 0.1, (im, jm)))
    for name in ("el", "elb", "elf", "et", "etb", "etf", "egf", "egb"):
        s[name] = np.asfortranarray(n2(0.3) * fsm)
    s["d"] = np.asfortranarray(h + s["el"])
    s["dt"] = np.asfortranarray(h + s["et"])
    for name, mask in (("ua", dum), ("uab", dum), ("va", dvm), ("vab", dvm)):
        s[name] = np.asfortranarray(n2(0.3) * mask)
    for name, mask in (("u", dum), ("ub", dum), ("v", dvm), ("vb", dvm)):
        s[name] = np.asfortranarray(n3(0.3) * mask[:, :, None])
    s["w"] = np.asfortranarray(n3(1e-4) * fsm[:, :, None])
    zz = s["zz"][None, None, :]
    for name in ("t", "tb", "tclim"):
        s[name] = np.asfortranarray((5 + 15 * np.exp(zz * h[:, :, None] / 1000) + n3(0.5))
                                    * fsm[:, :, None])
    for name in ("s", "sb", "sclim"):
        s[name] = np.asfortranarray((35 + n3(0.3)) * fsm[:, :, None])
    s["rho"] = np.asfortranarray(oracle.call("dens(s,t,rho)", s, params)["rho"])
    s["rmean"] = np.asfortranarray(oracle.call("dens(sclim,tclim,rmean)", s, params)["rmean"])
    for name in ("q2", "q2b"):
        s[name] = np.asfortranarray(rng.uniform(1e-7, 1e-3, (im, jm, kb)))
    s["q2l"] = np.asfortranarray(s["q2"] * rng.uniform(1, 50, (im, jm, kb)))
    s["q2lb"] = np.asfortranarray(s["q2b"] * rng.uniform(1, 50, (im, jm, kb)))
    s["l"] = np.asfortranarray(rng.uniform(0.1, 50, (im, jm, kb)))
    for name in ("km", "kh", "kq"):
        s[name] = np.asfortranarray(rng.uniform(1e-5, 1e-1, (im, jm, kb)))
    s["aam"] = np.asfortranarray(rng.uniform(10, 1000, (im, jm, kb)))
    s["aam2d"] = np.asfortranarray(rng.uniform(10, 1000, (im, jm)))
    s["wusurf"] = np.asfortranarray(n2(1e-4))
    s["wvsurf"] = np.asfortranarray(n2(1e-4))
    s["swrad"] = np.asfortranarray(-np.abs(n2(1e-4)))
    for name, n in (("ele", jm), ("elw", jm), ("uabe", jm), ("uabw", jm),
                    ("eln", im), ("els", im), ("vabn", im), ("vabs", im)):
        s[name] = rng.standard_normal(n) * 0.1
    for name, n in (("tbe", jm), ("tbw", jm), ("tbn", im), ("tbs", im)):
        s[name] = np.asfortranarray(rng.uniform(5, 20, (n, kb)))
    for name, n in (("sbe", jm), ("sbw", jm), ("sbn", im), ("sbs", im)):
        s[name] = np.asfortranarray(rng.uniform(34, 36, (n, kb)))
    return dict(params, ramp=float(rng.uniform(0.5, 1.0))), s


def open_state(state: dict, seed: int) -> dict:
    """``state`` with open boundaries (tests/test_core_boundary.py): masks
    all 1 and u, v, w of alternating sign, so that bcond's upstream
    branches of cases 4 and 6 meet inflow and outflow on every edge."""
    rng = np.random.default_rng(seed)
    im, jm, kb = state["u"].shape
    i, j, k = np.meshgrid(np.arange(im), np.arange(jm), np.arange(kb), indexing="ij")
    sign = np.where((i + j + k) % 2 == 0, 1.0, -1.0)
    s = dict(state)
    for name in ("fsm", "dum", "dvm"):
        s[name] = np.ones((im, jm), order="F")
    for name, scale in (("u", 0.3), ("v", 0.3), ("w", 1e-4)):
        s[name] = np.asfortranarray(scale * rng.uniform(0.1, 1, (im, jm, kb)) * sign)
    return s


def _prev(a: np.ndarray, axis: int) -> np.ndarray:
    """a(i-1) along ``axis`` (first slab repeated)."""
    return np.concatenate([a.take([0], axis), a.take(range(a.shape[axis] - 1), axis)], axis)


def smol_parity_state(state: dict, params: dict, seed: int) -> dict:
    """Inputs of a direct smol_adif call (tests/test_core_tracers.py): ff
    positive with a quarter of the points below value_min, mass fluxes of
    both signs around each point's second-order threshold, so that all
    three of its outcomes occur."""
    rng = np.random.default_rng(seed)
    shape = state["t"].shape
    ff = rng.uniform(0.5, 30, shape)
    low = rng.random(shape) < 0.25
    ff[low] = rng.choice([-1e-3, 0.0, 3e-10], size=int(low.sum()))
    dti2, dt = params["dti2"], state["dt"][:, :, None]
    thresholds = (state["aru"][:, :, None] * (_prev(dt, 0) + dt) / (2 * dti2),
                  state["arv"][:, :, None] * (_prev(dt, 1) + dt) / (2 * dti2),
                  _prev(state["dzz"], 0)[None, None, :] * dt / dti2)

    def flux(threshold):
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return np.asfortranarray(sign * threshold * 10 ** rng.uniform(-2, 2, shape))

    x, y, z = (flux(t) for t in thresholds)
    return dict(state, ff=np.asfortranarray(ff), xmassflux=x, ymassflux=y, zwflux=z)


def coordinates_state(state: dict, seed: int) -> dict:
    """grid_coordinates' in/output arrays, random (it overwrites them)."""
    rng = np.random.default_rng(seed)
    shape = state["dx"].shape
    extra = {name: np.asfortranarray(rng.standard_normal(shape))
             for name in ("east_c", "north_c", "east_e", "north_e", "east_u", "north_u",
                          "east_v", "north_v", "rot")}
    return dict(state, **extra)


def as_tensors(state: Mapping, dtype: torch.dtype, device: torch.device) -> dict:
    return {k: torch.as_tensor(np.ascontiguousarray(v), dtype=dtype, device=device)
            for k, v in state.items() if isinstance(v, np.ndarray)}


def as_numpy(x) -> Any:
    return x.detach().to("cpu", torch.float64).numpy() if torch.is_tensor(x) else x
