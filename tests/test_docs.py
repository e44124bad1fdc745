"""The documentation: the Sphinx site builds with warnings as errors; the
getting-started page's and the tutorial's examples run as written; every command that README
and the docs show parses with the real argument parsers; the rendered
getting-started and implicit-core pages show their figures and equations in
headless Chromium.

The build is ``python -m sphinx -W -b html docs docs/_build/html`` into a
scratch folder (measured: about 12 s on 2 shared cores); the examples run
pompy on the 12-step seamount (a few seconds each).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from conftest import in_ci

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return [(lang.strip(), body) for lang, body in
            re.findall(r"^```([^\n`]*)\n(.*?)^```", text, flags=re.S | re.M)]


def indented_blocks(text: str) -> list[str]:
    """README's 4-space indented code blocks (outside fences)."""
    outside = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    blocks, current = [], []
    for line in outside.splitlines():
        if line.startswith("    ") and (current or not line.strip().startswith("-")):
            current.append(line[4:])
        elif current and not line.strip():
            current.append("")
        else:
            if current:
                blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def commands(block: str) -> list[str]:
    """The shell commands of a code block: continuation lines joined,
    comments and a prompt dropped, split at && ; and |."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        line = re.sub(r"^\$\s+", "", line.split(" #")[0].strip())
        if line.startswith("#"):
            continue
        found += [part.strip() for part in re.split(r"&&|;|\|", line) if part.strip()]
    return found


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every pompy command README and the docs show."""
    shown = []
    for page in pages():
        text = page.read_text()
        blocks = [body for lang, body in fenced_blocks(text) if lang in SHELL_FENCES]
        if page.name == "README.md":
            blocks += indented_blocks(text)
            # the commands table: one example per subcommand, its last column
            blocks += [row.rstrip(" |").rsplit("|", 1)[1].strip().strip("`")
                       for row in text.splitlines() if row.startswith("| `pompy ")]
        for block in blocks:
            for command in commands(block):
                if re.search(r"(^|\s)(pompy|torchrun)(\s|$)|-m pompy", command):
                    shown.append((str(page.relative_to(ROOT)), command))
    return shown


# ---------------------------------------------------------------- parsing


class ParseError(Exception):
    pass


def parse_with(parser, args: list[str], what: str) -> None:
    """``parser.parse_args(args)``; a ParseError with argparse's message
    instead of its exit."""
    def error(message):
        raise ParseError(f"{what}: {message}")
    parser.error = error
    for action in parser._actions:                           # subcommands report here too
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.error = error
    try:
        parser.parse_args(args)
    except SystemExit as exc:                                # --help, --version
        if exc.code not in (0, None):
            raise ParseError(f"{what}: exit {exc.code}") from None


def module_parser(module: str):
    """The parser of ``python -m MODULE`` for pompy's modules."""
    if module == "pompy":
        from pompy.cli import build_parser
        return build_parser()
    if module == "pompy.train":
        from pompy.train.cli import build_parser
        return build_parser()
    if module == "pompy.generate":
        from pompy.generate import add_arguments
        parser = argparse.ArgumentParser(prog="python -m pompy.generate")
        add_arguments(parser)
        return parser
    if module == "pompy.oracle":
        parser = argparse.ArgumentParser(prog="python -m pompy.oracle")     # as pompy/oracle/__main__.py
        sub = parser.add_subparsers(dest="command", required=True)
        sub.add_parser("build").add_argument("--force", action="store_true")
        return parser
    raise ParseError(f"no parser known for python -m {module}")


def check_command(command: str) -> None:
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):     # VAR=value prefixes
        words = words[1:]
    if not words:
        return
    head = words[0]
    if head == "pompy":
        parse_with(module_parser("pompy"), words[1:], command)
    elif head == "torchrun" or re.fullmatch(r"python3?", head) and words[1:3] == ["-m",
                                                                              "pompy.launch"]:
        from torch.distributed.run import get_args_parser       # pompy.launch takes torchrun's
        launcher = get_args_parser()
        args = launcher.parse_args(words[1:] if head == "torchrun" else words[3:])
        if args.module:
            parse_with(module_parser(args.training_script), args.training_script_args, command)
        else:
            assert Path(ROOT / args.training_script).is_file(), command
    elif re.fullmatch(r"python3?", head) and words[1:2] == ["-m"]:
        module = words[2]
        if module in ("pip", "pytest", "sphinx"):
            return
        if module == "pompy.oracle":
            assert words[3:4] == ["build"] and set(words[4:]) <= {"--force"}, command
            return
        parse_with(module_parser(module), words[3:], command)
    elif re.fullmatch(r"python3?", head):
        assert (ROOT / words[1]).is_file(), command                      # validation scripts


