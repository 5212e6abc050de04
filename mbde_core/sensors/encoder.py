"""Encoders: absolute angle of a body, or relative angle between two bodies.

h = wrap(theta_b - theta_a), theta = atan2(d_y, d_x) of the body's x axis
(d = second point - first point); body a may be the ground (theta_a = 0).
dtheta/dd = (-d_y, d_x) / |d|^2. A quantization of 2 pi / counts_per_revolution models
the encoder resolution. Published as sensor_msgs/JointState (position, rad).
"""
from __future__ import annotations

from mbde_core.sensors.base import Sensor, wrap_angle
from mbde_core.sensors.geometry import basis_vector, body_angle_and_gradient, body_columns, scatter_d


class Encoder(Sensor):
    kind = "encoder"
    msg_type = "sensor_msgs/msg/JointState"
    dim = 1

    def __init__(self, mech, name, *, body: int, reference_body: int = -1, joint_name: str | None = None, offset: float = 0.0, **kw):
        self.body = body
        self.reference_body = reference_body
        self.offset = float(offset)
        self.channels = [joint_name or name]
        super().__init__(mech, name, **kw)
        self.angular[:] = True

    def _angle(self, q, body):
        d, _ = basis_vector(self.mech, body, q)
        return body_angle_and_gradient(d)

    def _h(self, q, qd, qdd):
        th, _ = self._angle(q, self.body)
        if self.reference_body >= 0:
            th = th - self._angle(q, self.reference_body)[0]
        return wrap_angle(th - self.offset)[:, None]

    def _jac(self, q, qd, qdd):
        Hq, Hqd, Hqdd = self._zeros(q.shape[0])
        for body, sign in ((self.body, 1.0), (self.reference_body, -1.0)):
            if body < 0:
                continue
            _, g = self._angle(q, body)
            scatter_d(Hq, 0, body_columns(self.mech, body)[3], sign * g[:, 0], sign * g[:, 1])
        return Hq, Hqd, Hqdd
