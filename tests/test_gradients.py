"""Gradient clipping (the seed's rule, default norm 1.0) and gradient-norm
monitoring, against norms computed by hand."""
import logging
import math

import pytest
import torch

from pompy.autodiff.gradients import GRAD_CLIP_NORM, clip_gradients, gradient_norms, log_gradient_norms


def params_with_grads():
    a = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    b = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    a.grad = torch.tensor([3.0, 0.0, 4.0], dtype=torch.float64)       # norm 5
    b.grad = torch.tensor([0.0, 12.0], dtype=torch.float64)           # norm 12
    return a, b


def test_default_clip_norm_is_1():
    assert GRAD_CLIP_NORM == 1.0


def test_clip_scales_the_global_norm_to_the_limit():
    a, b = params_with_grads()
    before = clip_gradients([a, b])
    assert before == pytest.approx(13.0)
    after = math.sqrt(float((a.grad ** 2).sum() + (b.grad ** 2).sum()))
    assert after == pytest.approx(1.0, rel=1e-6)
    assert a.grad.tolist() == pytest.approx([3 / 13, 0.0, 4 / 13], rel=1e-6)


@pytest.mark.parametrize("limit", [None, 0.0, -1.0])
def test_clipping_off(limit):
    a, b = params_with_grads()
    assert clip_gradients([a, b], limit) is None and b.grad.tolist() == [0.0, 12.0]


def test_norms_global_and_per_parameter(caplog):
    a, b = params_with_grads()
    c = torch.nn.Parameter(torch.zeros(1))                           # no gradient: skipped
    named = [("a", a), ("b", b), ("c", c)]
    assert gradient_norms(named) == {"global": pytest.approx(13.0), "a": 5.0, "b": 12.0}
    with caplog.at_level(logging.INFO, logger="pompy.gradients"):
        log_gradient_norms(named, step=7)
    assert "step 7: gradient norms global=1.300e+01 a=5.000e+00 b=1.200e+01" in caplog.text


def test_non_finite_gradients_are_flagged(caplog):
    a, b = params_with_grads()
    b.grad[0] = float("nan")
    with caplog.at_level(logging.INFO, logger="pompy.gradients"):
        norms = log_gradient_norms([("a", a), ("b", b)])
    assert math.isnan(norms["b"]) and "not finite: global, b" in caplog.text
    assert caplog.records[-1].levelno == logging.WARNING


def test_a_non_finite_gradient_skips_the_step_and_names_the_parameter(caplog):
    """Clipping a NaN would make every gradient NaN: the step is skipped
    instead (gradients cleared, so an optimizer leaves the parameters as
    they are) and the warning names the parameter."""
    a, b = params_with_grads()
    b.grad[1] = float("nan")
    weights = (a.detach().clone(), b.detach().clone())
    optimizer = torch.optim.Adam([a, b], lr=0.1)
    with caplog.at_level(logging.INFO, logger="pompy.gradients"):
        norm = clip_gradients([("encoder.a", a), ("decoder.b", b)])
    assert math.isnan(norm) and a.grad is None and b.grad is None
    assert "non-finite gradient in decoder.b" in caplog.text and "encoder.a" not in caplog.text
    optimizer.step()
    assert torch.equal(a, weights[0]) and torch.equal(b, weights[1])
    a, b = params_with_grads()
    a.grad[0] = float("inf")
    assert math.isinf(clip_gradients([a, b])) and "parameter 0" in caplog.text
