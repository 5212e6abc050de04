"""Acquisition versus tracking against ground truth: when an estimator found the state, how
well it tracked it afterwards, and a locked offset.

A whole-run RMSE or NEES mixes the start-up transient (a particle filter's uniform start,
paper 000 sec. 6.1; a Kalman observer started off) with the tracking accuracy: a PF
whole-run NEES of 1e7 may be a filter that tracked to 0.003 rad after its first second.

- acquisition: the error e_i of every independent coordinate is *on track* at a step when
  |e_i| <= min(max(SIGMAS sigma_i, floor_i), cap_i), sigma_i the estimate's own standard
  deviation (its covariance), floor_i a resolution below which an error is never called
  a loss (``ANGLE_FLOOR`` rad for angles, ``LENGTH_FLOOR`` x the mechanism's length scale
  for lengths) and cap_i a coarse bound beyond which an estimate is not an estimate,
  however wide its covariance (``ANGLE_CAP``, ``LENGTH_CAP``: a particle filter's
  uniform start is within its own 5 sigma but not acquired). With the branch
  probabilities, a step is on track only while P(true branch) > ``BRANCH_P`` (the issue's
  "time to acquire (branch and state)"). ``acquired_after`` [s] is the first step of the
  last on-track stretch (to the end) at which the estimate is also *confident*: every
  coordinate's ``CONFIDENT_SIGMAS`` (2) sigma within its cap (``confident``; None if there
  is none). A cloud still spread over 0.2-1.6 rad whose mean happens to lie within 10 deg
  of the truth is on track but not yet acquired: the PF's (``refine: none``) tracking RMSE over a UKF's
  on the same steps (started at the truth), 4 seeds x 5 s of fourbar_gyro / fourbar_imu /
  pf_rig_branch0, was 1.07-2.33 / 0.87-2.15 / 1.20-1.76 from the first on-track step and
  0.95-1.34 / 0.70-1.36 / 1.20-1.54 from the confident one (0.92-1.21 / 0.72-1.14 /
  0.94-1.22 after the first second); the branch alone moved only the first. 5 sigma
  within the cap instead gave about the same ratios but called the Kalman observers on
  the torque-profile four-bar of ``mbde bench motors`` (started at the truth, sigma between
  2 and 5 deg for their first 1.4 s) not acquired within 1 s; a bound at every step instead
  of at the start would call a dead point a loss (pf_sim seeds 11 and 14). Once acquired,
  a sigma growing past the bound (a dead point) is not a loss; an error beyond the
  tolerance is, and the next acquisition again waits for a confident step. A consistent
  estimator leaves 5 sigma with
  probability 6e-7 per coordinate and step, so a later excursion is a real loss; an error
  near a dead point of the output link, where the estimate's sigma grows, is not (the
  fixed 2-degree rule called a filter of RMSE 0.0045 rad unconverged for 9.2 s there).
  Without a covariance the rule is the floor x ``NO_COV_FACTOR`` (2 deg).
- tracking: RMSE of z, zd, zdd, mean NEES with its 95 % band for the effective sample
  size (:mod:`~mbde_core.estimators.assess.autocorrelation`) and the 95 % coverage, over
  the steps from ``acquired_after`` to the end.
- branch: ``branch_identified_after`` [s], the first time after which the probability of
  the true assembly branch stays above ``BRANCH_P`` (so ``acquired_after`` >= it).
- locked offset: in windows of ``WINDOW`` s, the mean NEES above ``LOCK_NEES`` x its dof
  while the error is nearly constant (its mean over the window carries >= ``LOCK_SHARE``
  of its mean square): the estimate sits on a wrong state with a covariance that excludes
  the truth. Two or more consecutive such windows (>= 1 s) are a lock; the longest one is
  reported (start, duration, offset, mean NEES).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.assess.autocorrelation import SeriesMean, chi2_mean_band
from mbde_core.estimators.chi2 import chi2_ppf

SIGMAS = 5.0
ANGLE_FLOOR = math.radians(0.5)  # rad
LENGTH_FLOOR = 0.005  # of the mechanism's length scale
ANGLE_CAP = math.radians(10.0)  # rad
LENGTH_CAP = 0.05  # of the mechanism's length scale
NO_COV_FACTOR = 4.0  # without a covariance: 4 x the floor (2 deg)
BRANCH_P = 0.99
CONFIDENT_SIGMAS = 2.0  # acquired from a step whose CONFIDENT_SIGMAS x sigma is within the cap
WINDOW = 0.5  # s
LOCK_NEES = 10.0  # x dof
LOCK_SHARE = 0.8
LOCK_WINDOWS = 2


class _Tracking:
    """Sums over the steps of the current on-track stretch."""

    def __init__(self, g: int):
        self.n = 0
        self.sq = {k: np.zeros(g) for k in ("z", "zd", "zdd")}
        self.nees = SeriesMean()
        self.nees_sum, self.nees_n, self.covered = 0.0, 0, 0

    def add(self, errs: dict, nees, s95: float) -> None:
        self.n += len(errs["z"])
        for k in self.sq:
            self.sq[k] += np.sum(errs[k] ** 2, axis=0)
        if nees is not None:
            v = nees[np.isfinite(nees)]
            self.nees.add(v)
            self.nees_sum += float(v.sum())
            self.nees_n += len(v)
            self.covered += int(np.sum(v <= s95))


class AcquisitionMetrics:
    """The module's metrics, streamed: :meth:`add` batches in time order, :meth:`result`."""

    def __init__(self, angular, length_scale: float, with_branch: bool = True, confident: bool = True):
        """``with_branch``: off track while P(true branch) <= BRANCH_P; ``confident``: acquired
        from a step whose CONFIDENT_SIGMAS sigma is within the cap (as the module docstring;
        False: the rule without them, for comparisons)."""
        self.with_branch, self.confident = bool(with_branch), bool(confident)
        angular = np.asarray(angular, bool)
        self.g = len(angular)
        self.floor = np.where(angular, ANGLE_FLOOR, LENGTH_FLOOR * max(length_scale, 1e-12))
        self.cap = np.where(angular, ANGLE_CAP, LENGTH_CAP * max(length_scale, 1e-12))
        self.d = 2 * self.g
        self.s95 = float(chi2_ppf(0.95, self.d))
        self.t0 = None
        self.t_acq = None  # start of the current on-track stretch
        self.track = _Tracking(self.g)
        self.used_cov = True
        self.t_branch, self.p_final, self.has_branch = None, None, False
        self.win = None  # the open window's sums (steps, e, e^2, NEES) and first/last stamps
        self.lock_run: list = []  # consecutive locked windows
        self.lock_best = None

    def add(self, t, errs: dict, sig_z=None, nees=None, branch_p=None, true_branch=None) -> None:
        """t (K,) [s]; errs {"z", "zd", "zdd"}: (K, g) estimate - truth (angles wrapped);
        sig_z (K, g) the estimate's standard deviations of z (None: no covariance); nees
        (K,) or None; branch_p (K, B) and true_branch (K,) labels, or None."""
        t = np.asarray(t, float)
        if not len(t):
            return
        if self.t0 is None:
            self.t0 = float(t[0])
        ez = np.asarray(errs["z"], float)
        if sig_z is None:
            self.used_cov = False
            tol = np.broadcast_to(NO_COV_FACTOR * self.floor, ez.shape)
        else:
            tol = np.minimum(np.maximum(SIGMAS * np.nan_to_num(np.asarray(sig_z, float), nan=0.0), self.floor),
                             self.cap)
        ok = np.all(np.abs(ez) <= tol, axis=1)
        p_true = None
        if branch_p is not None and true_branch is not None:
            p_true = self._p_true(branch_p, true_branch)
            if self.with_branch:
                ok &= p_true > BRANCH_P
        bad = np.flatnonzero(~ok)
        start = 0
        if bad.size:  # the stretch restarts after the last step off track
            start = int(bad[-1]) + 1
            self.track = _Tracking(self.g)
            self.t_acq = None
        if start < len(t) and self.t_acq is None and self.confident and sig_z is not None:
            sure = np.all(CONFIDENT_SIGMAS * np.nan_to_num(np.asarray(sig_z, float)[start:], nan=np.inf) <= self.cap, axis=1)
            first = np.flatnonzero(sure)
            start = start + int(first[0]) if first.size else len(t)
        if start < len(t):
            if self.t_acq is None:
                self.t_acq = float(t[start])
            self.track.add({k: np.asarray(v, float)[start:] for k, v in errs.items()},
                           None if nees is None else np.asarray(nees, float)[start:], self.s95)
        if nees is not None:
            self._windows(t, ez, np.asarray(nees, float))
        if p_true is not None:
            self._branch(t, p_true)

    @staticmethod
    def _p_true(branch_p, true_branch) -> np.ndarray:
        p = np.asarray(branch_p, float)
        lab = np.asarray(true_branch, int)
        inside = (lab >= 0) & (lab < p.shape[1])
        return np.where(inside, p[np.arange(len(p)), np.clip(lab, 0, p.shape[1] - 1)], 0.0)

    def _branch(self, t, p_true) -> None:
        self.has_branch = True
        low = np.flatnonzero(p_true <= BRANCH_P)
        if low.size:
            self.t_branch = float(t[low[-1] + 1]) if low[-1] + 1 < len(t) else None
        elif self.t_branch is None:
            self.t_branch = float(t[0])
        self.p_final = float(p_true[-1])

    def _windows(self, t, ez, nees) -> None:
        idx = np.floor((t - self.t0) / WINDOW).astype(int)
        for w in np.unique(idx):
            sel = idx == w
            v = nees[sel]
            fin = np.isfinite(v)
            if self.win is not None and self.win["index"] != w:
                self._close()
            if self.win is None:
                self.win = {"index": int(w), "n": 0, "s": np.zeros(self.g), "q": np.zeros(self.g), "ns": 0.0,
                            "nn": 0, "first": float(t[sel][0])}
            W = self.win
            W["n"] += int(sel.sum())
            W["s"] = W["s"] + ez[sel].sum(axis=0)
            W["q"] = W["q"] + (ez[sel] ** 2).sum(axis=0)
            W["ns"] += float(v[fin].sum())
            W["nn"] += int(fin.sum())
            W["last"] = float(t[sel][-1])

    def _close(self) -> None:
        W, self.win = self.win, None
        n = max(W["n"], 1)
        mean_e = W["s"] / n
        locked = (W["nn"] > 0 and W["ns"] / W["nn"] > LOCK_NEES * self.d
                  and float(np.sum(mean_e**2)) >= LOCK_SHARE * float(np.sum(W["q"] / n)))
        if locked:
            self.lock_run.append(W)
        else:
            self._end_lock()

    def _end_lock(self) -> None:
        run, self.lock_run = self.lock_run, []
        if len(run) < LOCK_WINDOWS:
            return
        n = sum(W["n"] for W in run)
        lock = {"from": run[0]["first"] - self.t0, "duration": run[-1]["last"] - run[0]["first"],
                "offset_z": (sum(W["s"] for W in run) / n).tolist(),
                "mean_nees": sum(W["ns"] for W in run) / max(sum(W["nn"] for W in run), 1)}
        if self.lock_best is None or lock["duration"] > self.lock_best["duration"]:
            self.lock_best = lock

    def result(self) -> dict:
        if self.win is not None:
            self._close()
        self._end_lock()
        out = {"acquisition_rule": {"sigmas": SIGMAS if self.used_cov else None,
                                    "floor": (self.floor * (1 if self.used_cov else NO_COV_FACTOR)).tolist(),
                                    "cap": self.cap.tolist(), "branch_p": BRANCH_P if self.with_branch else None,
                                    "confident": self.confident and self.used_cov},
               "acquired_after": None if self.t_acq is None else self.t_acq - self.t0,
               "locked_offset": self.lock_best}
        tr = self.track
        if self.t_acq is not None and tr.n:
            track = {"steps": tr.n, "rmse": {k: np.sqrt(v / tr.n).tolist() for k, v in tr.sq.items()}}
            if tr.nees_n:
                r = tr.nees.result()
                lo, hi = chi2_mean_band(self.d, r["n_eff"])
                mean = tr.nees_sum / tr.nees_n
                track["nees"] = {"mean": mean, "dof": self.d, "band_95": [lo, hi], "in_band": bool(lo <= mean <= hi),
                                 "effective_samples": r["n_eff"], "coverage_95": tr.covered / tr.nees_n}
            out["tracking"] = track
        if self.has_branch:
            out["branch_identified_after"] = None if self.t_branch is None else self.t_branch - self.t0
            out["branch_probability_final"] = self.p_final
        return out


def acquisition_metrics(t, errs: dict, angular, length_scale: float, sig_z=None, nees=None, branch_p=None,
                        true_branch=None, **rule) -> dict:
    """:class:`AcquisitionMetrics` of a whole run at once (``rule``: its keywords)."""
    acc = AcquisitionMetrics(angular, length_scale, **rule)
    acc.add(t, errs, sig_z, nees, branch_p, true_branch)
    return acc.result()
