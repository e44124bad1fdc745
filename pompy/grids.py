"""The grid a config sets up, for checks made before a run (the external CFL limit).

The grid is not rebuilt here: it is the torch core's own set-up
(pompy.core.stepping.set_up: seamount, box or the IC file), so the check
sees exactly the dx, dy, h, fsm and tps the run will have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pompy.config import Config

GRID = ("dx", "dy", "h", "fsm", "tps", "east_c", "north_c")


def setup_grid(config: Config) -> dict[str, np.ndarray]:
    """dx, dy, h, fsm, the external CFL time step tps (pom2k's, 0 on land)
    and the corner coordinates east_c, north_c of the config's set-up, as
    float64 numpy arrays indexed (i, j) at [i-1, j-1]."""
    from pompy.core.stepping import set_up

    state = set_up(config)
    return {name: state[name].numpy() for name in GRID}
