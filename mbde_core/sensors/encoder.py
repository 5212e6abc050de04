"""Encoders: absolute angle of a body, or relative angle between two bodies.

h = wrap(theta_b - theta_a), theta = atan2(d_y, d_x) of the body's x axis
(d = second point - first point); body a may be the ground (theta_a = 0).
dtheta/dd = (-d_y, d_x) / |d|^2. A quantization of 2 pi / counts_per_revolution models
the encoder resolution. Published as sensor_msgs/JointState (position, rad).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.sensors.base import Sensor, wrap_angle
from mbde_core.sensors.geometry import basis_layout, basis_vector, body_angle_and_gradient, body_columns, scatter_d

TWO_PI = 2.0 * math.pi


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

    def linearize(self, q, qd=None, qdd=None):
        """(h (1,), dh/dq, dh/dqd, dh/dqdd (1, n)) at one state, on Python floats (the
        observers' hot path): the same angle, wrap and gradient as :meth:`h` and
        :meth:`jacobians`, without the batch machinery."""
        n = self.mech.n
        x = q.tolist()
        th, Hq = 0.0, [0.0] * (n + 1)
        for body, sign in ((self.body, 1.0), (self.reference_body, -1.0)):
            if body < 0:
                continue
            (a, ca, b, cb, c_, cc, d, cd), _, (xi, yi, xj, yj) = self._layout(body)
            dx = (x[a] if a >= 0 else ca) - (x[b] if b >= 0 else cb)
            dy = (x[c_] if c_ >= 0 else cc) - (x[d] if d >= 0 else cd)
            s = dx * dx + dy * dy
            th = math.atan2(dy, dx) if sign > 0 else th - math.atan2(dy, dx)
            gx, gy = sign * (-dy / s), sign * (dx / s)
            Hq[xj] += gx
            Hq[yj] += gy
            Hq[xi] -= gx
            Hq[yi] -= gy
        t = th - self.offset + math.pi  # wrap_angle on one float
        h = t - math.pi if 0.0 <= t < TWO_PI else t % TWO_PI - math.pi
        z = np.zeros((1, n))
        return np.array([h]), np.array([Hq[:n]]), z, z.copy()

    def _layout(self, body: int):
        """:func:`basis_layout` of ``body``, kept with the mechanism and fixed points it was
        read from (recomputed if either is replaced)."""
        mech = self.mech
        cache = self.__dict__.setdefault("_layouts", {})
        hit = cache.get(body)
        if hit is None or hit[0] is not mech or hit[1] is not mech.fixed_xy:
            hit = cache[body] = (mech, mech.fixed_xy, basis_layout(mech, body))
        return hit[2]