def test_commands_are_found():
    shown = shown_commands()
    firsts = {c.split()[0] for _, c in shown}
    readme = {c.split()[1] for page, c in shown if page == "README.md" and c.startswith("pompy ")}
    assert {"run", "compare", "config", "setup", "verify", "generate", "train", "report"} <= readme
    assert len(shown) > 20 and {"pompy", "torchrun", "python3"} <= firsts, shown


@pytest.mark.parametrize("page,command", shown_commands())
def test_every_shown_command_parses(page, command):
    """Each pompy command of README and the docs, with its flags, against
    the real parsers: pompy.cli.build_parser(), the trainer's
    (pompy.train.cli, from pompy.settings), the generator's and torchrun's."""
    check_command(command)


def test_the_checker_catches_a_wrong_flag():
    with pytest.raises(ParseError):
        check_command("pompy run configs/seamount.nml --stpes 3")
    with pytest.raises(ParseError):
        check_command("torchrun --nproc_per_node=2 -m pompy.train --config c.nml --batchsize 2")
    with pytest.raises(ParseError):
        check_command("pompy frobnicate")


# ---------------------------------------------------------------- the build


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built with warnings as errors."""
    try:
        import furo  # noqa: F401
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as exc:
        reason = f"the documentation tools are not installed ({exc}): pip install -e '.[test]'"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("docs") / "html"
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-b", "html", "-q", str(DOCS), str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out


def test_the_docs_build_with_warnings_as_errors(site):
    for page in ("index", "getting-started", "tutorial", "new-core", "guide/configs",
                 "guide/running", "guide/outputs",
                 "guide/troubleshooting", "guide/comparing", "guide/reports", "oracle", "cores",
                 "implicit-core", "gradients", "training", "performance", "variables", "changelog",
                 "api/index",
                 "api/cores", "api/gradients"):
        assert (site / f"{page}.html").is_file(), page
    api = (site / "api" / "cores.html").read_text()
    assert 'id="pompy.core.model.Core"' in api and "run_time_loop" in api
    implicit = (site / "implicit-core.html").read_text()
    assert implicit.count("<math") >= 10 and not re.search(r"<script[^>]*mathjax", implicit, re.I)


def test_flags_and_code_survive_the_build(site):
    """A flag copied from any page is the flag (two hyphens, no en-dash); a
    formula with ** is code, not bold; NamedTuple fields do not repeat
    "Alias for field number"."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r"(?<![\w\u2013-])\u2013[a-z_]{3,}", text), page
        assert "Alias for field number" not in text, page
    api = (site / "api" / "training.html").read_text()
    assert "--resume" in api and "--overwrite" in api
    gradients = (site / "gradients.html").read_text()
    assert "<code" in gradients and "1e-8**p" in gradients and "<strong>p" not in gradients
    # a docstring's usage lines are shown as written, not coloured as Python
    training = (site / "api" / "training.html").read_text()
    block = training[training.rindex("<pre>", 0, training.index("--nproc_per_node=K")):
                     training.index("--nproc_per_node=K")]
    assert '<span class="' not in block, block[:300]


def test_the_variable_table_has_every_variable(site):
    """variables.html: a row per declared variable (pompy.variables, work
    arrays too) with its long name and units, and the categories as the
    declarations say (u: restart, output, each snapshot, k = 1..kb-1)."""
    from html import unescape

    from pompy import variables

    page = unescape((site / "variables.html").read_text())
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>",
                                                                         row, re.S)]
        rows[cells[0]] = cells
    declared = {**variables.VARIABLES, **variables.WORK}
    assert set(declared) <= set(rows), set(declared) - set(rows)
    for name, var in declared.items():
        assert rows[name][1:3] == [var.long_name, var.units], (name, rows[name])
    assert rows["u"][3:] == ["(i, j, k)", "U", "prognostic", "yes", "yes", "every snapshot",
                             "k = 1..kb-1"]
    assert rows["q2"][8] == "sample starts" and rows["q2"][9] == ""
    assert rows["h"][8] == "once" and rows["a"][6:] == ["", "", "", ""]


def test_no_issue_numbers_or_history_in_the_text():
    for page in pages():
        text = page.read_text()
        assert not re.search(r"\bissues? #?\d+|#\d{1,4}\b", text, flags=re.I), page
        assert "tried and not kept" not in text.lower(), page


