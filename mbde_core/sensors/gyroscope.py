"""Gyroscope: angular rate of a body about z (paper 003 / mbde-matlab formula).

w = (d_x d'_y - d_y d'_x) / |d|^2 with d = second point - first point of the body (exact
for a rigid body). dw/dd and dw/dd' are analytic. Published as sensor_msgs/Imu
angular_velocity.z [rad/s].
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import Sensor
from mbde_core.sensors.geometry import (basis_components, basis_values, basis_vector, body_columns, omega_and_gradients,
                                        scatter_d)


class Gyroscope(Sensor):
    kind = "gyroscope"
    dim = 1
    channels = ["gyro_z"]
    uses_qd = True

    def __init__(self, mech, name, *, body: int, **kw):
        self.body = body
        super().__init__(mech, name, **kw)

    def _h(self, q, qd, qdd):
        dx, dy, ddx, ddy = basis_components(self.mech, self.body, q, qd)
        return ((dx * ddy - dy * ddx) / (dx * dx + dy * dy))[:, None]

    def _jac(self, q, qd, qdd):
        Hq, Hqd, Hqdd = self._zeros(q.shape[0])
        d, dd = basis_vector(self.mech, self.body, q, qd)
        _, gd, gdd = omega_and_gradients(d, dd)
        cols = body_columns(self.mech, self.body)[3]
        scatter_d(Hq, 0, cols, gd[:, 0], gd[:, 1])
        scatter_d(Hqd, 0, cols, gdd[:, 0], gdd[:, 1])
        return Hq, Hqd, Hqdd

    def linearize(self, q, qd, qdd=None):
        """(h (1,), dh/dq, dh/dqd, dh/dqdd (1, n)) at one state: :meth:`linearize_floats`
        as arrays (the observers' hot path)."""
        h, hq, hqd = self.linearize_floats(q.tolist(), qd.tolist())
        return np.array([h]), np.array([hq]), np.array([hqd]), np.zeros((1, self.mech.n))

    def linearize_floats(self, q, qd):
        """(h, dh/dq (n,), dh/dqd (n,)) at one state given as lists of floats, on floats.

        The same w, dw/dd and dw/dd' as :meth:`h` and :meth:`jacobians` (geometry.
        omega_and_gradients) without the batch machinery.
        """
        mech = self.mech
        n = mech.n
        dx, dy, ddx, ddy = basis_values(mech, self.body, q, qd)
        s = dx * dx + dy * dy
        c = dx * ddy - dy * ddx
        k2 = 2.0 * c / (s * s)
        gdx, gdy, gddx, gddy = ddy / s - k2 * dx, -ddx / s - k2 * dy, -dy / s, dx / s
        xi, yi, xj, yj = body_columns(mech, self.body)[3]
        Hq, Hqd = [0.0] * (n + 1), [0.0] * (n + 1)
        # scatter_d for one state on floats (column n collects fixed points, discarded)
        for H, gx, gy in ((Hq, gdx, gdy), (Hqd, gddx, gddy)):
            H[xj] += gx
            H[yj] += gy
            H[xi] -= gx
            H[yi] -= gy
        return c / s, Hq[:n], Hqd[:n]
