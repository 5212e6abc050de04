"""Position, velocity and acceleration problems, the R matrix and R'z'.

With z = q[independent] and the dependent coordinates q_d (García de Jalón & Bayo 1994,
ch. 4; paper 003 eq. 2; paper 000 eq. 12):

- position: Phi(q_d; z) = 0, Newton-Raphson  Phi_q,d dq_d = -Phi;
- velocity: Phi_q qd = 0  ->  Phi_q,d qd_d = -Phi_q,z zd, i.e. qd = R zd with
  R[z] = I and R[d] = -Phi_q,d^{-1} Phi_q,z;
- acceleration: Phi_q qdd = -(Phi_q)' qd  ->  qdd = R zdd + R'zd with
  (R'zd)[z] = 0 and (R'zd)[d] = -Phi_q,d^{-1} (Phi_q)' qd.

Every function accepts a single state (q: (n,)) or a batch (q: (N, n)); results keep
that leading axis.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine.linalg import solve


def _phi_tol(mech) -> float:
    return 1e-14 * max(1.0, mech.length_scale**2)


def solve_position(mech, z, q_guess, *, max_iter: int = 30, independent=None):
    """Solve Phi(q) = 0 for the dependent coordinates with z fixed.

    z: (g,) or (N, g); q_guess: (n,) or (N, n) (its z entries are overwritten).
    Returns (q, ok) with ok a bool (or (N,) bool array): converged to |Phi| <= 1e-12 L^2.
    Steps are limited to one mechanism length so far-away guesses do not blow up.
    """
    iz = mech.independent if independent is None else np.asarray(independent)
    dep = mech.dependent if independent is None else np.setdiff1d(np.arange(mech.n), iz)
    q = np.array(q_guess, dtype=float, copy=True)
    single = q.ndim == 1
    if single:
        q = q[None]
    q[:, iz] = np.asarray(z, dtype=float).reshape(q.shape[0], len(iz))
    tol = _phi_tol(mech)
    max_step = mech.length_scale
    with np.errstate(all="ignore"):
        for _ in range(max_iter):
            phi = mech.phi(q)
            err = np.max(np.abs(phi), axis=1)
            done = ~(err > tol)  # NaN counts as done (failed): it never converges
            if done.all():
                break
            J = mech.phi_q(q)[:, :, dep]
            try:
                dq = solve(J, -phi)
            except np.linalg.LinAlgError:
                dq = _lstsq_batch(J, -phi)
            dq[done] = 0.0
            norm = np.max(np.abs(dq), axis=1)
            big = norm > max_step
            if big.any():
                dq[big] *= (max_step / norm[big])[:, None]
            q[:, dep] += dq
    phi = mech.phi(q)
    ok = np.all(np.abs(phi) <= 1e3 * tol, axis=1) & np.all(np.isfinite(q), axis=1)
    return (q[0], bool(ok[0])) if single else (q, ok)


def _lstsq_batch(J, rhs):
    out = np.zeros((J.shape[0], J.shape[2]))
    for k in range(J.shape[0]):
        out[k] = np.linalg.lstsq(J[k], rhs[k], rcond=None)[0]
    return out


def r_matrix(mech, q, phi_q=None):
    """R: (n, g) or (N, n, g) with qd = R zd (columns span the null space of Phi_q)."""
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    J = mech.phi_q(q[None] if single else q) if phi_q is None else (phi_q[None] if single else phi_q)
    N = J.shape[0]
    R = np.zeros((N, mech.n, mech.dof))
    R[:, mech.independent, np.arange(mech.dof)] = 1.0
    R[:, mech.dependent, :] = -solve(J[:, :, mech.dependent], J[:, :, mech.independent])
    return R[0] if single else R


def velocity(mech, q, zd, phi_q=None):
    """qd = R zd: (n,) or (N, n) from zd (g,) or (N, g)."""
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    qb = q[None] if single else q
    zd = np.asarray(zd, dtype=float).reshape(qb.shape[0], mech.dof)
    J = mech.phi_q(qb) if phi_q is None else (phi_q[None] if single else phi_q)
    qd = np.zeros_like(qb)
    qd[:, mech.independent] = zd
    rhs = -np.einsum("nij,nj->ni", J[:, :, mech.independent], zd)
    qd[:, mech.dependent] = solve(J[:, :, mech.dependent], rhs)
    return qd[0] if single else qd


def rdot_zd(mech, q, qd, phi_q=None):
    """R'zd: (n,) or (N, n), the acceleration obtained with zdd = 0."""
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    qb = q[None] if single else q
    qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
    J = mech.phi_q(qb) if phi_q is None else (phi_q[None] if single else phi_q)
    out = np.zeros_like(qb)
    out[:, mech.dependent] = solve(J[:, :, mech.dependent], -mech.phi_q_dot_qd(qb, qdb))
    return out[0] if single else out


def acceleration(mech, q, qd, zdd, phi_q=None):
    """qdd = R zdd + R'zd: (n,) or (N, n) from zdd (g,) or (N, g)."""
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    qb = q[None] if single else q
    qdb = np.asarray(qd, dtype=float).reshape(qb.shape)
    zdd = np.asarray(zdd, dtype=float).reshape(qb.shape[0], mech.dof)
    J = mech.phi_q(qb) if phi_q is None else (phi_q[None] if single else phi_q)
    out = np.zeros_like(qb)
    out[:, mech.independent] = zdd
    rhs = -mech.phi_q_dot_qd(qb, qdb) - np.einsum("nij,nj->ni", J[:, :, mech.independent], zdd)
    out[:, mech.dependent] = solve(J[:, :, mech.dependent], rhs)
    return out[0] if single else out


def full_state(mech, q_guess, z, zd, zdd=None):
    """Assemble (q, qd, qdd) from independent (z, zd, zdd) with a nearby guess for q.

    Returns (q, qd, qdd, ok); qdd is None if zdd is None.
    """
    q, ok = solve_position(mech, z, q_guess)
    J = mech.phi_q(q)
    qd = velocity(mech, q, zd, phi_q=J)
    qdd = None if zdd is None else acceleration(mech, q, qd, zdd, phi_q=J)
    return q, qd, qdd, ok
