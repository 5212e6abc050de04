"""Linear encoder on a slider: position s = u . (P - O) along the track [m].

Linear in q: dh/dq = u at the slider point's columns. Published as
sensor_msgs/JointState (a prismatic joint's position).
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import Sensor


class SliderPosition(Sensor):
    kind = "slider_position"
    msg_type = "sensor_msgs/msg/JointState"
    dim = 1

    def __init__(self, mech, name, *, slider: int, joint_name: str | None = None, **kw):
        s = mech.spec.sliders[slider]
        self.slider = slider
        self.point = s.point
        self.u = np.array(s.direction)
        self.origin = np.array(s.origin)
        self.channels = [joint_name or name]
        super().__init__(mech, name, **kw)

    def _h(self, q, qd, qdd):
        P = self.mech.points(q)[:, self.point]
        return ((P - self.origin) @ self.u)[:, None]

    def _jac(self, q, qd, qdd):
        Hq, Hqd, Hqdd = self._zeros(q.shape[0])
        Hq[:, 0, self.mech.px[self.point]] = self.u[0]
        Hq[:, 0, self.mech.py[self.point]] = self.u[1]
        return Hq, Hqd, Hqdd
