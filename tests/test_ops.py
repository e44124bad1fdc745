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


# (operator, dimension it reads along, offset): xm(a)[i] = a[i-1], ...; zm, zp
# read along the last dimension, k in every pompy array that has one.
NEIGHBOURS = [("xm", 0, -1), ("xp", 0, 1), ("ym", 1, -1), ("yp", 1, 1),
              ("zm", -1, -1), ("zp", -1, 1)]
SHAPES = [(5,), (5, 4), (5, 4, 3)]


def _by_hand(x: np.ndarray, dim: int, offset: int) -> np.ndarray:
    """x[n + offset] along dim by a loop, the edge element where n + offset
    falls outside 0..size-1."""
    x = np.moveaxis(x, dim, 0)
    size = x.shape[0]
    out = np.empty_like(x)
    for n in range(size):
        out[n] = x[min(max(n + offset, 0), size - 1)]
    return np.moveaxis(out, 0, dim)


@pytest.mark.parametrize("name,dim,offset,shape", [
    (name, dim, offset, shape) for name, dim, offset in NEIGHBOURS for shape in SHAPES
    if dim != 1 or len(shape) > 1],                    # a 1-D array has no j
    ids=lambda v: f"{len(v)}d" if isinstance(v, tuple) else None)
def test_neighbour_reads_the_named_index_and_repeats_the_edge(name, dim, offset, shape):
    g = torch.Generator().manual_seed(3)
    a = torch.rand(*shape, generator=g, dtype=torch.float64)
    out = getattr(ops, name)(a)
    assert out.shape == a.shape
    np.testing.assert_array_equal(out.numpy(), _by_hand(a.numpy(), dim, offset))
    # interior and edge explicitly, on the first element of the other dimensions
    x = np.moveaxis(a.numpy(), dim, 0).reshape(a.size(dim), -1)[:, 0]
    o = np.moveaxis(out.numpy(), dim, 0).reshape(a.size(dim), -1)[:, 0]
    size = x.shape[0]
    for n in range(1, size - 1):                       # interior: the neighbour
        assert o[n] == x[n + offset]
    if offset < 0:                                     # edge: the edge slab repeated
        assert o[0] == x[0] and o[-1] == x[-2]
    else:
        assert o[-1] == x[-1] and o[0] == x[1]


def test_neighbours_by_fortran_index(a):
    """a(i-1,j,k), a(i,j+1,k), a(i,j,k-1), ... on a 3-D (i, j, k) field, and
    the edge of each: a(0,j,k) reads as a(1,j,k), a(i,jm+1,k) as a(i,jm,k)."""
    im, jm, kb = a.shape
    for i in range(im):
        for j in range(jm):
            for k in range(kb):
                assert ops.xm(a)[i, j, k] == a[max(i - 1, 0), j, k]
                assert ops.xp(a)[i, j, k] == a[min(i + 1, im - 1), j, k]
                assert ops.ym(a)[i, j, k] == a[i, max(j - 1, 0), k]
                assert ops.yp(a)[i, j, k] == a[i, min(j + 1, jm - 1), k]
                assert ops.zm(a)[i, j, k] == a[i, j, max(k - 1, 0)]
                assert ops.zp(a)[i, j, k] == a[i, j, min(k + 1, kb - 1)]
    # composed: a(i-1,j-1) is xm(ym(a)) = ym(xm(a))
    assert torch.equal(ops.xm(ops.ym(a)), ops.ym(ops.xm(a)))
    assert torch.equal(ops.xm(ops.ym(a))[2:, 2:], a[1:-1, 1:-1])


def test_k_neighbours_of_profiles_and_boundary_slices(a):
    """zm, zp read k, the last dimension, in (k,) profiles and (j, k) slices,
    as in the (i, j, k) field they come from."""
    zz = a[0, 0]                                            # (k,)
    np.testing.assert_array_equal(ops.zm(zz).numpy(), [zz[0], zz[0], zz[1]])
    np.testing.assert_array_equal(ops.zp(zz).numpy(), [zz[1], zz[2], zz[2]])
    for op in (ops.zm, ops.zp):
        assert torch.equal(op(a[3]), op(a)[3])              # (j, k) slice at i = 4
        assert torch.equal(op(a[:, 2]), op(a)[:, 2])        # (i, k) slice at j = 3
        assert torch.equal(op(ops.levels(zz)).view(-1), op(zz))


def test_neighbours_of_a_single_point_dimension_are_itself():
    a = torch.arange(6.0, dtype=torch.float64).view(1, 6, 1)
    for op in (ops.xm, ops.xp, ops.zm, ops.zp):
        assert torch.equal(op(a), a)


def test_neighbours_carry_gradients():
    a = torch.rand(4, 3, 2, dtype=torch.float64, requires_grad=True)
    for op in (ops.xm, ops.xp, ops.ym, ops.yp, ops.zm, ops.zp):
        assert torch.autograd.gradcheck(op, (a,))


def test_only_one_stencil_vocabulary():
    for name in ("axf", "axb", "ayf", "ayb", "azf", "azb",
                 "dxf", "dxb", "dyf", "dyb", "dzf", "dzb"):
        assert not hasattr(ops, name)


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
