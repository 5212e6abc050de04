"""Known inputs in the stage: the readings of measured torques held between readings.

A known-input sensor (:mod:`mbde_core.sensors.effort`: a motor driver's torque, or a
current times a gain) reads the generalized force u = gain * y on one coordinate. The
stage (:class:`~mbde_core.estimators.stage.core.EstimatorStage`, the same in ``mbde
replay`` and the live node) takes such a reading like any other -- it closes the slots
before the reading's slot, then the reading becomes the *current* input. How the force
behaves between readings is the sensor's ``hold`` (:mod:`mbde_core.sensors.effort`).
``zero``: held from each reading until the next (zero-order hold). ``linear``: the stage
predicts into a slot when the slot closes (with its readings, the torque read at the
slot's own time among them), not when its first reading arrives (:attr:`HeldInputs.defers`),
and the force over a step [t, t + dt] that ends at or before the newest reading u_k is the
line between the last two readings at the step's middle (a first-order hold),

    u = u_k - r (t_k - (t + dt/2)),   var = gain^2 (sigma^2 + step^2 / 12) + (r dt/2)^2,

r = (u_k - u_k-1) / (t_k - t_k-1) (the step's middle before u_k-1: u_k-1). A step past the
newest reading (every step with ``zero``) holds it with the variance

    var = gain^2 (sigma^2 + step^2 / 12) + (r (a + dt/2))^2

the reading's noise model plus the hold's error: a torque that changes at the rate r is
off by about r a at the age a of the reading, taken at the middle of the step dt. A
saturating speed controller swings its torque through its whole range within a few
readings (issue 42's speed-step slider-crank: -2 -> +2 N m in 20 ms, 200 Hz readings):
held from its reading on, the torque of the previous reading drives the prediction wrong
by up to dt B 1 N m per step, and the residual input state (the friction the model lacks)
takes the error and carries it on. Measured on the moving speed-step slider-crank (its
1 kHz controller read at 200 Hz: ``linear``; UKF, seed 100, 7 s, gyroscope 200 Hz, step
2.5 ms): tracking RMSE 0.00234 rad held, 0.00142 with the line (the unknown-torque UKF
0.00168). Where the torque does hold between readings (paper 004's slider-crank: a 1 kHz
servo read at 1 kHz) the line leads it by half a period: UKF 0.0021 -> 0.0052 rad.

A reading older than ``STALE_PERIODS`` of its sensor's own interval (at least
``STALE_MIN`` s) is *stale*: the driver stopped publishing, and the force is no longer
known. The estimator then gets the last value with the variance of the largest force seen
so far (before any reading: of the force limit given for the coordinate, default one
unit of the reading, gain^2), so that the torque it cannot see widens its plant noise instead of being
taken as known; the steps predicted so are counted (``stale_inputs``).
"""
from __future__ import annotations

import math

import numpy as np

STALE_PERIODS = 5.0   # a held reading older than this many of its sensor's intervals is stale
STALE_MIN = 0.05      # s: ... and at least this old


class HeldInputs:
    """The current known inputs of a SensorSet's input sensors (module doc).

    sensors: the known-input sensors (``SensorSet.inputs``); limits: {coordinate index:
    force limit}, the variance of a stale input before any reading (default gain^2)."""

    def __init__(self, sensors, limits=None):
        self.sensors = list(sensors)
        self.index = {s.name: j for j, s in enumerate(self.sensors)}
        self.var = np.array([s.force_variance() for s in self.sensors])
        self.linear = np.array([getattr(s, "hold", "zero") == "linear" for s in self.sensors])
        self.defers = bool(self.linear.any())  # the stage predicts into a slot when it closes
        limits = limits or {}
        self.fallback = np.array([float(limits.get(s.coordinate, abs(s.gain))) ** 2 for s in self.sensors])
        self.clear()

    @classmethod
    def of(cls, estimator) -> "HeldInputs | None":
        """The held inputs of an estimator's known-input sensors if its traits take them."""
        ins = list(getattr(estimator.sensors, "inputs", ())) if estimator.traits.known_inputs else []
        return cls(ins) if ins else None

    def clear(self) -> None:
        """Forget the held readings (a new track)."""
        m = len(self.sensors)
        self.value = np.zeros(m)
        self.rate = np.zeros(m)  # (u_k - u_k-1) / (t_k - t_k-1)
        self.stamp = np.full(m, -math.inf)
        self.period = np.full(m, math.nan)
        self.largest = np.zeros(m)

    def __contains__(self, name) -> bool:
        return name in self.index

    def hold(self, m) -> None:
        """Hold the reading ``m`` (a Measurement of an input sensor) from its stamp on."""
        j = self.index[m.sensor]
        u = self.sensors[j].force(m.value)[0]
        if math.isfinite(self.stamp[j]) and m.stamp > self.stamp[j]:
            self.period[j] = m.stamp - self.stamp[j]
            self.rate[j] = (u - self.value[j]) / self.period[j]
        self.stamp[j] = m.stamp
        self.value[j] = u
        self.largest[j] = max(self.largest[j], abs(self.value[j]))

    def stale(self, t: float) -> np.ndarray:
        """(m,) bool: no reading yet, or the held one is too old at time t."""
        limit = np.maximum(STALE_MIN, STALE_PERIODS * np.nan_to_num(self.period, nan=0.0))
        return ~(t - self.stamp <= limit + 1e-9)

    def current(self, t: float, dt: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values (m,), variances (m,), stale (m,) bool) of the inputs held over the step
        [t, t + dt] (module doc)."""
        stale = self.stale(t)
        age = np.where(np.isfinite(self.stamp), np.maximum(t - self.stamp, 0.0), 0.0)
        var = self.var + (self.rate * (age + 0.5 * dt)) ** 2
        value = self.value.copy()
        ahead = np.where(np.isfinite(self.stamp), self.stamp - (t + 0.5 * dt), 0.0)
        inside = self.linear & (ahead > 0) & np.isfinite(self.period)  # the step's middle before the newest reading
        if inside.any():
            back = np.minimum(ahead, np.nan_to_num(self.period, nan=0.0))
            value[inside] = (self.value - self.rate * back)[inside]
            var[inside] = (self.var + (self.rate * 0.5 * dt) ** 2)[inside]
        if stale.any():
            wide = np.where(self.largest > 0, self.largest**2, self.fallback)
            var[stale] = np.maximum(var[stale], wide[stale])
        return value, var, stale
