"""The ``pompy-variables`` directive: the table of every model variable
(pompy.variables), one row each, from the declarations themselves, so the
page cannot drift from the code: name, long name, units, dimensions, grid
location, kind, and where it goes (restart files, output, datasets, the
trainer's network channels)."""
from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx

COLUMNS = ("name", "long name", "units", "dims", "location", "kind", "restart",
           "output", "dataset", "channels")


def _cell(text: str, literal: bool = False) -> nodes.entry:
    entry = nodes.entry()
    paragraph = nodes.paragraph()
    paragraph += nodes.literal(text, text) if literal else nodes.Text(text)
    entry += paragraph
    return entry


def rows() -> list[list[str]]:
    """A row of COLUMNS per declared variable (work arrays last)."""
    from pompy import dataset, variables
    from pompy.generate.writer import TARGET_FIELDS

    grid, state = set(dataset.grid_fields()), set(dataset.state_fields())
    table = []
    for name, var in {**variables.VARIABLES, **variables.WORK}.items():
        packed = name in variables.PACKED
        table.append([
            name, var.long_name, var.units, "(" + ", ".join(var.dims) + ")", var.location,
            var.kind, "yes" if var.restart else "", "yes" if var.output else "",
            "once" if name in grid else "every snapshot" if name in TARGET_FIELDS
            else "sample starts" if name in state else "",
            ("k = 1..kb-1" if len(var.dims) == 3 else "one") if packed else ""])
    return table


class VariablesTable(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        table = nodes.table(classes=["pompy-variables"])
        group = nodes.tgroup(cols=len(COLUMNS))
        table += group
        for _ in COLUMNS:
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        header = nodes.row()
        for title in COLUMNS:
            header += _cell(title)
        head += header
        group += head
        body = nodes.tbody()
        for values in rows():
            row = nodes.row()
            for n, value in enumerate(values):
                row += _cell(value, literal=n == 0)
            body += row
        group += body
        return [table]


def setup(app: Sphinx) -> dict:
    app.add_directive("pompy-variables", VariablesTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
