"""The estimator-options reference, from each estimator's typed options.

The ONE entry point the reference reads is :func:`option_rows` (what each estimator
accepts, with its default): the frozen ``Options`` dataclass each estimator class
declares (``mbde_core.estimators.configure.defaults``: the common and stage options and
the estimator's own), for every registered estimator. Meanings come from the comments of
the shipped options files (``config/estimators/*.yaml``), which state every default.
"""
from __future__ import annotations

import os
import re

from mbde_docs.md import code, table

CONFIG = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "config", "estimators")
FILES = ("default.yaml", "pf.yaml", "adekf.yaml", "vipf.yaml")


def option_rows() -> dict[str, list[tuple[str, object]]]:
    """estimator name -> [(key path, default value)] of every option it accepts."""
    from mbde_core.estimators.configure import defaults
    from mbde_core.estimators.registry import names

    def flatten(d, prefix=""):
        for k, v in d.items():
            path = f"{prefix}{k}"
            if isinstance(v, dict) and v and k not in ("options",):
                yield from flatten(v, path + ".")
            else:
                yield path, v

    out = {}
    for name in names():
        try:
            out[name] = list(flatten(defaults(name)))
        except ModuleNotFoundError:  # an estimator whose optional dependency is missing
            continue
    return out


def comments() -> dict[tuple[str, str], str]:
    """(section, key path) -> the trailing comment of that key in the shipped options files."""
    out = {}
    for fname in FILES:
        path = os.path.join(CONFIG, fname)
        if not os.path.isfile(path):
            continue
        section, stack = None, []
        for line in open(path, encoding="utf-8"):
            m = re.match(r"^( *)([A-Za-z_][\w]*):(.*)$", line.rstrip("\n"))
            if not m:
                continue
            indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
            if indent == 0:
                section, stack = key, []
                continue
            level = indent // 2 - 1
            stack = stack[:level] + [key]
            comment = rest.split("#", 1)[1].strip() if "#" in rest else ""
            if comment:
                out[(section, ".".join(stack))] = comment
    return out


def common_comments() -> dict[str, str]:
    """key path -> meaning, from the header of default.yaml: its "Common options" entries
    (``#   key: meaning``) and the rule's inputs (``#   rule.key   meaning``)."""
    out, keys = {}, []
    started = False
    for line in open(os.path.join(CONFIG, "default.yaml"), encoding="utf-8"):
        if not line.startswith("#"):
            break
        line = line.rstrip()
        if line.startswith("# Common options"):
            started, keys = True, []
            continue
        rule = re.match(r"^#   (rule\.\w+) +(.*)$", line)
        m = re.match(r"^#   ([a-z_][\w.]*)([^:]*): (.*)$", line) if started else None
        if rule:
            keys = [rule.group(1)]
            out[keys[0]] = rule.group(2).strip()
        elif m:
            keys = [m.group(1)] + re.findall(r"\b([a-z_]+\.[a-z_]+)\b", m.group(2))
            for k in keys:
                out[k] = m.group(3).strip()
        elif keys and re.match(r"^#     ", line):
            for k in keys:
                out[k] += " " + line[1:].strip()
        else:
            keys = []
    return out


def _value(v) -> str:
    if isinstance(v, float):
        return code(f"{v:g}")
    if v is None:
        return code("null")
    return code(v if not isinstance(v, (list, dict)) else str(v).replace("'", ""))


def markdown() -> str:
    rows = option_rows()
    notes = comments()
    common = common_comments()
    out = ["Generated from each estimator's typed options (the frozen `Options` dataclass its "
           "class declares, `mbde_core/estimators/options/frozen.py`); the meanings are the comments of the shipped "
           "options files in `config/estimators/` (`default.yaml` states the default-tuning "
           "rule in full). An options file is a mapping `<estimator>: {options}`; options left "
           "out keep these defaults, an unknown key or a wrong type is a one-line error naming "
           "the file and the key path. `auto` and `null` are computed from the mechanism and "
           "its sensors when the estimator is built ([tuning](../guides/tuning.md)).\n"]
    for name, items in rows.items():
        out.append(f"## `{name}`\n")
        table_rows = []
        for path, value in items:
            note = notes.get((name, path)) or common.get(path) or common.get(path.split(".")[0]) or ""
            table_rows.append([code(path), _value(value), note])
        out.append(table(["option", "default", "meaning"], table_rows))
    return "\n".join(out)
