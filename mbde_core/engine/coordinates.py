"""Choice of independent coordinates z among the natural coordinates q.

Paper 000 (sec. 6.1) selects the independent coordinate of its four-bar by a pivoted
(LU) factorisation of the constraint Jacobian, so that the dependent block Phi_q,d is as
well conditioned as possible. We use QR with column pivoting of Phi_q (equivalent
rank-revealing choice): the first m pivot columns become dependent coordinates and
the remaining g = n - m columns are the independent ones. Relative (angle) coordinates
are down-weighted so that, when possible, they are chosen as independent coordinates
(the crank angle of a four-bar rather than a point coordinate).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

_ANGLE_WEIGHT = 1e-3
_RANK_TOL = 1e-9


def independent_rows(mech, q: np.ndarray) -> np.ndarray:
    """Indices of a maximal set of linearly independent constraint rows at q."""
    J = mech.constraints.jacobian(q[None], mech.points(q[None]))[0]
    if J.shape[0] == 0:
        return np.arange(0)
    _, R, piv = scipy.linalg.qr(J.T, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > _RANK_TOL * max(diag.max(), 1e-300)))
    return np.sort(piv[:rank])


def choose_independent(mech, q: np.ndarray) -> np.ndarray:
    """Independent coordinate indices (g,) by column-pivoted QR of Phi_q at q."""
    J = mech.phi_q(q)
    w = np.ones(mech.n)
    w[mech.rel_columns] = _ANGLE_WEIGHT
    scale = np.linalg.norm(J, axis=0).max() or 1.0
    _, _, piv = scipy.linalg.qr(J * w / scale, mode="economic", pivoting=True)
    dependent = np.sort(piv[: mech.m])
    return np.setdiff1d(np.arange(mech.n), dependent)


def is_valid_choice(mech, q: np.ndarray, independent, max_cond: float = 1e10) -> bool:
    """True if Phi_q restricted to the dependent coordinates is square and well conditioned."""
    dep = np.setdiff1d(np.arange(mech.n), independent)
    J = mech.phi_q(q)[:, dep]
    if J.shape[0] != J.shape[1]:
        return False
    return bool(np.linalg.cond(J) < max_cond)
