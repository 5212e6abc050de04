"""Vectorised constraint equations Phi(q) = 0 of a planar linkage in natural coordinates.

Every function is batched: ``q`` is (N, n); points are gathered into P (N, n_points, 2).
Column index ``n`` is a scratch column that absorbs the entries of fixed points
(their coordinates are not unknowns), so assembling never needs a mask.

Constraint rows, in this order (García de Jalón & Bayo 1994, ch. 2-3):

1. constant distance between two points i, j of a body (first two points of every body):
   ``phi = |P_j - P_i|^2 - L^2``;
2. rigid polygon: an extra point k of a body with >= 3 points keeps its body-frame
   coordinates (xi, eta) w.r.t. the basis (i, j)::

       phi = P_k - P_i - a (P_j - P_i) - b J (P_j - P_i),  a = xi/L, b = eta/L,
       J = [[0, -1], [1, 0]]      (2 linear rows, no mirror ambiguity)

3. fixed slider: point k on the line through O along the unit vector u:
   ``phi = u x (P_k - O) = u_x (y_k - O_y) - u_y (x_k - O_x)`` (linear);
   coordinate row ``phi = q_c`` (linear; the static part of a coordinate driver,
   :mod:`mbde_core.model.drivers`);
4. absolute angle theta of segment a -> b (relative coordinate, column c)::

       phi = sin(theta) (x_b - x_a) - cos(theta) (y_b - y_a)

   whose derivative w.r.t. theta, cos(theta) dx + sin(theta) dy = L, never vanishes.
"""
from __future__ import annotations

import numpy as np


class ConstraintSet:
    """Index arrays and evaluators for all constraint rows of one mechanism.

    Parameters
    ----------
    n: number of natural coordinates.
    px, py: (n_points,) column of each point's x / y in q (``n`` for fixed points).
    distances: list of (i, j, L).
    rigid: list of (i, j, k, a, b).
    sliders: list of (k, Ox, Oy, ux, uy).
    angles: list of (a, b, column).
    coordinates: list of columns c (rows phi = q_c, after the sliders).
    """

    def __init__(self, n, px, py, distances, rigid, sliders, angles, coordinates=()):
        self.n = n
        self.px = np.asarray(px, dtype=np.intp)
        self.py = np.asarray(py, dtype=np.intp)
        self.d_i = np.array([d[0] for d in distances], dtype=np.intp)
        self.d_j = np.array([d[1] for d in distances], dtype=np.intp)
        self.d_L2 = np.array([d[2] ** 2 for d in distances], dtype=float)
        nd = len(distances)
        self.r_ijk = np.array([r[:3] for r in rigid], dtype=np.intp).reshape(-1, 3)
        self.r_ab = np.array([r[3:] for r in rigid], dtype=float).reshape(-1, 2)
        nr = 2 * len(rigid)
        self.s_k = np.array([s[0] for s in sliders], dtype=np.intp)
        self.s_O = np.array([s[1:3] for s in sliders], dtype=float).reshape(-1, 2)
        self.s_u = np.array([s[3:5] for s in sliders], dtype=float).reshape(-1, 2)
        ns = len(sliders) + len(coordinates)
        self.a_a = np.array([a[0] for a in angles], dtype=np.intp)
        self.a_b = np.array([a[1] for a in angles], dtype=np.intp)
        self.a_c = np.array([a[2] for a in angles], dtype=np.intp)
        na = len(angles)
        self.rows_d = np.arange(nd)
        self.rows_lin = np.arange(nd, nd + nr + ns)
        self.rows_a = np.arange(nd + nr + ns, nd + nr + ns + na)
        self.m = nd + nr + ns + na
        self.kinds = ["distance"] * nd + ["rigid"] * nr + ["slider"] * len(sliders) + ["coordinate"] * len(coordinates) + ["angle"] * na
        # linear rows: constant Jacobian template and offset, phi_lin = A q_ext + c
        A = np.zeros((nr + ns, n + 1))
        self._lin_fixed_terms = []  # contributions of fixed points, filled by bind_fixed()
        for r, (i, j, k, a, b) in enumerate(rigid):
            rx, ry = 2 * r, 2 * r + 1
            for col, coef in ((self.px[k], 1.0), (self.px[i], -1.0 + a), (self.px[j], -a), (self.py[j], b), (self.py[i], -b)):
                A[rx, col] += coef
            for col, coef in ((self.py[k], 1.0), (self.py[i], -1.0 + a), (self.py[j], -a), (self.px[j], -b), (self.px[i], b)):
                A[ry, col] += coef
        for s, (k, Ox, Oy, ux, uy) in enumerate(sliders):
            A[nr + s, self.py[k]] += ux
            A[nr + s, self.px[k]] += -uy
        for r, col in enumerate(coordinates):
            A[nr + len(sliders) + r, int(col)] = 1.0
        self._A_lin = A
        self._rigid = rigid
        self._sliders = sliders

    # ---------------------------------------------------------------------------------
    def bind_fixed(self, fixed_xy_full: np.ndarray) -> None:
        """Store the constant part of the linear rows (fixed points, slider origins)."""
        nr = 2 * len(self._rigid)
        c = np.zeros(len(self.rows_lin))
        P = fixed_xy_full  # (n_points, 2), moving entries ignored below
        fixed = (self.px == self.n)
        for r, (i, j, k, a, b) in enumerate(self._rigid):
            for (pt, cx_x, cx_y) in ((k, 1.0, 0.0), (i, -1.0 + a, -b), (j, -a, b)):
                if fixed[pt]:
                    c[2 * r] += cx_x * P[pt, 0] + cx_y * P[pt, 1]
            for (pt, cy_y, cy_x) in ((k, 1.0, 0.0), (i, -1.0 + a, b), (j, -a, -b)):
                if fixed[pt]:
                    c[2 * r + 1] += cy_y * P[pt, 1] + cy_x * P[pt, 0]
        for s, (k, Ox, Oy, ux, uy) in enumerate(self._sliders):
            c[nr + s] = -(ux * Oy - uy * Ox)
        self._c_lin = c
        self._A_lin_q = np.ascontiguousarray(self._A_lin[:, : self.n])

    # ---------------------------------------------------------------------------------
    def phi(self, q: np.ndarray, P: np.ndarray) -> np.ndarray:
        """Phi: (N, m) for q (N, n) with points P (N, n_points, 2)."""
        N = q.shape[0]
        out = np.empty((N, self.m))
        if self.rows_d.size:
            v = P[:, self.d_j] - P[:, self.d_i]
            out[:, self.rows_d] = np.einsum("nkd,nkd->nk", v, v) - self.d_L2
        if self.rows_lin.size:
            out[:, self.rows_lin] = q @ self._A_lin_q.T + self._c_lin
        if self.rows_a.size:
            th = q[:, self.a_c]
            v = P[:, self.a_b] - P[:, self.a_a]
            out[:, self.rows_a] = np.sin(th) * v[..., 0] - np.cos(th) * v[..., 1]
        return out

    def jacobian(self, q: np.ndarray, P: np.ndarray) -> np.ndarray:
        """Phi_q: (N, m, n)."""
        N = q.shape[0]
        J = np.zeros((N, self.m, self.n + 1))
        if self.rows_d.size:
            v2 = 2.0 * (P[:, self.d_j] - P[:, self.d_i])
            r = self.rows_d
            J[:, r, self.px[self.d_j]] = v2[..., 0]
            J[:, r, self.py[self.d_j]] = v2[..., 1]
            J[:, r, self.px[self.d_i]] = -v2[..., 0]
            J[:, r, self.py[self.d_i]] = -v2[..., 1]
        if self.rows_lin.size:
            J[:, self.rows_lin, :] = self._A_lin
        if self.rows_a.size:
            th = q[:, self.a_c]
            s, c = np.sin(th), np.cos(th)
            v = P[:, self.a_b] - P[:, self.a_a]
            r = self.rows_a
            J[:, r, self.px[self.a_b]] = s
            J[:, r, self.py[self.a_b]] = -c
            J[:, r, self.px[self.a_a]] = -s
            J[:, r, self.py[self.a_a]] = c
            J[:, r, self.a_c] = c * v[..., 0] + s * v[..., 1]
        return J[:, :, : self.n]

    def jacobian_dot_qd(self, q, qd, P, V) -> np.ndarray:
        """(dPhi_q/dt) qd: (N, m); V (N, n_points, 2) are the point velocities."""
        N = q.shape[0]
        out = np.zeros((N, self.m))
        if self.rows_d.size:
            w = V[:, self.d_j] - V[:, self.d_i]
            out[:, self.rows_d] = 2.0 * np.einsum("nkd,nkd->nk", w, w)
        if self.rows_a.size:
            th = q[:, self.a_c]
            thd = qd[:, self.a_c]
            s, c = np.sin(th), np.cos(th)
            v = P[:, self.a_b] - P[:, self.a_a]
            w = V[:, self.a_b] - V[:, self.a_a]
            out[:, self.rows_a] = thd**2 * (-s * v[..., 0] + c * v[..., 1]) + 2.0 * thd * (c * w[..., 0] + s * w[..., 1])
        return out


