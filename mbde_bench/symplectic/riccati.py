"""Symplectic covariance propagation for Kalman filtering (paper 002 sec. 6, Theorem 6.1, Algorithm 6.1).

Continuous-time model (Proposition 6.1): x' = A x + G w, z = C x + v with white noises of
intensities Q and R. The Kalman-Bucy covariance solves the Riccati equation

    P' = A P + P A^T - P C^T R^-1 C P + G Q G^T,

which is the projection of the linear Hamiltonian state-adjoint system (eq. 11)

    [x; w]' = S [x; w],     S = [[-A^T, C^T R^-1 C], [G Q G^T, A]]

through P = W X^-1 (eqs. 12-14): if (X, W) solves it with X(0) = I, W(0) = P0, then
W(t) = P(t) X(t). S is Hamiltonian ((J S)^T = J S, Lemma 6.1), so its flow is symplectic.

Theorem 6.1: discretise the state-adjoint system with a symplectic one-step map Psi (the
symplectic Euler scheme of eq. 15, implicit in the q-part v of x and the p-part mu of w,
explicit in y and lambda, for a mechanical state x = (q, p)) and update

    P_{k+1} = (Psi21 + Psi22 P_k) (Psi11 + Psi12 P_k)^-1                        (eq. 16)

then w_k = P_k x_k holds exactly for the discrete state-adjoint trajectory, and Psi is
symplectic (Psi^T J Psi = J) by construction: the covariance inherits the Hamiltonian
structure of the optimal filter. The Euler-discretised Riccati equation
P_{k+1} = P_k + h P'(P_k) is the same fractional update with Psi = I + h S, which is not
symplectic (Psi^T J Psi - J = h^2 S^T J S).

Algorithm 6.1 (symplectic state and covariance updates; no separate prediction and
measurement steps, as the continuous filter): with the reading z_{k+1},

    P_{k+1} = (Psi21 + Psi22 P_k)(Psi11 + Psi12 P_k)^-1,   K = P_{k+1} C^T R^-1
    [q; p]_{k+1} = [q; p]_k + h [(A - K C) [q_{k+1}; p_k] + K z_{k+1}]

(the filter ODE x^' = (A - K C) x^ + K z by symplectic Euler; the implicit part is linear
and solved directly). A reading taken every h seconds with variance R_d corresponds to the
intensity R = R_d h.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg


def state_adjoint_matrix(A, C, GQG, Rinv) -> np.ndarray:
    """S (2d, 2d) of eq. 11 for x (d,): [[-A^T, C^T R^-1 C], [G Q G^T, A]]."""
    A = np.atleast_2d(np.asarray(A, float))
    C = np.atleast_2d(np.asarray(C, float))
    return np.block([[-A.T, C.T @ np.atleast_2d(Rinv) @ C], [np.atleast_2d(GQG), A]])


def mechanical_implicit(n: int) -> np.ndarray:
    """Implicit components of eq. 15 for x = (q, p) in R^2n: v = q-part of x, mu = p-part of w."""
    return np.concatenate([np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool), np.ones(n, bool)])


def symplectic_euler_map(S, h: float, implicit=None) -> np.ndarray:
    """Psi (2d, 2d) of eq. 15: X1 = X0 + h S (D_I X1 + D_E X0), i.e.
    Psi = (I - h S D_I)^-1 (I + h S D_E); implicit: bool mask (default mechanical)."""
    S = np.asarray(S, float)
    N = S.shape[0]
    imp = mechanical_implicit(N // 4) if implicit is None else np.asarray(implicit, bool)
    D_I = np.diag(imp.astype(float))
    return np.linalg.solve(np.eye(N) - h * S @ D_I, np.eye(N) + h * S @ (np.eye(N) - D_I))


def exact_map(S, h: float) -> np.ndarray:
    """Theta(t + h, t) = expm(S h): the exact transition of the state-adjoint system."""
    return scipy.linalg.expm(np.asarray(S, float) * h)


def fractional_update(Psi, P) -> np.ndarray:
    """(Psi21 + Psi22 P)(Psi11 + Psi12 P)^-1 (eq. 16), blocks of size d = len(P)."""
    d = P.shape[0]
    num = Psi[d:, :d] + Psi[d:, d:] @ P
    den = Psi[:d, :d] + Psi[:d, d:] @ P
    return np.linalg.solve(den.T, num.T).T


def symplectic_defect(Psi) -> float:
    """max |Psi^T J Psi - J| with J = [[0, I], [-I, 0]] (0 for a symplectic map)."""
    d = Psi.shape[0] // 2
    J = np.block([[np.zeros((d, d)), np.eye(d)], [-np.eye(d), np.zeros((d, d))]])
    return float(np.max(np.abs(Psi.T @ J @ Psi - J)))


def euler_riccati_step(A, C, GQG, Rinv, h: float, P) -> np.ndarray:
    """P + h (A P + P A^T - P C^T R^-1 C P + G Q G^T): the Euler-discretised Riccati equation."""
    return P + h * (A @ P + P @ A.T - P @ C.T @ Rinv @ C @ P + GQG)


class LinearModel:
    """x' = A x + G w, z = C x + v (intensities Q, R); readings every h s (variance R / h)."""

    def __init__(self, A, C, G, Q, R, h: float):
        self.A = np.atleast_2d(np.asarray(A, float))
        self.C = np.atleast_2d(np.asarray(C, float))
        self.G = np.atleast_2d(np.asarray(G, float))
        self.Q = np.atleast_2d(np.asarray(Q, float))
        self.R = np.atleast_2d(np.asarray(R, float))
        self.h = float(h)
        self.GQG = self.G @ self.Q @ self.G.T
        self.Rinv = np.linalg.inv(self.R)
        self.S = state_adjoint_matrix(self.A, self.C, self.GQG, self.Rinv)
        self.d = self.A.shape[0]

    @property
    def reading_variance(self) -> np.ndarray:
        return self.R / self.h


