"""Gyroscope: angular rate of a body about z (paper 003 / mbde-matlab formula).

w = (d_x d'_y - d_y d'_x) / |d|^2 with d = second point - first point of the body (exact
for a rigid body). dw/dd and dw/dd' are analytic. Published as sensor_msgs/Imu
angular_velocity.z [rad/s].
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import Sensor
from mbde_core.sensors.geometry import basis_components, basis_vector, body_columns, omega_and_gradients, scatter_d


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
        """(h (1,), dh/dq, dh/dqd, dh/dqdd (1, n)) at one state, on Python floats.

        The same w, dw/dd and dw/dd' as :meth:`h` and :meth:`jacobians` (geometry.
        omega_and_gradients) without the batch machinery: the observers' hot path.
        """
        mech = self.mech
        n = mech.n
        i, j, _, (xi, yi, xj, yj) = body_columns(mech, self.body)
        ql, qdl = q.tolist(), qd.tolist()

        def point(x, k, c, axis, fixed):
            return x[c] if c < n else (float(mech.fixed_xy[k][axis]) if fixed else 0.0)

        dx = point(ql, j, xj, 0, True) - point(ql, i, xi, 0, True)
        dy = point(ql, j, yj, 1, True) - point(ql, i, yi, 1, True)
        ddx = point(qdl, j, xj, 0, False) - point(qdl, i, xi, 0, False)
        ddy = point(qdl, j, yj, 1, False) - point(qdl, i, yi, 1, False)
        s = dx * dx + dy * dy
        c = dx * ddy - dy * ddx
        w = c / s
        k2 = 2.0 * c / (s * s)
        gdx, gdy = ddy / s - k2 * dx, -ddx / s - k2 * dy
        gddx, gddy = -dy / s, dx / s
        Hq = np.zeros((1, n + 1))
        Hqd = np.zeros((1, n + 1))
        Hq[0, xj] += gdx
        Hq[0, yj] += gdy
        Hq[0, xi] -= gdx
        Hq[0, yi] -= gdy
        Hqd[0, xj] += gddx
        Hqd[0, yj] += gddy
        Hqd[0, xi] -= gddx
        Hqd[0, yi] -= gddy
        return np.array([w]), Hq[:, :n], Hqd[:, :n], np.zeros((1, n))
