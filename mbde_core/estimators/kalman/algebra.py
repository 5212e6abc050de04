"""Shared Kalman-filter measurement update with per-sensor Mahalanobis gating.

Paper 003 eqs. 15a-e: y = o - h(x), S = H P H^T + R, K = P H^T S^-1, x+ = x + K y,
P+ = (I - K H) P (Joseph form here, for symmetry and positive definiteness).
Gating: a sensor's reading is rejected when its own innovation's squared Mahalanobis
distance y_s^T S_s^-1 y_s exceeds the gate (a chi-square quantile chosen by the stage).

Speed: a single innovation channel (one gyroscope or encoder reading, the common case)
is handled with scalar arithmetic (S is 1x1: division instead of solves and Cholesky
factors), and the row selection is skipped when no reading is gated out. The NIS of up to
four channels (a gyroscope and an accelerometer: three) comes from a Cholesky factor and a
forward substitution on Python floats (the same operations as LAPACK's, equal to rounding).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.engine.linalg import solve


STEP_BOUND = 4.0    # an update may move the state by at most 4 (NIS + dof) in the prior's metric
STEP_HALVINGS = 4   # damped steps (gain down to 1/16) tried before the readings are left unfused


def move_within_bound(d, P, nis, dof) -> bool:
    """Whether an update's move d of the state is one a Kalman update can make.

    A linear-Gaussian update x+ = x- + K y moves the state by d with
    d^T P^-1 d = y^T S^-1 H P H^T S^-1 y <= y^T S^-1 y (the NIS). The nonlinear updates
    (CEKF's continuous correction integrated over the step, DIEKFpm's iterated update and
    projection) can leave it by orders of magnitude when the covariance is wide or the
    state far off (``mbde bench faults``: velocities of 1e2-1e18 rad/s after one update,
    then overflowing covariances); a move beyond ``STEP_BOUND`` (NIS + dof) is refused
    (the caller damps the step). P: the prior covariance of the compared coordinates.
    """
    if not np.all(np.isfinite(d)):
        return False
    nis = nis if nis is not None and math.isfinite(nis) else 0.0
    try:
        m = float(d @ np.linalg.solve(P, d))
    except np.linalg.LinAlgError:
        m = float(d @ np.linalg.pinv(P) @ d)
    return m <= STEP_BOUND * (nis + dof)


def gate_rows(names, dims, y, S, gates, distances=None):
    """(accepted names, rejected names, row indices kept) after per-sensor gating;
    ``distances`` (a list) receives (name, y_s^T S_s^-1 y_s) of every gated reading."""
    accepted, rejected, rows = [], [], []
    k = 0
    for n, d in zip(names, dims):
        sl = slice(k, k + d)
        k += d
        if gates and n in gates and gates[n] is not None:
            if d == 1:
                s, yv = float(S[sl.start, sl.start]), float(y[sl.start])
                d2 = yv * yv / s if s != 0.0 else np.inf  # yv * yv: inf on overflow (** 2 raises)
            elif d == 2:  # y^T S^-1 y with the adjugate of the 2 x 2 block (no LAPACK call)
                d2 = _d2_2x2(S, sl.start, y)
            else:
                Sn = S[sl, sl]
                try:
                    d2 = float(y[sl] @ np.linalg.solve(Sn, y[sl]))
                except np.linalg.LinAlgError:
                    d2 = np.inf
            if distances is not None:
                distances.append((n, d2))
            if not d2 <= gates[n]:
                rejected.append(n)
                continue
        accepted.append(n)
        rows.extend(range(sl.start, sl.stop))
    return accepted, rejected, np.array(rows, dtype=np.intp)


def _d2_2x2(S, k: int, y) -> float:
    """y_s^T S_s^-1 y_s of the 2 x 2 block S[k:k+2, k:k+2] (an accelerometer's two axes, every
    step of the observers) on floats: (a11 y0^2 - (a01 + a10) y0 y1 + a00 y1^2) / det, equal to
    numpy.linalg.solve's to rounding; inf when the block is singular, as there."""
    (a00, a01), (a10, a11) = S[k : k + 2, k : k + 2].tolist()
    y0, y1 = y[k : k + 2].tolist()
    det = a00 * a11 - a01 * a10
    if det == 0.0 or not math.isfinite(det):
        return np.inf
    return (a11 * y0 * y0 - (a01 + a10) * y0 * y1 + a00 * y1 * y1) / det


def gate(names, dims, y, S, gates, distances=None):
    """gate_rows, with rows None when every reading is accepted (no selection needed)."""
    if not gates or not any(n in gates and gates[n] is not None for n in names):
        return list(names), [], None
    accepted, rejected, rows = gate_rows(names, dims, y, S, gates, distances)
    if not rejected:
        rows = None
    return accepted, rejected, rows


