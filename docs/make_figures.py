"""The documentation's figures, made again:

    python3 docs/make_figures.py

_static/first-run.png: the getting-started page's own code (its "First run"
command and its Python blocks, run in a scratch folder); _static/
tutorial-basin.png: the tutorial's own code (its Python blocks, with its
first ``pompy run`` before the plot); _static/implicit-damping.png: the implicit core's amplification per step, from its
formula."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DOCS = Path(__file__).parent
STATIC = DOCS / "_static"


def _made_in_scratch(steps: list[tuple[str, str]], made: str, target: str) -> None:
    """Run ``steps`` in order in a scratch folder holding the configs (each
    ("python", code) or ("pompy", its arguments)), then keep its ``made``
    file as _static/``target``."""
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(DOCS.parent / "configs", Path(scratch) / "configs")
        for kind, what in steps:
            argv = ["-c", what] if kind == "python" else ["-m", "pompy", *what.split()]
            subprocess.run([sys.executable, *argv], cwd=scratch, check=True)
        shutil.copy(Path(scratch) / made, STATIC / target)


def first_run() -> None:
    page = (DOCS / "getting-started.md").read_text()
    section = page.split("\n## First plot", 1)[1].split("\n## ", 1)[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    _made_in_scratch([("pompy", "run configs/seamount.nml"), ("python", code)],
                     "first-run.png", "first-run.png")


def tutorial_basin() -> None:
    page = (DOCS / "tutorial.md").read_text()
    *setup, plot = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    _made_in_scratch([*(("python", code) for code in setup), ("pompy", "run basin.nml"),
                      ("python", plot)], "basin.png", "tutorial-basin.png")


def implicit_damping() -> None:
    x = np.logspace(-2, 2, 400)
    fig, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    for theta, style in ((0.5, ":"), (0.55, "-"), (0.6, "--"), (1.0, "-.")):
        amplification = np.sqrt((1 + (1 - theta) ** 2 * x ** 2) / (1 + theta ** 2 * x ** 2))
        ax.semilogx(x, amplification, style, lw=2, label=f"theta = {theta:g}"
                    + (" (default)" if theta == 0.55 else ""))
    ax.plot([10], [np.sqrt(21.25 / 31.25)], "o", color="C1")
    ax.annotate("0.82 at omega dt = 10", (10, np.sqrt(21.25 / 31.25)), (12, 0.9),
                arrowprops=dict(arrowstyle="->"))
    ax.set(xlabel="omega dt", ylabel="amplification per step |lambda|", ylim=(0, 1.05))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower left")
    fig.savefig(STATIC / "implicit-damping.png", dpi=90)


if __name__ == "__main__":
    first_run()
    tutorial_basin()
    implicit_damping()
