"""Estimators by name (module imported lazily)."""
from __future__ import annotations

import importlib
import zlib

import numpy as np

# name -> (module, class)
_TABLE = {
    "ukf": ("mbde_core.estimators.kalman.ukf", "UKF"),
    "errorekf": ("mbde_core.estimators.kalman.errorekf", "ErrorEKF"),
    "viekf": ("mbde_core.estimators.kalman.viekf", "VIEKF"),
    "dekf": ("mbde_core.estimators.kalman.dekf", "DEKF"),
    "cekf": ("mbde_core.estimators.kalman.cekf", "CEKF"),
    "diekfpm": ("mbde_core.estimators.kalman.diekfpm", "DIEKFpm"),
    "pf": ("mbde_core.estimators.particle.filter", "ParticleFilter"),
    "vipf": ("mbde_core.estimators.particle.vipf", "VIParticleFilter"),
    "adekf": ("mbde_core.estimators.kalman.adekf", "ADEKF"),
}
ESTIMATOR_NAMES = tuple(_TABLE)


def estimator_class(name: str):
    if name not in _TABLE:
        raise KeyError(f"unknown estimator {name!r} (choose from {', '.join(ESTIMATOR_NAMES)})")
    module, cls = _TABLE[name]
    return getattr(importlib.import_module(module), cls)


def make_estimator(name: str, mech, sensors, config: dict, rng=None, context=None):
    """Build estimator ``name`` for a mechanism model and its sensors; ``auto`` options are
    resolved by the default-tuning rule (:func:`~mbde_core.estimators.options.rule.resolve_config`,
    context: a scenario's rule inputs) and the estimator's ``config`` holds the numbers."""
    from mbde_core.estimators.options.rule import resolve_config

    return estimator_class(name)(mech, sensors, resolve_config(name, config, mech, sensors, context), rng)


def estimator_rng(seed: int, name: str) -> np.random.Generator:
    """The random generator of estimator ``name`` for run seed ``seed``.

    SeedSequence(seed, spawn_key=(crc32(name),)) -- the construction of the simulator's
    per-sensor noise streams -- so an estimator's randomness depends on (seed, name) only,
    never on its position in a list of estimators or on the process that runs it. Used by
    ``mbde replay`` and by the live estimator node (bit-identical runs).
    """
    key = zlib.crc32(str(name).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(key,)))
