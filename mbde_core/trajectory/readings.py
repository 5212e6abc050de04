"""Readings on the trajectory's time grid, as compact arrays per sensor.

Grid: t_i = t0 + i dt, i = 0..N-1, with t0 the stamp of the first valid reading and
dt the smoother's step: the grid of :class:`mbde_core.estimators.stage.EstimatorStage`,
so the smoothed states share the stamps of the filters' estimates. A reading stamped t
belongs to step round((t - t0) / dt), as in the stage (readings between grid points are
fused at the nearest one, as the filters do).

Bad readings are counted and skipped, never fatal (as the stage counts them): unknown
sensor names, non-finite stamps or values and values of the wrong dimension.
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SensorRows:
    """Readings of one sensor: steps idx (K,), values (K, d), whitening W (d, d) with
    W^T W = covariance^-1 (rows of the residual are W (h - o))."""

    name: str
    idx: np.ndarray
    values: np.ndarray
    whiten: np.ndarray

    def window(self, lo: int, hi: int) -> "SensorRows":
        """The readings of steps lo <= i < hi, re-indexed from lo."""
        a, b = np.searchsorted(self.idx, [lo, hi])
        return SensorRows(self.name, self.idx[a:b] - lo, self.values[a:b], self.whiten)


@dataclass
class Readings:
    """Every valid reading on the grid t_i = t0 + (first + i) dt, i < N, and the counters of
    the skipped ones (``first`` > 0 for a window of a longer grid: same stamps)."""

    t0: float
    dt: float
    N: int
    sensors: list[SensorRows]
    counters: dict = field(default_factory=dict)
    first: int = 0

    @property
    def times(self) -> np.ndarray:
        return self.t0 + self.dt * (self.first + np.arange(self.N))

    def window(self, lo: int, hi: int) -> "Readings":
        """Steps lo <= i < hi as a grid of their own (indices from 0, same stamps)."""
        return Readings(self.t0, self.dt, hi - lo, [s.window(lo, hi) for s in self.sensors], self.counters, self.first + lo)


def sensor_whitening(sensor, sigma: float | None = None) -> np.ndarray:
    """W (d, d) with W^T W = C^-1, C the sensor's covariance (or sigma^2 I if given)."""
    C = np.eye(sensor.dim) * sigma**2 if sigma is not None else np.atleast_2d(sensor.covariance())
    L = np.linalg.cholesky(C)
    return np.linalg.inv(L)


def bin_readings(measurements, sensors, dt: float, sensor_sigma: dict | None = None) -> Readings:
    """Readings (see the module docstring) from Measurements in any order."""
    counters = {"received": 0, "used": 0, "unknown_sensor": 0, "non_finite": 0, "per_sensor": {}}
    stamps: dict[str, array] = {}  # compact (8 bytes a number): long runs are read as a stream
    values: dict[str, array] = {}
    for m in measurements:
        counters["received"] += 1
        if m.sensor not in sensors:
            counters["unknown_sensor"] += 1
            continue
        v = np.asarray(m.value, dtype=float)
        if not (math.isfinite(m.stamp) and v.shape == (sensors[m.sensor].dim,) and np.all(np.isfinite(v))):
            counters["non_finite"] += 1
            continue
        if m.sensor not in stamps:
            stamps[m.sensor], values[m.sensor] = array("d"), array("d")
        stamps[m.sensor].append(float(m.stamp))
        values[m.sensor].extend(v)
    if not stamps:
        return Readings(0.0, dt, 0, [], counters)
    t0 = min(min(s) for s in stamps.values())
    t_last = max(max(s) for s in stamps.values())
    N = int(round((t_last - t0) / dt)) + 1
    rows = []
    sigmas = sensor_sigma or {}
    for s in sensors:
        if s.name not in stamps:
            continue
        t = np.frombuffer(stamps[s.name], dtype=float)
        order = np.argsort(t, kind="stable")
        idx = np.rint((t[order] - t0) / dt).astype(np.intp)
        vals = np.frombuffer(values[s.name], dtype=float).reshape(len(t), s.dim)[order]
        rows.append(SensorRows(s.name, idx, vals, sensor_whitening(s, sigmas.get(s.name))))
        counters["per_sensor"][s.name] = len(t)
        counters["used"] += len(t)
    return Readings(t0, dt, N, rows, counters)
