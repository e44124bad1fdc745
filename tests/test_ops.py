"""Stencil operators against hand-indexed loops on small random arrays."""
import numpy as np
import pytest
import torch

from pompy import ops


@pytest.fixture
def a():
    g = torch.Generator().manual_seed(0)
    return torch.rand(5, 4, 3, generator=g, dtype=torch.float64)


def test_shift_forward_and_back_repeat_the_edge(a):
    fwd, back = ops.shift(a, ops.X, 1), ops.shift(a, ops.X, -1)
    for i in range(5):
        assert torch.equal(fwd[i], a[min(i + 1, 4)])
        assert torch.equal(back[i], a[max(i - 1, 0)])
    two = ops.shift(a, ops.Z, 2)
    assert torch.equal(two[:, :, 0], a[:, :, 2]) and torch.equal(two[:, :, 2], a[:, :, 2])
    with pytest.raises(ValueError, match="shift by 5"):
        ops.shift(a, ops.X, 5)


@pytest.mark.parametrize("name,dim,forward,average", [
    ("axf", 0, True, True), ("axb", 0, False, True), ("ayf", 1, True, True),
    ("ayb", 1, False, True), ("azf", 2, True, True), ("azb", 2, False, True),
    ("dxf", 0, True, False), ("dxb", 0, False, False), ("dyf", 1, True, False),
    ("dyb", 1, False, False), ("dzf", 2, True, False), ("dzb", 2, False, False)])
def test_average_and_difference_interiors(a, name, dim, forward, average):
    out = getattr(ops, name)(a).numpy()
    x = np.moveaxis(a.numpy(), dim, 0)
    o = np.moveaxis(out, dim, 0)
    for n in range(1, x.shape[0] - 1):     # interior points, by hand
        nb = x[n + 1] if forward else x[n - 1]
        want = .5 * (nb + x[n]) if average else (nb - x[n] if forward else x[n] - nb)
        np.testing.assert_array_equal(o[n], want)


def test_inside_keeps_rest_outside_fortran_ranges(a):
    rest = torch.full_like(a, -1.0)
    out = ops.inside(a, rest, i=(2, 4), k=(1, 2))
    for i in range(5):
        for k in range(3):
            want = a[i, :, k] if (2 <= i + 1 <= 4 and k + 1 <= 2) else rest[i, :, k]
            assert torch.equal(out[i, :, k], want)
    assert torch.equal(ops.inside(a, j=(1, 4)), a)
    zero_outside = ops.inside(a, i=(2, 2))
    assert zero_outside[0].abs().sum() == 0 and torch.equal(zero_outside[1], a[1])


def test_sqrt_rn_is_correctly_rounded():
    g = torch.Generator().manual_seed(1)
    x = torch.exp(torch.randn(200000, generator=g, dtype=torch.float64) * 20)
    assert np.array_equal(ops.sqrt_rn(x).numpy(), np.sqrt(x.numpy()))
    x32 = x.float()
    assert np.array_equal(ops.sqrt_rn(x32).numpy(), np.sqrt(x32.numpy()))


def test_over_rounds_once():
    g = torch.Generator().manual_seed(2)
    x = torch.rand(100000, generator=g, dtype=torch.float64) + 0.5
    assert np.array_equal(ops.over(19.230, x).numpy(), 19.230 / x.numpy())
