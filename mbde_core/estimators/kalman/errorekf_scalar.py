"""The errorEKF's update for one scalar reading, on Python floats (its hot path).

:meth:`ErrorEKF.update <mbde_core.estimators.kalman.errorekf.ErrorEKF.update>` with one reading
of a one-channel sensor that does not read accelerations (a gyroscope, an encoder) and
the plain error state dx = [dz, dzd] (n_x = 2g): the same formulas as the generic path
(:meth:`ReducedModel.linearize`, :func:`kalman.ekf_update`, the exact correction through
:meth:`ReducedModel.solve_full`), the matrices being at most 2g x 2g and one row, written
on floats instead of numpy calls (whose fixed cost dominates at this size). Results agree
with the generic path to rounding (numpy's dot products may sum in another order).

Measurement row (paper 003 sec. 3.1.2), at the simulation state (a FullState with the
kernels' context)::

    H = [h_q R + h_qd (dqd/dz),  h_qd R],
    (dqd/dz)_k: zero on z, Phi_q,d (dqd/dz)_k,d = -D(R_k, qd),
    D(u, v) = [(Phi_q)'(u + v) (u + v) - (Phi_q)'(u - v) (u - v)] / 4.

Update with s = H P H^T + r, K = P H^T / s, dx = K y, Joseph form
P+ = (I - K H) P (I - K H)^T + K r K^T (symmetrised); the gate rejects the reading when
y^2 / s exceeds the threshold. The correction solves the position problem at z + dz from
q + R dz (:func:`mbde_core.engine.fastpath.s_position`) and evaluates qd = R (zd + dzd)
and the dynamics there (the generated ``post`` kernel).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine.fastpath import SCALAR_ERRORS, s_position
from mbde_core.engine.integrators import MBState
from mbde_core.engine.rk4_single import MAX_ITER, rk4_step
from mbde_core.estimators.kalman import errorekf_numba
from mbde_core.estimators.base import UpdateResult, accepted_result
from mbde_core.estimators.kalman.reduced import FullState


def applies(est, measurements) -> bool:
    """Whether :func:`update` handles these readings."""
    if len(measurements) != 1 or est.dim != 2 * est.g or est.linear:
        return False
    s = est.sensors[measurements[0].sensor]
    return s.dim == 1 and not s.uses_qdd and getattr(s, "linearize", None) is not None


def measurement_row(est, st: FullState, sensor):
    """(h, H row (2g floats)) of a one-channel sensor at the FullState ``st``."""
    K = est._kernels
    S = K.scalar
    xs, tr, J = st.ctx
    g = est.g
    qd = st.qd.tolist()
    lin = getattr(sensor, "linearize_floats", None)
    if lin is not None:
        h, hq, hqd = lin(xs, qd)
        h = np.array([h])
    else:
        h, Hq, Hqd, _ = sensor.linearize(st.q, st.qd, None)
        hq, hqd = Hq[0].tolist(), Hqd[0].tolist()
    if est._nb is not None:
        return h, errorekf_numba.row(est._nb, st, qd, hq, hqd)
    Rl = st.R.tolist()
    dep = K.dep
    row_z, row_zd = [], []
    for k in range(g):
        u = [r[k] for r in Rl]
        a = S.jdot(xs, [x + y for x, y in zip(u, qd)], tr)
        b = S.jdot(xs, [x - y for x, y in zip(u, qd)], tr)
        col = S.dsolve(J, tr, [-(0.25 * (x - y)) for x, y in zip(a, b)])
        dcol = [0.0] * len(u)
        for c, v in zip(dep, col):
            dcol[c] = v
        row_z.append(sum(x * y for x, y in zip(hq, u)) + sum(x * y for x, y in zip(hqd, dcol)))
        row_zd.append(sum(x * y for x, y in zip(hqd, u)))
    return h, row_z + row_zd


def update(est, measurements, gates):
    """The update (see the module doc); the estimator's P, state and FullState change."""
    m = measurements[0]
    name = m.sensor
    sensor = est.sensors[name]
    st = est._full()
    if st.ctx is None:
        return None
    if est._nb is not None and getattr(sensor, "linearize_floats", None) is not None:
        res, dx = errorekf_numba.update(est, est._nb, st, name, m.value, gates, m.variance_factor)
        if dx is not None:  # non-finite on the compiled path: the Python correction decides
            try:
                correct(est, st, dx, compiled=False)
            except SCALAR_ERRORS:
                est._correct(np.array(dx))
        return res
    h, H = measurement_row(est, st, sensor)
    y = est.model.residual([name], np.asarray(m.value, float), h)
    r = float(est.model.noise_covariance([name], est._sigma)[0, 0]) * m.variance_factor
    yv = float(y[0])
    P = est.P.tolist()
    n = len(H)
    if n == 2:
        (p00, p01), (p10, p11) = P
        h0, h1 = H
        PHt = [p00 * h0 + p01 * h1, p10 * h0 + p11 * h1]
        s = h0 * PHt[0] + h1 * PHt[1] + r
    else:
        PHt = [sum(p * x for p, x in zip(Pi, H)) for Pi in P]
        s = sum(x * p for x, p in zip(H, PHt)) + r
    dist = []
    if gates and gates.get(name) is not None:
        d2 = yv**2 / s if s != 0.0 else np.inf
        dist.append((name, d2))
        if not d2 <= gates[name]:
            return UpdateResult([], [name], distances=dist)
    Kg = [p / s for p in PHt]
    dx = [k * yv for k in Kg]
    est.P = np.array(joseph2(P, Kg, H, r) if n == 2 else joseph(P, Kg, H, r))
    res = accepted_result(name, y, s, dist)
    try:
        correct(est, st, dx)
    except SCALAR_ERRORS:  # singular or non-finite: the generic correction decides
        est._correct(np.array(dx))
    return res


