"""pompy.utils.allocator: the pompy command runs on tcmalloc where the machine
has it, gives its children the user's environment, keeps an allocator the
user preloaded, and computes the same bits as on the system's allocator."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pompy.utils import allocator

ROOT = Path(__file__).resolve().parents[1]
SEAMOUNT = ROOT / "configs" / "seamount.nml"
# where CI installs it (.ci/run): there a missing tcmalloc is a failure
needs_tcmalloc = pytest.mark.skipif(
    allocator.tcmalloc_path() is None and os.environ.get("CI") != "true",
    reason="tcmalloc is not installed (apt-get install libtcmalloc-minimal4)")

# started as an entry point is: prints once before reexec (twice when it
# executes itself again), then its allocator, LD_PRELOAD and a child's allocator
PROBE = """
import os, subprocess, sys
print("start", flush=True)
from pompy.utils.allocator import in_use, reexec
reexec()
child = subprocess.run([sys.executable, "-c", "from pompy.utils.allocator import in_use; print(in_use())"],
                       capture_output=True, text=True).stdout.strip()
print(in_use(), os.environ.get("LD_PRELOAD", "-"), child,
      any(n in os.environ for n in ("_POMPY_ALLOCATOR_ADDED", "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD")))
"""


def probe(tmp_path, **env):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.ENV)}
    out = subprocess.run([sys.executable, str(script)], env={**full, **env}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@needs_tcmalloc
def test_an_entry_point_runs_on_tcmalloc_and_its_children_on_the_users_allocator(tmp_path):
    assert probe(tmp_path) == ["start", "start", "tcmalloc", "-", "system", "False"]
    assert probe(tmp_path, POMPY_ALLOCATOR="tcmalloc") == [
        "start", "start", "tcmalloc", "-", "system", "False"]


def test_system_keeps_the_systems_allocator(tmp_path):
    assert probe(tmp_path, POMPY_ALLOCATOR="system") == ["start", "system", "-", "system", "False"]


@needs_tcmalloc
def test_a_preloaded_allocator_is_kept_without_executing_again(tmp_path):
    path = allocator.tcmalloc_path()
    assert probe(tmp_path, LD_PRELOAD=path) == ["start", "tcmalloc", path, "tcmalloc", "False"]


def test_a_users_preload_of_another_kind_is_kept(tmp_path):
    """Any LD_PRELOAD is the user's choice (a sanitizer must come first; an
    allocator of another make must not be displaced): no second start."""
    assert probe(tmp_path, LD_PRELOAD="libm.so.6") == ["start", "system", "libm.so.6", "system",
                                                       "False"]


@needs_tcmalloc
def test_a_multiprocessing_child_is_not_started_again(tmp_path):
    """A spawned child (as torchrun --run-path starts its workers) reads its
    job from a pipe that an exec would close: it runs on as it is."""
    script = tmp_path / "spawn.py"
    script.write_text(
        "import multiprocessing as mp\n"
        "def child(q):\n"
        "    from pompy.utils.allocator import in_use, reexec\n"
        "    reexec()\n"
        "    q.put(in_use())\n"
        "if __name__ == '__main__':\n"
        "    from pompy.utils.allocator import in_use, reexec\n"
        "    reexec()\n"
        "    q = mp.get_context('spawn').Queue()\n"
        "    p = mp.get_context('spawn').Process(target=child, args=(q,))\n"
        "    p.start(); got = q.get(timeout=120); p.join()\n"
        "    print(in_use(), got, p.exitcode)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.ENV)}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tcmalloc", "system", "0"]


def test_a_closed_stdout_is_no_error():
    out = subprocess.run(f"'{sys.executable}' -m pompy --version >&-", shell=True,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr   # argparse: then to stderr


def test_an_unknown_allocator_is_one_line_and_exit_2():
    env = {**os.environ, "POMPY_ALLOCATOR": "mimalloc"}
    out = subprocess.run([sys.executable, "-m", "pompy", "config", str(SEAMOUNT)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "pompy: POMPY_ALLOCATOR='mimalloc' is not an allocator pompy knows: use tcmalloc or system"]


@needs_tcmalloc
def test_the_same_bits_on_either_allocator(tmp_path):
    """`pompy run` on each allocator (3 steps of the seamount, eager
    float64); the restarts equal to the last bit (`pompy compare
    --tolerance 0`)."""
    files = []
    for name in allocator.CHOICES:
        out = tmp_path / name
        env = {**os.environ, "POMPY_ALLOCATOR": name}
        done = subprocess.run([sys.executable, "-m", "pompy", "run", str(SEAMOUNT), "--steps", "3",
                               "--output", str(out)], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        files.append(str(out / "explicit_restart.nc"))
    done = subprocess.run([sys.executable, "-m", "pompy", "compare", *files, "--tolerance", "0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
