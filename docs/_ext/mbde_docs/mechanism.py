"""The mechanism and scenario YAML references, from the loaders' schemas."""
from __future__ import annotations

import re

from mbde_docs.md import code, section_table, table


def markdown() -> str:
    from mbde_core.model import schema

    out = [
        "Generated from `mbde_core/model/schema.py`, the table the loader checks every file "
        "against. Units are SI. Numbers may be arithmetic expressions (a safe evaluator, no "
        "`eval`): `+ - * / ^ **`, `sqrt sin cos tan asin acos atan atan2 exp log abs min max "
        "hypot deg2rad rad2deg`, and the variables below.\n",
    ]
    for sec in schema.SECTIONS:
        where = f"`{sec.path}`" if sec.path else "the top level"
        out += [f"## {sec.title}\n", f"Keys of {where}. {sec.doc}\n", section_table(sec)]
        if sec is schema.LOAD:
            rows = [[code(t), ", ".join(code(k) for k in req), ", ".join(code(k) for k in opt) or "-", meaning]
                    for t, (req, opt, meaning) in schema.LOAD_TYPES.items()]
            out += ["Keys by load type:\n", table(["type", "requires", "may have", "meaning"], rows)]
        if sec is schema.DRIVER:
            rows = [[code(t), f"{code(ref)}, {code(fn)}", meaning] for t, (ref, fn, meaning) in schema.DRIVER_TYPES.items()]
            out += ["Keys by driver type:\n", table(["type", "requires", "meaning"], rows)]
        if sec is schema.RELATIVE:
            rows = [[code(t), meaning] for t, meaning in schema.RELATIVE_TYPES.items()]
            out += ["Types:\n", table(["type", "the coordinate is"], rows)]
    out += ["## Expression variables\n",
            "Points are numbered **from 0** (references and `x<i>`/`y<i>`); libmbse's `index` and "
            "`lengthIJ` count **from 1**. A mix-up is an error that names the right spelling.\n",
            table(["variable", "exists", "meaning"], [list(v) for v in schema.VARIABLES])]
    return "\n".join(out)


def _docstring_yaml(module) -> str:
    """The annotated YAML example of a module docstring (the text after '::')."""
    doc = module.__doc__
    block = doc.split("::\n", 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines).rstrip() + "\n"


def scenario_markdown() -> str:
    """The scenario reference: the loader's annotated example (its docstring), checked to
    name every key the loader accepts (a key added to the loader without its documentation
    fails the docs build)."""
    from mbde_core.scenario import controller, model_errors, scenario

    parts = [("scenario", scenario, scenario.TOP_KEYS), ("speed_controller", controller, controller.KEYS),
             ("model_errors", model_errors, model_errors.KEYS)]
    out = ["Generated from the scenario loaders' documented examples "
           "(`mbde_core/scenario/`); every key they accept is in them.\n"]
    for title, module, keys in parts:
        text = _docstring_yaml(module) if "::\n" in module.__doc__ else module.__doc__
        missing = [k for k in keys if not re.search(rf"\b{re.escape(k)}\b", text)]
        if missing:
            raise ValueError(f"{module.__name__}: keys {missing} are accepted but not documented in its docstring")
        body = text if "::\n" in module.__doc__ else module.__doc__
        out += [f"## `{title}`\n" if title != "scenario" else "## A scenario file\n",
                "```yaml\n" + body + "```\n" if "::\n" in module.__doc__ else body + "\n"]
    out += ["The `sensors:` list follows the [sensor YAML reference](sensor-yaml.md); `loads` and "
            "`unmodelled_loads` the [mechanism YAML reference](mechanism-yaml.md)'s `loads`.\n"]
    return "\n".join(out)
