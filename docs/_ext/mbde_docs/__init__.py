"""Sphinx extension of the mbde docs: references generated from the code at build time.

A page asks for a generated reference with a fenced block whose info string is
``{mbde-reference} NAME``; before the page is parsed (Sphinx's ``source-read`` event)
the block is replaced by the Markdown that :data:`GENERATORS` ``[NAME]()`` returns. The
generators read the code's own schemas (the mechanism loader's, the sensor loader's, the
estimator options, the nodes' parameter table, the CLI's argparse parsers), so the
reference pages cannot drift from what the code accepts. Pages with a generated block are
always rebuilt (``env-get-outdated``).
"""
from __future__ import annotations

import re

BLOCK = re.compile(r"^```\{mbde-reference\}[ \t]+([\w-]+)[ \t]*\n```[ \t]*$", re.M)


def _generators() -> dict:
    from mbde_docs import cli, mechanism, options, ros, sensors

    return {
        "mechanism": mechanism.markdown,
        "sensors": sensors.markdown,
        "scenario": mechanism.scenario_markdown,
        "estimator-options": options.markdown,
        "ros": ros.markdown,
        "cli": cli.markdown,
    }


def expand(text: str) -> str:
    """``text`` with every ``{mbde-reference} NAME`` block replaced by its Markdown."""
    gens = _generators()

    def sub(match):
        name = match.group(1)
        if name not in gens:
            raise ValueError(f"unknown generated reference {name!r} (one of {', '.join(sorted(gens))})")
        return gens[name]().rstrip() + "\n"

    return BLOCK.sub(sub, text)


def _source_read(app, docname, source):
    if BLOCK.search(source[0]):
        source[0] = expand(source[0])
        app.env.mbde_generated = getattr(app.env, "mbde_generated", set()) | {docname}


def _outdated(app, env, added, changed, removed):
    return sorted(getattr(env, "mbde_generated", set()) - set(removed))


def setup(app):
    app.connect("source-read", _source_read)
    app.connect("env-get-outdated", _outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
