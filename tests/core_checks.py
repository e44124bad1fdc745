"""Checks shared by the torch-core tests (tests/test_core_*.py).

``assert_inputs_not_written`` runs a torch routine on one pom2k call and
checks that it neither writes its input tensors nor returns one of them (or
a view of one). ``float32_errors`` runs a torch routine in float32 and
returns each field's error against the oracle's float64 result.
``wrong_gradient`` wraps a routine of pompy.core.stepping.ROUTINES so that
one of its outputs keeps its value and has its gradient (reverse and
forward mode alike) 1.1 times the true one: what a gradient check must
catch.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from conftest import relative_error
from oracle_compare import torch_call


def assert_inputs_not_written(fn, oracle, call: str, state: dict, params: dict) -> None:
    """fn on ``call`` leaves every input tensor as it was, and every output
    is a tensor of its own (no storage shared with an input), or, where the
    routine leaves an in/out argument unwritten, that argument itself."""
    @functools.wraps(fn)
    def checked(**kwargs):
        inputs = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        before = {k: v.clone() for k, v in inputs.items()}
        out = fn(**kwargs)
        for k, v in before.items():
            assert torch.equal(inputs[k], v), f"{call} wrote its input {k}"
        storages = {t.untyped_storage().data_ptr(): k for k, t in inputs.items()}
        for name, field in zip(out._fields, out):
            if field is kwargs.get(name) and torch.equal(field, before[name]):
                continue
            shared = storages.get(field.untyped_storage().data_ptr())
            assert shared is None, f"{call} returns {name} in the storage of its input {shared}"
        return out

    torch_call(checked, oracle, call, state, params)


def on_device(fn, device: str):
    """fn with its tensor arguments moved to ``device``; checks the results stay there."""
    if device == "cpu":
        return fn

    @functools.wraps(fn)
    def moved(**kwargs):
        out = fn(**{k: v.to(device) if isinstance(v, torch.Tensor) else v
                    for k, v in kwargs.items()})
        assert all(t.device.type == device for t in out), f"{fn.__name__}: results left {device}"
        return out
    return moved


def float32_errors(fn, oracle, call: str, state: dict, params: dict,
                   device: str = "cpu") -> dict[str, float]:
    """{field: error relative to the field's max magnitude} of fn run in
    float32 (on ``device``) against the oracle's float64 result; every
    field must come back float32 and finite."""
    want = oracle.call(call, state, params)
    got = torch_call(on_device(fn, device), oracle, call, state, params, dtype=torch.float32)
    errors = {}
    for name, g in got.items():
        assert g.dtype == torch.float32, f"{call} {name}: {g.dtype}"
        errors[name] = err = relative_error(g.double().cpu().numpy(), want[name])
        assert np.isfinite(err), f"{call} {name}: float32 error {err}"
    return errors


class _TenPercentOff(torch.autograd.Function):
    """The identity whose derivative is 1.1 in both modes."""
    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 1.1 * grad

    @staticmethod
    def jvp(ctx, tangent):               # as wrong as the backward: forward mode agrees
        return 1.1 * tangent


def ten_percent_off(x: torch.Tensor) -> torch.Tensor:
    """``x``, its gradient 1.1 times the true one."""
    return _TenPercentOff.apply(x)


def wrong_gradient(fn, output: str):
    """Routine ``fn`` with its output ``output`` as it is, its gradient 10 % off."""
    @functools.wraps(fn)
    def wrong(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out._replace(**{output: ten_percent_off(getattr(out, output))})
    return wrong
