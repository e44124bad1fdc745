"""validation/compiled_profile.py's readers: the loop nests of Inductor's
generated C++ (read from code Inductor generates here, as pompy's graphs
are generated), perf's and addr2line's output, and the shares of a py-spy
sample. The sampling itself needs py-spy, perf and minutes of
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
    """The C++ Inductor generates for fn on the CPU, with pompy's options
    (its C++ wrapper: the kernels and the entry function in one source)."""
    from torch._inductor.utils import run_and_get_code

    from pompy.core.compiled import INDUCTOR_OPTIONS
    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn, backend="inductor", options=INDUCTOR_OPTIONS),
                                  *args)
    return "\n".join(sources)


def test_loop_nests_count_the_points_of_inductors_loops(profile):
    """A shifted 3-D range written once (8 x 7 x 19 points, vectorised along
    k where the machine has vectors) and a level read at stride 21 into a
    plane (9 x 7 points, scalar), each an outermost nest with its points;
    every line of a kernel belongs to one nest."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa
    x = torch.rand(9, 7, 21, dtype=torch.float64)
    cpp = generated_cpp(lambda x: x[1:, :, 2:] * 3.0 + 1.0, x)
    nests = profile.loop_nests(cpp)
    assert [points for _, _, _, points, _ in nests] == [8 * 7 * 19]
    assert nests[0][4] == bool(pick_vec_isa())
    cpp = generated_cpp(lambda x: x[:, :, 4] * 3.0, x)
    nests = profile.loop_nests(cpp)
    assert [(points, vectorised) for _, _, _, points, vectorised in nests] == [(9 * 7, False)]
    line, first, last, _, _ = nests[0]
    lines = cpp.split("\n")
    assert "for(int64_t" in lines[line - 1] and lines[first - 1].startswith('extern "C"')
    assert first < line <= last <= len(lines)


def test_copy_kind_tells_moved_data_from_computed(profile):
    """A cat's piece taken from an input (read and stored at the same
    places: a copy), the levels of a (k, i, j) stack made (i, j, k) (a
    transpose: reordered), and arithmetic (neither), each from the code
    Inductor generates for it."""
    x, y = torch.rand(9, 7, 20, dtype=torch.float64), torch.rand(9, 7, 21, dtype=torch.float64)
    cpp = generated_cpp(lambda x, y: torch.cat([x, (y * 2.0).sum(2, keepdim=True)], 2), x, y)
    lines = cpp.split("\n")
    kinds = [(points, profile.copy_kind(lines, nest))
             for nest in profile.loop_nests(cpp) for points in [nest[3]]]
    assert sorted(kinds, key=str) == sorted([(9 * 7 * 21, None), (9 * 7 * 20, "copy")], key=str)
    z = torch.rand(21, 9, 7, dtype=torch.float64)
    cpp = generated_cpp(lambda z: z.permute(1, 2, 0).contiguous(), z)
    lines = cpp.split("\n")
    assert {profile.copy_kind(lines, nest) for nest in profile.loop_nests(cpp)} == {"reordered"}


KERNEL = ['extern "C" void k(double* p)', "{",
          "    double acc = 0;",
          "    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(10L); x0+=1)",
          "    {", "        p[x0] = 1;", "    }",
          "    for(int64_t x0=static_cast<int64_t>(2L); x0<static_cast<int64_t>(6L); x0+=1)",
          "    {",
          "        for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(3L); x1+=1)",
          "        {", "            auto v = at::vec::Vectorized<double>::loadu(p);", "        }",
          "    }", "}"]


def test_nest_samples_count_each_line_once(profile):
    """Lines 1-7 (the kernel's head, its accumulator, the first loop) are the
    first nest's, 8-15 the second's: every sample counted once."""
    nests = profile.loop_nests("\n".join(KERNEL))
    assert nests == [(4, 1, 7, 10, False), (8, 8, 15, 12, True)]
    counts = collections.Counter({1: 2, 3: 1, 6: 5, 7: 1, 8: 3, 12: 7, 15: 2})
    assert profile.nest_samples(nests, counts) == [(12, 8, 12, True), (9, 4, 10, False)]