def assemble_constraints(spec, n: int, px, py, fixed_xy, rel_columns):
    """The constraint rows of a mechanism spec, in the order of the module docstring:
    (ConstraintSet bound to the fixed points, {driver name: its row in the full set}).

    px, py: (n_points,) columns of each point's x / y in q (``n`` for fixed points);
    fixed_xy (n_points, 2) the spec's point positions; rel_columns the columns of the
    relative coordinates.
    """
    pts = spec.points
    distances, rigid = [], []
    xy = fixed_xy
    driven = {d.body: d for d in spec.drivers if d.kind == "distance"}
    driver_rows = {}  # driver name -> row of the full constraint set
    for bi, b in enumerate(spec.bodies):
        i, j = b.points[0], b.points[1]
        if not (pts[i].fixed and pts[j].fixed):
            if bi in driven:  # |P_j - P_i|^2 - 0, the driver's f(t)^2 is the time-dependent part
                driver_rows[driven[bi].name] = len(distances)
            distances.append((i, j, 0.0 if bi in driven else b.length))
        d = xy[j] - xy[i]
        L = float(np.hypot(*d))
        for k in b.points[2:]:
            if pts[k].fixed and pts[i].fixed and pts[j].fixed:
                continue
            e = xy[k] - xy[i]
            a = float(np.dot(e, d) / L**2)
            bb = float((d[0] * e[1] - d[1] * e[0]) / L**2)
            rigid.append((i, j, k, a, bb))
    sliders = [(s.point, s.origin[0], s.origin[1], s.direction[0], s.direction[1]) for s in spec.sliders]
    angles = [(r.points[0], r.points[1], rel_columns[k]) for k, r in enumerate(spec.relative_coordinates)]
    coords = [d for d in spec.drivers if d.kind == "coordinate"]
    base = len(distances) + 2 * len(rigid) + len(sliders)
    driver_rows.update({d.name: base + k for k, d in enumerate(coords)})
    out = ConstraintSet(n, px, py, distances, rigid, sliders, angles, [d.coordinate for d in coords])
    out.bind_fixed(fixed_xy)
    return out, driver_rows