def innovation_stats(y, S):
    """(NIS, normalised innovation L^-1 y with S = L L^T, log det S)."""
    if S.shape == (1, 1):
        s = float(S[0, 0])
        if s > 0.0:  # Cholesky of a 1x1 matrix: L = sqrt(s)
            e = y / math.sqrt(s)
            return float(e[0] * e[0]), e, math.log(s)
        return float("nan"), np.full_like(y, np.nan), float("nan")
    if S.shape[0] <= 4:  # the observers' 2-4 channels (a gyroscope and an accelerometer): on floats
        L = cholesky_floats(S.tolist())
        if L is None:
            return float("nan"), np.full_like(y, np.nan), float("nan")
        e = []
        for Li, yi in zip(L, y.tolist()):  # forward substitution L e = y
            e.append((yi - sum(u * v for u, v in zip(Li, e))) / Li[len(e)])
        return float(sum(v * v for v in e)), np.array(e, dtype=float), 2.0 * sum(math.log(Li[k]) for k, Li in enumerate(L))
    try:
        L = np.linalg.cholesky(S)
        e = np.linalg.solve(L, y)
        return float(e @ e), e, float(2.0 * np.sum(np.log(np.diagonal(L))))
    except np.linalg.LinAlgError:
        return float("nan"), np.full_like(y, np.nan), float("nan")


def update_result(accepted, rejected, y, S) -> UpdateResult:
    """The UpdateResult of fused readings with innovation y and its covariance S."""
    nis, e, logdet = innovation_stats(y, S)
    return UpdateResult(accepted, rejected, nis, int(y.shape[0]), y, e, logdet)


def ekf_update(x, P, names, dims, y, H, R, gates):
    """Gated EKF update. Returns (dx, P+, UpdateResult)."""
    PHt = P @ H.T
    S = H @ PHt + R
    dist = []
    accepted, rejected, rows = gate(names, dims, y, S, gates, dist)
    if rows is not None:
        if rows.size == 0:
            return np.zeros_like(x), P, UpdateResult([], rejected, distances=dist)
        y, H, R = y[rows], H[rows], R[np.ix_(rows, rows)]
        S = S[np.ix_(rows, rows)]
        PHt = PHt[:, rows]
    if S.shape[0] == 1:
        K = PHt / S[0, 0]
    else:
        K = kalman_gain(P, H, S)
    dx = K @ y
    P = joseph_update(P, K, H, R)
    res = update_result(accepted, rejected, y, S)
    res.distances = dist
    return dx, P, res


def reading_noise(R, measurements, dims):
    """R with each reading's block scaled by its ``variance_factor`` (several readings
    combined into one, :mod:`mbde_core.estimators.stage.multirate`); R itself (the same
    read-only array) when every factor is 1."""
    f = [m.variance_factor for m in measurements]
    if all(v == 1.0 for v in f):
        return R
    s = np.repeat(np.sqrt(np.asarray(f, float)), dims)
    return R * np.outer(s, s)


def cholesky(P: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of a symmetric matrix (its lower triangle is read), as
    numpy.linalg.cholesky (LinAlgError unless positive definite); small ones on floats."""
    if P.shape[0] > 4:
        return np.linalg.cholesky(P)
    L = cholesky_floats(P.tolist())
    if L is None:
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return np.array(L)


def cholesky_floats(a):
    """Lower Cholesky factor (list of rows, zeros above the diagonal) of the symmetric
    matrix ``a`` (list of rows, its lower triangle read), None unless positive definite
    (NaN included): L_jj = sqrt(a_jj - sum_k<j L_jk^2), L_ij = (a_ij - sum_k<j L_ik L_jk) / L_jj."""
    n = len(a)
    L = [[0.0] * n for _ in range(n)]
    for j in range(n):
        Lj = L[j]
        s = a[j][j] - sum(v * v for v in Lj[:j])
        if not s > 0.0:  # also NaN
            return None
        d = math.sqrt(s)
        Lj[j] = d
        for i in range(j + 1, n):
            Li = L[i]
            Li[j] = (a[i][j] - sum(u * v for u, v in zip(Li[:j], Lj[:j]))) / d
    return L


def joseph_update(P, K, H, R):
    """Joseph-form covariance update (I - K H) P (I - K H)^T + K R K^T (stays symmetric PSD)."""
    I_KH = np.eye(P.shape[0]) - K @ H
    P = I_KH @ P @ I_KH.T + K @ R @ K.T
    return 0.5 * (P + P.T)


def kalman_gain(P, H, S):
    """K = P H^T S^-1 via a solve (S symmetric positive definite)."""
    return solve(S, H @ P).T if S.shape[0] > 0 else np.zeros((P.shape[0], 0))
