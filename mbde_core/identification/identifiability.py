"""Identifiability from the rank of the parameters' reduced Jacobian (paper 001 sec. 3.7).

With the states eliminated (variable projection, paper 001 eq. 3.32,
:mod:`.projection`), the parameters' information is S = T^T T, T the Jacobian of the
residuals with respect to the parameters after the states have absorbed what they can.
In relative units (the joint problem's unknowns are p / |p0|):

- a parameter with a zero column (the model does not depend on it) is not identifiable;
- an eigenvalue lambda_k = s_k^2 of S below ``tol`` lambda_max (default 1e-9, i.e. a singular
  value of T below 3e-5 of the largest) is a null direction v_k: the combination
  v_k^T dp/|p| changes nothing the data can see (e.g. mass and inertia of a pendulum with
  gravity, which enter only as the ratio m g l / J). Every parameter with
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
    """rank (of S_rel), eigenvalues (ascending, relative units), identifiable (P,) bools,
    null_directions: list of {parameter label: component} of the null eigenvectors."""

    rank: int
    eigenvalues: np.ndarray
    identifiable: np.ndarray
    null_directions: list = field(default_factory=list)


def analyse(S: np.ndarray, labels, tol: float = 1e-9, share: float = 0.1) -> Identifiability:
    """Identifiability of P parameters from their information S (P, P) in relative units
    (the information of p / |p|, as the joint problem's unknowns are scaled)."""
    P = S.shape[0]
    ok = np.diag(S) > 0
    lam, V = np.linalg.eigh(0.5 * (S + S.T))
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
