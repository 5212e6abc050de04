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
  of a gravity-driven linkage, whose common scale cancels). Every parameter with
  |v_k| > ``share`` (default 0.1) in a null direction is reported not identifiable and
  is not estimated (held at its starting value);
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
    D = np.where(ok, 1.0 / np.sqrt(np.where(ok, d, 1.0)), 0.0)
    lam, V = np.linalg.eigh(0.5 * (S + S.T) * np.outer(D, D))
    top = max(float(lam[-1]), 0.0)
    null = lam <= tol * top if top > 0 else np.ones(P, bool)
    ident = ok.copy()
    directions = []
    for k in np.flatnonzero(null):
        v = V[:, k] / np.max(np.abs(V[:, k]))
        members = np.abs(v) > share
        ident &= ~members
        directions.append({labels[j]: float(v[j]) for j in np.flatnonzero(members)})
    return Identifiability(int(np.sum(~null)), lam, ident, directions)
