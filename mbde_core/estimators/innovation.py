"""Scores of a filter's innovations, and when an estimate says the mechanism is lost.

Shared by the stage's multi-start bank (:mod:`~mbde_core.estimators.stage.multistart`) and the
particle filter's Gaussian follower (:mod:`~mbde_core.estimators.particle.refine`). The score
of a run of updates is the prediction-error decomposition of the readings' likelihood,

    -2 log p(y_1..y_n | H) = sum_k [ nu_k^T S_k^-1 nu_k + log det S_k ] + const,

made robust by a cap on each update's NIS (``cap``: the largest gate threshold, or
``DEFAULT_CAP``); a gate-rejected reading counts cap + the filter's last log det S.

Lost: some independent coordinate's standard deviation exceeds ``LOST_SIGMA`` (angles
[rad]) or ``LOST_SIGMA`` x the mechanism's length scale (lengths).
"""
from __future__ import annotations

import math

import numpy as np

LOST_SIGMA = 0.5
DEFAULT_CAP = 25.0


def scored(res) -> bool:
    """Whether an update's NIS and log det S are finite (a score of its own readings)."""
    return res.nis is not None and math.isfinite(res.nis) and res.logdet is not None and math.isfinite(res.logdet)


def accepted_score(res, cap: float, logdet: float) -> float:
    """-2 log-likelihood (+ const) of an update's accepted readings: min(NIS, cap) + log det S,
    with the filter's last log det S ``logdet`` (and cap) when they are not finite (module
    doc); 0 if none was accepted."""
    if not res.accepted:
        return 0.0
    return min(res.nis, cap) + res.logdet if scored(res) else cap + logdet


def rejected_score(res, cap: float, logdet: float) -> float:
    """What the update's gate-rejected readings cost: cap + log det S each (module doc)."""
    return (cap + logdet) * len(res.rejected) if res.rejected else 0.0


def is_lost(est, snap) -> bool:
    """True if the estimate ``snap`` of ``est`` says the mechanism is lost (module doc)."""
    if snap.cov is None:
        return False
    g = len(snap.z)
    sd = np.sqrt(np.clip(np.diag(snap.cov)[:g], 0.0, None))
    mech = est.mech
    angular = np.isin(mech.independent, mech.rel_columns)
    limit = np.where(angular, LOST_SIGMA, LOST_SIGMA * mech.length_scale)
    return bool(np.any(~np.isfinite(sd)) or np.any(sd > limit))
