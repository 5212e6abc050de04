"""The parameters' Jacobian after eliminating the states (paper 001 eqs. 3.30-3.32).

For whitened residuals r(x, p) with Jacobian [J_x, J_p], the states are eliminated by
variable projection:

    T = (I - J_x (J_x^T J_x)^-1 J_x^T) J_p = J_p - J_x Y,   Y = A^-1 C,
    A = J_x^T J_x,  C = J_x^T J_p,

and the parameters' covariance is (T^T T)^-1 (eq. 3.31; T^T T is the Schur complement
E - C^T A^-1 C). Like paper 001, T is formed explicitly (one banded solve with P right-
hand sides, O(N b^2 P)) and its singular value decomposition gives the covariance and
the rank, instead of a Cholesky factorisation of the Schur complement: T^T T is positive
semi-definite by construction even when the cancellation E - C^T A^-1 C is severe
(nearly hard dynamics make E much larger than the information that is left).

Leverages (the diagonal of the hat matrix H = J (J^T J)^-1 J^T) split the same way,
since T is orthogonal to the range of J_x: h_i = j_x,i A^-1 j_x,i^T + t_i (T^T T)^+ t_i^T,
the first term from the diagonal blocks of A^-1 (the smoother's marginals without
parameters).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from mbde_core.trajectory.normal import NormalEquations, RowBlock


@dataclass
class Projection:
    """T's SVD (s (P,), V (P, P)), the row blocks' T parts and A^-1's diagonal blocks."""

    s: np.ndarray
    V: np.ndarray
    T_blocks: list  # per RowBlock: (K, d, P)
    state_marginals: np.ndarray  # (N, b, b) diagonal blocks of A^-1

    def covariance(self, rcond: float = 0.0) -> np.ndarray:
        """(T^T T)^-1 (P, P) (pseudo-inverse over singular values > rcond * max)."""
        s = self.s
        keep = s > rcond * (s[0] if s.size else 0.0)
        inv = np.where(keep, 1.0 / np.where(keep, s, 1.0) ** 2, 0.0)
        C = (self.V * inv) @ self.V.T
        return 0.5 * (C + C.T)

    def information(self) -> np.ndarray:
        return (self.V * self.s**2) @ self.V.T


def project(rows: list, N: int, b: int, P: int) -> Projection:
    """Projection of the parameters' columns of ``rows`` (RowBlocks with Jp where they
    depend on the P parameters) onto the complement of the states' columns."""
    ne = NormalEquations([RowBlock(rb.name, rb.idx, rb.r, rb.Ji, rb.Jn) for rb in rows], N, b, 0).factor(0.0)
    if P == 0:
        return Projection(np.zeros(0), np.zeros((0, 0)), [np.zeros(rb.r.shape + (0,)) for rb in rows], ne.marginals())
    _, cb, _, _ = ne._factor
    C = np.zeros((N, b, P))
    for rb in rows:
        if rb.Jp is None or rb.r.size == 0:
            continue
        np.add.at(C, rb.idx, np.einsum("kdi,kdp->kip", rb.Ji, rb.Jp))
        if rb.Jn is not None:
            np.add.at(C, np.asarray(rb.idx) + 1, np.einsum("kdi,kdp->kip", rb.Jn, rb.Jp))
    Y = scipy.linalg.cho_solve_banded((cb, False), C.reshape(N * b, P), check_finite=False).reshape(N, b, P)
    blocks = []
    for rb in rows:
        idx = np.asarray(rb.idx)
        T = -np.einsum("kdi,kip->kdp", rb.Ji, Y[idx])
        if rb.Jn is not None:
            T -= np.einsum("kdi,kip->kdp", rb.Jn, Y[idx + 1])
        if rb.Jp is not None:
            T += rb.Jp
        blocks.append(T)
    Tm = np.concatenate([t.reshape(-1, P) for t in blocks]) if blocks else np.zeros((0, P))
    R = scipy.linalg.qr(Tm, mode="r", check_finite=False)[0][:P] if Tm.shape[0] else np.zeros((P, P))
    _, s, Vt = np.linalg.svd(R)
    return Projection(s, Vt.T, blocks, ne.marginals())


def leverages(proj: Projection, rows: list, names) -> dict:
    """{block name: h (K, d)} leverages of the single-block rows of the named blocks."""
    pinv = proj.covariance(rcond=1e-12)
    out = {}
    for rb, T in zip(rows, proj.T_blocks):
        if rb.name not in names or rb.Jn is not None:
            continue
        idx = np.asarray(rb.idx)
        h = np.einsum("kdi,kij,kdj->kd", rb.Ji, proj.state_marginals[idx], rb.Ji)
        h += np.einsum("kdp,pq,kdq->kd", T, pinv, T)
        out[rb.name] = np.concatenate([out[rb.name], h]) if rb.name in out else h
    return out
