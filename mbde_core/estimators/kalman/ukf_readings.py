"""Readings of a UKF's few sigma points on Python floats (gyroscopes, accelerometers).

The UKF predicts every fused sensor at its 2L + 1 sigma points (L = 2g: 5 points for one
degree of freedom). The sensors' batched ``h`` costs ~10 (gyroscope) and ~30 us
(accelerometer) of fixed numpy overhead per call at that size, several times the
arithmetic. As the engine's small batches (:data:`mbde_core.engine.fastpath.SMALL_BATCH`),
up to SMALL_BATCH points are evaluated one by one on floats with the sensors' own
formulas (equal to the batched ones to rounding):

- gyroscope (:mod:`mbde_core.sensors.gyroscope`): w = (d_x d'_y - d_y d'_x) / |d|^2 with
  d = P_j - P_i of its body;
- accelerometer (:mod:`mbde_core.sensors.accelerometer`, paper 004 eqs. 44-45):
  f = C [a_i; a_j] - g (body-mounted) or a_P - g (point-mounted), h_k = e_k . f with
  e_k = Rot(alpha_k) d / |d| (body) or (cos alpha_k, sin alpha_k) (point).

Other sensor types (and subclasses, which may read otherwise) use their batched ``h``.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine.fastpath import SMALL_BATCH
from mbde_core.sensors.accelerometer import Accelerometer
from mbde_core.sensors.gyroscope import Gyroscope


class SigmaReadings:
    """h of the named sensors at a few full states, (N, d) stacked as the sensors' h."""

    def __init__(self, mech, sensors):
        self.mech = mech
        self.sensors = sensors
        self._plans = {}
        self._fixed = mech.fixed_xy

    def __call__(self, names, q, qd, qdd) -> np.ndarray:
        if self._fixed is not self.mech.fixed_xy:  # the plans read the fixed points' positions
            self._plans.clear()
            self._fixed = self.mech.fixed_xy
        if q.shape[0] > SMALL_BATCH:
            return self._batched(names, q, qd, qdd)
        plans = [self._plan(n) for n in names]
        if any(p is None for p in plans):
            return self._batched(names, q, qd, qdd)
        ql, qdl = q.tolist(), qd.tolist()
        qddl = qdd.tolist() if qdd is not None else None
        rows = []
        for k in range(len(ql)):
            row = []
            for p in plans:
                p(row, ql[k], qdl[k], None if qddl is None else qddl[k])
            rows.append(row)
        return np.array(rows, dtype=float).reshape(len(ql), -1)

    def _batched(self, names, q, qd, qdd):
        if len(names) == 1:
            return self.sensors[names[0]].h(q, qd, qdd)
        return np.concatenate([self.sensors[n].h(q, qd, qdd) for n in names], axis=1)

    def _plan(self, name):
        """A function appending the reading of sensor ``name`` at one state, or None."""
        if name not in self._plans:
            s = self.sensors[name]
            self._plans[name] = (_gyroscope(self.mech, s) if type(s) is Gyroscope
                                 else _accelerometer(self.mech, s) if type(s) is Accelerometer else None)
        return self._plans[name]


def _basis(mech, body):
    """(positions of the basis points' coordinates [xi, yi, xj, yj] in q + consts, consts):
    a fixed point's coordinates are constants (its position; velocity 0), as
    :func:`mbde_core.sensors.geometry.basis_values` reads them."""
    i, j, _ = mech.body_basis[body]
    idx, consts = [], []
    for k in (i, j):
        for axis, cols in ((0, mech.px), (1, mech.py)):
            c = int(cols[k])
            if c < mech.n:
                idx.append(c)
            else:
                idx.append(mech.n + len(consts))
                consts.append(float(mech.fixed_xy[k][axis]))
    return idx, consts


def _gyroscope(mech, s):
    (xi, yi, xj, yj), consts = _basis(mech, s.body)
    zeros = [0.0] * len(consts)

    def h(out, q, qd, qdd):
        if consts:
            q, qd = q + consts, qd + zeros
        dx, dy, ddx, ddy = q[xj] - q[xi], q[yj] - q[yi], qd[xj] - qd[xi], qd[yj] - qd[yi]
        out.append((dx * ddy - dy * ddx) / (dx * dx + dy * dy))
    return h


def _accelerometer(mech, s):
    gx, gy = float(mech.gravity[0]), float(mech.gravity[1])
    # e_k = u @ rotation(alpha_k).T as the batched code, from the same matrices
    rot = [np.asarray(rt, dtype=float).tolist() for rt in s._rot_t]
    n = mech.n
    if s.body >= 0:
        cols = list(s._cols)
        C0, C1 = s._C.tolist()
        (xi, yi, xj, yj), consts = _basis(mech, s.body)

        def h(out, q, qd, qdd):
            a = (qdd if qdd is not None else [0.0] * n) + [0.0]  # column n: fixed points (no acceleration)
            b = [a[c] for c in cols]
            fx = sum(c * v for c, v in zip(C0, b)) - gx
            fy = sum(c * v for c, v in zip(C1, b)) - gy
            if consts:
                q = q + consts
            dx, dy = q[xj] - q[xi], q[yj] - q[yi]
            nd = math.sqrt(dx * dx + dy * dy)
            ux, uy = dx / nd, dy / nd
            for (r00, r01), (r10, r11) in rot:
                out.append((ux * r00 + uy * r10) * fx + (ux * r01 + uy * r11) * fy)
        return h
    cx, cy = s._cols
    axes = [(math.cos(a), math.sin(a)) for a in s.axes]

    def h_point(out, q, qd, qdd):
        a = (qdd if qdd is not None else [0.0] * n) + [0.0]
        fx, fy = a[cx] - gx, a[cy] - gy
        for ex, ey in axes:
            out.append(ex * fx + ey * fy)
    return h_point
