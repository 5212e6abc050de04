"""Accuracy and consistency metrics of an estimator run against ground truth.

- RMSE and maximum error of z, zd, zdd (angles wrapped to [-pi, pi));
- NEES e^T P^-1 e of e = [z, zd] - truth per step (Bar-Shalom et al. 2001, ch. 5.4);
  for a consistent filter it is chi-square with d = 2g degrees of freedom. The mean over
  K steps is compared with the two-sided 95 % band of the mean of a chi2(d) series with
  the run's effective sample size K_eff = K / tau, tau the integrated autocorrelation
  time of the NEES series (:mod:`~mbde_core.estimators.assess.autocorrelation`):
  successive steps are correlated, and the band of K independent values,
  [chi2_{0.025}(K d) / K, chi2_{0.975}(K d) / K] (:func:`chi2_band`), would flag nearly
  every consistent run. Also reported: the 95 % coverage, the fraction of steps whose
  error lies inside the estimate's 95 % region (NEES <= chi2_{0.95}(d); per coordinate of
  z: |e_i| <= 1.96 sqrt(P_ii)), 0.95 for a consistent filter; and the fraction of steps
  whose NEES lies in the per-step band [chi2_{0.025}(d), chi2_{0.975}(d)];
- NIS y^T S^-1 y of every update, with its band (same construction, per-update dof);
- innovation whiteness: sample autocorrelation of the normalised innovations at lags
  1..L and the fraction of lags outside +/- 1.96 / sqrt(N);
- cost: mean/max step time [us] and the real-time factor = processing time / data
  duration (< 1: faster than real time).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.assess.autocorrelation import SeriesMean, chi2_mean_band
from mbde_core.estimators.chi2 import chi2_ppf

from mbde_core.sensors.base import wrap_angle


def chi2_band(dof: int, count: int, p: float = 0.95) -> tuple[float, float]:
    """Band of the mean of ``count`` independent chi2(dof) variables at probability p."""
    a = (1.0 - p) / 2.0
    k = max(int(count), 1) * int(dof)
    return float(chi2_ppf(a, k) / max(count, 1)), float(chi2_ppf(1 - a, k) / max(count, 1))


def coordinate_errors(est: np.ndarray, truth: np.ndarray, angular: np.ndarray) -> np.ndarray:
    """est - truth (K, g) with angle coordinates wrapped."""
    e = np.asarray(est, float) - np.asarray(truth, float)
    if np.any(angular):
        e[:, angular] = wrap_angle(e[:, angular])
    return e


def nees(err_x: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """(K,) e^T P^-1 e for errors (K, d) and covariances (K, d, d); never negative.

    P is symmetrised and inverted through its eigen-decomposition P = V diag(l) V^T with
    the eigenvalues floored at 1e-12 max(l) (rounding can leave a PSD matrix with tiny
    negative eigenvalues, and a plain solve then returns any sign): e^T P^-1 e =
    sum_k (v_k^T e)^2 / l_k >= 0. NaN where e or P is not finite or P is zero.
    """
    E = np.asarray(err_x, dtype=float)
    P = np.asarray(covs, dtype=float)
    out = np.full(len(E), np.nan)
    ok = np.isfinite(E).all(axis=1) & np.isfinite(P).all(axis=(1, 2))
    if not ok.any():
        return out
    Ps = 0.5 * (P[ok] + np.swapaxes(P[ok], 1, 2))
    lam, V = np.linalg.eigh(Ps)
    top = lam.max(axis=1)
    good = top > 0
    lam = np.maximum(lam, 1e-12 * top[:, None])
    proj = np.einsum("kij,ki->kj", V, E[ok])
    val = np.sum(proj * proj / np.where(lam > 0, lam, 1.0), axis=1)
    out[np.nonzero(ok)[0][good]] = val[good]
    return out


def reference_nees(err_x: np.ndarray, covs, ref_covs: np.ndarray | None = None) -> np.ndarray:
    """(K,) NEES of errors (K, d) with covariances covs (K, d, d), less ref_covs (K, d, d)
    if given (an estimated reference, see :meth:`RunMetrics.add`): NaN where
    covs - ref_covs is not positive definite."""
    C = np.array(covs, dtype=float)
    if ref_covs is not None:
        C = C - ref_covs
        with np.errstate(invalid="ignore"):
            pd = np.linalg.eigvalsh(0.5 * (C + np.swapaxes(C, 1, 2))).min(axis=1) > 0
        C[~pd] = np.nan
    return nees(err_x, C)


def whiteness(normalized: list[np.ndarray], max_lag: int = 20) -> dict:
    """Autocorrelation test of normalised innovation sequences (per channel).

    The sequence of the most frequent innovation dimension is tested; see
    :class:`Whiteness` (this is it, fed at once).
    """
    acc = Whiteness(max_lag)
    for e in normalized:
        acc.add(e)
    return acc.result()


class Whiteness:
    """Streaming autocorrelation test of normalised innovations (bounded memory).

    Per innovation dimension d: count N, sums of y = x - x_0 and y^2, lagged products
    sum_t y_t y_(t-l) for l = 1..max_lag, and the first and last max_lag samples, which
    give the sample autocorrelation of the mean-removed sequence exactly:
    sum_(t>=l) (y_t - m)(y_(t-l) - m) = P_l - m (S - head_l) - m (S - tail_l) + (N - l) m^2.
    The result tests the dimension with the most samples at lags 1..L, L = min(max_lag,
    N // 4): rho_l per channel, and the fraction of |rho_l| > 1.96 / sqrt(N).
    """

    def __init__(self, max_lag: int = 20):
        self.max_lag = int(max_lag)
        self.dims: dict[int, dict] = {}

    def add(self, e) -> None:
        """One normalised innovation vector (d,)."""
        self.add_block(np.asarray(e, dtype=float)[None, :])

    def add_block(self, X: np.ndarray) -> None:
        """Consecutive innovations of one dimension, (k, d)."""
        X = np.asarray(X, dtype=float)
        if X.size == 0:
            return
        d = X.shape[1]
        L = self.max_lag
        st = self.dims.get(d)
        if st is None:
            st = self.dims[d] = {"x0": X[0].copy(), "n": 0, "s": np.zeros(d), "q": np.zeros(d),
                                 "p": np.zeros((L + 1, d)), "head": np.zeros((0, d)), "tail": np.zeros((0, d))}
        Y = X - st["x0"]
        c = len(st["tail"])
        Z = np.vstack([st["tail"], Y])
        for lag in range(1, L + 1):
            a = max(c, lag)
            if a < len(Z):
                st["p"][lag] += np.sum(Z[a:] * Z[a - lag: len(Z) - lag], axis=0)
        st["n"] += len(Y)
        st["s"] += Y.sum(axis=0)
        st["q"] += np.sum(Y * Y, axis=0)
        if len(st["head"]) < L:
            st["head"] = np.vstack([st["head"], Y[: L - len(st["head"])]])
        st["tail"] = Z[-L:] if L else Z[:0]

    def result(self) -> dict:
        if not self.dims:
            return {}
        st = max(self.dims.values(), key=lambda v: v["n"])
        N = st["n"]
        if N < 10:
            return {}
        L = int(min(self.max_lag, N // 4))
        m = st["s"] / N
        var = st["q"] - N * m * m
        rho = np.zeros((len(m), L))
        for lag in range(1, L + 1):
            cov = st["p"][lag] - m * (st["s"] - st["head"][:lag].sum(axis=0)) \
                - m * (st["s"] - st["tail"][-lag:].sum(axis=0)) + (N - lag) * m * m
            rho[:, lag - 1] = np.where(var > 0, cov / np.where(var > 0, var, 1.0), 0.0)
        bound = 1.96 / np.sqrt(N)
        return {
            "lags": L,
            "samples": N,
            "max_abs_autocorrelation": float(np.max(np.abs(rho))),
            "fraction_outside_95": float(np.mean(np.abs(rho) > bound)),
            "bound_95": float(bound),
        }


def record_arrays(records) -> dict:
    """Arrays of a list of StepRecords: stamps (K,), z/zd/zdd (K, g), covs (list, entries
    (2g, 2g) or None), updates (list of UpdateResult or None), costs (K,)."""
    return {
        "stamps": np.array([r.estimate.stamp for r in records], dtype=float),
        "z": np.array([r.estimate.z for r in records], dtype=float),
        "zd": np.array([r.estimate.zd for r in records], dtype=float),
        "zdd": np.array([r.estimate.zdd for r in records], dtype=float),
        "covs": [r.estimate.cov for r in records],
        "updates": [r.update for r in records],
        "costs": np.array([r.cost for r in records], dtype=float),
    }


def evaluate_run(records, truth_z, truth_zd, truth_zdd, angular, duration: float | None = None,
                 truth_cov: np.ndarray | None = None) -> dict:
    """Metrics of one estimator run.

    records: list of StepRecord (stage output); truth_*: (K, g) truth at the records'
    stamps (see :func:`truth_at`); angular: (g,) bool mask of angle coordinates;
    truth_cov: covariances of an estimated reference (see :meth:`RunMetrics.add`).
    The same as :class:`RunMetrics` fed with all records at once.
    """
    acc = RunMetrics(angular, duration, truth=True)
    acc.add(record_arrays(records), truth_z, truth_zd, truth_zdd, truth_cov)
    return acc.result()


class RunMetrics:
    """Streaming metrics of one run: :meth:`add` chunks of steps in time order,
    :meth:`result` gives the dict of :func:`evaluate_run` (``truth=True``: RMSE, max error,
    NEES, NIS, whiteness, cost) or, without ground truth, steps, cost and mean NIS."""

    def __init__(self, angular, duration: float | None = None, truth: bool = True, max_lag: int = 20):
        self.angular = np.asarray(angular, bool)
        self.duration = duration
        self.truth = truth
        g = len(self.angular)
        self.steps = 0
        self.sq = {k: np.zeros(g) for k in ("z", "zd", "zdd")}
        self.mx = {k: np.zeros(g) for k in ("z", "zd", "zdd")}
        self.nees = {"sum": 0.0, "n": 0, "in_step": 0, "covered": 0, "covered_z": np.zeros(g), "missing_cov": False}
        self.nis = {"sum": 0.0, "n": 0, "dof": 0, "any": False}
        self.nees_series = SeriesMean()
        self.nis_series = SeriesMean()
        self.white = Whiteness(max_lag)
        self.cost = {"sum": 0.0, "max": -np.inf}
        self.g = g

    def add(self, arrays: dict, truth_z=None, truth_zd=None, truth_zdd=None, truth_cov=None):
        """arrays: :func:`record_arrays` of consecutive steps; truth_*: (K, g) at their stamps.

        truth_cov: (K, 2g, 2g) covariance of [z, zd] of an *estimated* reference (the batch
        smoother, ``mbde replay --reference smoother``): the NEES then uses P - P_ref, the
        covariance of the difference between a filter and the smoother of the same
        readings when both are optimal (Cov(x_f - x_s) = P_f - P_s, Rauch-Tung-Striebel);
        steps where P - P_ref is not positive definite get no NEES (and are counted).
        Returns the NEES of the steps (K,), None without ground truth or covariances."""
        K = len(arrays["stamps"])
        if K == 0:
            return None
        self.steps += K
        costs = arrays["costs"]
        self.cost["sum"] += float(np.sum(costs))
        self.cost["max"] = max(self.cost["max"], float(np.max(costs)))
        by_dim: dict[int, list] = {}  # innovations of this chunk per dimension, in order
        nis = []
        for u in arrays["updates"]:
            if u is None or u.nis is None:
                continue
            self.nis["any"] = True
            if math.isfinite(u.nis):
                self.nis["sum"] += float(u.nis)
                self.nis["n"] += 1
                self.nis["dof"] += int(u.dof)
                nis.append(float(u.nis))
            if self.truth and u.normalized_innovation is not None:
                by_dim.setdefault(len(u.normalized_innovation), []).append(u.normalized_innovation)
        self.nis_series.add(nis)
        for rows in by_dim.values():
            self.white.add_block(np.array(rows, dtype=float))
        if not self.truth:
            return None
        ez = coordinate_errors(arrays["z"], truth_z, self.angular)
        errs = {"z": ez, "zd": arrays["zd"] - truth_zd, "zdd": arrays["zdd"] - truth_zdd}
        for k, e in errs.items():
            self.sq[k] += np.sum(e * e, axis=0)
            self.mx[k] = np.maximum(self.mx[k], np.max(np.abs(e), axis=0))
        covs = arrays["covs"]
        if self.nees["missing_cov"] or any(c is None for c in covs):
            self.nees["missing_cov"] = True
            return None
        v = reference_nees(np.hstack([ez, errs["zd"]]), covs, truth_cov)
        if truth_cov is not None:
            self.nees["reference"] = self.nees.get("reference", 0) + int(np.isfinite(v).sum())
            self.nees["reference_steps"] = self.nees.get("reference_steps", 0) + K
        ok = np.isfinite(v)
        slo, shi, s95 = chi2_ppf([0.025, 0.975, 0.95], 2 * self.g)
        self.nees["sum"] += float(np.sum(v[ok]))
        self.nees["n"] += int(ok.sum())
        self.nees["in_step"] += int(np.sum((v[ok] >= slo) & (v[ok] <= shi)))
        self.nees["covered"] += int(np.sum(v[ok] <= s95))
        sd = np.sqrt(np.clip(np.array([np.diag(c)[: self.g] for c in covs], dtype=float), 0, None)[ok])
        if truth_cov is not None:
            sd = np.sqrt(np.clip(sd ** 2 - np.array([np.diag(c)[: self.g] for c in truth_cov])[ok], 0, None))
        self.nees["covered_z"] += np.sum(np.abs(ez[ok]) <= 1.96 * sd, axis=0)
        self.nees_series.add(v)
        return v

    def result(self) -> dict:
        out: dict = {"steps": self.steps}
        if self.truth and self.steps:
            K = self.steps
            out["rmse"] = {k: np.sqrt(v / K).tolist() for k, v in self.sq.items()}
            out["max_error"] = {k: v.tolist() for k, v in self.mx.items()}
            if not self.nees["missing_cov"]:
                n, d = self.nees["n"], 2 * self.g
                out["nees"] = _banded_mean(self.nees["sum"], n, d, self.nees_series)
                out["nees"].update({
                    "coverage_95": self.nees["covered"] / n if n else None,
                    "coverage_95_z": (self.nees["covered_z"] / n).tolist() if n else None,
                    "fraction_in_step_band": self.nees["in_step"] / n if n else None})
                if self.nees.get("reference_steps"):
                    out["nees"]["reference_covariance_subtracted"] = True
                    out["nees"]["fraction_positive_definite"] = self.nees["reference"] / self.nees["reference_steps"]
        if self.nis["any"]:
            n, total = self.nis["n"], self.nis["dof"]
            mean = self.nis["sum"] / n if n else None
            if self.truth:
                out["nis"] = _banded_mean(self.nis["sum"], n, total / n if n else 0, self.nis_series)
                out["nis"]["mean_dof"] = out["nis"].pop("dof")
                out["whiteness"] = self.white.result()
            elif n:
                out["nis"] = {"mean": mean}
        steps = max(self.steps, 1)
        out["step_time_us"] = {"mean": self.cost["sum"] / steps * 1e6,
                               "max": (self.cost["max"] if self.steps else 0.0) * 1e6}
        if self.duration:
            out["realtime_factor"] = self.cost["sum"] / self.duration
        return out


def sigma_z(covs, g: int):
    """(K, g) standard deviations of z from the covariances (list of (2g, 2g)), None if any is missing."""
    if not len(covs) or any(c is None for c in covs):
        return None
    return np.sqrt(np.clip(np.array([np.diag(c)[:g] for c in covs], dtype=float), 0, None))


def _banded_mean(total: float, n: int, dof: float, series: SeriesMean) -> dict:
    """Mean of n values summing to total, its 95 % band for a chi2(dof) series with the
    effective sample size of ``series`` and whether it lies inside."""
    if not n:
        return {"mean": None, "dof": dof, "band_95": [None, None], "in_band": False}
    mean = total / n
    r = series.result()
    n_eff = r["n_eff"] or n
    lo, hi = chi2_mean_band(dof, n_eff)
    return {"mean": mean, "dof": dof, "band_95": [lo, hi], "in_band": bool(lo <= mean <= hi),
            "effective_samples": n_eff, "autocorrelation_steps": r["tau"]}


def _rms(e: np.ndarray) -> list[float]:
    return np.sqrt(np.mean(e * e, axis=0)).tolist()


def truth_at(stamps: np.ndarray, t: np.ndarray, values: np.ndarray, angular=None) -> np.ndarray:
    """Linear interpolation of a truth series values (K, g) at times t (K,) to ``stamps``.

    Angle columns are unwrapped before and wrapped after interpolating. Exact when the
    stamps coincide with truth samples (the usual case: the truth is recorded on a grid
    that contains the filter grid).
    """
    values = np.asarray(values, float)
    out = np.empty((len(stamps), values.shape[1]))
    for c in range(values.shape[1]):
        col = values[:, c]
        if angular is not None and angular[c]:
            col = np.unwrap(col)
        out[:, c] = np.interp(stamps, t, col)
        if angular is not None and angular[c]:
            out[:, c] = wrap_angle(out[:, c])
    return out