class SymplecticKalman:
    """Algorithm 6.1 for a mechanical state x = (q, p) (q, p in R^n): see the module docstring."""

    name = "symplectic"

    def __init__(self, model: LinearModel, x0, P0):
        self.m = model
        self.x = np.asarray(x0, float).copy()
        self.P = np.asarray(P0, float).copy()
        self.Psi = symplectic_euler_map(model.S, model.h)
        n = model.d // 2
        A, h = model.A, model.h
        self._n = n

    def step(self, z):
        m, n, h = self.m, self._n, self.m.h
        self.P = fractional_update(self.Psi, self.P)
        K = self.P @ m.C.T @ m.Rinv
        Ae = m.A - K @ m.C
        b = self.x + h * (K @ np.atleast_1d(z))
        q, p = self.x[:n], self.x[n:]
        # q1 = q + h (Aqq q1 + Aqp p) + b_q - q ;  p1 = p + h (Apq q1 + App p) + b_p - p
        q1 = np.linalg.solve(np.eye(n) - h * Ae[:n, :n], b[:n] + h * Ae[:n, n:] @ p)
        p1 = b[n:] + h * (Ae[n:, :n] @ q1 + Ae[n:, n:] @ p)
        self.x = np.concatenate([q1, p1])
        return self.x, self.P


class EulerRiccatiKalman:
    """The continuous filter discretised by explicit Euler (covariance and state)."""

    name = "euler_riccati"

    def __init__(self, model: LinearModel, x0, P0):
        self.m = model
        self.x = np.asarray(x0, float).copy()
        self.P = np.asarray(P0, float).copy()

    def step(self, z):
        m = self.m
        K = self.P @ m.C.T @ m.Rinv
        self.x = self.x + m.h * ((m.A - K @ m.C) @ self.x + K @ np.atleast_1d(z))
        self.P = euler_riccati_step(m.A, m.C, m.GQG, m.Rinv, m.h, self.P)
        return self.x, self.P


def transition(A, h: float, scheme: str) -> np.ndarray:
    """A_k of x_{k+1} = A_k x_k for x' = A x, x = (q, p): ``euler`` I + hA, ``midpoint``
    (I - hA/2)^-1 (I + hA/2), ``symplectic_euler`` (the matrix of paper 002 sec. 4)."""
    A = np.asarray(A, float)
    N = A.shape[0]
    I = np.eye(N)
    if scheme == "euler":
        return I + h * A
    if scheme == "midpoint":
        return np.linalg.solve(I - 0.5 * h * A, I + 0.5 * h * A)
    if scheme == "symplectic_euler":
        return symplectic_euler_map(A, h, np.arange(N) < N // 2)
    raise ValueError(scheme)


class DiscreteKalman:
    """Proposition 4.1 with A_k = transition(A, h, scheme), Q_k = G Q G^T h, R_k = R / h."""

    def __init__(self, model: LinearModel, x0, P0, scheme: str):
        self.m = model
        self.name = f"discrete_{scheme}"
        self.x = np.asarray(x0, float).copy()
        self.P = np.asarray(P0, float).copy()
        self.Ak = transition(model.A, model.h, scheme)
        self.Qk = model.GQG * model.h
        self.Rk = model.reading_variance

    def step(self, z):
        m = self.m
        self.x = self.Ak @ self.x
        self.P = self.Ak @ self.P @ self.Ak.T + self.Qk
        S = m.C @ self.P @ m.C.T + self.Rk
        K = np.linalg.solve(S.T, (self.P @ m.C.T).T).T
        self.x = self.x + K @ (np.atleast_1d(z) - m.C @ self.x)
        IKC = np.eye(m.d) - K @ m.C
        self.P = IKC @ self.P @ IKC.T + K @ self.Rk @ K.T  # Joseph form
        return self.x, self.P
