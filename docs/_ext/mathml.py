"""Math rendered to MathML when the docs are built (latex2mathml), so the
pages need no script and no network to show their equations: browsers
lay MathML out natively (Chromium since 109, Firefox, Safari)."""
from __future__ import annotations

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.math import get_node_equation_number


def _mathml(latex: str, display: str) -> str:
    try:
        return convert(latex.strip(), display=display)
    except Exception as exc:            # latex2mathml raises its own errors, all of them a bad formula
        raise ExtensionError(f"cannot convert to MathML: {latex!r}: {exc}") from exc


def visit_math(self, node: nodes.math) -> None:
    self.body.append(f'<span class="math">{_mathml(node.astext(), "inline")}</span>')
    raise nodes.SkipNode


def visit_displaymath(self, node: nodes.math_block) -> None:
    number = get_node_equation_number(self, node) if node["number"] else None
    self.body.append(self.starttag(node, "div", CLASS="math"))
    if number:
        self.body.append(f'<span class="eqno">({number})</span>')
    for latex in node.astext().split("\n\n"):
        self.body.append(_mathml(latex, "block"))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict:
    app.add_html_math_renderer("mathml", (visit_math, None), (visit_displaymath, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
