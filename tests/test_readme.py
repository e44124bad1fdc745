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


def test_readme_is_a_front_door():
    """At most about 200 lines; its figure is there; it names every
    subcommand of pompy's parser, the exit codes and where the docs are."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme):
        assert (ROOT / image).is_file(), image
    from pompy.cli import build_parser
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name in subcommands:
        assert f"`pompy {name}`" in readme, name
    exits = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130, 143 |"):
        assert code in exits, code
    assert "python3 -m sphinx -W -b html docs docs/_build/html" in readme
