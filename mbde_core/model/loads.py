"""Applied loads as generalized forces Q(t, q, qd) and their Jacobians, batched.

Conventions: torques are counter-clockwise positive (about +z). A torque T on a body with
basis points i, j (d = r_j - r_i, |d| = L) is the couple of forces T J d / L^2 at j and
its opposite at i (virtual work T dtheta with dtheta = (J d) . dd / L^2). The angular
velocity of that body is w = (d x d') / L^2.
"""
from __future__ import annotations

import numpy as np

from mbde_core.model.spec import LoadSpec

FRICTION_VELOCITY_SCALE = 0.01  # rad/s or m/s: default regularisation of dry friction


VELOCITY_KINDS = ("joint_damping", "point_damping", "joint_friction", "point_friction")


class LoadSet:
    """All applied loads of a mechanism except gravity (which is constant)."""

    def __init__(self, loads: tuple[LoadSpec, ...], n: int, px, py, bodies):
        self.n = n
        self.px = np.asarray(px)
        self.py = np.asarray(py)
        self.loads = loads
        # basis (i, j, L^2) per body
        self.basis = [(b.points[0], b.points[1], b.length**2) for b in bodies]
        self.velocity_dependent = any(ld.kind in VELOCITY_KINDS for ld in loads)
        self.position_dependent = any(ld.kind in ("torque", "joint_damping", "joint_friction") for ld in loads)

    def __bool__(self) -> bool:
        return bool(self.loads)

    # ---------------------------------------------------------------------------------
    def _cols(self, body):
        i, j, L2 = self.basis[body]
        return (self.px[i], self.py[i], self.px[j], self.py[j]), L2

    def _d(self, P, body):
        i, j, L2 = self.basis[body]
        return P[:, j] - P[:, i], L2

    def forces(self, t: float, q: np.ndarray, qd: np.ndarray, P: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Q (N, n) at time t; P, V (N, n_points, 2) are point positions and velocities."""
        N = q.shape[0]
        Q = np.zeros((N, self.n + 1))
        for ld in self.loads:
            if ld.kind == "force":
                Q[:, self.px[ld.point]] += ld.value[0](t)
                Q[:, self.py[ld.point]] += ld.value[1](t)
            elif ld.kind == "generalized_force":
                Q[:, ld.coordinate] += ld.value[0](t)
            elif ld.kind == "torque":
                self._add_torque(Q, P, ld.body, np.full(N, ld.value[0](t)))
            elif ld.kind in ("joint_damping", "joint_friction"):
                T = self._joint_torque(ld, self._relative_omega(P, V, ld))[0]
                self._add_torque(Q, P, ld.body, T)
                if ld.body2 >= 0:
                    self._add_torque(Q, P, ld.body2, -T)
            elif ld.kind == "point_damping":
                Q[:, self.px[ld.point]] -= ld.c * V[:, ld.point, 0]
                Q[:, self.py[ld.point]] -= ld.c * V[:, ld.point, 1]
            elif ld.kind == "point_friction":
                vx, vy = V[:, ld.point, 0], V[:, ld.point, 1]
                s = -ld.c / np.sqrt(vx * vx + vy * vy + ld.scale * ld.scale)
                Q[:, self.px[ld.point]] += s * vx
                Q[:, self.py[ld.point]] += s * vy
        return Q[:, : self.n]

    def _relative_omega(self, P, V, ld):
        """w_b - w_a (N,) of a joint load (body2 -1: the ground)."""
        return self._omega(P, V, ld.body) - (self._omega(P, V, ld.body2) if ld.body2 >= 0 else 0.0)

    @staticmethod
    def _joint_torque(ld, w):
        """(T, dT/dw) (N,) of a joint's viscous (-c w) or dry (-c s(w)) friction torque."""
        if ld.kind == "joint_damping":
            return -ld.c * w, np.full(np.shape(w), -ld.c)
        e2 = ld.scale * ld.scale
        r = np.sqrt(w * w + e2)
        return -ld.c * w / r, -ld.c * e2 / (r * r * r)

    def _omega(self, P, V, body):
        i, j, L2 = self.basis[body]
        d = P[:, j] - P[:, i]
        dd = V[:, j] - V[:, i]
        return (d[:, 0] * dd[:, 1] - d[:, 1] * dd[:, 0]) / L2

    def _add_torque(self, Q, P, body, T):
        (xi, yi, xj, yj), L2 = self._cols(body)
        d, _ = self._d(P, body)
        fx = -T * d[:, 1] / L2  # T J d / L^2, J d = (-d_y, d_x)
        fy = T * d[:, 0] / L2
        Q[:, xj] += fx
        Q[:, yj] += fy
        Q[:, xi] -= fx
        Q[:, yi] -= fy

    # ---------------------------------------------------------------------------------
    def jacobians(self, t, q, qd, P, V):
        """(dQ/dq, dQ/dqd), each (N, n, n)."""
        N = q.shape[0]
        n1 = self.n + 1
        Kq = np.zeros((N, n1, n1))
        Cq = np.zeros((N, n1, n1))
        for ld in self.loads:
            if ld.kind == "torque":
                self._torque_jac(Kq, P, ld.body, np.full(N, ld.value[0](t)))
            elif ld.kind in ("joint_damping", "joint_friction"):
                bodies = [(ld.body, 1.0)] + ([(ld.body2, -1.0)] if ld.body2 >= 0 else [])
                # T = T(w_b - w_a); dT/dq and dT/dqd as (N, n1) rows (dT/dw times dw/dq, dw/dqd)
                T, dTdw = self._joint_torque(ld, self._relative_omega(P, V, ld))
                dTq = np.zeros((N, n1))
                dTqd = np.zeros((N, n1))
                for b, sgn in bodies:
                    (xi, yi, xj, yj), L2 = self._cols(b)
                    i, j, _ = self.basis[b]
                    d = P[:, j] - P[:, i]
                    dd = V[:, j] - V[:, i]
                    # w = (dx ddy - dy ddx)/L2 ; dw/dd = (ddy, -ddx)/L2 ; dw/ddd = (-dy, dx)/L2
                    for col, val in ((xj, dd[:, 1]), (yj, -dd[:, 0]), (xi, -dd[:, 1]), (yi, dd[:, 0])):
                        dTq[:, col] += dTdw * sgn * val / L2
                    for col, val in ((xj, -d[:, 1]), (yj, d[:, 0]), (xi, d[:, 1]), (yi, -d[:, 0])):
                        dTqd[:, col] += dTdw * sgn * val / L2
                for b, sgn in bodies:
                    (xi, yi, xj, yj), L2 = self._cols(b)
                    d, _ = self._d(P, b)
                    # Q_j = sgn T J d / L2: dQ = sgn (J d / L2) dT + sgn T/L2 J dd
                    jd = np.stack([-d[:, 1], d[:, 0]], axis=1) / L2  # (N, 2)
                    for r, sign_pt in ((xj, 1.0), (xi, -1.0)):
                        Kq[:, r, :] += sign_pt * sgn * jd[:, 0:1] * dTq
                        Cq[:, r, :] += sign_pt * sgn * jd[:, 0:1] * dTqd
                    for r, sign_pt in ((yj, 1.0), (yi, -1.0)):
                        Kq[:, r, :] += sign_pt * sgn * jd[:, 1:2] * dTq
                        Cq[:, r, :] += sign_pt * sgn * jd[:, 1:2] * dTqd
                    self._torque_jac(Kq, P, b, sgn * T)
            elif ld.kind == "point_damping":
                Cq[:, self.px[ld.point], self.px[ld.point]] -= ld.c
                Cq[:, self.py[ld.point], self.py[ld.point]] -= ld.c
            elif ld.kind == "point_friction":  # dF/dv = -c (I / r - v v^T / r^3), r = sqrt(|v|^2 + eps^2)
                v = V[:, ld.point, :]
                r = np.sqrt(np.einsum("ki,ki->k", v, v) + ld.scale * ld.scale)
                cols = (self.px[ld.point], self.py[ld.point])
                for a, ca in enumerate(cols):
                    for b, cb in enumerate(cols):
                        Cq[:, ca, cb] += -ld.c * ((a == b) / r - v[:, a] * v[:, b] / r**3)
        return Kq[:, : self.n, : self.n], Cq[:, : self.n, : self.n]

    def _torque_jac(self, K, P, body, T):
        """Add d(T J d / L^2)/dq for a fixed torque value T (N,)."""
        (xi, yi, xj, yj), L2 = self._cols(body)
        a = T / L2
        # f = a J d = a (-d_y, d_x); df/dd = a J
        for row, sgn_row in ((xj, 1.0), (xi, -1.0)):  # fx = -a d_y
            K[:, row, yj] += -a * sgn_row
            K[:, row, yi] += a * sgn_row
        for row, sgn_row in ((yj, 1.0), (yi, -1.0)):  # fy = a d_x
            K[:, row, xj] += a * sgn_row
            K[:, row, xi] += -a * sgn_row
