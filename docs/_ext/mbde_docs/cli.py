"""The command-line reference, from every `mbde` subcommand's argparse parser."""
from __future__ import annotations

import argparse
import importlib


def _parser(name: str, module_name: str, helptext: str) -> argparse.ArgumentParser:
    from mbde_core.cli.main import OneLineParser

    module = importlib.import_module(module_name)
    p = OneLineParser(prog=f"mbde {name}", description=getattr(module, "DESCRIPTION", helptext),
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(p)
    return p


def _help(p: argparse.ArgumentParser) -> str:
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return p.format_help()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def markdown() -> str:
    from mbde_core.cli.main import _commands

    out = ["Generated from the argparse parsers of the `mbde` command (`mbde_core/cli/`) and of its "
           "plugins (`mbde bench`, `mbde_bench/cli.py`): what `mbde COMMAND --help` prints.\n"]
    for name, module_name, helptext in _commands():
        p = _parser(name, module_name, helptext)
        out += [f"## `mbde {name}`\n", helptext + "\n", "```text\n" + _help(p).rstrip() + "\n```\n"]
        sub = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        for action in sub:
            for subname, sp in action.choices.items():
                out += [f"### `mbde {name} {subname}`\n", "```text\n" + _help(sp).rstrip() + "\n```\n"]
    return "\n".join(out)
