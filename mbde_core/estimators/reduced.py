"""The multibody model seen by independent-coordinate observers: x = [z, zd] (paper 003 sec. 3.1).

Maps the filter state to the full motion and back, and linearises the sensors:

- q(z) by the position problem (started from the previous q: keeps the branch),
  qd = R zd, qdd = R zdd + R'zd with zdd = f(z, zd, t) (R-matrix dynamics, eq. 3);
- the measurement Jacobian H = dh/dx by the chain rule (paper 003 sec. 3.1.2):
  dq/dz = R, dqd/dzd = R, and dqd/dz_k = d(R zd)/dz_k whose dependent part solves
  Phi_q,d (dqd/dz_k)_d = -D(R_k, qd), where D(u, v) = u^T (d^2 Phi / dq^2) v is the
  symmetric bilinear form with D(qd, qd) = (Phi_q)' qd (obtained by polarisation:
  D(u, v) = [D(u+v, u+v) - D(u-v, u-v)] / 4);
- sensors that read accelerations (accelerometers) also depend on x through
  qdd(x) = R f(x) + R'zd; that part, dqdd/dx, is taken by central differences of the
  dynamics (documented numerical scheme; the other terms are analytic).
- the continuous transition Jacobian A = d[zd, zdd]/d[z, zd] either simplified to
  [[0, I], [0, 0]] (paper 003 eq. 13: the observers' default) or complete, with
  df/dx by central differences of the dynamics (``full``).
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.linalg import solve


class ReducedModel:
    """x = [z, zd] <-> (q, qd, qdd) for one mechanism and its sensors."""

    def __init__(self, mech, sensors):
        self.mech = mech
        self.sensors = sensors
        self.g = mech.dof
        self.iz = mech.independent
        self.dep = mech.dependent

    # -- assembly ------------------------------------------------------------------------------
    def assemble(self, x: np.ndarray, q_guess: np.ndarray):
        """(q, qd, ok) for x (2g,) or (N, 2g) with guesses q_guess (n,) or (N, n)."""
        g = self.g
        q, ok = kinematics.solve_position(self.mech, x[..., :g], q_guess)
        qd = kinematics.velocity(self.mech, q, x[..., g:])
        return q, qd, ok

    def accelerations(self, t, q, qd, extra_Q=None):
        """(zdd, qdd) from the dynamics, single or batched."""
        return dynamics.forward(self.mech, t, q, qd, extra_Q=extra_Q)

    # -- measurement model ---------------------------------------------------------------------
    def predict_measurements(self, names, q, qd, qdd):
        """Stacked h of the named sensors (single state)."""
        return np.concatenate([self.sensors[n].h(q, qd, qdd) for n in names])

    def residual(self, names, measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        out, k = [], 0
        for n in names:
            s = self.sensors[n]
            out.append(s.residual(measured[k : k + s.dim], predicted[k : k + s.dim]))
            k += s.dim
        return np.concatenate(out)

    def covariance(self, names, overrides: dict | None = None) -> np.ndarray:
        """Block-diagonal measurement covariance; overrides: name -> (d, d) or variance."""
        blocks = []
        for n in names:
            if overrides and n in overrides:
                c = np.atleast_1d(np.asarray(overrides[n], dtype=float))
                blocks.append(np.diag(c) if c.ndim == 1 else c)
            else:
                blocks.append(self.sensors[n].covariance())
        return _block_diag(blocks)

    def bilinear(self, q, u, v):
        """D(u, v) = u^T (d^2 Phi/dq^2) v by polarisation of (Phi_q)'qd (single or batched)."""
        a = self.mech.phi_q_dot_qd(q, u + v)
        b = self.mech.phi_q_dot_qd(q, u - v)
        return 0.25 * (a - b)

    def dqd_dz(self, q, qd, R, phi_q):
        """d(R zd)/dz (n, g) at fixed zd (single state)."""
        n, g = self.mech.n, self.g
        out = np.zeros((n, g))
        Jd = phi_q[:, self.dep]
        rhs = np.stack([-self.bilinear(q, R[:, k], qd) for k in range(g)], axis=1)  # (m, g)
        out[self.dep, :] = np.linalg.solve(Jd, rhs)
        return out

    def qdd_of_x(self, t, x, q_guess, extra_Q=None):
        q, qd, ok = self.assemble(x, q_guess)
        return self.accelerations(t, q, qd, extra_Q)[1]

    def measurement_jacobian(self, names, t, q, qd, qdd, extra_Q=None, eps: float = 1e-6):
        """H = dh/dx (d, 2g) of the stacked named sensors at a consistent state (single)."""
        mech, g = self.mech, self.g
        J = mech.phi_q(q)
        R = kinematics.r_matrix(mech, q, phi_q=J)
        dqd_dz = self.dqd_dz(q, qd, R, J)
        uses_qdd = any(self.sensors[n].uses_qdd for n in names)
        dqdd = None
        if uses_qdd:
            x = np.concatenate([q[self.iz], qd[self.iz]])
            dqdd = np.zeros((mech.n, 2 * g))
            for k in range(2 * g):
                step = eps * max(1.0, abs(x[k]))
                xp, xm = x.copy(), x.copy()
                xp[k] += step
                xm[k] -= step
                dqdd[:, k] = (self.qdd_of_x(t, xp, q, extra_Q) - self.qdd_of_x(t, xm, q, extra_Q)) / (2 * step)
        rows = []
        for n in names:
            s = self.sensors[n]
            Hq, Hqd, Hqdd = s.jacobians(q, qd, qdd)
            Hz = Hq @ R + Hqd @ dqd_dz
            Hzd = Hqd @ R
            H = np.concatenate([Hz, Hzd], axis=1)
            if s.uses_qdd:
                H = H + Hqdd @ dqdd
            rows.append(H)
        return np.concatenate(rows, axis=0)

    # -- transition ------------------------------------------------------------------------------
    def transition_jacobian(self, t, x, q, mode: str = "simple", extra_Q=None, eps: float = 1e-6):
        """Continuous-time A = d[zd, f]/d[z, zd] (2g, 2g)."""
        g = self.g
        A = np.zeros((2 * g, 2 * g))
        A[:g, g:] = np.eye(g)
        if mode == "simple":
            return A
        for k in range(2 * g):
            step = eps * max(1.0, abs(x[k]))
            xp, xm = x.copy(), x.copy()
            xp[k] += step
            xm[k] -= step
            qp, qdp, _ = self.assemble(xp, q)
            qm, qdm, _ = self.assemble(xm, q)
            fp = self.accelerations(t, qp, qdp, extra_Q)[0]
            fm = self.accelerations(t, qm, qdm, extra_Q)[0]
            A[g:, k] = (fp - fm) / (2 * step)
        return A

    def input_gain(self, q, columns) -> np.ndarray:
        """dzdd/du (g, k) for generalized forces u on coordinates ``columns``: Mbar^-1 R^T E."""
        mech = self.mech
        R = kinematics.r_matrix(mech, q)
        Mbar = R.T @ mech.M @ R
        E = np.zeros((mech.n, len(columns)))
        E[list(columns), np.arange(len(columns))] = 1.0
        return np.linalg.solve(Mbar, R.T @ E)


def _block_diag(blocks):
    size = sum(b.shape[0] for b in blocks)
    out = np.zeros((size, size))
    k = 0
    for b in blocks:
        d = b.shape[0]
        out[k : k + d, k : k + d] = b
        k += d
    return out


def joseph_update(P, K, H, R):
    """Joseph-form covariance update (I - K H) P (I - K H)^T + K R K^T (stays symmetric PSD)."""
    I_KH = np.eye(P.shape[0]) - K @ H
    P = I_KH @ P @ I_KH.T + K @ R @ K.T
    return 0.5 * (P + P.T)


def kalman_gain(P, H, S):
    """K = P H^T S^-1 via a solve (S symmetric positive definite)."""
    return solve(S, H @ P).T if S.shape[0] > 0 else np.zeros((P.shape[0], 0))
