"""Validation of the ``inputs`` option of the estimators with input states (the Kalman
observers' :mod:`~mbde_core.estimators.kalman.input_states`, the particle filters'
:mod:`~mbde_core.estimators.particle.inputs`): unknown generalized forces, one per
{coordinate, psd, sigma0, initial, limit}, or ``auto`` (the rule's)."""
from __future__ import annotations

import math

from mbde_core.errors import ConfigError
from mbde_core.estimators.options.frozen import AUTO

INPUT_KEYS = ("coordinate", "psd", "sigma0", "initial", "limit")


def input_interval(step: float, sensors, per_step: bool = False) -> float:
    """The interval over which the rule's per-step increment of an unknown input applies
    (:func:`~mbde_core.estimators.options.rule.auto_inputs`, psd = (F w')^2 dt): the step
    dt, or the shortest reading period T of ``sensors`` if the step subdivides it (dt < T).
    A random walk of density psd changes by sqrt(psd t) over t, so psd = (F w')^2 dt lets
    the input move by F w' sqrt(dt T) between two readings: halving the step between the
    same readings made the input states stiffer, and on paper 004's slider-crank (1 kHz
    accelerometer, step 0.5 ms, torque unknown) the UKF and DIEKFpm lagged the servo's
    torque ripple and ran 0.02-0.05 rad ahead at 5-10 sigma (mean NEES/dim 15 and 8.4, seed
    100, 3 s). With dt = T the input moves by F w' T per reading whatever the step: the
    density of the largest likelihood of the readings there (psd x1 / x2 / x4 / x16 of the
    step's: -2 log L per reading 0.84 / 0.57 / 0.78 / 1.81, UKF). per_step: the step itself
    (the particle filters, whose walk redraws within the limit: over the readings' period
    the PF lost the speed-step slider-crank started at rest, never on track within 3 s on 3
    seeds, against on track after 1.69 s at the step's density)."""
    if per_step:
        return float(step)
    periods = [1.0 / float(s.rate) for s in sensors if getattr(s, "rate", 0) and float(s.rate) > 0]
    return max(float(step), min(periods)) if periods else float(step)


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
