"""Body-frame geometry shared by the sensor models (batched).

A body's frame has its origin at the body's first point and its x axis along
d = P_j - P_i (first to second point). Column indices map derivatives w.r.t. d or a
point back to q; column n collects fixed points and is discarded.
"""
from __future__ import annotations

import numpy as np


def body_columns(mech, body: int):
    """(i, j, L, (xi, yi, xj, yj)) for a body: basis points, length, q columns."""
    i, j, L = mech.body_basis[body]
    return i, j, L, (mech.px[i], mech.py[i], mech.px[j], mech.py[j])


def _point(mech, x, k, fixed: bool):
    """(N, 2) position (fixed=True uses the fixed coordinates) or velocity of point k."""
    cx, cy = mech.px[k], mech.py[k]
    if cx < mech.n:
        return np.stack([x[:, cx], x[:, cy]], axis=1)
    value = mech.fixed_xy[k] if fixed else np.zeros(2)
    return np.broadcast_to(value, (x.shape[0], 2))


def basis_vector(mech, body: int, q, qd=None):
    """d (N, 2) and, if qd is given, d' (N, 2) of a body (only its two basis points are read)."""
    i, j, _, _ = body_columns(mech, body)
    d = _point(mech, q, j, True) - _point(mech, q, i, True)
    if qd is None:
        return d, None
    return d, _point(mech, qd, j, False) - _point(mech, qd, i, False)


def _coord(mech, cols, k, axis: int, fixed: bool):
    """Coordinate ``axis`` of point k: ``cols[c]`` for its column c of q (or qd), or a
    constant float (fixed point: its position if ``fixed``, else velocity 0.0)."""
    c = (mech.px if axis == 0 else mech.py)[k]
    if c < mech.n:
        return cols[c]
    return float(mech.fixed_xy[k][axis]) if fixed else 0.0


def basis_values(mech, body: int, q_cols, qd_cols):
    """(d_x, d_y, d'_x, d'_y) of a body from column accessors: ``q.T`` of a batch (N, n)
    (each value (N,), or a float where both basis points are fixed) or the list of one
    state's floats (each value a float)."""
    i, j, _, _ = body_columns(mech, body)
    return tuple(_coord(mech, x, j, a, f) - _coord(mech, x, i, a, f) for x, f in ((q_cols, True), (qd_cols, False))
                 for a in (0, 1))


def basis_components(mech, body: int, q, qd):
    """(d_x, d_y, d'_x, d'_y), each (N,): :func:`basis_vector` as columns, not stacked
    into (N, 2) arrays (the same values, fewer copies in a particle filter's hot path)."""
    out = basis_values(mech, body, q.T, qd.T)
    return tuple(np.full(q.shape[0], v) if isinstance(v, float) else v for v in out)


def scatter_d(J, row, cols, gx, gy):
    """Add a gradient w.r.t. d = P_j - P_i (gx, gy (N,)) into J[:, row, :]."""
    xi, yi, xj, yj = cols
    J[:, row, xj] += gx
    J[:, row, yj] += gy
    J[:, row, xi] -= gx
    J[:, row, yi] -= gy


def basis_layout(mech, body: int):
    """Where the float code of one state reads a body's d = P_j - P_i and d': for x_j, x_i,
    y_j, y_i, (column of q, 0.0) or (-1, the fixed value); the same with (column of qd,
    0.0) or (-1, 0.0); then the q columns (xi, yi, xj, yj) a gradient in d scatters into
    (column n: a fixed point, discarded)."""
    i, j, _, cols = body_columns(mech, body)

    def where(point, axis, fixed):
        col = int((mech.px if axis == 0 else mech.py)[point])
        if col < mech.n:
            return (col, 0.0)
        return (-1, float(mech.fixed_xy[point][axis]) if fixed else 0.0)

    return tuple(tuple(v for p, ax in ((j, 0), (i, 0), (j, 1), (i, 1)) for v in where(p, ax, fixed))
                 for fixed in (True, False)) + (tuple(int(c) for c in cols),)


def body_angle_and_gradient(d):
    """theta = atan2(dy, dx) (N,) and dtheta/dd (N, 2) = (-dy, dx) / |d|^2."""
    s = d[:, 0] ** 2 + d[:, 1] ** 2
    return np.arctan2(d[:, 1], d[:, 0]), np.stack([-d[:, 1] / s, d[:, 0] / s], axis=1)


def omega_and_gradients(d, dd):
    """Angular velocity w = (d x d') / |d|^2 (N,), dw/dd (N, 2), dw/dd' (N, 2)."""
    s = d[:, 0] ** 2 + d[:, 1] ** 2
    c = d[:, 0] * dd[:, 1] - d[:, 1] * dd[:, 0]
    w = c / s
    gd = np.stack([dd[:, 1] / s - 2.0 * c * d[:, 0] / s**2, -dd[:, 0] / s - 2.0 * c * d[:, 1] / s**2], axis=1)
    gdd = np.stack([-d[:, 1] / s, d[:, 0] / s], axis=1)
    return w, gd, gdd


def rotation(alpha: float) -> np.ndarray:
    c, s = np.cos(alpha), np.sin(alpha)
    return np.array([[c, -s], [s, c]])
