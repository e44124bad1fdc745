"""Every torch routine reproduces pom2k's own calls (golden seamount_calls/)
within 1e-13 of each field's magnitude, as the oracle does (test_oracle_calls)."""
import json

import pytest

import pompy.core
from conftest import GOLDEN, assert_fields_close, load_golden, require_golden
from oracle_compare import torch_call
from pompy.config import Config
from pompy.oracle.run import parameters


def _calls():
    index = GOLDEN / "seamount_calls" / "index.json"
    if not index.exists():
        return [pytest.param(None, id="golden-absent")]
    return [pytest.param(c, id=c["file"][:-4]) for c in json.loads(index.read_text())["calls"]]


@pytest.fixture(scope="module")
def call_params():
    grid = json.loads((require_golden() / "seamount_calls" / "index.json").read_text())["grid"]
    return parameters(Config(im=grid["im"], jm=grid["jm"], kb=grid["kb"], kl2=grid["kb"] - 2))


@pytest.mark.parametrize("call", _calls())
def test_torch_routine_reproduces_pom2k_call(oracle, call_params, call):
    require_golden()
    data = load_golden(f"seamount_calls/{call['file']}")
    pre = {k[4:]: v for k, v in data.items() if k.startswith("pre/")}
    post = {k[5:]: v for k, v in data.items() if k.startswith("post/")}
    params = dict(call_params, nadv=2 if call["run"] == "nadv=2" else 1)
    text = call["call"].removeprefix("call ")
    got = torch_call(getattr(pompy.core, call["routine"]), oracle, text, pre, params)
    got = {k: v.numpy() for k, v in got.items()}
    want = {name: post.get(name, pre[name]) for name in got}
    assert_fields_close(got, want, 1e-13, label=f"torch {text}")
