"""``--set key.path=value`` overrides of a scenario document (before it is loaded).

A key path is a dotted list of mapping keys with optional list indices:
``duration``, ``model_errors.gravity``, ``sensors[0].period``, ``sensors.0.noise.sigma``,
``speed_controller.target.steps``. The value is parsed as YAML (``2.5``, ``pi/4`` stays a
string and is evaluated as an expression by the loader, ``[[0, 40], [1, 50]]`` is a
list). Missing mappings along the path are created; a list index must exist. Problems
raise a one-line :class:`ConfigError` naming ``--set`` and the key path.
"""
from __future__ import annotations

import copy
import difflib
import re
from typing import Any, Iterable

from mbde_core.config.yamlnode import parse_yaml

from mbde_core.errors import ConfigError

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_key_path(path: str) -> list[str | int]:
    """'a.b[0].c' -> ['a', 'b', 0, 'c']; all-digit dotted parts become indices."""
    parts: list[str | int] = []
    pos = 0
    text = path.strip()
    while pos < len(text):
        if text[pos] == ".":
            if pos == 0 or pos == len(text) - 1 or text[pos - 1] == ".":
                raise ConfigError("--set", path, "empty key in key path")
            pos += 1
            continue
        m = _PART.match(text, pos)
        if not m:
            raise ConfigError("--set", path, f"malformed key path near {text[pos:]!r}")
        if m.group(1) is not None:
            key = m.group(1).strip()
            parts.append(int(key) if key.isdigit() else key)
        else:
            parts.append(int(m.group(2)))
        pos = m.end()
    if not parts:
        raise ConfigError("--set", path, "empty key path")
    return parts


def parse_setting(text: str) -> tuple[list[str | int], str, Any]:
    """'key.path=value' -> (parts, key path text, parsed value)."""
    if "=" not in text:
        raise ConfigError("--set", "", f"expected KEY.PATH=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    parts = parse_key_path(key)
    try:  # the protections of every config file (depth, tags, alias expansion, duplicate keys)
        value = parse_yaml(raw, "--set").value if raw.strip() else None
    except ConfigError as exc:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise ConfigError("--set", key.strip(), f"cannot parse the value {shown!r} as YAML: {exc.message}") from None
    return parts, key.strip(), value


def set_path(doc: dict, parts: list[str | int], value: Any, label: str) -> None:
    """Set doc[parts...] = value in place, creating missing mappings."""
    node = doc
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = label if last else _join(parts[: i + 1])
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ConfigError("--set", where, f"is not a list (cannot take index [{part}])")
            if not 0 <= part < len(node):
                raise ConfigError("--set", where, f"index out of range (the list has {len(node)} entries)")
        elif not isinstance(node, dict):
            raise ConfigError("--set", where, f"cannot set key {part!r} inside a {type(node).__name__}")
        if last:
            node[part] = value
            return
        nxt = node[part] if isinstance(part, int) else node.get(part)
        if nxt is None:
            nxt = [] if isinstance(parts[i + 1], int) else {}
            node[part] = nxt
        node = nxt


def apply_settings(doc: dict, settings: Iterable[str], top_keys: Iterable[str]) -> dict:
    """A deep copy of doc with every 'key.path=value' applied in order."""
    out = copy.deepcopy(doc)
    allowed = set(top_keys)
    for text in settings:
        parts, key, value = parse_setting(text)
        if not isinstance(parts[0], str) or parts[0] not in allowed:
            hint = difflib.get_close_matches(str(parts[0]), sorted(allowed), n=1, cutoff=0.6)
            raise ConfigError("--set", key, "unknown scenario key" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        set_path(out, parts, value, key)
    return out


def _join(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out
