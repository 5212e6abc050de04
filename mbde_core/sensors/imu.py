"""Planar IMU on a body: [gyroscope z, accelerometer x, accelerometer y] (body frame).

Combines :class:`Gyroscope` and a two-axis body :class:`Accelerometer` (axes at 0 and
pi/2 in the body frame, at a body-frame offset). Published as one sensor_msgs/Imu.
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.accelerometer import Accelerometer
from mbde_core.sensors.base import NoiseModel, Sensor
from mbde_core.sensors.gyroscope import Gyroscope


class IMU(Sensor):
    kind = "imu"
    dim = 3
    channels = ["gyro_z", "accel_x", "accel_y"]
    uses_qd = True
    uses_qdd = True

    def __init__(self, mech, name, *, body: int, offset=(0.0, 0.0), axis_angle: float = 0.0, **kw):
        self.body = body
        self.offset = tuple(float(v) for v in offset)  # body frame [m]
        self.axis_angle = float(axis_angle)  # x axis of the accelerometer pair vs the body x axis [rad]
        dummy = NoiseModel.white(0.0, 1)
        common = dict(rate=kw["rate"], frame_id=kw["frame_id"], topic=kw["topic"])
        self._gyro = Gyroscope(mech, name + "/gyro", body=body, noise=dummy, **common)
        self._acc = Accelerometer(mech, name + "/accel", axes=[axis_angle, axis_angle + np.pi / 2], body=body,
                                  offset=offset, noise=NoiseModel.white(0.0, 2), **common)
        super().__init__(mech, name, **kw)

    def _h(self, q, qd, qdd):
        return np.concatenate([self._gyro._h(q, qd, qdd), self._acc._h(q, qd, qdd)], axis=1)

    def _jac(self, q, qd, qdd):
        g = self._gyro._jac(q, qd, qdd)
        a = self._acc._jac(q, qd, qdd)
        return tuple(np.concatenate([x, y], axis=1) for x, y in zip(g, a))
