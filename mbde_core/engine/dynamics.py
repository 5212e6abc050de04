"""Forward dynamics in independent coordinates (R-matrix method) and inverse dynamics.

Forward dynamics (paper 000 eq. 12, paper 003 eq. 3):

    zdd = (R^T M R)^{-1} R^T (Q - M R' zd),   qdd = R zdd + R' zd

obtained by premultiplying M qdd + Phi_q^T lambda = Q by R^T (Phi_q R = 0).
A second, independent formulation solves the Lagrange-multiplier system
[[M, Phi_q^T], [Phi_q, 0]] [qdd; lambda] = [Q; -(Phi_q)' qd] (paper 003 eq. 1); both
agree to rounding and the tests check it.

With time-dependent driving constraints (:mod:`mbde_core.model.drivers`) the
acceleration has the particular part s_a(t) (Phi_q,d s_a[d] = c''(t)):
zdd = (R^T M R)^{-1} R^T (Q - M (R' zd + s_a)), qdd = R zdd + R' zd + s_a.

Inverse dynamics: the generalized forces tau on driven coordinates d (a valid set of
independent coordinates) that produce a given motion satisfy
R^T (M qdd - Q - E_d tau) = 0, i.e. (E_d^T R)^T tau = R^T (M qdd - Q).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.engine import fastpath, kinematics
from mbde_core.engine.linalg import solve, solve_one


@dataclass
class DynamicsEval:
    """Result of one forward-dynamics evaluation (batched or single).

    zdd: (N, g); qdd: (N, n); R: (N, n, g); rdzd: (N, n) = R'zd; phi_q: (N, m, n);
    Mbar: (N, g, g) = R^T M R; Qbar: (N, g) = R^T (Q - M R'zd); Q: (N, n).
    """

    zdd: np.ndarray
    qdd: np.ndarray
    R: np.ndarray
    rdzd: np.ndarray
    phi_q: np.ndarray
    Mbar: np.ndarray
    Qbar: np.ndarray
    Q: np.ndarray


def evaluate(mech, t: float, q: np.ndarray, qd: np.ndarray, extra_Q=None, extra_zdd=None) -> DynamicsEval:
    """R-matrix forward dynamics for a batch q, qd (N, n) (always batched).

    extra_Q: optional (N, n) additional generalized forces; extra_zdd: optional (N, g)
    acceleration added to zdd (the acceleration noise v of paper 000 eq. 11).
    """
    if getattr(mech, "drivers", None):
        return _evaluate_driven(mech, t, q, qd, extra_Q, extra_zdd)
    return _evaluate_static(mech, t, q, qd, extra_Q, extra_zdd)


def _evaluate_static(mech, t, q, qd, extra_Q=None, extra_zdd=None) -> DynamicsEval:
    """evaluate() without the drivers' terms."""
    K = fastpath.kernels(mech)
    if K is not None:
        return _evaluate_fast(mech, K, t, np.asarray(q, dtype=float), np.asarray(qd, dtype=float), extra_Q, extra_zdd)
    J = mech.phi_q(q)
    R = kinematics.r_matrix(mech, q, phi_q=J)
    rdzd = kinematics.rdot_zd(mech, q, qd, phi_q=J, drivers=False)
    Q = mech.forces(t, q, qd)
    if extra_Q is not None:
        Q = Q + extra_Q
    MR = np.einsum("ij,njk->nik", mech.M, R)
    Mbar = np.einsum("nji,njk->nik", R, MR)
    Qbar = np.einsum("nji,nj->ni", R, Q - rdzd @ mech.M.T)
    zdd = solve(Mbar, Qbar)
    if extra_zdd is not None:
        zdd = zdd + extra_zdd
    qdd = np.einsum("nij,nj->ni", R, zdd) + rdzd
    return DynamicsEval(zdd, qdd, R, rdzd, J, Mbar, Qbar, Q)


def _evaluate_driven(mech, t, q, qd, extra_Q, extra_zdd) -> DynamicsEval:
    """evaluate() with drivers: the particular acceleration s_a enters as the force -M s_a."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    qd = np.asarray(qd, dtype=float).reshape(q.shape)
    sa = kinematics.particular(mech, q, mech.drivers.rates(t)[1])
    MsT = sa @ mech.M.T
    eQ = -MsT if extra_Q is None else np.asarray(extra_Q, dtype=float).reshape(q.shape) - MsT
    ev = _evaluate_static(mech, t, q, qd, eQ, extra_zdd)
    ev.qdd = ev.qdd + sa
    ev.rdzd = ev.rdzd + sa
    ev.Q = ev.Q + MsT
    return ev


def _evaluate_small(mech, K, t, q, qd, extra_Q, extra_zdd) -> DynamicsEval:
    """evaluate() state by state on the scalar kernels (small batches)."""
    N, n, g = q.shape[0], mech.n, mech.dof
    S = K.scalar
    fields = []
    for k in range(N):
        x, v = q[k].tolist(), qd[k].tolist()
        tr = S.trig(x)
        eQ = None if extra_Q is None else extra_Q[k].tolist()
        ez = None if extra_zdd is None else extra_zdd[k].tolist()
        Q = fastpath.s_forces(mech, K, t, x, v, eQ)
        fields.append(S.dynamics(S.jac(x, tr), tr, x, v, Q, ez) + (Q, S.jac_values(x, tr)))
    zdd, qdd, R, rd, Mbar, Qbar, Q, jv = (np.array(f, dtype=float) for f in zip(*fields))
    Jd = np.zeros((N, K.m * n))
    Jd[:, K.jac_flat] = jv
    return DynamicsEval(zdd.reshape(N, g), qdd.reshape(N, n), R.reshape(N, n, g), rd.reshape(N, n),
                        Jd.reshape(N, K.m, n), Mbar.reshape(N, g, g), Qbar.reshape(N, g), Q.reshape(N, n))


def _evaluate_fast(mech, K, t, q, qd, extra_Q, extra_zdd) -> DynamicsEval:
    """evaluate() on the generated kernels: batch-last evaluation, dense results."""
    N, n, g = q.shape[0], mech.n, mech.dof
    if 0 < N <= fastpath.SMALL_BATCH:
        try:
            eQ = None if extra_Q is None else np.asarray(extra_Q, dtype=float).reshape(N, n)
            ez = None if extra_zdd is None else np.asarray(extra_zdd, dtype=float).reshape(N, g)
            return _evaluate_small(mech, K, t, q, np.asarray(qd, dtype=float).reshape(N, n), eQ, ez)
        except fastpath.SCALAR_ERRORS:
            pass  # the batched code handles singular and non-finite states
    x, v = fastpath.soa(q, n), fastpath.soa(qd, n)
    eQ = None if extra_Q is None else fastpath.soa(extra_Q, n)
    ez = None if extra_zdd is None else fastpath.soa(extra_zdd, g)
    V = K.vector
    with np.errstate(all="ignore"):
        tr = V.trig(x)
        J = V.jac(x, tr)
        zdd, qdd, R, rd, Mbar, Qbar = fastpath.v_dynamics(mech, K, t, x, v, tr, J, eQ, ez)
        Q = fastpath.v_forces(mech, K, t, x, v, eQ)
        jv = V.jac_values(x, tr)
    st = fastpath.stack
    Rd = np.empty((N, n, g))
    for i, row in enumerate(R):
        for k, val in enumerate(row):
            Rd[:, i, k] = val
    Md = np.empty((N, g, g))
    for i, row in enumerate(Mbar):
        for k, val in enumerate(row):
            Md[:, i, k] = val
    Jd = np.zeros((N, K.m * n))
    for f, val in zip(K.jac_flat, jv):
        Jd[:, f] = val
    return DynamicsEval(st(zdd, N).T, st(qdd, N).T, Rd, st(rd, N).T, Jd.reshape(N, K.m, n), Md, st(Qbar, N).T, st(Q, N).T)


def forward(mech, t: float, q, qd, extra_Q=None):
    """(zdd, qdd) for a single state (n,) or a batch (N, n)."""
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    K = None if getattr(mech, "drivers", None) else fastpath.kernels(mech)
    if K is not None:
        out = _forward_fast(mech, K, t, q, qd, extra_Q)
        if out is not None:
            return out
    qb = q[None] if single else q
    qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
    eq = None if extra_Q is None else np.asarray(extra_Q, dtype=float).reshape(qb.shape)
    ev = evaluate(mech, t, qb, qdb, extra_Q=eq)
    return (ev.zdd[0], ev.qdd[0]) if single else (ev.zdd, ev.qdd)


def _forward_fast(mech, K, t, q, qd, extra_Q):
    """forward() on the generated kernels; None if a single state needs the generic code."""
    qd = np.asarray(qd, dtype=float).reshape(q.shape)
    eQ = None if extra_Q is None else np.asarray(extra_Q, dtype=float).reshape(q.shape)
    if q.ndim == 1 or 0 < q.shape[0] <= fastpath.SMALL_BATCH:
        S = K.scalar
        try:
            out = []
            for x, v, e in zip(q.reshape(-1, mech.n).tolist(), qd.reshape(-1, mech.n).tolist(),
                               [None] * q.size if eQ is None else eQ.reshape(-1, mech.n).tolist()):
                tr = S.trig(x)
                out.append(fastpath.s_dynamics(mech, K, t, x, v, tr, S.jac(x, tr), e)[:2])
        except fastpath.SCALAR_ERRORS:
            if q.ndim == 1:
                return None  # the generic code decides (exactly singular, non-finite)
        else:
            zdd, qdd = (np.array(f, dtype=float) for f in zip(*out))
            return (zdd[0], qdd[0]) if q.ndim == 1 else (zdd, qdd)
    N = q.shape[0]
    x, v = fastpath.soa(q, mech.n), fastpath.soa(qd, mech.n)
    V = K.vector
    with np.errstate(all="ignore"):
        tr = V.trig(x)
        zdd, qdd = fastpath.v_dynamics(mech, K, t, x, v, tr, V.jac(x, tr), None if eQ is None else fastpath.soa(eQ, mech.n))[:2]
    return fastpath.stack(zdd, N).T, fastpath.stack(qdd, N).T


def forward_lagrange(mech, t: float, q, qd):
    """(qdd, lambda) by the Lagrange-multiplier (index-1) formulation, single state."""
    q = np.asarray(q, dtype=float)
    qd = np.asarray(qd, dtype=float)
    J = mech.phi_q(q)
    m, n = J.shape
    A = np.zeros((n + m, n + m))  # [[M, Phi_q^T], [Phi_q, 0]]
    A[:n, :n] = mech.M
    A[:n, n:] = J.T
    A[n:, :n] = J
    b = np.concatenate([mech.forces(t, q, qd), -mech.phi_q_dot_qd(q, qd)])
    if getattr(mech, "drivers", None):
        b[n:] += mech.drivers.rates(t)[1]
    x = solve_one(A, b)  # = numpy.linalg.solve
    return x[: mech.n], x[mech.n :]


def inverse(mech, t: float, q, qd, qdd, driven=None) -> np.ndarray:
    """Generalized forces on the driven coordinates that produce the motion (q, qd, qdd).

    q, qd, qdd: (n,) consistent with the constraints (e.g. from kinematics.full_state).
    driven: coordinate indices (g,), default the mechanism's independent coordinates.
    Returns tau (g,): the force/torque each driver applies (positive along the coordinate).
    """
    q = np.asarray(q, dtype=float)
    J = mech.phi_q(q)
    R = kinematics.r_matrix(mech, q, phi_q=J)
    rhs = R.T @ (mech.M @ np.asarray(qdd, dtype=float) - mech.forces(t, q, qd))
    d = mech.independent if driven is None else np.asarray(driven)
    return solve_one(R[d, :].T, rhs)  # = numpy.linalg.solve


def energy_drift(mech, qs: np.ndarray, qds: np.ndarray) -> float:
    """Relative energy drift of a trajectory: max |E(t) - E(0)| / max_t T(t).

    Normalised by the peak kinetic energy (the energy actually exchanged), because the
    total energy has an arbitrary zero (the potential's reference).
    """
    E = mech.energy(qs, qds)
    scale = max(float(np.max(mech.kinetic_energy(qds))), 1e-300)
    return float(np.max(np.abs(E - E[0])) / scale)
