"""Sphinx configuration of pompy's documentation (MyST Markdown, furo).

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are
errors; tests/test_docs.py runs it)."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import pompy  # noqa: E402

project = "pompy"
author = "the pompy developers"
copyright = "pompy developers"
version = release = pompy.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "mathml",
    "plaindoc",
    "variables_table",
]
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
html_math_renderer = "mathml"
# an unlabelled block (a docstring's usage lines, a formula) is shown as written, not as Python
highlight_language = "none"

html_theme = "furo"
html_title = f"pompy {release}"
html_static_path = ["_static"]
html_css_files = ["pompy.css"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
nitpicky = False
default_role = "code"
# "--resume" stays two hyphens (smart quotes made it an en-dash, which a shell refuses)
smartquotes = False


def _skip_field_aliases(app, what, name, obj, skip, options):
    """A NamedTuple's fields document themselves as "Alias for field number
    N": left out (the class docstring says what each is)."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_field_aliases)


def _unplaced_modules() -> list[str]:
    """pompy's modules that no API page names (a module added since the
    pages were written): listed on api/more.md, written here, so the
    reference never leaves one out."""
    import pkgutil
    import re

    placed = set()
    for page in (HERE / "api").glob("*.md"):
        placed |= set(re.findall(r"automodule:: (\S+)", page.read_text()))
    return [m.name for m in pkgutil.walk_packages(pompy.__path__, "pompy.")
            if not m.name.endswith("__main__") and m.name not in placed]


def _write_more_page() -> None:
    path = HERE / "api" / "more.md"
    lines = ["# More modules", "",
             "Modules not yet placed on one of the pages above.", ""]
    for module in _unplaced_modules():
        lines += ["```{eval-rst}", f".. automodule:: {module}", "```", ""]
    path.write_text("\n".join(lines))


_write_more_page()
