"""Identifiability from the rank of the parameters' reduced Jacobian (paper 001 sec. 3.7).

With the states eliminated (variable projection, paper 001 eq. 3.32,
:mod:`.projection`), the parameters' information is S = T^T T, T the Jacobian of the
residuals with respect to the parameters after the states have absorbed what they can.
In the correlation form (each column normalised, so units do not matter):

- a parameter with a zero column (the model does not depend on it) is not identifiable;
- an eigenvalue lambda_k of D S D (D = diag(S)^-1/2) below ``tol`` lambda_max (default
  1e-9, i.e. a singular value of the normalised T below 3e-5 of the largest) is a null
  direction v_k: the combination sum_j v_kj D_j dp_j changes nothing the data can see
  (e.g. mass and gravity of a pendulum, which enter only as their product; or every mass
  of a gravity-driven linkage, whose common scale cancels);
- membership is judged in the unknowns' own relative units (the scaled unknowns u =
  p / |p0| of :mod:`.problem`, i.e. relative changes), not in the correlation form: a
  parameter whose column is small (a weak damping next to gravity) has a small
  component in a correlation-form null vector even when it moves as much as the
  others in relative terms (J, m and b of a pendulum scale together). With Q an
  orthonormal basis of the null space in u, a parameter whose leverage ||Q_j|| (the
  length of its unit vector's projection onto the null space, 0..1) exceeds ``share``
  (default 0.1) is reported not identifiable and is not estimated (held at its starting
  value); the reported null directions are in u (relative changes, largest 1);
- the remaining parameters have the covariance S^-1 (paper 001 eq. 3.31); their relative
  standard deviations show how well the data determine them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Identifiability:
    """rank (of D S D), eigenvalues (ascending, of D S D), identifiable (P,) bools,
    null_directions: list of {parameter label: component} of the null eigenvectors."""

    rank: int
    eigenvalues: np.ndarray
    identifiable: np.ndarray
    null_directions: list = field(default_factory=list)


def analyse(S: np.ndarray, labels, tol: float = 1e-9, share: float = 0.1) -> Identifiability:
    """Identifiability of P parameters from their information S (P, P) (any scaling: the
    test runs on the correlation form D S D, D = diag(S)^-1/2, whose eigenvalues do not
    depend on the parameters' units)."""
    P = S.shape[0]
    d = np.diag(S).copy()
    ok = d > 0
    ident = ok.copy()
    if not ok.any():
        return Identifiability(0, np.zeros(P), ident, [])
    D = 1.0 / np.sqrt(d[ok])
    lam, V = np.linalg.eigh(0.5 * (S[np.ix_(ok, ok)] + S[np.ix_(ok, ok)].T) * np.outer(D, D))
    top = max(float(lam[-1]), 0.0)
    null = lam <= tol * top if top > 0 else np.ones(lam.size, bool)
    directions = []
    if null.any():
        U = D[:, None] * V[:, null]  # null directions in the scaled unknowns (relative changes)
        Q = np.linalg.qr(U)[0]
        leverage = np.full(P, 0.0)
        leverage[ok] = np.linalg.norm(Q, axis=1)
        ident &= leverage <= share
        idx = np.flatnonzero(ok)
        for k in range(U.shape[1]):
            v = U[:, k] / np.max(np.abs(U[:, k]))
            directions.append({labels[idx[j]]: float(v[j]) for j in np.flatnonzero(np.abs(v) > share)})
    eig = np.concatenate([np.zeros(P - lam.size), lam])  # zero columns: zero eigenvalues
    return Identifiability(int(np.sum(~null)), eig, ident, directions)