def test_python_shares_by_innermost_frame(profile):
    """Each sample's innermost frame decides its share; a graph's samples go
    to the StepGraphs line that called it (not _call's)."""
    step = ("<module> (compiled_profile.py:70);Core._pass (pompy/core/model.py:591);"
            "StepGraphs._external_pass (/r/pompy/core/compiled.py:206);"
            "StepGraphs._call (/r/pompy/core/compiled.py:178)")
    raw = "\n".join([
        f"{step};_wrap_func.<locals>.g (/tmp/cache/ab/cabc.py:13072) 30",
        f"{step};compile_wrapper (torch/_dynamo/eval_frame.py:1166) 4",
        f"{step};runtime_wrapper (torch/_functorch/_aot_autograd/runtime_wrappers.py:1141) 2",
        f"{step};ConfigModule.__setattr__ (torch/utils/_config_module.py:418) 1",
        f"{step};StepGraphs._graph (/r/pompy/core/compiled.py:145) 3",
        "Core._pass (pompy/core/model.py:603);StepGraphs.internal_pass "
        "(/r/pompy/core/compiled.py:227);_wrap_func.<locals>.g (/tmp/cache/cd/ccd.py:5) 60"])
    shares, graphs, total = profile.python_shares(raw)
    assert total == 100
    assert shares == {profile.GRAPHS: 90, profile.ENTRY: 4, profile.WRAPPERS: 2,
                      profile.PYTHON: 4}
    assert graphs == {"/r/pompy/core/compiled.py:206": 30, "/r/pompy/core/compiled.py:227": 60}


def test_perf_samples_by_library_and_file_address(profile):
    """perf script's lines (their format as perf 6 prints them): a sample in a
    generated library at its file address (ip - start + offset), a map at
    offset 0 included; other libraries counted by name only."""
    so = "/tmp/torchinductor_root/i5/ci52.main.so"
    script = "\n".join([
        f"python3 0 0.000000: PERF_RECORD_MMAP2 25379/25379: [0x7f58be537000(0xb6000) @ 0x3000 "
        f"fe:00 1531914 0]: r-xp {so}",
        "python3 0 0.000000: PERF_RECORD_MMAP2 25379/25379: [0x7f0000000000(0x1000) @ 0 "
        "fe:00 1531915 0]: r-xp /tmp/c/zero.main.so",
        f"     7f58be5566a3 ({so})", f"     7f58be5566a3 ({so})", f"     7f58be558f00 ({so})",
        "     7f00000004d2 (/tmp/c/zero.main.so)",
        "     7f58e76bbdbc (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)"])
    by_library, addresses = profile.perf_script_samples(script)
    assert by_library == {so: 3, "/tmp/c/zero.main.so": 1,
                          "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0": 1}
    assert addresses == {so: {0x7f58be5566a3 - 0x7f58be537000 + 0x3000: 2,
                              0x7f58be558f00 - 0x7f58be537000 + 0x3000: 1},
                         "/tmp/c/zero.main.so": {0x4d2: 1}}


def test_cpp_lines_take_the_kernels_own_line(profile):
    """addr2line -a -i prints an address, then its inlined frames innermost
    first: the last generated-C++ line is the kernel's (an address with
    none is left out)."""
    text = "\n".join([
        "0x0000000000009272", "/usr/lib/gcc/x86_64-linux-gnu/12/include/avx512fintrin.h:6292",
        "/torch/include/ATen/cpu/vec/vec512/vec512_double.h:204",
        "/tmp/torchinductor_root/i5/ci52.main.cpp:24620",
        "0x000000000000c3ed", "/tmp/torchinductor_root/i5/ci52.main.cpp:36285",
        "0x000000000000c400", "??:0"])
    assert profile.cpp_lines(text) == {0x9272: 24620, 0xc3ed: 36285}
