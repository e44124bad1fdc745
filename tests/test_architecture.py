"""The layer above the routines: imports only point down (no cycle, function-
level imports included), importing pompy changes no global state, one
set-up per run, and a captured or restarted core continues bit for bit."""
from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pompy import variables
from pompy.config import load_config
from pompy.core.explicit import ExplicitCore

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "pompy"
CONFIGS = ROOT / "configs"
# the size a reader can hold: a module, and a function outside the pom2k routines
MODULE_LINES = 700
FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{pompy module: the pompy modules it imports anywhere in its source
    (module level or inside functions; TYPE_CHECKING blocks excluded)}.
    ``from pkg import name`` points at pkg.name when that is a module."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                       for n in ast.walk(node)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_in_pompy():
    graph = import_graph()
    assert len(graph) > 30 and "pompy.core.model" in graph["pompy.core.explicit"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_layers_point_down():
    """Leaf modules import no pompy module above them; no core reaches the
    driver or the command line; the physics never reaches the oracle's
    drivers."""
    graph = import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for leaf in ("pompy.errors", "pompy.variables", "pompy.calls", "pompy.ops",
                 "pompy.autodiff.layers", "pompy.oracle.build"):
        assert graph[leaf] == set(), (leaf, graph[leaf])
    # a config holds its gradient policies (&gradient_policy), nothing of the model
    assert reach("pompy.config") <= {"pompy.errors", "pompy.autodiff.policies",
                                     "pompy.autodiff.layers"}
    for core in ("pompy.core.model", "pompy.core.explicit", "pompy.core.stepping"):
        assert not reach(core) & {"pompy.driver", "pompy.cli", "pompy.oracle.driver"}, core


def _sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "validation").rglob("*.py")])


def pom2k_routines() -> set[str]:
    """The oracle's subroutine names: the pom2k routines, which the torch
    cores mirror statement for statement whatever their length."""
    text = "\n".join(p.read_text() for p in (ROOT / "reference_fortran").glob("*.f90"))
    return {name.lower() for name in re.findall(r"(?im)^\s*subroutine\s+(\w+)", text)}


def long_functions(tree: ast.AST, exempt: set[str]) -> list[tuple[str, int]]:
    """(name, lines) of the functions longer than FUNCTION_LINES, ``exempt`` aside."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES and node.name not in exempt]


def private_imports(tree: ast.AST) -> list[str]:
    """``from module import _name`` of a pompy module (its private names)."""
    return [f"{node.module or '.'}.{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("pompy"))
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_the_size_checks_find_what_they_look_for():
    tree = ast.parse("from pompy.io import _create, write_restart\n"
                     "from .stencil import _apply\nfrom os import _exit\n"
                     "def f():\n" + "    x = 1\n" * FUNCTION_LINES + "def advave():\n"
                     + "    x = 1\n" * FUNCTION_LINES)
    assert private_imports(tree) == ["pompy.io._create", "stencil._apply"]
    assert long_functions(tree, {"advave"}) == [("f", FUNCTION_LINES + 1)]
    assert {"advave", "profq", "bcond", "external_step"} <= pom2k_routines()


def test_modules_and_functions_are_of_a_size_a_reader_can_hold():
    """No module of pompy/ or validation/ over MODULE_LINES lines; no function
    over FUNCTION_LINES outside the pom2k routines (the oracle's subroutine
    names, which the cores mirror); no import of another module's private
    (_name) name."""
    exempt = pom2k_routines()
    big, long, private = [], [], []
    for path in _sources():
        text = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        if len(text.splitlines()) > MODULE_LINES:
            big.append((where, len(text.splitlines())))
        tree = ast.parse(text)
        long += [(where, *f) for f in long_functions(tree, exempt)]
        private += [(where, name) for name in private_imports(tree)]
    assert not big, big
    assert not long, long
    assert not private, private


def test_one_settings_reader():
    """The commands' settings are read in one place: no argparse.Namespace
    is made in pompy/ outside pompy/settings."""
    makers = [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py")
              if "Namespace(" in p.read_text() and "settings" not in p.parts]
    assert makers == [], makers


def test_importing_pompy_changes_no_global_state():
    """Every pompy module imported in a fresh process: the policy registry,
    dynamo's recompile limit, torch's default dtype and the thread count are
    as before; building a compiled core changes none of them either."""
    modules = sorted(import_graph())
    code = f"""
import json, torch, torch._dynamo, importlib
from pompy.autodiff import policies
def read():
    return dict(registry=sorted(policies.POLICY_REGISTRY),
                limit=torch._dynamo.config.recompile_limit,
                dtype=str(torch.get_default_dtype()), threads=torch.get_num_threads())
before = read()
for name in {modules!r}:
    if name != "pompy.__main__":
        importlib.import_module(name)
