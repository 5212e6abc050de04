"""Gyroscope: angular rate of a body about z (paper 003 / mbde-matlab formula).

w = (d_x d'_y - d_y d'_x) / |d|^2 with d = second point - first point of the body (exact
for a rigid body). dw/dd and dw/dd' are analytic. Published as sensor_msgs/Imu
angular_velocity.z [rad/s].
"""
from __future__ import annotations

import numpy as np

from mbde_core.sensors.base import Sensor
from mbde_core.sensors.geometry import (basis_components, basis_layout, basis_vector, body_columns,
                                        omega_and_gradients, scatter_d)


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
        n = self.mech.n
        (a, ca, b, cb, c_, cc, d, cd), (e, ce, f, cf, g, cg, k, ck), (xi, yi, xj, yj) = self._float_layout()
        # basis_values: d = P_j - P_i (a column of q, or the fixed point), d' likewise from qd
        dx = (q[a] if a >= 0 else ca) - (q[b] if b >= 0 else cb)
        dy = (q[c_] if c_ >= 0 else cc) - (q[d] if d >= 0 else cd)
        ddx = (qd[e] if e >= 0 else ce) - (qd[f] if f >= 0 else cf)
        ddy = (qd[g] if g >= 0 else cg) - (qd[k] if k >= 0 else ck)
        s = dx * dx + dy * dy
        c = dx * ddy - dy * ddx
        k2 = 2.0 * c / (s * s)
        gdx, gdy, gddx, gddy = ddy / s - k2 * dx, -ddx / s - k2 * dy, -dy / s, dx / s
        Hq, Hqd = [0.0] * (n + 1), [0.0] * (n + 1)
        # scatter_d for one state on floats (column n collects fixed points, discarded)
        for H, gx, gy in ((Hq, gdx, gdy), (Hqd, gddx, gddy)):
            H[xj] += gx
            H[yj] += gy
            H[xi] -= gx
            H[yi] -= gy
        return c / s, Hq[:n], Hqd[:n]

    def _float_layout(self):
        """Where :meth:`linearize_floats` reads d and d' (computed once): for x_j, x_i,
        y_j, y_i of the basis points, (column of q, 0.0) or (-1, the fixed value) and
        (column of qd, 0.0) or (-1, 0.0); then the q columns (xi, yi, xj, yj). Kept with
        the mechanism and its fixed points it was read from (recomputed if either is replaced)."""
        mech = self.mech
        cached = self.__dict__.get("_layout")
        if cached is not None and cached[0] is mech and cached[1] is mech.fixed_xy:
            return cached[2]
        lay = basis_layout(mech, self.body)
        self._layout = (mech, mech.fixed_xy, lay)
        return lay
