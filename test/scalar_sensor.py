"""A scalar sensor reading the first coordinate, with its noise model: the trust
verdict's tests feed it synthetic readings without a mechanism."""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import NoiseModel


class ScalarSensor:
    """Reads ``q[0]``; noise sigma [rad] and quantisation step [rad]."""

    def __init__(self, sigma=0.01, step=0.0):
        self.angular = np.array([False])
        self.noise = NoiseModel(np.array([sigma]), np.zeros(1), np.zeros(1), np.array([step]))

    def h(self, q, qd=None, qdd=None):
        return np.array([q[0]])
