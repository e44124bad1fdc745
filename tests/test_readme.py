import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```[^\n]*\n(.*?)```", section, flags=re.S)]


def test_quick_start_has_two_commands():
    run, test = quick_start_commands()
    assert run.endswith("python3 -m pompy run configs/seamount.nml")
    assert test.endswith("python3 -m pytest")


def test_ci_runs_the_readme_test_command():
    test_command = quick_start_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
    assert "export POMPY_REQUIRE_GOLDEN=1" in ci
