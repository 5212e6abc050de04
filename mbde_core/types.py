"""Plain data types exchanged between the engine, sensors, estimators, bags and nodes.

All arrays are numpy float64; shapes are given per field. Times are seconds (float)
on the bag / ROS clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Measurement:
    """One time-stamped reading of one configured sensor.

    stamp: time of the reading [s]. sensor: sensor name from the sensor config.
    value: (d,) reading in SI units (rad, rad/s, m/s^2, m), d = sensor dimension.
    variance_factor: the reading's noise covariance is this times the sensor's (1: one
    reading; < 1: several readings combined into one, :mod:`mbde_core.estimators.stage.multirate`).
    """

    stamp: float
    sensor: str
    value: np.ndarray
    variance_factor: float = 1.0


@dataclass
class MechanismSnapshot:
    """A (ground-truth or estimated) dynamic state of a mechanism at one instant.

    q, qd, qdd: (n,) natural coordinates and derivatives.
    z, zd, zdd: (g,) independent coordinates and derivatives.
    cov: (2g, 2g) covariance of [z, zd] or None if unknown.
    branch: most probable assembly-branch label, -1 if unknown.
    branch_probabilities: (K,) or None.
    input_names / inputs (k,) / input_cov (k, k): estimated unknown inputs, or empty/None.
    """

    stamp: float
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    cov: np.ndarray | None = None
    branch: int = -1
    branch_probabilities: np.ndarray | None = None
    input_names: list[str] = field(default_factory=list)
    inputs: np.ndarray | None = None
    input_cov: np.ndarray | None = None


@dataclass
class ParticleCloud:
    """The particle set of a particle filter at one instant.

    z, zd: (N, g); branch: (N,) int labels; weight: (N,) normalised weights.
    ess: effective sample size 1/sum(w^2); unique: distinct particles.
    """

    stamp: float
    z: np.ndarray
    zd: np.ndarray
    branch: np.ndarray
    weight: np.ndarray
    ess: float
    unique: int
