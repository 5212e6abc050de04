"""Frozen typed options: what the options pipeline hands an estimator's constructor.

Every estimator declares its options as a frozen dataclass (``Options``, a subclass of
:class:`Options` here) next to its class: the fields are the option keys with their
defaults and types, nested groups are nested dataclasses, mappings keyed by the user
(``sensor_sigma``, ``rule.force_limits``) are :class:`FrozenMap`, lists are tuples. The
pipeline (:mod:`mbde_core.estimators.configure`) builds one per estimator per run, after
validating and resolving the options; nothing changes it afterwards (``replace`` makes a
new one, e.g. ``mbde tune``'s scaled plant noise) and nothing re-validates it.

Why dataclasses and not pydantic (measured on this machine, AMD EPYC, process CPU time,
other processes running): importing pydantic 2.14 costs 75-95 ms per process (every
replay worker, every node) and defining 15 models of 8 fields 64 ms more, against 9-15 ms
for the standard library's dataclasses, which numpy already imports; building one options
object costs 2-4 us either way (negligible: once per estimator per run). pydantic would be
a new binary dependency, and its validation errors would have to be mapped back to the
YAML file, line and key path that every config error names (one line, exit status 2):
the pipeline validates on the YAML nodes (:mod:`mbde_core.config.yamlnode`), which know
them, and the dataclasses only carry the result.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

AUTO = "auto"  # an option the default-tuning rule resolves (:mod:`~mbde_core.estimators.options.rule`)


class FrozenMap(Mapping):
    """An immutable, hashable, picklable mapping (option mappings keyed by the user)."""

    __slots__ = ("_d", "_h")

    def __init__(self, items=()):
        self._d = dict(items)
        self._h = None

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(tuple(self._d.items()))
        return self._h

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self._d) == dict(other)

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"

    def __reduce__(self):
        return (FrozenMap, (self._d,))


def freeze(value):
    """dicts -> FrozenMap, lists -> tuples, recursively (options are immutable)."""
    if isinstance(value, Options):
        return value
    if isinstance(value, Mapping):
        return FrozenMap((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value):
    """The plain-Python form (dicts, lists) of options, for YAML, JSON and the rule."""
    if isinstance(value, Options):
        return value.as_dict()
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def items_of(cls):
    """A field whose value is a tuple of ``cls`` options (e.g. the input states)."""
    return dataclasses.field(default=(), metadata={"items": cls})


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of every options dataclass (frozen). ``from_dict`` builds one from plain values
    (missing keys: the defaults), ``as_dict`` gives them back; ``defaults()`` is the plain
    form of the defaults, the reference the YAML is validated against."""

    @classmethod
    def from_dict(cls, values: Mapping) -> "Options":
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = [k for k in values if k not in fields]
        if unknown:
            raise KeyError(f"{cls.__name__}: no option {', '.join(map(str, unknown))}")
        kw = {}
        for name, value in values.items():
            kw[name] = _build(fields[name], value, cls)
        return cls(**kw)

    def as_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = thaw(value)
        return out

    @classmethod
    def defaults(cls) -> dict:
        """The defaults as plain values (dicts and lists)."""
        return cls().as_dict()

    def replace(self, **changes) -> "Options":
        """A copy with some options changed (plain values are frozen)."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: _build(fields[k], v, type(self)) for k, v in changes.items()})


def _build(field: dataclasses.Field, value, owner) -> Any:
    """The frozen value of ``field`` from a plain ``value``."""
    default = field.default
    if isinstance(value, Options):
        return value
    if isinstance(default, Options) and isinstance(value, Mapping):
        return type(default).from_dict(value)
    item = field.metadata.get("items")
    if item is not None and isinstance(value, (list, tuple)):
        return tuple(v if isinstance(v, item) else item.from_dict(v) for v in value)
    kind = field.metadata.get("options")
    if kind is not None and isinstance(value, Mapping):
        return kind.from_dict(value)
    return freeze(value)


@dataclasses.dataclass(frozen=True)
class InputSpec(Options):
    """One unknown generalized force as a random-walk state (the ``inputs`` option of the
    observers with input states, :mod:`~mbde_core.estimators.kalman.input_states`):
    coordinate (name), psd [(N m)^2/s or N^2/s], sigma0 [N m or N], initial, limit (|u| <=
    limit; inf: unbounded). ``given``: the keys it was built from, which ``as_dict`` gives
    back (as written in the config, or by the rule)."""

    coordinate: str = ""
    psd: float = 1.0
    sigma0: float = 1.0
    initial: float = 0.0
    limit: float = math.inf
    given: tuple = dataclasses.field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls, values: Mapping) -> "InputSpec":
        return super().from_dict({**values, "given": tuple(values)})

    def as_dict(self) -> dict:
        keys = self.given or ["coordinate"] + [f.name for f in dataclasses.fields(self)[1:5]
                                               if getattr(self, f.name) != f.default]
        return {k: getattr(self, k) for k in keys}
