"""Gyroscope: angular rate of a body about z (paper 003 / mbde-matlab formula).

w = (d_x d'_y - d_y d'_x) / |d|^2 with d = second point - first point of the body (exact
for a rigid body). dw/dd and dw/dd' are analytic. Published as sensor_msgs/Imu
angular_velocity.z [rad/s].
"""
from __future__ import annotations

from mbde_core.sensors.base import Sensor
from mbde_core.sensors.geometry import basis_vector, body_columns, omega_and_gradients, scatter_d


class Gyroscope(Sensor):
    kind = "gyroscope"
    dim = 1
    channels = ["gyro_z"]
    uses_qd = True

    def __init__(self, mech, name, *, body: int, **kw):
        self.body = body
        super().__init__(mech, name, **kw)

    def _h(self, q, qd, qdd):
        d, dd = basis_vector(self.mech, self.body, q, qd)
        dx, dy = d[:, 0], d[:, 1]
        return ((dx * dd[:, 1] - dy * dd[:, 0]) / (dx * dx + dy * dy))[:, None]

    def _jac(self, q, qd, qdd):
        Hq, Hqd, Hqdd = self._zeros(q.shape[0])
        d, dd = basis_vector(self.mech, self.body, q, qd)
        _, gd, gdd = omega_and_gradients(d, dd)
        cols = body_columns(self.mech, self.body)[3]
        scatter_d(Hq, 0, cols, gd[:, 0], gd[:, 1])
        scatter_d(Hqd, 0, cols, gdd[:, 0], gdd[:, 1])
        return Hq, Hqd, Hqdd
