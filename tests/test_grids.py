import math

import numpy as np
import pytest
from conftest import load_golden

from pompy.config import Config
from pompy.core.setup import setup_grid


def test_seamount_grid_matches_golden():
    want = load_golden("seamount/iint_000000")
    got = setup_grid(Config())
    for name in ("dy", "fsm", "east_c", "north_c"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    # pom2k's -O3 build takes dx's sin from glibc's SIMD sin (libmvec), torch's is correctly
    # rounded: dx differs by up to 9.1e-13 m (1 ulp of 8000; 2 ulp below 4096)
    np.testing.assert_array_max_ulp(got["dx"], want["dx"], maxulp=2)
    np.testing.assert_allclose(got["h"], want["h"], rtol=1e-12, atol=0)


def test_seamount_grid_by_hand():
    im, jm, hmax = 17, 12, 4500.0
    got = setup_grid(Config(im=im, jm=jm, kb=11))
    assert got["dx"].shape == (im, jm)
    dx = [8000 - 4000 * math.sin(math.pi * i / im) for i in range(1, im + 1)]
    dy = [8000 - 4000 * math.sin(math.pi * j / jm) for j in range(1, jm + 1)]
    # the seamount sits on the west/south face of cell ((im+1)/2, (jm+1)/2) = (9, 6)
    i, j = 5, 8
    east, north = sum(dx[i - 1 : 8]), sum(dy[5 : j - 1])
    h = hmax * (1 - 0.9 * math.exp(-(east**2 + north**2) / 25000**2))
    assert got["h"][i - 1, j - 1] == pytest.approx(h, rel=1e-13)
    assert got["h"][8, 5] == pytest.approx(hmax * 0.1, rel=1e-15)
    assert (got["h"][:, [0, -1]] == 1).all() and (got["fsm"][:, [0, -1]] == 0).all()
    assert (got["fsm"][:, 1:-1] == 1).all()


def test_box_grid():
    got = setup_grid(Config(iproblem=2, im=21, jm=21, kb=11))
    assert (got["dx"] == 8000).all() and (got["dy"] == 8000).all()
    wet = np.zeros((21, 21))
    wet[1:-1, 1:-1] = 1
    np.testing.assert_array_equal(got["fsm"], wet)
    np.testing.assert_array_equal(got["h"], np.where(wet == 1, 4500.0, 1.0))


def test_file_grid_has_no_setup_grid():
    with pytest.raises(ValueError, match="iproblem=3"):
        setup_grid(Config(iproblem=3))
