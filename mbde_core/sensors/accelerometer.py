"""Accelerometers: specific force f = a_P - g at a point, projected on sensing axes.

Body-mounted (paper 004 eqs. 44-51): the point P has body-frame coordinates (xi, eta)
(origin at the body's first point, x axis towards the second), so
r_P = C(xi, eta) [r_i; r_j] and a_P = C [a_i; a_j] (C constant, natural coordinates);
each sensing axis k makes the angle alpha_k with the body x axis:
e_k = Rot(alpha_k) d / |d|, and h_k = e_k . (a_P - g). Then dh/dqdd = e_k^T C,
dh/dq = [(I - d^ d^T) / |d|] Rot(-alpha_k) (a_P - g) (w.r.t. d), dh/dqd = 0.
Point-mounted (e.g. on a slider block that only translates): axes at fixed angles in
the world frame (or relative to a slider's track), h_k = e_k . (a_P - g).
At rest an accelerometer reads -g projected on its axes. Published as sensor_msgs/Imu
linear_acceleration.x (first axis) and .y (second axis) [m/s^2].
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.sensors.base import Sensor
from mbde_core.sensors.geometry import basis_values, basis_vector, body_columns, rotation, scatter_d


class Accelerometer(Sensor):
    kind = "accelerometer"
    uses_qdd = True

    def __init__(self, mech, name, *, axes, body: int = -1, offset=(0.0, 0.0), point: int = -1, **kw):
        self.axes = [float(a) for a in axes]
        self.dim = len(self.axes)
        self.channels = ["accel_x", "accel_y"][: self.dim]
        self.body = body
        self.point = point
        self.offset = tuple(float(v) for v in offset)
        if body >= 0:
            C, (i, j) = mech.body_point_matrix(body, self.offset)
            self._C = C
            self._cols = body_columns(mech, body)[3]
        else:
            self._cols = (mech.px[point], mech.py[point])
        super().__init__(mech, name, **kw)
        self._rot_t = [rotation(a).T for a in self.axes]  # constant: built once, not per call

    def _point_accel(self, qdd):
        cols = list(self._cols)
        if max(cols) < qdd.shape[1]:  # no fixed point among them: read qdd directly (same values)
            x = qdd
        else:  # column n: fixed points (zero acceleration)
            x = np.concatenate([qdd, np.zeros((qdd.shape[0], 1))], axis=1)
        if self.body >= 0:
            basis = x[:, cols]  # (N, 4) = [a_i, a_j]
            return basis @ self._C.T
        return x[:, cols]

    def _axes(self, q):
        """(N, dim, 2) unit sensing axes."""
        if self.body >= 0:
            d, _ = basis_vector(self.mech, self.body, q)
            u = d / np.linalg.norm(d, axis=1, keepdims=True)
            return np.stack([u @ rt for rt in self._rot_t], axis=1)
        e = np.array([[np.cos(a), np.sin(a)] for a in self.axes])
        return np.broadcast_to(e, (q.shape[0], self.dim, 2))

    def _h(self, q, qd, qdd):
        f = self._point_accel(qdd) - self.mech.gravity
        return np.einsum("nkc,nc->nk", self._axes(q), f)

    def h_many(self, q, pairs, memo: dict | None = None) -> list:
        """:meth:`Sensor.h_many` with the sensing axes (a function of q alone) computed once."""
        if type(self)._h is not Accelerometer._h:  # a subclass with its own reading model
            return super().h_many(q, pairs, memo)
        key = ("accelerometer axes", self.name)
        E = None if memo is None else memo.get(key)
        out = []
        for qd, qdd in pairs:
            qb, _, qddb, _ = self._batch(q, qd, qdd)
            if E is None:
                E = self._axes(qb)
                if memo is not None:
                    memo[key] = E
            out.append(np.einsum("nkc,nc->nk", E, self._point_accel(qddb) - self.mech.gravity))
        return out

    def _jac(self, q, qd, qdd):
        N = q.shape[0]
        Hq, Hqd, Hqdd = self._zeros(N)
        E = self._axes(q)
        f = self._point_accel(qdd) - self.mech.gravity
        if self.body >= 0:
            xi, yi, xj, yj = self._cols
            d, _ = basis_vector(self.mech, self.body, q)
            nd = np.linalg.norm(d, axis=1)
            u = d / nd[:, None]
            for k, a in enumerate(self.axes):
                row = E[:, k] @ self._C  # (N, 4): e_k^T C on [xi, yi, xj, yj]
                for c, col in enumerate((xi, yi, xj, yj)):
                    Hqdd[:, k, col] += row[:, c]
                w = f @ rotation(a)  # Rot(-a) f  (row-vector form)
                g = (w - u * np.sum(u * w, axis=1, keepdims=True)) / nd[:, None]
                scatter_d(Hq, k, self._cols, g[:, 0], g[:, 1])
        else:
            cx, cy = self._cols
            for k in range(self.dim):
                Hqdd[:, k, cx] += E[:, k, 0]
                Hqdd[:, k, cy] += E[:, k, 1]
        return Hq, Hqd, Hqdd

    def linearize(self, q, qd, qdd):
        """(h (d,), dh/dq, dh/dqd, dh/dqdd (d, n)) at one state: :meth:`linearize_floats` as
        arrays (the observers' hot path: the ADE-KF reads its accelerometers at every step)."""
        h, Hq, Hqdd = self.linearize_floats(q.tolist(), qdd.tolist())
        n = self.mech.n
        return np.array(h), np.array(Hq).reshape(self.dim, n), np.zeros((self.dim, n)), np.array(Hqdd).reshape(self.dim, n)

    def linearize_floats(self, q, qdd):
        """(h, dh/dq, dh/dqdd) at one state given as lists of floats: h a list of d floats,
        the Jacobians lists of d rows of n floats (dh/dqd = 0).

        The formulas of :meth:`h` and :meth:`jacobians` (module docstring) without the
        batch machinery (~10x less time)."""
        mech = self.mech
        n = mech.n
        a = qdd + [0.0]  # column n: fixed points (no acceleration)
        gx, gy = float(mech.gravity[0]), float(mech.gravity[1])
        Hq = [[0.0] * (n + 1) for _ in range(self.dim)]
        Hqdd = [[0.0] * (n + 1) for _ in range(self.dim)]
        h = []
        if self.body >= 0:
            cols = self._cols
            C = self._C.tolist()
            b = [a[c] for c in cols]
            fx = sum(cv * bv for cv, bv in zip(C[0], b)) - gx
            fy = sum(cv * bv for cv, bv in zip(C[1], b)) - gy
            dx, dy = basis_values(mech, self.body, q, q)[:2]
            nd = math.sqrt(dx * dx + dy * dy)
            ux, uy = dx / nd, dy / nd
            xi, yi, xj, yj = cols
            for k, al in enumerate(self.axes):
                c, s = math.cos(al), math.sin(al)
                ex, ey = c * ux - s * uy, s * ux + c * uy
                h.append(ex * fx + ey * fy)
                Hk, Hdk = Hq[k], Hqdd[k]
                for col, c0, c1 in zip(cols, C[0], C[1]):
                    Hdk[col] += ex * c0 + ey * c1
                wx, wy = c * fx + s * fy, -s * fx + c * fy
                uw = ux * wx + uy * wy
                g0, g1 = (wx - ux * uw) / nd, (wy - uy * uw) / nd
                Hk[xj] += g0
                Hk[yj] += g1
                Hk[xi] -= g0
                Hk[yi] -= g1
        else:
            cx, cy = self._cols
            fx, fy = a[cx] - gx, a[cy] - gy
            for k, al in enumerate(self.axes):
                ex, ey = math.cos(al), math.sin(al)
                h.append(ex * fx + ey * fy)
                Hqdd[k][cx] += ex
                Hqdd[k][cy] += ey
        return h, [r[:n] for r in Hq], [r[:n] for r in Hqdd]