def joseph(P, Kg, H, r):
    """(I - K H) P (I - K H)^T + K r K^T, symmetrised (lists; as algebra.joseph_update)."""
    n = len(H)
    A = [[(1.0 if i == j else 0.0) - Kg[i] * H[j] for j in range(n)] for i in range(n)]  # I - K H
    AP = [[sum(A[i][k] * P[k][j] for k in range(n)) for j in range(n)] for i in range(n)]
    C = [[sum(AP[i][k] * A[j][k] for k in range(n)) + Kg[i] * r * Kg[j] for j in range(n)] for i in range(n)]
    return [[0.5 * (C[i][j] + C[j][i]) for j in range(n)] for i in range(n)]


def joseph2(P, Kg, H, r):
    """:func:`joseph` of a 2 x 2 covariance, written out."""
    (p00, p01), (p10, p11) = P
    k0, k1 = Kg
    h0, h1 = H
    a00, a01, a10, a11 = 1.0 - k0 * h0, 0.0 - k0 * h1, 0.0 - k1 * h0, 1.0 - k1 * h1
    b00, b01 = a00 * p00 + a01 * p10, a00 * p01 + a01 * p11
    b10, b11 = a10 * p00 + a11 * p10, a10 * p01 + a11 * p11
    kr0, kr1 = k0 * r, k1 * r
    c00 = b00 * a00 + b01 * a01 + kr0 * k0
    c01 = b00 * a10 + b01 * a11 + kr0 * k1
    c10 = b10 * a00 + b11 * a01 + kr1 * k0
    c11 = b10 * a10 + b11 * a11 + kr1 * k1
    return [[0.5 * (c00 + c00), 0.5 * (c01 + c10)], [0.5 * (c10 + c01), 0.5 * (c11 + c11)]]


def propagate2(P, F, Q):
    """F P F^T + Q, symmetrised, of 2 x 2 lists (the errorEKF's covariance prediction)."""
    (p00, p01), (p10, p11) = P
    (f00, f01), (f10, f11) = F
    (q00, q01), (q10, q11) = Q
    a00, a01 = f00 * p00 + f01 * p10, f00 * p01 + f01 * p11
    a10, a11 = f10 * p00 + f11 * p10, f10 * p01 + f11 * p11
    c00 = a00 * f00 + a01 * f01 + q00
    c01 = a00 * f10 + a01 * f11 + q01
    c10 = a10 * f00 + a11 * f01 + q10
    c11 = a10 * f10 + a11 * f11 + q11
    return [[0.5 * (c00 + c00), 0.5 * (c01 + c10)], [0.5 * (c10 + c01), 0.5 * (c11 + c11)]]


