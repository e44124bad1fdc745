"""The suite's long-run checks (marked ``slow``, left out of the default
run and of CI to keep it short): runs them with pytest.

    python3 validation/slow_tests.py [more pytest arguments]

Today: the 240-step gradient with and without checkpointing
(tests/test_differentiable_core.py, about 60 s on one core)."""
import sys
from pathlib import Path

import pytest

if __name__ == "__main__":
    tests = Path(__file__).parents[1] / "tests"
    # one at a time (-n 0): each is sized for the whole machine
    sys.exit(pytest.main([str(tests), "-m", "slow", "-n", "0", *sys.argv[1:]]))
