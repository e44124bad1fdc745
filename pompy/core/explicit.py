"""ExplicitCore: pom2k's main program in torch, as the oracle's run_steps.

    core = ExplicitCore(config, device="cpu", dtype=torch.float64)
    core.run_initialization()          # pom2k's set-up, iint = 0
    core.run_time_loop()               # iint = core.iint+1 .. core.iend

Every variable of pompy.variables is an attribute (``core.u``, ``core.el``)
and an entry of ``core.state``. The set-up is computed on the CPU in
float64, then moved to the core's device and dtype, so a float32 or CUDA
run starts from the same initial state as the float64 CPU run.

Each internal step reads two detached values from the device: vamax after
the external passes (pom2k's velocity check, which decides whether the
internal mode runs) and, after the internal mode, whether every prognostic
field is finite. pom2k stops after a step whose vamax exceeds vmaxl; pompy
also stops on a NaN or infinity, which pom2k's check skips. Either stop
raises :class:`pompy.run.ModelStop`; ``last_good`` then holds the state of
the step before, which the time loop never writes in place.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from pompy import variables
from pompy.config import Config, parameters
from pompy.core import stepping
from pompy.core.stepping import run
from pompy.ops import X, Y, inside, shift
from pompy.run import CFLViolation, ModelStop, NonFiniteState, first_non_finite, progress_update

# The fields the time loop advances or that a caller may set as inputs
# (initial conditions, forcing): cloned at loop entry so that a leaf tensor
# with requires_grad can be given as any of them.
LOOP_INPUTS = tuple(variables.names("prognostic") + variables.names("forcing")
                    + ["w", "rho", "km", "kh", "kq", "l", "aam", "d", "dt"])


# the routines of the time loop that torch.compile fuses (compile=True)
COMPILED = ("advct", "advave", "advu", "advv", "advq", "vertvl", "advt1", "advt2", "profq",
            "proft", "profu", "profv", "bcond", "dens", "baropg", "smagorinsky",
            "surface_forcing", "vertical_averages")


def _to_numpy(state: dict) -> dict[str, np.ndarray]:
    return {name: np.asfortranarray(t.detach().to("cpu", torch.float64).numpy())
            for name, t in state.items()}


# checkpoint= choices: none, the heavy routines (turbulence, tracers,
# momentum), or whole internal steps
CHECKPOINTS = (None, "routines", "steps")
HEAVY = ("advq", "profq", "advt1", "advt2", "proft", "advu", "advv", "profu", "profv")


def _checkpointed(fn):
    """fn, recomputed in the backward pass (non-reentrant torch checkpoint)
    when gradients are on."""
    def wrapper(**kwargs):
        if not torch.is_grad_enabled():
            return fn(**kwargs)
        return torch_checkpoint(fn, use_reentrant=False, preserve_rng_state=False, **kwargs)
    wrapper.__name__ = fn.__name__
    return wrapper


class ExplicitCore:
    """pom2k, vectorised in torch: same routines, same order, same numbers."""

    def __init__(self, config: Config, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, compile: bool = False,
                 checkpoint: str | None = None):
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype {dtype}: the core runs in torch.float64 or torch.float32")
        if checkpoint not in CHECKPOINTS:
            raise ValueError(f"checkpoint={checkpoint!r}: one of {CHECKPOINTS}")
        object.__setattr__(self, "state", {})
        # torch.compile each physics routine (not the main-loop sections,
        # whose Python branches on iext would recompile for every pass).
        # bcond compiles once per case, dtype and grid: more than dynamo's
        # default 8 versions of one function
        if compile:
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.routines = stepping.ROUTINES if not compile else {
            name: (torch.compile(fn) if name in COMPILED else fn)
            for name, fn in stepping.ROUTINES.items()}
        # checkpoint="routines": recompute the heavy routines in the backward
        # pass instead of keeping their intermediates; "steps": whole steps
        self.checkpoint = checkpoint
        if checkpoint == "routines":
            self.routines = {name: (_checkpointed(fn) if name in HEAVY else fn)
                             for name, fn in self.routines.items()}
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        self.params = parameters(config)
        self.iint = 0
        self.time0 = 0.0
        self.time = 0.0
        self.iend = config.iend
        self.generation_fast_path = False
        self.capture_interval = 0
        self.generation_records: list[dict] = []
        self._loop_mode: str | None = None
        self.last_good: dict | None = None
        self.vamax = 0.0

    # pom2k names as attributes: core.u is core.state["u"]
    def __getattr__(self, name):
        state = self.__dict__.get("state", {})
        if name in state:
            return state[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in variables.VARIABLES or name in variables.WORK:
            self.state[name] = value
        else:
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------ set-up
    def run_initialization(self) -> None:
        """pom2k's set-up (iint = 0), computed on the CPU in float64; for
        iproblem 3 from the config's IC file (pompy.icfile)."""
        self.load_state(stepping.set_up(self.config), iint=0)

    def load_state(self, arrays: dict, iint: int, time0: float = 0.0) -> None:
        """Set the state from arrays by pom2k name (numpy or torch, pom2k
        order), e.g. a restart file or a golden state; names not given are
        zero. The next step is iint+1."""
        c = self.config
        state = {}
        self.period = math.inf
        for name in (*variables.VARIABLES, *variables.WORK):
            shape = variables.shape(name, c.im, c.jm, c.kb)
            value = arrays.get(name)
            if value is None:
                state[name] = torch.zeros(shape, dtype=self.dtype, device=self.device)
                continue
            value = torch.as_tensor(np.ascontiguousarray(value) if isinstance(value, np.ndarray)
                                    else value)
            if tuple(value.shape) != shape:
                raise ValueError(f"{name}: shape {tuple(value.shape)} does not fit the config's "
                                 f"grid (expected {shape} for im={c.im}, jm={c.jm}, kb={c.kb})")
            if name == "cor":
                # inertial period (days) for the forcing ramp, from the given (float64) cor
                f = abs(float(value[c.im // 2 - 1, c.jm // 2 - 1]))
                self.period = (2.0 * math.pi) / f / 86400.0 if f != 0 else math.inf
            state[name] = value.detach().to(device=self.device, dtype=self.dtype).clone()
        object.__setattr__(self, "state", state)
        self.iint, self.time0 = iint, time0
        self.time = c.dti * iint / 86400.0 + time0
        self.last_good = None
        self._loop_mode = None
        self.generation_records = []

    def numpy_state(self) -> dict[str, np.ndarray]:
        """Every variable as a float64 numpy array in pom2k (Fortran) order."""
        return _to_numpy(self.state)

    # ------------------------------------------------------------ time loop
    def run_time_loop(self, callback: Callable[[ExplicitCore], None] | None = None) -> None:
        """pom2k's main loop for iint = self.iint+1 .. self.iend; ``callback(core)``
        after each step. Raises ModelStop on a velocity or NaN blow-up.

        With ``generation_fast_path`` (data generation: no gradients) the
        leaf cloning is skipped and, every ``capture_interval`` steps, a
        detached snapshot of the prognostic fields is appended to
        ``generation_records``. Switching between the two modes needs
        run_initialization() (or load_state) in between (the seed's pitfall 5)."""
        if not self.state:
            raise RuntimeError("run_initialization() (or load_state) must come before run_time_loop()")
        mode = "generation" if self.generation_fast_path else "gradient"
        if self._loop_mode not in (None, mode):
            raise RuntimeError(
                f"this core last ran in {self._loop_mode} mode (generation_fast_path="
                f"{self._loop_mode == 'generation'}); call run_initialization() or load_state() "
                f"before running it in {mode} mode, or use a separate core")
        self._loop_mode = mode
        if not self.generation_fast_path:
            # leaf tensors (initial conditions with requires_grad) become
            # intermediates, so the loop may rebind them freely
            for name in LOOP_INPUTS:
                self.state[name] = self.state[name].clone()
        with torch.no_grad() if self.generation_fast_path else contextlib.nullcontext():
            for iint in range(self.iint + 1, self.iend + 1):
                self.step(iint)
                if self.generation_fast_path and self.capture_interval > 0 \
                        and iint % self.capture_interval == 0:
                    self.generation_records.append(self.snapshot())
                if callback is not None:
                    callback(self)

    def snapshot(self) -> dict:
        """The prognostic fields, detached copies (for offline use), with iint and time."""
        record = {name: self.state[name].detach().clone() for name in variables.names("prognostic")}
        return dict(record, iint=self.iint, time=self.time)

    def step(self, iint: int) -> None:
        """Internal step iint, as one pass of pom2k's main loop."""
        good = self.state
        time = self.config.dti * float(iint) / 86400.0 + self.time0
        # what the step reads besides the state, fixed now: a recomputation
        # in the backward pass (checkpoint="steps") must see the same
        ramp = min(time / self.period, 1.0) if self.config.lramp else 1.0
        fixed = (dict(self.params, ramp=ramp), dict(self.routines), self.time0)
        if self.checkpoint == "steps" and torch.is_grad_enabled():
            s, vamax, imax, jmax, going = torch_checkpoint(self._advance, good, iint, *fixed,
                                                           use_reentrant=False,
                                                           preserve_rng_state=False)
        else:
            s, vamax, imax, jmax, going = self._advance(good, iint, *fixed)
        self.vamax = vamax
        object.__setattr__(self, "state", s)
        self.iint, self.time = iint, time
        if not going:
            self.last_good = good
            if vamax > self.config.vmaxl:
                raise CFLViolation(iint, vamax, int(imax), int(jmax), self.config.vmaxl)
            raise NonFiniteState(iint, *first_non_finite(self.numpy_state()))

    def _advance(self, state: dict, iint: int, p: dict, routines: dict, time0: float) -> tuple:
        """One pass of pom2k's main loop on ``state`` (not written), with the
        parameters ``p`` (ramp set) and ``routines``: the new state, vamax,
        (imax, jmax) and whether the run may go on. A function of its
        arguments, so that it can be recomputed (checkpoint="steps")."""
        c, s = self.config, dict(state)
        isplit = c.isplit
        run(s, p, "surface_forcing", routines=routines)
        # 3-D terms of the external mode; in mode 2 the initial aam2d is kept
        if c.mode != 2:
            run(s, p, "advct(a,c,ee)", "baropg", "smagorinsky", "vertical_averages",
                routines=routines)
        d, ua, va = s["d"], s["ua"], s["va"]
        isp2i = 1.0 / (2.0 * float(isplit))
        s["egf"] = s["el"] * (1.0 / float(isplit))
        s["utf"] = inside(ua * (d + shift(d, X, -1)) * isp2i, s["utf"], i=(2, c.im))
        s["vtf"] = inside(va * (d + shift(d, Y, -1)) * isp2i, s["vtf"], j=(2, c.jm))
        for iext in range(1, isplit + 1):
            s = stepping.external_step(s, dict(p, iext=iext), routines)
        # pom2k's velocity check of the last pass: the first value read from
        # the device this step (a NaN fails it; pom2k's check skips NaN)
        vamax = float(s.pop("vamax"))
        imax, jmax = s.pop("imax"), s.pop("jmax")
        going = vamax <= c.vmaxl
        if going:
            if (iint != 1 or time0 != 0.0) and c.mode != 2:
                s = stepping.internal_step(s, p, routines)
            s["egb"], s["etb"], s["et"] = s["egf"].clone(), s["et"].clone(), s["etf"].clone()
            s["dt"] = s["h"] + s["et"]
            s["utb"], s["vtb"], s["vfluxb"] = s["utf"].clone(), s["vtf"].clone(), s["vfluxf"].clone()
            going = self._finite(s)              # the second value read
        return s, vamax, imax, jmax, going

    @staticmethod
    def _finite(s: dict) -> bool:
        """Whether every prognostic field is finite (one read from the device)."""
        return bool(torch.stack([torch.isfinite(s[n]).all()
                                 for n in variables.names("prognostic")]).all())

    # ------------------------------------------------------------ pompy.run interface
    name = "explicit"

    def advance(self, last: int, bar=None) -> None:
        """Steps iint+1..last (pompy.run's model interface); on a stop the
        exception carries the last good state as numpy arrays."""
        self.iend = last
        try:
            self.run_time_loop(lambda core: progress_update(bar, core.iint, core.config, core.vamax))
        except ModelStop as exc:
            exc.last_good = _to_numpy(self.last_good)
            raise
