"""Gauss-Newton normal equations of a trajectory problem: block-tridiagonal states plus
dense parameter columns, banded Cholesky, Schur complement, marginal covariances.

Rows. A :class:`RowBlock` holds K whitened residual rows r_k (d each) that depend on the
state block x_{i_k} (b values), optionally on the next block x_{i_k + 1} and optionally
on P global parameters p. The Jacobian of the whole problem is therefore block-
bidiagonal in the states with P dense columns appended (paper 001 eq. 3.25; paper 003
eq. 23 gives the same structure for the smoother's factors).

Normal equations. With J = [J_x, J_p] and r the stacked rows (cost = 1/2 |r|^2),

    [ A    C ] [dx]     [g_x]      A = J_x^T J_x  (N b x N b, block tridiagonal)
    [ C^T  E ] [dp] = - [g_p],     C = J_x^T J_p  (N b x P),  E = J_p^T J_p,
                                   g = J^T r.

A is stored as its diagonal blocks D (N, b, b) and super-diagonal blocks B (N-1, b, b)
(B_i = A[i, i+1]). Levenberg-Marquardt damping adds mu diag(J_n^T J_n) to A and E, the
diagonal over the nonlinear rows only (Marquardt's scaling: invariant to the units of
each variable; see :meth:`NormalEquations.damping`).

Solve. A is banded with half-bandwidth u = 2b - 1; LAPACK's banded Cholesky (pbtrf /
pbtrs through scipy.linalg.cholesky_banded / cho_solve_banded) factors it in
O(N b u^2). Parameters are eliminated by the Schur complement
S = E - C^T A^-1 C (P x P), dp = S^-1 (-g_p + C^T A^-1 g_x), dx = A^-1 (-g_x - C dp)
(paper 001 eqs. 3.31-3.32: S^-1 is the parameters' covariance).

Marginal covariances (the diagonal blocks of the inverse information matrix), never
forming the dense inverse: with A = U^T U (U upper block-bidiagonal, diagonal blocks
U_i upper triangular, super-diagonal blocks V_i), Sigma = U^-1 U^-T satisfies
U Sigma = U^-T, whose block row i above the diagonal gives (Takahashi et al. 1973)

    Sigma_{i,i+1} = -G_i Sigma_{i+1,i+1},            G_i = U_i^-1 V_i,
    Sigma_{i,i}   = U_i^-1 U_i^-T + G_i Sigma_{i+1,i+1} G_i^T,

a backward recursion of O(N b^3) (symmetric PSD by construction, like an RTS smoother).
With parameters, the states' marginals gain Y_i S^-1 Y_i^T, Y = A^-1 C.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg


@dataclass
class RowBlock:
    """K whitened residual rows of one kind (see the module docstring).

    idx: (K,) state index of each row group; r: (K, d) residuals; Ji: (K, d, b)
    d r / d x_idx; Jn: (K, d, b) d r / d x_{idx+1} or None; Jp: (K, d, P) d r / d p or
    None. ``name`` labels the factor kind (cost breakdown, tests). ``linear``: the rows
    are affine in the unknowns (their Gauss-Newton model is exact): they do not enter
    the Levenberg-Marquardt scaling (see :meth:`NormalEquations.damping`).
    """

    name: str
    idx: np.ndarray
    r: np.ndarray
    Ji: np.ndarray
    Jn: np.ndarray | None = None
    Jp: np.ndarray | None = None
    linear: bool = False

    @property
    def cost(self) -> float:
        return 0.5 * float(np.sum(self.r * self.r))


def total_cost(rows) -> float:
    """1/2 sum |r|^2 over RowBlocks."""
    return sum(rb.cost for rb in rows)


def _accumulate(out, idx, vals, unique: bool):
    if unique:
        out[idx] += vals
    else:
        np.add.at(out, idx, vals)


class NormalEquations:
    """J^T J and J^T r of a list of RowBlocks over N state blocks of size b (+ P parameters)."""

    def __init__(self, rows, N: int, b: int, P: int = 0):
        self.N, self.b, self.P = N, b, P
        D = np.zeros((N, b, b))
        B = np.zeros((max(N - 1, 0), b, b))
        gx = np.zeros((N, b))
        C = np.zeros((N, b, P))
        E = np.zeros((P, P))
        gp = np.zeros(P)
        dn = np.zeros((N, b))  # diag of J^T J over the nonlinear rows (damping scale)
        en = np.zeros(P)
        for rb in rows:
            idx = np.asarray(rb.idx)
            if idx.size == 0:
                continue
            unique = idx.size < 2 or bool(np.all(np.diff(idx) > 0))
            JJ = np.einsum("kdi,kdj->kij", rb.Ji, rb.Ji)
            _accumulate(D, idx, JJ, unique)
            _accumulate(gx, idx, np.einsum("kdi,kd->ki", rb.Ji, rb.r), unique)
            if not rb.linear:
                _accumulate(dn, idx, np.einsum("kii->ki", JJ), unique)
            if rb.Jn is not None:
                JJ = np.einsum("kdi,kdj->kij", rb.Jn, rb.Jn)
                _accumulate(D, idx + 1, JJ, unique)
                if not rb.linear:
                    _accumulate(dn, idx + 1, np.einsum("kii->ki", JJ), unique)
                _accumulate(B, idx, np.einsum("kdi,kdj->kij", rb.Ji, rb.Jn), unique)
                _accumulate(gx, idx + 1, np.einsum("kdi,kd->ki", rb.Jn, rb.r), unique)
            if rb.Jp is not None and P:
                _accumulate(C, idx, np.einsum("kdi,kdp->kip", rb.Ji, rb.Jp), unique)
                if rb.Jn is not None:
                    _accumulate(C, idx + 1, np.einsum("kdi,kdp->kip", rb.Jn, rb.Jp), unique)
                E += np.einsum("kdp,kdq->pq", rb.Jp, rb.Jp)
                if not rb.linear:
                    en += np.einsum("kdp,kdp->p", rb.Jp, rb.Jp)
                gp += np.einsum("kdp,kd->p", rb.Jp, rb.r)
        self.D, self.B, self.gx, self.C, self.E, self.gp = D, B, gx, C, E, gp
        self.dn, self.en = dn, en
        self._factor = None

    # -- products --------------------------------------------------------------------------
    def damping(self) -> tuple[np.ndarray, np.ndarray]:
        """Marquardt's scaling (N, b), (P,): the diagonal of J^T J over the *nonlinear* rows.

        Levenberg-Marquardt damping is a trust region against linearisation errors;
        affine rows (the smoother's near-hard integrator factors) have none, and their
        weights (~1e12 on the diagonal) would otherwise damp the free directions of the
        trajectory by orders of magnitude more than their real curvature."""
        return self.dn, self.en

    def quad(self, dx: np.ndarray, dp: np.ndarray | None = None) -> float:
        """[dx, dp]^T [[A, C], [C^T, E]] [dx, dp] (dx (N, b), dp (P,))."""
        v = float(np.einsum("ki,kij,kj->", dx, self.D, dx))
        if self.N > 1:
            v += 2.0 * float(np.einsum("ki,kij,kj->", dx[:-1], self.B, dx[1:]))
        if self.P and dp is not None:
            v += 2.0 * float(np.einsum("ki,kip,p->", dx, self.C, dp)) + float(dp @ self.E @ dp)
        return v

    def gradient_dot(self, dx, dp=None) -> float:
        v = float(np.sum(self.gx * dx))
        if self.P and dp is not None:
            v += float(self.gp @ dp)
        return v

    # -- factorisation ---------------------------------------------------------------------
    def _banded(self, mu: float) -> np.ndarray:
        """Upper banded storage (LAPACK 'U') of A + mu diag(damping)."""
        N, b = self.N, self.b
        u = 2 * b - 1
        ab = np.zeros((u + 1, N * b))
        D = self.D.copy()
        if mu:
            d = np.einsum("kii->ki", D)
            d += mu * self.dn
        for r in range(b):
            for c in range(r, b):  # A[i b + r, i b + c] = D_i[r, c], column i b + c
                ab[u + r - c, c::b] = D[:, r, c]
        for r in range(b):
            for c in range(b):  # A[i b + r, (i+1) b + c] = B_i[r, c]
                ab[u + r - c - b, b + c::b] = self.B[:, r, c]
        return ab

    def factor(self, mu: float = 0.0) -> "NormalEquations":
        """Cholesky-factor A + mu diag(A) (and the Schur complement with parameters).

        Raises numpy.linalg.LinAlgError if the damped matrix is not positive definite.
        """
        N, b, P = self.N, self.b, self.P
        cb = scipy.linalg.cholesky_banded(self._banded(mu), lower=False, check_finite=False)
        Y = S = None
        if P:
            Y = self._solve_A(cb, self.C.reshape(N * b, P))
            E = self.E + mu * np.diag(self.en)
            S = E - self.C.reshape(N * b, P).T @ Y
            S = 0.5 * (S + S.T)
            S = scipy.linalg.cho_factor(S, check_finite=False)
        self._factor = (mu, cb, Y, S)
        return self

    @staticmethod
    def _solve_A(cb, rhs):
        return scipy.linalg.cho_solve_banded((cb, False), rhs, check_finite=False)

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """The (damped) Gauss-Newton step (dx (N, b), dp (P,)) of the current factorisation."""
        _, cb, Y, S = self._factor
        N, b, P = self.N, self.b, self.P
        gx = self.gx.reshape(N * b)
        if not P:
            return -self._solve_A(cb, gx).reshape(N, b), np.zeros(0)
        Ag = self._solve_A(cb, gx)
        Cm = self.C.reshape(N * b, P)
        dp = scipy.linalg.cho_solve(S, -self.gp + Cm.T @ Ag, check_finite=False)
        dx = -Ag - Y @ dp
        return dx.reshape(N, b), dp

    # -- covariances ---------------------------------------------------------------------------
    def marginals(self, off_diagonal: bool = False):
        """Diagonal blocks (N, b, b) of the inverse of the (undamped) information matrix
        (and, with ``off_diagonal``, its super-diagonal blocks Sigma_{i,i+1} (N-1, b, b):
        (diag, super)). Without parameters only: the super-diagonal blocks leave out the
        parameters' share.

        Uses the current factorisation, which must be undamped (``factor(0)``)."""
        mu, cb, Y, S = self._require_undamped()
        N, b = self.N, self.b
        u = 2 * b - 1
        Ud = np.zeros((N, b, b))
        V = np.zeros((max(N - 1, 0), b, b))
        for r in range(b):
            for c in range(r, b):
                Ud[:, r, c] = cb[u + r - c, c::b]
        for r in range(b):
            for c in range(b):
                V[:, r, c] = cb[u + r - c - b, b + c::b]
        Uinv = np.linalg.inv(Ud)
        Pd = Uinv @ np.swapaxes(Uinv, 1, 2)
        G = Uinv[:-1] @ V if N > 1 else V
        out = np.empty((N, b, b))
        sup = np.empty((max(N - 1, 0), b, b)) if off_diagonal else None
        out[-1] = Pd[-1]
        for i in range(N - 2, -1, -1):
            Gi = G[i]
            out[i] = Pd[i] + Gi @ out[i + 1] @ Gi.T
            if sup is not None:
                sup[i] = -Gi @ out[i + 1]
        out = 0.5 * (out + np.swapaxes(out, 1, 2))
        if self.P:
            Si = scipy.linalg.cho_solve(S, np.eye(self.P), check_finite=False)
            Yb = Y.reshape(N, b, self.P)
            out += np.einsum("kip,pq,kjq->kij", Yb, Si, Yb)
        return (out, sup) if off_diagonal else out

    def last_block_factor(self) -> np.ndarray:
        """U (b, b), upper triangular, of the last state block (no parameters): the last
        diagonal block of the inverse is U^-1 U^-T, so U^T U is the information of x_{N-1}
        with every other state marginalised out."""
        _, cb, _, _ = self._require_undamped()
        N, b = self.N, self.b
        u = 2 * b - 1
        U = np.zeros((b, b))
        for r in range(b):
            for c in range(r, b):
                U[r, c] = cb[u + r - c, (N - 1) * b + c]
        return U

    def parameter_covariance(self) -> np.ndarray:
        """S^-1 (P, P): the parameters' covariance (paper 001 eq. 3.31), undamped."""
        _, _, _, S = self._require_undamped()
        if not self.P:
            return np.zeros((0, 0))
        Si = scipy.linalg.cho_solve(S, np.eye(self.P), check_finite=False)
        return 0.5 * (Si + Si.T)

    def _require_undamped(self):
        if self._factor is None or self._factor[0] != 0.0:
            self.factor(0.0)
        return self._factor
