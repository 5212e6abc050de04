"""Markdown helpers of the generated references."""
from __future__ import annotations


def cell(text) -> str:
    """A table cell: pipes escaped, newlines folded."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def code(text) -> str:
    """Inline code of a value (empty string shown as ``''``)."""
    text = "''" if text == "" else str(text)
    return "`" + text.replace("`", "'") + "`" if text else ""


def section_table(section) -> str:
    """The keys of a :class:`mbde_core.config.schema.Section` as a table."""
    rows = [[code(k.name) + (" (required)" if k.required else ""), k.type, k.unit, k.default, k.meaning]
            for k in section.keys]
    return table(["key", "type", "unit", "default", "meaning"], rows)
