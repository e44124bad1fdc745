"""Compare a torch routine with the oracle routine of the same name.

The torch routine takes keyword arguments named exactly as the oracle
routine's (pom2k's dummy names, without im, jm, kb) and returns a
NamedTuple of the oracle's in/output arguments, in the same order, as new
tensors. ``compare_call`` runs both on the same state for one pom2k call
string (e.g. ``"advq(q2b,q2,uf,a,c)"``) and returns {state name: error
relative to the field's max magnitude}.
"""
from __future__ import annotations

import numpy as np
import torch

from conftest import assert_fields_close
from pompy.calls import bind, invoke


def torch_call(fn, oracle, call: str, state: dict, params: dict, dtype=torch.float64):
    """``fn`` run as pom2k's ``call`` by pompy.calls (the torch cores'
    binder) on the state as tensors; checks that it returns the oracle
    routine's in/output arguments, in order."""
    tensors = {k: torch.as_tensor(np.ascontiguousarray(v), dtype=dtype) for k, v in state.items()}
    out, binding = invoke(fn, call, tensors, params)
    sig = oracle.signature(bind(call)[0])
    inout = [a for a in sig.args if a in sig.inout]
    assert tuple(out._fields) == tuple(inout), (
        f"torch {fn.__name__} returns {out._fields}, the oracle writes {tuple(inout)}")
    return {binding.get(a, a): getattr(out, a) for a in inout}


def compare_call(fn, oracle, call: str, state: dict, params: dict, rtol: float) -> dict:
    want = oracle.call(call, state, params)
    got = torch_call(fn, oracle, call, state, params)
    got = {k: v.detach().cpu().numpy() for k, v in got.items()}
    return assert_fields_close(got, want, rtol, label=f"torch {call}")
