"""Validation of the ``inputs`` option of the estimators with input states (the Kalman
observers' :mod:`~mbde_core.estimators.kalman.input_states`, the particle filters'
:mod:`~mbde_core.estimators.particle.inputs`): unknown generalized forces, one per
{coordinate, psd, sigma0, initial, limit}, or ``auto`` (the rule's)."""
from __future__ import annotations

import math

from mbde_core.errors import ConfigError
from mbde_core.estimators.options.frozen import AUTO

INPUT_KEYS = ("coordinate", "psd", "sigma0", "initial", "limit")


def validate_inputs(cfg: dict, file: str, path: str) -> None:
    """The ``inputs`` option: ``auto`` or a list of {coordinate, psd >= 0, sigma0 > 0,
    initial, limit > 0} (finite numbers), and ``input_jump_nis`` >= 0."""
    jn = cfg["input_jump_nis"]
    if isinstance(jn, bool) or not isinstance(jn, (int, float)) or not jn >= 0:
        raise ConfigError(file, f"{path}.input_jump_nis", f"must be >= 0 (0 = off), got {jn!r}")
    items = cfg["inputs"]
    if items == AUTO:
        return
    if not isinstance(items, list):
        raise ConfigError(file, f"{path}.inputs",
                          f"a list of inputs or {AUTO!r}, e.g. [{{coordinate: theta, psd: 10.0, sigma0: 1.0}}]")
    for k, item in enumerate(items):
        where = f"{path}.inputs[{k}]"
        if not isinstance(item, dict) or "coordinate" not in item:
            raise ConfigError(file, where, "expected {coordinate: name, psd: value, sigma0: value}")
        for key, value in item.items():
            if key not in INPUT_KEYS:
                raise ConfigError(file, f"{where}.{key}", f"unknown key (choose from {', '.join(INPUT_KEYS)})")
            if key == "coordinate":
                if not isinstance(value, str):
                    raise ConfigError(file, f"{where}.coordinate", f"a coordinate name, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(file, f"{where}.{key}", f"a finite number, got {value!r}")
            if (key == "psd" and value < 0) or (key in ("sigma0", "limit") and value <= 0):
                raise ConfigError(file, f"{where}.{key}", f"must be {'>= 0' if key == 'psd' else '> 0'}, got {value}")
