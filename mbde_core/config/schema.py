"""Declarative schemas of the YAML files: a key's name, type, meaning, unit, default.

The loaders check files against these tables (required and allowed keys) and the
documentation's references are generated from them (docs/_ext/mbde_docs), so what a
loader accepts and what the reference says are one source. Used by
:mod:`mbde_core.model.schema` (mechanism YAML) and :mod:`mbde_core.sensors.schema`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    """One key of a section: name, type (for humans), meaning, unit, required, default."""

    name: str
    type: str
    meaning: str
    unit: str = ""
    required: bool = False
    default: str = ""


@dataclass(frozen=True)
class Section:
    """A mapping of a file: ``path`` ('' = the top level, ``points[i]`` = each list item)."""

    path: str
    title: str
    doc: str
    keys: tuple[Key, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def required(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys if k.required)
