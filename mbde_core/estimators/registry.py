"""Estimators by name: one line per estimator, its class loaded when first asked for.

``_TABLE`` maps a name to ``"module:Class"``; the module is imported on demand
(``importlib``: a command that runs the UKF does not import the particle filters, ~0.3 s of
CPU each, measured with ``time.process_time``). Everything else about an estimator -- its
option defaults and its :class:`~mbde_core.estimators.traits.Traits` -- is declared on its
class, so adding an estimator is its module plus one line here (or :func:`register` at run
time, e.g. a test's toy observer). The estimators are built from their options by
:func:`mbde_core.estimators.configure.make_estimator`.
"""
from __future__ import annotations

import importlib
import zlib

import numpy as np

# name -> "module:Class"
_TABLE = {
    "ukf": "mbde_core.estimators.kalman.ukf:UKF",
    "errorekf": "mbde_core.estimators.kalman.errorekf:ErrorEKF",
    "viekf": "mbde_core.estimators.kalman.viekf:VIEKF",
    "dekf": "mbde_core.estimators.kalman.dekf:DEKF",
    "cekf": "mbde_core.estimators.kalman.cekf:CEKF",
    "diekfpm": "mbde_core.estimators.kalman.diekfpm:DIEKFpm",
    "pf": "mbde_core.estimators.particle.filter:ParticleFilter",
    "vipf": "mbde_core.estimators.particle.vipf:VIParticleFilter",
    "adekf": "mbde_core.estimators.kalman.adekf:ADEKF",
}
ESTIMATOR_NAMES = tuple(_TABLE)  # the shipped estimators (names(): with those registered at run time)
_LOADED: dict[str, type] = {}


def names() -> tuple[str, ...]:
    """Every estimator name: the shipped ones and those added by :func:`register`."""
    return tuple(_TABLE)


def register(name: str, target) -> None:
    """Add (or replace) estimator ``name``: a class, or ``"module:Class"`` imported when
    first needed."""
    _LOADED.pop(name, None)
    if isinstance(target, str):
        _TABLE[name] = target
    else:
        _TABLE[name] = f"{target.__module__}:{target.__qualname__}"
        _LOADED[name] = target


def unregister(name: str) -> None:
    """Remove an estimator added by :func:`register` (the shipped ones stay)."""
    if name not in ESTIMATOR_NAMES:
        _TABLE.pop(name, None)
        _LOADED.pop(name, None)


def estimator_class(name: str):
    """The class of estimator ``name`` (KeyError naming the choices for an unknown one)."""
    cls = _LOADED.get(name)
    if cls is not None:
        return cls
    if name not in _TABLE:
        raise KeyError(f"unknown estimator {name!r} (choose from {', '.join(_TABLE)})")
    module, _, attr = _TABLE[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    _LOADED[name] = cls
    return cls


def traits(name: str):
    """The :class:`~mbde_core.estimators.traits.Traits` of estimator ``name``."""
    return estimator_class(name).traits


def estimator_rng(seed: int, name: str) -> np.random.Generator:
    """The random generator of estimator ``name`` for run seed ``seed``.

    SeedSequence(seed, spawn_key=(crc32(name),)) -- the construction of the simulator's
    per-sensor noise streams -- so an estimator's randomness depends on (seed, name) only,
    never on its position in a list of estimators or on the process that runs it. Used by
    ``mbde replay`` and by the live estimator node (bit-identical runs).
    """
    key = zlib.crc32(str(name).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(key,)))
