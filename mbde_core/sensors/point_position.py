"""Position tracker of a point: h = (x, y) of the point in the world frame [m].

A camera or motion-capture marker (paper 002's crane: a Kinect measures the payload's
x, y). Linear in q: dh/dq selects the point's columns. Published as
sensor_msgs/JointState with the two channels ``<joint_name>_x`` and ``<joint_name>_y``
(positions in m).
"""
from __future__ import annotations

from mbde_core.sensors.base import Sensor


class PointPosition(Sensor):
    kind = "point_position"
    msg_type = "sensor_msgs/msg/JointState"
    dim = 2

    def __init__(self, mech, name, *, point: int, joint_name: str | None = None, **kw):
        self.point = int(point)
        base = joint_name or name
        self.channels = [f"{base}_x", f"{base}_y"]
        super().__init__(mech, name, **kw)

    def _h(self, q, qd, qdd):
        return self.mech.points(q)[:, self.point]

    def _jac(self, q, qd, qdd):
        Hq, Hqd, Hqdd = self._zeros(q.shape[0])
        Hq[:, 0, self.mech.px[self.point]] = 1.0
        Hq[:, 1, self.mech.py[self.point]] = 1.0
        return Hq, Hqd, Hqdd
