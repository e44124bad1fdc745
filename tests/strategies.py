"""Random but physically valid pom2k states for torch-vs-oracle tests.

``random_state(seed, im, jm, kb)`` draws a grid with steep random
topography and land (h=1 where dry, walls on the north and south edges),
noisy spacings, masks from the oracle's own areas_masks, the sigma levels
from its depth, a stratified T/S, density from dens, flows of both signs
masked by dum/dvm, positive turbulence fields, and random work arrays.
``pom_states()`` is the hypothesis strategy over seeds and small sizes.
Arrays are Fortran-ordered numpy float64, indexed (i, j, k) like pom2k.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from hypothesis import strategies as st

from pompy.config import Config
from pompy.config import parameters

TWO_D = ("el elb elf et etb etf egf egb d ua uab uaf va vab vaf utb utf vtb vtf "
         "adx2d ady2d drx2d dry2d aam2d advua advva fluxua fluxva wubot wvbot "
         "wusurf wvsurf wtsurf wssurf swrad vfluxf vfluxb e_atmos tps tsurf ssurf").split()
THREE_D = ("u ub uf v vb vf w t tb s sb rho rmean tclim sclim q2 q2b q2l q2lb l "
           "km kh kq aam advx advy drhox drhoy a c ee gg dtef zflux").split()


def small_config(im: int, jm: int, kb: int, **overrides) -> Config:
    kl1 = min(6, kb - 3)
    return dataclasses.replace(Config(), im=im, jm=jm, kb=kb, kl1=max(kl1, 2),
                               kl2=kb - 2, **overrides)


def random_state(seed: int, im: int, jm: int, kb: int, oracle, land: float = 0.2):
    rng = np.random.default_rng(seed)
    config = small_config(im, jm, kb)
    params = parameters(config)
    f = lambda shape: np.zeros(shape, order="F")  # noqa: E731
    s = {name: f((kb,)) for name in ("z", "zz", "dz", "dzz")}
    s.update(oracle.call("depth", s, params))
    s["dx"] = np.asfortranarray(rng.uniform(3000, 9000, (im, jm)))
    s["dy"] = np.asfortranarray(rng.uniform(3000, 9000, (im, jm)))
    h = rng.uniform(20, config.hmax, (im, jm))
    h[rng.random((im, jm)) < land] = 1.0          # land
    h[:, 0] = h[:, -1] = 1.0                       # channel walls
    s["h"] = np.asfortranarray(h)
    s["cor"] = np.asfortranarray(rng.uniform(0.5e-4, 1.5e-4, (im, jm)))
    for name in ("art", "aru", "arv", "fsm", "dum", "dvm"):
        s[name] = f((im, jm))
    s.update(oracle.call("areas_masks", s, params))
    fsm, dum, dvm = s["fsm"], s["dum"], s["dvm"]
    n2 = lambda scale: scale * rng.standard_normal((im, jm))  # noqa: E731
    n3 = lambda scale: scale * rng.standard_normal((im, jm, kb))  # noqa: E731
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
        s[name] = np.asfortranarray((5 + 15 * np.exp(zz * h[:, :, None] / 1000)
                                     + n3(0.5)) * fsm[:, :, None])
    for name in ("s", "sb", "sclim"):
        s[name] = np.asfortranarray((35 + n3(0.3)) * fsm[:, :, None])
    s["rho"] = np.asfortranarray(oracle.call("dens(s,t,rho)", s, params)["rho"])
    s["rmean"] = np.asfortranarray(oracle.call("dens(sclim,tclim,rmean)", s, params)["rmean"])
    for name in ("q2", "q2b"):
        s[name] = np.asfortranarray(rng.uniform(1e-7, 1e-3, (im, jm, kb)))
    for name in ("q2l", "q2lb"):
        s[name] = np.asfortranarray(s[name[:-1] if name == "q2l" else "q2b"]
                                    * rng.uniform(1, 50, (im, jm, kb)))
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
    params = dict(params, ramp=float(rng.uniform(0.5, 1.0)))
    return config, params, s


def pom_states(min_size: int = 5, max_size: int = 9):
    """Hypothesis strategy: (seed, im, jm, kb) for random_state."""
    return st.tuples(st.integers(0, 2**31 - 1), st.integers(min_size, max_size),
                     st.integers(min_size, max_size), st.integers(5, 8))


def to_torch(state: dict, dtype=torch.float64, device="cpu") -> dict:
    return {k: torch.as_tensor(np.ascontiguousarray(v), dtype=dtype, device=device)
            for k, v in state.items() if isinstance(v, np.ndarray)}
