"""Option groups shared by the estimators: the stage's, and the Kalman observers' common ones.

Frozen dataclasses (:mod:`.frozen`); units and meaning in :mod:`.schema`'s docstring and
config/estimators/default.yaml. ``auto`` values are resolved by the default-tuning rule
(:mod:`.rule`) before an estimator gets its options.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mbde_core.estimators.options.frozen import AUTO, FrozenMap, InputSpec, Options, items_of  # noqa: F401

GATE = 0.999999      # chi-square probability of the per-reading gate (robot_localization's 4.9 sigma)
MODEL_ERROR = 0.1    # the rule's default relative error of the known forces


@dataclass(frozen=True)
class Reacquire(Options):
    """The gate's re-acquisition rule and the multi-start bank (:mod:`~mbde_core.estimators.stage`)."""

    rejections: float = 10
    time: float = 0.2
    inflation: float = 100.0
    candidates: float = 64
    window: float = 0.3


@dataclass(frozen=True)
class PlantNoise(Options):
    """White noise densities on zdd [unit^2/s^3] and z' [unit^2/s]: a number or one per
    coordinate; ``adaptive`` (UKF, errorEKF): their scale learnt from the innovations over
    ``adaptive_window`` [s] (:mod:`~mbde_core.estimators.kalman.adaptive_noise`)."""

    acceleration_psd: float | tuple | str = AUTO
    velocity_psd: float | tuple | str = AUTO
    adaptive: bool = False
    adaptive_window: float = 1.0


@dataclass(frozen=True)
class InitialSigma(Options):
    """Initial standard deviations of z [unit] and zd [unit/s]: a number or one per coordinate."""

    z: float | tuple | str = AUTO
    zd: float | tuple | str = AUTO


@dataclass(frozen=True)
class Rule(Options):
    """Inputs of the default-tuning rule: the known forces' relative error, unknown-force bounds."""

    model_error: float = MODEL_ERROR
    force_limits: FrozenMap = FrozenMap()


@dataclass(frozen=True)
class StageOptions(Options):
    """What every estimator's stage reads: step [s], the gate and its re-acquisition."""

    step: float | str = AUTO
    gate: float = GATE
    gate_window: float = 0.5
    gate_persist: float = 0
    reacquire: Reacquire = Reacquire()


@dataclass(frozen=True)
class KalmanOptions(Options):
    """The common options of the [z, zd] Kalman observers (the stage's included), in the
    order of config/estimators/default.yaml."""

    step: float | str = AUTO
    plant_noise: PlantNoise = PlantNoise()
    initial_sigma: InitialSigma = InitialSigma()
    sensor_sigma: FrozenMap = FrozenMap()
    transition_jacobian: str = "simple"
    rule: Rule = Rule()
    gate: float = GATE
    gate_window: float = 0.5
    gate_persist: float = 0
    reacquire: Reacquire = Reacquire()


def input_field(default=AUTO):
    """The ``inputs`` option of the observers with input states: ``auto`` (the rule's) or a
    tuple of :class:`InputSpec` (resolved options: always the tuple)."""
    return dataclasses.field(default=default, metadata={"items": InputSpec})


__all__ = ["AUTO", "GATE", "MODEL_ERROR", "FrozenMap", "InputSpec", "Options", "items_of", "Reacquire", "PlantNoise",
           "InitialSigma", "Rule", "StageOptions", "KalmanOptions", "input_field"]
