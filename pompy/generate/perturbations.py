"""The members of an ensemble and how each differs from member 0.

Member 0 is the unperturbed run. Member m > 0 is perturbed from the seed
pair (S, m): its perturbation seed is
``numpy.random.SeedSequence([S, m]).generate_state(1, numpy.uint64)[0] >> 1``
(a non-negative int64, :func:`member_seed`), and the kind of
perturbation (pompy.settings.generate.PERTURBATIONS) says what it
changes:

``ic`` (initial conditions): after the set-up, t and tb get amplitude
    times the normal draws of ``numpy.random.default_rng(seed)`` at wet
    points and levels 1..kb-1 (:func:`ic_perturbation`), and rho is
    recomputed by the core's dens as the set-up computes it
    (:func:`perturb_ic`). The grid stays the unperturbed one, so every
    member shares one grid.

``wind`` (forcing): the member runs from member 0's initial state with
    its own factor on the seamount's wind stress, the config's
    wind_factor times 1 + amplitude z, z one normal draw
    (:func:`wind_factor`). surface_forcing recomputes the stress every
    step from the parameters, so the factor is a parameter of the run,
    not a field of the state.

``params`` (the case): member m > 0 draws each case parameter named in
    ``ranges`` (pompy.config.CASE_PARAMS: the seamount's inflow,
    strat_amplitude, seamount_height, and wind_factor) uniformly in its
    range, then a spin-up offset of whole snapshot intervals within the
    spread, all
    from ``numpy.random.default_rng(seed)`` in that order
    (:func:`case_parameters`); its initial state is the set-up of the config
    with its values, run the common spin-up plus its offset. The offsets
    spread the members' windows along the spun-up flow.

The draws are made with numpy on the CPU in float64 whatever the core's
device and precision, so a member is the same on any machine.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from pompy.calls import apply
from pompy.config import Config, case_of
from pompy.core.model import Core

PERTURBATION_TEXT = {   # the dataset's "perturbation" attribute, by kind
    "ic": ("member 0 unperturbed; member m > 0: t and tb += amplitude (degC) * "
           "numpy.random.default_rng(perturbation_seed[m]).standard_normal((im, jm, kb)) at "
           "fsm = 1, k = 1..kb-1 (pom2k order), then rho = dens(s, t)"),
    "wind": ("member 0 unperturbed; member m > 0: the initial state of member 0, run with "
             "wind_factor[m] = (the namelist's wind_factor) * (1 + amplitude * "
             "numpy.random.default_rng(perturbation_seed[m]).standard_normal()), the factor on "
             "the seamount's wind stress; restart its snapshots with that wind_factor"),
    "params": ("member 0 unperturbed; member m > 0: with rng = numpy.random.default_rng("
               "perturbation_seed[m]), each case parameter of the ranges attribute, in its "
               "order, = rng.uniform(low, high), then spinup_offset[m] = every * "
               "rng.integers(0, spread // every + 1) internal steps (every: the steps between "
               "snapshots); the member is the set-up of the config with its values (stored "
               "per member), run the common spin-up plus its offset"),
}


def case_parameters(config: Config, ranges: Mapping[str, tuple[float, float]], seed: int,
                    spread: int, every: int) -> tuple[dict[str, float], int]:
    """A params member's (case parameters, spin-up offset in internal
    steps): the config's and 0 for member 0 (seed -1), else uniform draws
    of ``ranges`` then an offset of whole snapshot intervals (``every``
    steps) within ``spread`` steps (the module says how)."""
    values = case_of(config)
    if seed < 0:
        return values, 0
    rng = np.random.default_rng(seed)
    for name, (low, high) in ranges.items():
        values[name] = float(rng.uniform(low, high))
    return values, every * int(rng.integers(0, spread // every + 1))


def member_seed(seed: int, member: int) -> int:
    """Member m's perturbation seed from the run's seed S: a non-negative
    int64 drawn from SeedSequence([S, m]); -1 for member 0 (unperturbed)."""
    if member == 0:
        return -1
    return int(np.random.SeedSequence([seed, member]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def ic_perturbation(fsm: np.ndarray, kb: int, seed: int, amplitude: float) -> np.ndarray:
    """The ic perturbation of t (pom2k order): amplitude * N(0, 1) at wet
    points, levels 1..kb-1, drawn as (im, jm, kb) in pom2k's order."""
    noise = np.random.default_rng(seed).standard_normal((*fsm.shape, kb))
    wet = fsm[:, :, None] * (np.arange(kb) < kb - 1)
    return amplitude * (noise * wet)


def wind_factor(config: Config, perturb: str, seed: int, amplitude: float) -> float:
    """The wind factor of a member of perturbation seed ``seed`` (-1: member
    0): the config's, times 1 + amplitude * one N(0, 1) draw for wind."""
    if perturb != "wind" or seed < 0:
        return config.wind_factor
    return config.wind_factor * (1.0 + amplitude * np.random.default_rng(seed).standard_normal())


def member_cases(config: Config, perturb: str, seeds: list[int], amplitude: float,
                 ranges: Mapping[str, tuple[float, float]], spread: int, every: int
                 ) -> list[tuple[dict[str, float], int]]:
    """Each member's (case parameters, spin-up offset): drawn for params
    members (:func:`case_parameters`); else the config's, with the wind
    member's factor (:func:`wind_factor`), and no offset."""
    if perturb == "params":
        return [case_parameters(config, ranges, seed, spread, every) for seed in seeds]
    return [(case_of(config) | {"wind_factor": wind_factor(config, perturb, seed, amplitude)}, 0)
            for seed in seeds]


def perturb_ic(core: Core, seed: int, amplitude: float) -> None:
    """t and tb of a set-up core perturbed (ic_perturbation), rho recomputed
    by the core's own dens (its ``params`` and ``routines``) as the set-up
    does, and the three fields injected."""
    fsm = core.fsm.detach().cpu().double().numpy()
    delta = torch.from_numpy(ic_perturbation(fsm, core.config.kb, seed, amplitude))
    delta = delta.to(device=core.device, dtype=core.dtype)
    s = dict(core.state)
    s["t"], s["tb"] = s["t"] + delta, s["tb"] + delta
    with torch.no_grad():
        apply(s, core.params, "dens(s,t,rho)", routines=core.routines)
    core.inject({name: s[name] for name in ("t", "tb", "rho")})


def perturb_start(core: Core, perturb: str, seed: int, amplitude: float) -> None:
    """A member's perturbation of the initial state, if it has one: ic
    members > 0 (seed >= 0); wind members start from member 0's state."""
    if seed >= 0 and perturb == "ic":
        perturb_ic(core, seed, amplitude)