after_import = read()
from pompy.config import Config
from pompy.core.explicit import ExplicitCore
ExplicitCore(Config(im=5, jm=5, kb=4, kl1=2, kl2=3), compile=True)
print(json.dumps([before, after_import, read()]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, after_import, after_core = json.loads(out.stdout.splitlines()[-1])
    assert before == after_import == after_core
    assert before["registry"] == []


def test_one_set_up_per_run(tmp_path, monkeypatch):
    """`pompy run` sets up once, with either core, and checks the CFL limit
    on that set-up (a dte past the limit is still refused)."""
    import pompy.core.setup as setup
    from pompy.cli import main

    calls = []
    original = setup.set_up

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)
    monkeypatch.setattr(setup, "set_up", counted)
    config = CONFIGS / "box.nml"
    for core in ("explicit", "oracle"):
        calls.clear()
        code = main(["run", str(config), "--core", core, "--steps", "1",
                     "--output", str(tmp_path / core)])
        assert code == 0 and len(calls) == 1, (core, len(calls))
    calls.clear()
    assert main(["run", str(config), "--set", "dte=100", "--steps", "1",
                 "--output", str(tmp_path / "cfl")]) == 2
    assert len(calls) == 1


def small():
    return dataclasses.replace(load_config(CONFIGS / "seamount.nml"), im=12, jm=10, kb=6,
                               kl1=2, kl2=4, isplit=6, ispadv=3)


def run(core: ExplicitCore, steps: int) -> ExplicitCore:
    core.iend = core.iint + steps
    core.run_time_loop()
    return core


def assert_same_state(a: dict, b: dict) -> None:
    for name in variables.names("snapshot"):
        assert torch.equal(a[name], b[name]), name


def test_capture_restores_a_fresh_core_bit_for_bit():
    """capture() after 3 steps, restored into a new core (set up, or not set
    up at all), continues like the core it came from; every restored
    tensor is fresh and detached."""
    config = small()
    source = ExplicitCore(config)
    source.run_initialization()
    run(source, 3)
    record = source.capture()
    assert set(record) == set(variables.names("snapshot")) | {"iint", "time0", "time"}
    ptrs = {t.untyped_storage().data_ptr() for t in record.values() if torch.is_tensor(t)}
    want = run(source, 4).state
    for fresh_setup in (True, False):
        target = ExplicitCore(config)
        if fresh_setup:
            target.run_initialization()
        target.restore(record)
        assert target.iint == 3 and target.time == record["time"]
        assert all(t.untyped_storage().data_ptr() not in ptrs for t in target.state.values())
        assert_same_state(run(target, 4).state, want)


def test_snapshot_without_the_grid_restores_a_set_up_core():
    config = small()
    source = ExplicitCore(config)
    source.run_initialization()
    run(source, 2)
    record = source.snapshot()
    assert not set(record) & set(variables.names("grid"))
    target = ExplicitCore(config)
    with pytest.raises(ValueError, match="run_initialization"):
        target.restore(record)
    target.run_initialization()
    target.restore(record)
    assert_same_state(run(target, 3).state, run(source, 3).state)


def test_restore_gives_a_graph_free_state():
    """A core run with a leaf initial condition that requires grad: its
    capture holds detached tensors, and the restored core builds no graph
    on the captured history."""
    config = small()
    core = ExplicitCore(config)
    core.run_initialization()
    core.el = core.el.clone().requires_grad_(True)
    run(core, 1)
    assert core.el.grad_fn is not None
    record = core.capture()
    assert all(not t.requires_grad for t in record.values() if torch.is_tensor(t))
    core.restore(record)
    assert all(t.grad_fn is None and not t.requires_grad for t in core.state.values())


def test_restore_keeps_the_gradient_path_of_a_record_that_requires_grad():
    """A record edited with a tensor requiring grad (a corrected capture):
    the restored core's run carries its gradient back (once detached
    silently), equal to that of the same correction injected."""
    config = small()
    core = ExplicitCore(config)
    core.run_initialization()
    run(core, 1)
    record = core.capture()
    grads = []
    for how in ("restore", "inject"):
        t0 = record["t"].clone().requires_grad_(True)
        if how == "restore":
            core.restore({**record, "t": t0 * 1.0})
        else:
            core.restore(record)
            core.inject({"t": t0 * 1.0})
        run(core, 2)
        core.t.square().sum().backward()
        grads.append(t0.grad)
    assert grads[0] is not None and float(grads[0].abs().max()) > 0
    assert torch.equal(grads[0], grads[1])


def test_inject_keeps_the_autograd_path():
    config = small()
    core = ExplicitCore(config)
    core.run_initialization()
    t0 = core.t.detach().clone().requires_grad_(True)
    core.inject({"t": t0 * 1.0})
    run(core, 2)
    core.t.square().sum().backward()
    assert t0.grad is not None and torch.isfinite(t0.grad).all() and t0.grad.abs().max() > 0


def test_restart_carries_time0(tmp_path):
    """A run started at time0 = 0.5 days (the internal mode runs at iint 1,
    as pom2k's after a restart), continued from its restart file, equals
    the uninterrupted run, time0 included."""
    from pompy.driver import make_model
    from pompy.io import read_restart, write_restart

    config = dataclasses.replace(small(), lramp=True)
    whole = ExplicitCore(config)
    whole.run_initialization()
    whole.load_state(whole.state, iint=0, time0=0.5)
    run(whole, 4)
    part = ExplicitCore(config)
    part.run_initialization()
    part.load_state(part.state, iint=0, time0=0.5)
    run(part, 2)
    path = write_restart(tmp_path / "r.nc", config, part.numpy_state(), 2, part.time, part.time0)
    assert read_restart(path).time0 == 0.5
    resumed = make_model(config, restart=path)
    assert resumed.time0 == 0.5 and resumed.iint == 2
    resumed.advance(4)
    want = whole.numpy_state()
    for name in variables.names("restart"):
        np.testing.assert_array_equal(resumed.numpy_state()[name], want[name], err_msg=name)
