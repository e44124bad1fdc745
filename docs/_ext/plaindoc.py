"""pompy's docstrings as reStructuredText that builds without warnings.

pompy writes its docstrings as plain prose in the numpydoc manner: the
pom2k name, what is written where, formulas with ``|x|`` and ``a*b``,
continuation lines indented under a sentence. Read as reStructuredText,
``|x|`` is a substitution, a lone ``*`` starts emphasis and a deeper
indented line is a block quote without the blank line before it. This
hook, run before napoleon on each docstring, escapes those characters
outside double-backquoted literals and puts a blank line where the
indentation changes; a block indented under a sentence (code, a formula,
a table) becomes a literal block, so the reference shows the text as
written. Literal blocks (after ``::``), directives and numpydoc sections
(a title over a line of dashes, to the end) are left as they are."""
from __future__ import annotations

import re

from sphinx.application import Sphinx

_LITERAL = re.compile(r"(``.+?``|:[\w:]+:`[^`]+`)")
_SECTION_RULE = re.compile(r"^\s*-{3,}\s*$")
_TABLE_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)]|\(?[a-z0-9]\))\s")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape(text: str) -> str:
    parts = _LITERAL.split(text)
    for n in range(0, len(parts), 2):           # the text between literals
        part = parts[n].replace("\\", "\\\\").replace("|", r"\|").replace("*", r"\*")
        parts[n] = re.sub(r"(\w)_(?!\w)", r"\1\\_", part)
    return "".join(parts)


def plain_prose(lines: list[str]) -> list[str]:
    """``lines`` made safe as reStructuredText (see the module's docstring)."""
    out: list[str] = []
    verbatim_below = None           # indentation a literal block or directive must exceed
    rules = 0                       # the borders of a simple table seen: its text is kept
    for n, line in enumerate(lines):
        if _TABLE_RULE.match(line):
            rules += 1
        if rules % 3 or _TABLE_RULE.match(line):
            out.append(line)
            if rules % 3 == 0:
                rules = 0
            continue
        if n + 1 < len(lines) and _SECTION_RULE.match(lines[n + 1]) and line.strip():
            return out + lines[n:]   # numpydoc sections: napoleon's
        blank = not line.strip()
        if verbatim_below is not None and (blank or _indent(line) > verbatim_below):
            out.append(line)
            continue
        verbatim_below = None
        if blank:
            out.append(line)
            continue
        previous = next((p for p in reversed(out) if p.strip()), None)
        if previous is not None and _indent(line) > _indent(previous) and \
                not _LIST_ITEM.match(previous):
            # an indented block under a sentence (code, a formula, a table):
            # kept as written, a literal block
            out += ["", " " * _indent(previous) + "::", ""]
            verbatim_below = _indent(previous)
            out.append(line)
            continue
        continues_item = previous is not None and _LIST_ITEM.match(previous) and \
            _indent(line) > _indent(previous)
        if out and out[-1].strip() and _indent(out[-1]) != _indent(line) and not continues_item:
            out.append("")
        stripped = line.strip()
        if stripped.startswith(".. ") or stripped.startswith(">>>"):
            out.append(line)
        else:
            out.append(line[:_indent(line)] + _escape(stripped))
        if stripped.endswith("::") or stripped.startswith(".. "):
            verbatim_below = _indent(line)
    return out


def _process(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = plain_prose(lines)


def setup(app: Sphinx) -> dict:
    app.connect("autodoc-process-docstring", _process, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