# ---------------------------------------------------------------- pages that run


def page_steps(page: str, start: str, end: str | None = None) -> list[tuple[str, str]]:
    """A page's code from the heading ``start`` on (to ``end``), in order:
    ("shell", command) and ("python", block); outputs ("text") are not run."""
    text = (DOCS / page).read_text().split(f"\n## {start}", 1)[1]
    text = text.split(f"\n## {end}", 1)[0] if end else text
    steps = []
    for lang, body in fenced_blocks(text):
        if lang == "python":
            steps.append(("python", body))
        elif lang in SHELL_FENCES:
            steps += [("shell", c) for c in commands(body)]
    return steps


def run_steps(steps: list[tuple[str, str]], folder: Path) -> None:
    """Every step in ``folder`` (which holds the configs), as a reader runs
    them: each command, and each Python block after the page's earlier ones
    (as in one session); all must succeed."""
    (folder / "configs").symlink_to(ROOT / "configs")
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    python_code = []
    for kind, code in steps:
        if kind == "shell":
            words = shlex.split(code)
            assert words[0] == "pompy", code
            result = subprocess.run([sys.executable, "-m", "pompy", *words[1:]], cwd=folder, env=env,
                                    capture_output=True, text=True, timeout=600)
        else:
            python_code.append(code)
            result = subprocess.run([sys.executable, "-c", "\n".join(python_code)], cwd=folder,
                                    env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (code, result.stdout[-2000:], result.stderr[-3000:])


def a_picture(png: Path) -> None:
    picture = matplotlib.image.imread(png)
    assert min(picture.shape[:2]) > 200 and picture[..., :3].std() > 0.05


def test_the_getting_started_examples_run(oracle, tmp_path):
    """Every command and Python block of the page, in order, in a fresh
    folder holding the configs: all succeed, the plot is written, and the
    Fortran comparisons pass (the torch core within 1e-10, and bit for bit
    with --fortran-math)."""
    steps = page_steps("getting-started.md", "First run", "Where next")
    assert [kind for kind, _ in steps].count("python") >= 2
    assert sum(kind == "shell" and "compare" in c for kind, c in steps) == 2
    run_steps(steps, tmp_path)
    a_picture(tmp_path / "first-run.png")
    assert (tmp_path / "output" / "seamount" / "explicit_output.nc").is_file()


def test_the_tutorial_runs(oracle, tmp_path):
    """The tutorial, every block in order, in a fresh folder: its own IC
    file and config, a run of the torch core and of the oracle, both
    comparisons (within 1e-9, and bit for bit with --fortran-math) and the
    plot. What the page says of the default tolerance holds: at 1e-10 only
    w exceeds it, by at most 2.3e-10 of its largest value, every other field
    is within 6e-11."""
    from pompy.compare import differences

    steps = page_steps("tutorial.md", "The grid and the initial state")
    assert [kind for kind, _ in steps].count("python") == 3
    assert [c.split()[1] for kind, c in steps if kind == "shell"] == \
        ["config", "run", "run", "compare", "run", "compare"]
    run_steps(steps, tmp_path)
    a_picture(tmp_path / "basin.png")
    out = tmp_path / "output" / "basin"
    worst = {}
    for d in differences(out / "oracle_output.nc", out / "explicit_output.nc"):
        worst[d.name] = max(worst.get(d.name, 0.0), d.max_rel)
    over = {name for name, rel in worst.items() if rel > 1e-10}
    assert over == {"w"} and worst["w"] < 2.5e-10, worst
    assert max(rel for name, rel in worst.items() if name != "w") < 6e-11, worst


def test_the_new_core_example_runs(tmp_path):
    """The new-core page's free-surface part, given to a Core: the seamount
    as the explicit core runs it, bit for bit (the page's own asserts)."""
    steps = page_steps("new-core.md", "What a free-surface part does")
    python = [step for step in steps if step[0] == "python"]
    assert len(python) == 1 and "assert" in python[0][1]
    run_steps(python, tmp_path)


# ---------------------------------------------------------------- rendered pages


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "chromium is not installed (Debian: apt-get install -y chromium)"
        if in_ci():
            pytest.fail(reason + "; CI installs it (.ci/run)")
        pytest.skip(reason)
    return path


def browse(browser: str, page: Path, *extra: str, width: int = 1400) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-device-scale-factor=1", f"--window-size={width},7000", *extra,
                           page.as_uri()],
                          check=True, capture_output=True, text=True, timeout=120)