def correct(est, st: FullState, dx, compiled: bool = True) -> None:
    """The exact correction (ErrorEKF._correct) from the FullState at the simulation state
    (on the compiled correct_one when the estimator has it and ``compiled``)."""
    K = est._kernels
    g = est.g
    iz = K.iz
    xs = st.ctx[0]
    qd = st.qd.tolist()
    dz = dx[:g]
    z = [xs[c] + d for c, d in zip(iz, dz)]
    zd = [qd[c] + d for c, d in zip(iz, dx[g:])]
    if g == 1:  # R dz of one column: one product per row (as numpy's R @ dz)
        d = dz[0]
        guess = [x + row[0] * d for x, row in zip(xs, st.R.tolist())]
    else:
        guess = [x + sum(a * b for a, b in zip(row, dz)) for x, row in zip(xs, st.R.tolist())]
    if not (math.isfinite(sum(z)) and math.isfinite(sum(zd)) and math.isfinite(sum(guess))):
        est.failures += 1
        return
    if compiled and est._nb is not None:
        new = errorekf_numba.correct(est, est._nb, z, zd, guess)
        if new is False:
            est.failures += 1
            return
        if new is not None:
            est.state = MBState(new.q, new.qd, new.qdd)
            est.full = new
            return
    mech = est.mech
    q, ok, tr, J = s_position(mech, K, z, guess, MAX_ITER)
    if not ok:
        est.failures += 1
        return
    qd1, zdd, qdd, R, rd = K.scalar.post(J, tr, q, zd, K.time_values(est.t), None, True)
    new = FullState(np.array(q), np.array(qd1), np.array(qdd), np.array(zdd), np.array(R), np.array(rd), (q, tr, J))
    est.state = MBState(new.q, new.qd, new.qdd)
    est.full = new


def predict(est, dt, extra) -> bool:
    """The errorEKF's prediction of its simulation: the rk4 step on the scalar kernels (:func:`rk4_single.rk4_step`,
    the same operations as ``RK4.step``), started from the kernel values of the last
    FullState at the simulation state if there is one; the FullState at the result
    (R and the kernel context: what the update needs) comes with it. False (nothing
    changed) when a kernel meets an arithmetic exception: the generic step decides."""
    state, st = est.state, est.full
    if st is not None and st.ctx is not None and st.q is state.q:
        xs, tr, J = st.ctx
        ctx = (tr, J, None)
    else:
        xs, ctx = state.q.tolist(), None
    try:
        q1, qd1, qdd1, ok, (tr1, J1, R1, zdd1, rd1) = rk4_step(
            est.mech, est._kernels, est.t, xs, state.qd.tolist(),
            None if state.qdd is None else state.qdd.tolist(), dt, None if extra is None else extra.tolist(), ctx)
    except SCALAR_ERRORS:
        return False
    est.advance_clock(dt)
    if ok and math.isfinite(sum(q1)):
        q = np.array(q1)
        est.state = MBState(q, np.array(qd1), np.array(qdd1))
        est.full = FullState(q, est.state.qd, est.state.qdd, np.array(zdd1), np.array(R1), np.array(rd1),
                              (q1, tr1, J1))
    else:
        est.failures += 1
        est.state = MBState(state.q, state.qd)  # its qdd belongs to the previous time
        est.full = None
    return True


def fq_lists(est, F, Qd):
    """(F, Qd) as lists (cached with the arrays: the same objects every step when constant)."""
    c = est._FQ_lists_cache
    if c is None or c[0] is not F or c[1] is not Qd:
        c = est._FQ_lists_cache = (F, Qd, F.tolist(), Qd.tolist())
    return c[2], c[3]
