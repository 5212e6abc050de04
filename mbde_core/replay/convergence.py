"""Convergence of an estimator started far from the truth (a particle filter's uniform
start, paper 000 sec. 6.1): when it converged, and how well it tracks afterwards.

A full-run RMSE mixes the start-up transient with the tracking accuracy (a PF from a
uniform prior: 0.13 rad over 10 s, but ~0.1 deg once settled). These metrics split them:

- ``converged_after`` [s]: the first time after which every independent coordinate's
  error stays below its threshold (angles ``ANGLE_TOL`` rad, lengths ``LENGTH_TOL`` x the
  mechanism's length scale) until the end; None if it never settles;
- ``rmse_settled``: RMSE per coordinate over the estimates after that time;
- ``branch_identified_after`` [s]: the first time after which the probability of the true
  assembly branch stays above ``BRANCH_P`` (estimators with branch probabilities).
"""
from __future__ import annotations

import math

import numpy as np

ANGLE_TOL = math.radians(2.0)  # rad, paper 000's convergence criterion
LENGTH_TOL = 0.02  # of the mechanism's length scale
BRANCH_P = 0.99


def settle_time(t: np.ndarray, ok: np.ndarray) -> float | None:
    """First t[k] with ok[k:] all true (t: (K,), ok: (K,) bool), None if ok[-1] is false."""
    if len(ok) == 0 or not ok[-1]:
        return None
    bad = np.flatnonzero(~ok)
    return float(t[0] if bad.size == 0 else t[bad[-1] + 1])


def convergence_metrics(t, err, angular, length_scale: float, branch_p=None, true_branch=None) -> dict:
    """t (K,) [s] from the start of the run; err (K, g) estimate - truth; angular (g,) bool;
    branch_p (K, B) probabilities or None; true_branch (K,) labels or None."""
    t = np.asarray(t, float)
    err = np.asarray(err, float)
    tol = np.where(np.asarray(angular, bool), ANGLE_TOL, LENGTH_TOL * max(length_scale, 1e-12))
    ok = np.all(np.abs(err) <= tol, axis=1)
    out = {"convergence_tolerance": tol.tolist()}
    t_conv = settle_time(t, ok)
    out["converged_after"] = t_conv
    if t_conv is not None:
        late = t >= t_conv
        out["rmse_settled"] = np.sqrt(np.mean(err[late] ** 2, axis=0)).tolist()
    if branch_p is not None and true_branch is not None and len(branch_p):
        p = np.asarray(branch_p, float)
        lab = np.asarray(true_branch, int)
        inside = (lab >= 0) & (lab < p.shape[1])
        p_true = np.where(inside, p[np.arange(len(p)), np.clip(lab, 0, p.shape[1] - 1)], 0.0)
        out["branch_identified_after"] = settle_time(t, p_true > BRANCH_P)
        out["branch_probability_final"] = float(p_true[-1])
    return out


class ConvergenceMetrics:
    """:func:`convergence_metrics` computed in batches, in time order (streamed replays).

    ``add(t, err, branch_p, true_branch)`` per batch; ``result()`` at the end."""

    def __init__(self, angular, length_scale: float):
        self.tol = np.where(np.asarray(angular, bool), ANGLE_TOL, LENGTH_TOL * max(length_scale, 1e-12))
        self.t0 = None
        self.t_conv = None  # first time of the current run of in-tolerance steps
        self.sq = np.zeros(len(self.tol))
        self.n = 0
        self.t_branch = None
        self.p_final = None
        self.has_branch = False

    def add(self, t, err, branch_p=None, true_branch=None) -> None:
        t = np.asarray(t, float)
        err = np.asarray(err, float)
        if not len(t):
            return
        if self.t0 is None:
            self.t0 = float(t[0])
        ok = np.all(np.abs(err) <= self.tol, axis=1)
        for k in range(len(t)):  # a batch has at most a few thousand steps
            if ok[k]:
                if self.t_conv is None:
                    self.t_conv = float(t[k])
                    self.sq[:] = 0.0
                    self.n = 0
                self.sq += err[k] ** 2
                self.n += 1
            else:
                self.t_conv = None
        if branch_p is not None and true_branch is not None:
            self.has_branch = True
            p = np.asarray(branch_p, float)
            lab = np.asarray(true_branch, int)
            inside = (lab >= 0) & (lab < p.shape[1])
            p_true = np.where(inside, p[np.arange(len(p)), np.clip(lab, 0, p.shape[1] - 1)], 0.0)
            for k in range(len(t)):
                if p_true[k] > BRANCH_P:
                    if self.t_branch is None:
                        self.t_branch = float(t[k])
                else:
                    self.t_branch = None
            self.p_final = float(p_true[-1])

    def result(self) -> dict:
        out = {"convergence_tolerance": self.tol.tolist(),
               "converged_after": None if self.t_conv is None else self.t_conv - self.t0}
        if self.t_conv is not None and self.n:
            out["rmse_settled"] = np.sqrt(self.sq / self.n).tolist()
        if self.has_branch:
            out["branch_identified_after"] = None if self.t_branch is None else self.t_branch - self.t0
            out["branch_probability_final"] = self.p_final
        return out