def crop(png: Path, rect: dict):
    """The screenshot's pixels inside a rectangle the page reported (CSS
    pixels; the screenshot is at scale 1 and the page is not scrolled)."""
    rgb = matplotlib.image.imread(png)[..., :3].astype(float)
    return rgb[int(rect["top"]) + 1:int(rect["bottom"]) - 1, int(rect["left"]) + 1:int(rect["right"]) - 1]


# Laid out by the browser: each figure loaded and its place on the page;
# each display equation's place; every equation has a size, and every
# fraction has its numerator above its denominator (MathML rendered as
# math, not as a line of text); how far the page is wider than the window;
# any en-dash the reader sees where a flag (--name) would be.
LAYOUT_PROBE = """<script>
addEventListener("load", () => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const main = document.querySelector("article") || document.body;
  const images = [...main.querySelectorAll("img")].map(i => ({loaded: i.complete && i.naturalWidth > 0,
                                                               ...box(i)}));
  const maths = [...main.querySelectorAll("math")];
  const sized = maths.filter(m => { const r = m.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  const fracs = [...main.querySelectorAll("mfrac")];
  const stacked = fracs.filter(f => f.children.length === 2 &&
      f.children[0].getBoundingClientRect().bottom <= f.children[1].getBoundingClientRect().top + 1);
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({images, math: maths.length, sized: sized.length,
                                    displays: [...main.querySelectorAll("div.math")].map(box),
                                    fractions: fracs.length, stacked: stacked.length,
                                    overflow: document.documentElement.scrollWidth - innerWidth,
                                    dashed: document.body.innerText.match(/(?<![\\w\u2013-])\u2013[a-z_]{3,}/g)});
  document.body.appendChild(out);
});
</script>"""


def layout(browser: str, probe: Path, width: int) -> dict:
    """What LAYOUT_PROBE read of the page laid out in a ``width`` px window."""
    dom = browse(browser, probe, "--dump-dom", "--virtual-time-budget=5000", width=width).stdout
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, flags=re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


# every page with a figure or a display equation: (its figures, its display equations)
PAGES_WITH_FIGURES = [("index", 1, 0), ("getting-started", 1, 0), ("tutorial", 1, 0),
                      ("implicit-core", 1, 7), ("cores", 0, 3)]


def test_every_page_with_a_figure_or_an_equation_is_checked():
    shown = {str(p.relative_to(DOCS).with_suffix("")) for p in pages()[1:]
             if re.search(r"^```\{figure\}|^\$\$", p.read_text(), flags=re.M)}
    assert shown == {name for name, _, _ in PAGES_WITH_FIGURES}


@pytest.mark.parametrize("name,figures,equations", PAGES_WITH_FIGURES)
def test_pages_show_their_figures_and_equations_in_chromium(site, name, figures, equations):
    """The page in headless Chromium, its layout read back from the page
    itself: each figure loaded, and where the page puts it the screenshot
    shows a picture (not blank); each display equation drawn (ink where it
    lies), every equation sized and every fraction stacked, as MathML laid
    out as mathematics. At 1000, 1400 and 1600 px the page is no wider
    than the window, and no flag a reader sees is written with an en-dash."""
    browser = chromium()
    page = site / f"{name}.html"
    html = page.read_text()
    probe = page.with_name(f"{name}.probe.html")              # beside it: _static, _images resolve
    probe.write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"))
    shot = site / f"{name}.png"
    browse(browser, probe, f"--screenshot={shot}", "--virtual-time-budget=5000")
    for width in (1000, 1600):
        wide = layout(browser, probe, width)
        assert wide["overflow"] <= 0, (width, wide["overflow"])
    shown = layout(browser, probe, 1400)
    assert shown["overflow"] <= 0 and not shown["dashed"], (shown["overflow"], shown["dashed"])
    assert len(shown["images"]) == figures, shown["images"]
    for image in shown["images"]:
        assert image["loaded"] and image["right"] - image["left"] > 300, image
        pixels = crop(shot, image)
        assert pixels.std() > 0.1 and (pixels.min(axis=-1) < 0.9).mean() > 0.05, (image, pixels.std())
    assert shown["sized"] == shown["math"] >= equations, shown
    assert len(shown["displays"]) >= equations, shown["displays"]
    for display in shown["displays"]:
        ink = (crop(shot, display).mean(axis=-1) < 0.5).mean()
        assert ink > 0.01, (display, ink)
    if equations:
        assert shown["fractions"] >= 1 and shown["stacked"] == shown["fractions"], shown
