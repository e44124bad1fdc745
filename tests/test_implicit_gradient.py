"""The implicit core's gradient is its Fortran twin's gradient.

(draft: figures to be measured)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.autograd import forward_ad

from pompy.core.implicit import ImplicitCore
from pompy.oracle.driver import new_state, run_steps
from test_gradient_vs_fortran import Loss, direction, smooth
from test_implicit_oracle import small_seamount

WARM, STEPS = 5, 50
RTOL = 1e-6


def implicit_seamount(**changes):
    """21x17x11 seamount at dti = 180 s (dte 6, isplit 30), cg_maxiter 150."""
    return small_seamount(**{**dict(dte=6.0, isplit=30, cg_maxiter=150), **changes})


@dataclasses.dataclass
class Case:
    """A direction in the developed state (``inputs`` perturbed by ``d``,
    the same d for each) or in one parameter (``param``, d = 1), and J."""
    config: object
    base: dict
    loss: Loss
    inputs: tuple = ()
    d: np.ndarray | None = None
    param: str | None = None

    def oracle_j(self, h: float) -> float:
        """J of the Fortran twin's 50 steps from x + h d."""
        state = {name: value.copy(order="F") for name, value in self.base.items()}
        config = self.config
        if self.param is not None:
            config = dataclasses.replace(config, **{self.param: getattr(config, self.param) + h})
        for name in self.inputs:
            state[name] = np.asfortranarray(state[name] + h * self.d)
        run_steps(state, config, WARM + 1, WARM + STEPS, scheme="implicit")
        return self.loss.numpy(state), state

    def central(self, h: float) -> float:
        return (self.oracle_j(h)[0] - self.oracle_j(-h)[0]) / (2.0 * h)

    def _core(self) -> ImplicitCore:
        core = ImplicitCore(self.config)
        core.load_state(self.base, iint=WARM)
        core.iend = WARM + STEPS
        return core

    def reverse(self) -> tuple[float, float, dict]:
        """(J, <dJ/dx, d>) by autograd through the 50 steps, and the final state."""
        core = self._core()
        if self.param is not None:
            leaves = [torch.tensor(getattr(self.config, self.param), dtype=torch.float64,
                                   requires_grad=True)]
            core.params[self.param] = leaves[0]
            tangents = [torch.ones((), dtype=torch.float64)]
        else:
            leaves = [core.state[name].clone().requires_grad_(True) for name in self.inputs]
            for name, leaf in zip(self.inputs, leaves):
                core.state[name] = leaf
            tangents = [torch.from_numpy(self.d)] * len(leaves)
        core.run_time_loop()
        J = self.loss.torch(core.state)
        J.backward()
        g = sum(float(torch.sum(leaf.grad * t)) for leaf, t in zip(leaves, tangents)
                if leaf.grad is not None)     # None: not read (elb, etb: overwritten)
        return J.item(), g, core.numpy_state()

    def forward(self) -> float:
        """<dJ/dx, d> by forward mode (dual numbers) through the 50 steps."""
        core = self._core()
        with forward_ad.dual_level():
            if self.param is not None:
                core.params[self.param] = forward_ad.make_dual(
                    torch.tensor(getattr(self.config, self.param), dtype=torch.float64),
                    torch.ones((), dtype=torch.float64))
            else:
                for name in self.inputs:
                    core.state[name] = forward_ad.make_dual(core.state[name],
                                                            torch.from_numpy(self.d))
            core.run_time_loop()
            J = self.loss.torch(core.state)
            return float(forward_ad.unpack_dual(J).tangent)


def make_case(kind: str, seed: int, config=None) -> Case:
    """kind: "t" (t, tb; 1 degC), "el" (el, elb; 1 cm) or "horcon"."""
    config = config or implicit_seamount()
    base = new_state(config)
    run_steps(base, config, 1, WARM, scheme="implicit")
    rng = np.random.default_rng(seed)
    if kind == "horcon":
        return Case(config, base, Loss(base, rng), param="horcon")
    inputs, mask, amplitude = {"t": (("t", "tb"), "fsm", 1.0),
                               "el": (("el", "elb", "et", "etb", "d", "dt"), "fsm", 0.01)}[kind]
    shape = base[inputs[0]].shape
    if len(shape) == 2:
        d = smooth(rng.standard_normal(shape)) * base[mask]
        d = amplitude * d / np.abs(d).max()
    else:
        d = direction(base, shape, base[mask], amplitude, rng)
    return Case(config, base, Loss(base, rng), inputs, d)
