"""validation/compiled_profile.py's readers: the loop nests of Inductor's
generated C++ (read from code Inductor generates here) and the shares of a
py-spy sample. The sampling itself needs py-spy, perf and minutes of
compilation, so it runs from validation/ only."""
from __future__ import annotations

import collections
import importlib
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "validation"


@pytest.fixture(scope="module")
def profile():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("compiled_profile")
    finally:
        sys.path.remove(str(SCRIPTS))


def generated_cpp(fn, *args) -> str:
    """The C++ kernels Inductor generates for fn on the CPU."""
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn, backend="inductor"), *args)
    return "\n".join(sources)


def test_loop_nests_count_the_points_of_inductors_loops(profile):
    """A shifted 3-D range written once (8 x 7 x 19 points, vectorised along
    k) and a strided level copied to a plane (9 x 7 points, read at stride
    21: scalar), each an outermost nest with its points."""
    x = torch.rand(9, 7, 21, dtype=torch.float64)
    cpp = generated_cpp(lambda x: x[1:, :, 2:] * 3.0 + 1.0, x)
    nests = profile.loop_nests(cpp)
    assert sorted((points, vectorised) for _, _, points, vectorised in nests) == [(8 * 7 * 19, True)]
    cpp = generated_cpp(lambda x: x[:, :, 4] * 3.0, x)
    nests = profile.loop_nests(cpp)
    assert sorted((points, vectorised) for _, _, points, vectorised in nests) == [(9 * 7, False)]
    first, last, _, _ = nests[0]
    lines = cpp.split("\n")
    assert "for(int64_t" in lines[first - 1] and first <= last <= len(lines)


def test_nest_samples_sum_the_lines_of_each_nest(profile):
    cpp = "\n".join(['extern "C" void k(double* p)', "{",
                     "    double acc = 0;",
                     "    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(10L); x0+=1)",
                     "    {", "        p[x0] = 1;", "    }",
                     "    for(int64_t x0=static_cast<int64_t>(2L); x0<static_cast<int64_t>(6L); x0+=1)",
                     "    {",
                     "        for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(3L); x1+=1)",
                     "        {", "            p[x1 + 3*x0] = 2;", "        }", "    }", "}"])
    nests = profile.loop_nests(cpp)
    assert [(first, points) for first, _, points, _ in nests] == [(4, 10), (8, 12)]
    counts = collections.Counter({3: 1, 6: 5, 12: 7, 15: 2})
    # each nest's lines and the line before it (line 3, the accumulator, opens the first)
    assert profile.nest_samples(nests, counts, before=1) == [(9, 8, 12, False), (6, 4, 10, False)]


def test_python_shares_by_innermost_frame(profile):
    step = ("<module> (compiled_profile.py:70);Core._pass (pompy/core/model.py:591);"
            "StepGraphs._external_pass (pompy/core/compiled.py:206);"
            "StepGraphs._call (pompy/core/compiled.py:178)")
    raw = "\n".join([
        f"{step};_wrap_func.<locals>.g (/tmp/cache/ab/cabc.py:13072) 30",
        f"{step};compile_wrapper (torch/_dynamo/eval_frame.py:1166) 4",
        f"{step};runtime_wrapper (torch/_functorch/_aot_autograd/runtime_wrappers.py:1141) 2",
        f"{step};StepGraphs._graph (pompy/core/compiled.py:145) 3",
        "Core._pass (pompy/core/model.py:603);StepGraphs.internal_pass "
        "(pompy/core/compiled.py:227);_wrap_func.<locals>.g (/tmp/cache/cd/ccd.py:5) 61"])
    shares, graphs, total = profile.python_shares(raw)
    assert total == 100
    assert shares == {profile.GRAPHS: 91, profile.GUARDS: 4, profile.WRAPPERS: 2,
                      profile.PYTHON: 3}
    assert graphs == {"_external_pass:206": 30, "internal_pass:227": 61}
