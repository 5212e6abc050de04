"""Path-tracking access to YAML documents, so every config error names file and key path.

Every mbde YAML reader (mechanisms, sensors, scenarios, estimators, ROS parameter
files) goes through :class:`Node`; a problem raises
:class:`mbde_core.errors.ConfigError` (``file: key.path[2]: what is wrong``).

A config file is untrusted input: YAML tags other than the standard ones, duplicate keys,
documents nested deeper than ``MAX_DEPTH`` levels (or with recursive aliases) and alias
expansions beyond ``MAX_VALUES`` values are errors (one line each, never a crash).
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping

import yaml

from mbde_core.errors import ConfigError
from mbde_core.expr import ExpressionError, evaluate_value


def read_yaml(path: str | os.PathLike) -> "Node":
    """Read a YAML file into a :class:`Node`; missing files and syntax errors -> ConfigError."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(path, "", "is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot read file ({exc})") from None
    return parse_yaml(text, path)


MAX_DEPTH = 64           # nesting levels of a document
MAX_VALUES = 100_000     # values of a document with its aliases expanded


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects duplicate keys (YAML requires unique keys; PyYAML keeps
    the last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # unhashable key: reported by the caller
                    continue
                if dup:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, label: str = "<string>") -> "Node":
    """Parse YAML text (label names it in errors)."""
    deep = _too_deep(text)
    if deep:
        raise ConfigError(label, f"line {deep}", f"YAML nested deeper than {MAX_DEPTH} levels")
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(label, where, f"YAML syntax error: {problem}") from None
    except RecursionError:
        raise ConfigError(label, _deep_line(text), f"YAML nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        problem = "an integer with too many digits" if "digits" in str(exc) else str(exc).splitlines()[0][:120]
        raise ConfigError(label, "", f"YAML value error: {problem}") from None
    _check_structure(doc, label)
    return Node(doc, label, "")


def _too_deep(text: str) -> int:
    """First line (1-based) where the text nests flow collections ([ {) or indented blocks
    deeper than MAX_DEPTH, 0 if it does not: a linear pre-scan, because PyYAML needs
    quadratic time and then recursion for deep documents. Quoted strings and comments are
    skipped; the scan is conservative (it only counts, never parses)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH and text.count("\n") <= MAX_DEPTH:
        return 0
    indents: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            indent = len(line) - len(stripped)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
            if len(indents) > MAX_DEPTH:
                return number
    depth, quote, number, prev = 0, None, 1, " "
    comment = False
    for ch in text:
        if ch == "\n":
            number += 1
            comment = False
        elif comment:
            pass
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return number
        elif ch in "]}":
            depth -= 1
        prev = ch
    return 0


def _deep_line(text: str) -> str:
    """'line N' where the YAML text first nests deeper than MAX_DEPTH (tokens, no recursion)."""
    depth = 0
    opening = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
               yaml.BlockMappingStartToken)
    closing = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    try:
        for tok in yaml.scan(text, Loader=_Loader):
            depth += isinstance(tok, opening) - isinstance(tok, closing)
            if depth > MAX_DEPTH:
                return f"line {tok.start_mark.line + 1}"
    except (yaml.YAMLError, RecursionError):
        pass
    return ""


def _check_structure(doc, label: str) -> None:
    """Nesting depth and alias expansion within limits (iterative walk, no recursion)."""
    stack = [(doc, 0, "")]
    count = 0
    while stack:
        value, depth, path = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(label, "", f"document too large: its aliases expand to more than {MAX_VALUES} values")
        if depth > MAX_DEPTH:
            where = path if len(path) <= 60 else path[:60] + "..."
            raise ConfigError(label, where, f"nested deeper than {MAX_DEPTH} levels (or a recursive alias)")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1, f"{path}.{k}" if path else str(k)) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(value))


class Node:
    """A value inside a YAML document together with its file and key path."""

    __slots__ = ("value", "file", "path")

    def __init__(self, value: Any, file: str, path: str):
        self.value = value
        self.file = file
        self.path = path

    # -- errors ------------------------------------------------------------------------
    def error(self, message: str) -> ConfigError:
        return ConfigError(self.file, self.path, message)

    def child_path(self, key) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else str(key)

    # -- structure ---------------------------------------------------------------------
    def is_missing(self) -> bool:
        return self.value is None

    def mapping(self, required: Iterable[str] = (), optional: Iterable[str] = ()) -> "Node":
        """Assert this is a mapping with exactly the allowed keys; returns self."""
        if not isinstance(self.value, Mapping):
            raise self.error(f"expected a mapping, got {_kind(self.value)}")
        required = list(required)
        allowed = set(required) | set(optional)
        for key in self.value:
            if not isinstance(key, str):
                raise self.error(f"keys must be strings, got {key!r}")
            if allowed and key not in allowed:
                hint = _closest(key, allowed)
                raise ConfigError(
                    self.file, self.child_path(key), "unknown key" + (f" (did you mean {hint!r}?)" if hint else "")
                )
        for key in required:
            if key not in self.value:
                raise ConfigError(self.file, self.child_path(key), "missing required key")
        return self

    def has(self, key: str) -> bool:
        return isinstance(self.value, Mapping) and key in self.value

    def get(self, key: str) -> "Node":
        """Child node (value None if absent)."""
        v = self.value.get(key) if isinstance(self.value, Mapping) else None
        return Node(v, self.file, self.child_path(key))

    def req(self, key: str) -> "Node":
        if not self.has(key):
            raise ConfigError(self.file, self.child_path(key), "missing required key")
        return self.get(key)

    def sequence(self, min_len: int = 0, max_len: int | None = None) -> list["Node"]:
        if not isinstance(self.value, (list, tuple)):
            raise self.error(f"expected a list, got {_kind(self.value)}")
        n = len(self.value)
        if n < min_len:
            raise self.error(f"expected at least {min_len} entries, got {n}")
        if max_len is not None and n > max_len:
            raise self.error(f"expected at most {max_len} entries, got {n}")
        return [Node(v, self.file, self.child_path(i)) for i, v in enumerate(self.value)]

    def items(self) -> list[tuple[str, "Node"]]:
        self.mapping()
        return [(k, Node(v, self.file, self.child_path(k))) for k, v in self.value.items()]

    # -- scalars -----------------------------------------------------------------------
    def number(
        self,
        variables: Mapping[str, float] | None = None,
        *,
        positive: bool = False,
        nonnegative: bool = False,
        integer: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        """A finite number (or arithmetic expression over ``variables``)."""
        if self.value is None:
            raise self.error("expected a number, got nothing")
        try:
            v = evaluate_value(self.value, variables)
        except ExpressionError as exc:
            raise self.error(str(exc)) from None
        if not math.isfinite(v):
            raise self.error(f"must be finite, got {v}")
        if positive and not v > 0:
            raise self.error(f"must be > 0, got {v:g}")
        if nonnegative and v < 0:
            raise self.error(f"must be >= 0, got {v:g}")
        if integer and v != int(v):
            raise self.error(f"must be an integer, got {v:g}")
        if minimum is not None and v < minimum:
            raise self.error(f"must be >= {minimum:g}, got {v:g}")
        if maximum is not None and v > maximum:
            raise self.error(f"must be <= {maximum:g}, got {v:g}")
        return int(v) if integer else v

    def vector(self, length: int | None = None, variables=None, **kw) -> list[float]:
        items = self.sequence(min_len=length or 0, max_len=length)
        return [it.number(variables, **kw) for it in items]

    def string(self, choices: Iterable[str] | None = None) -> str:
        if not isinstance(self.value, str):
            raise self.error(f"expected a string, got {_kind(self.value)}")
        if choices is not None:
            choices = list(choices)
            if self.value not in choices:
                raise self.error(f"must be one of {', '.join(map(repr, choices))}, got {self.value!r}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def __repr__(self) -> str:
        return f"Node({self.file}:{self.path}={self.value!r})"


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"a boolean ({v})"
    if isinstance(v, Mapping):
        return "a mapping"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    if isinstance(v, str):
        return f"a string ({v!r})"
    return f"a {type(v).__name__}"


def _closest(key: str, allowed: Iterable[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    return match[0] if match else None
