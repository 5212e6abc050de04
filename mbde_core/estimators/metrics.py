"""Accuracy and consistency metrics of an estimator run against ground truth.

- RMSE and maximum error of z, zd, zdd (angles wrapped to [-pi, pi));
- NEES e^T P^-1 e of e = [z, zd] - truth per step (Bar-Shalom et al. 2001, ch. 5.4);
  for a consistent filter it is chi-square with d = 2g degrees of freedom. The mean over
  K steps is compared with the two-sided 95 % band of the mean of K independent chi2(d)
  variables, [chi2_{0.025}(K d) / K, chi2_{0.975}(K d) / K]; successive steps of one run
  are correlated, so the band is optimistic for a single run: tests average independent
  Monte-Carlo runs instead (see :func:`chi2_band`). The fraction of steps whose NEES
  lies in the per-step band [chi2_{0.025}(d), chi2_{0.975}(d)] is also reported;
- NIS y^T S^-1 y of every update, with its band (same construction, per-update dof);
- innovation whiteness: sample autocorrelation of the normalised innovations at lags
  1..L and the fraction of lags outside +/- 1.96 / sqrt(N);
- cost: mean/max step time [us] and the real-time factor = processing time / data
  duration (< 1: faster than real time).
"""
from __future__ import annotations

import numpy as np
import scipy.stats

from mbde_core.sensors.base import wrap_angle


def chi2_band(dof: int, count: int, p: float = 0.95) -> tuple[float, float]:
    """Band of the mean of ``count`` independent chi2(dof) variables at probability p."""
    a = (1.0 - p) / 2.0
    k = max(int(count), 1) * int(dof)
    return float(scipy.stats.chi2.ppf(a, k) / max(count, 1)), float(scipy.stats.chi2.ppf(1 - a, k) / max(count, 1))


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


def whiteness(normalized: list[np.ndarray], max_lag: int = 20) -> dict:
    """Autocorrelation test of normalised innovation sequences (per channel)."""
    if not normalized:
        return {}
    dims = {}
    for e in normalized:
        dims.setdefault(len(e), []).append(e)
    d, seqs = max(dims.items(), key=lambda kv: len(kv[1]))
    X = np.array(seqs)  # (N, d)
    N = X.shape[0]
    if N < 10:
        return {}
    L = int(min(max_lag, N // 4))
    X = X - X.mean(axis=0)
    var = np.sum(X * X, axis=0)
    rho = np.array([[np.sum(X[l:, c] * X[:-l, c]) / var[c] if var[c] > 0 else 0.0 for l in range(1, L + 1)] for c in range(d)])
    bound = 1.96 / np.sqrt(N)
    return {
        "lags": L,
        "samples": N,
        "max_abs_autocorrelation": float(np.max(np.abs(rho))),
        "fraction_outside_95": float(np.mean(np.abs(rho) > bound)),
        "bound_95": float(bound),
    }


def evaluate_run(records, truth_z, truth_zd, truth_zdd, angular, duration: float | None = None) -> dict:
    """Metrics of one estimator run.

    records: list of StepRecord (stage output); truth_*: (K, g) truth at the records'
    stamps (see :func:`truth_at`); angular: (g,) bool mask of angle coordinates.
    """
    z = np.array([r.estimate.z for r in records])
    zd = np.array([r.estimate.zd for r in records])
    zdd = np.array([r.estimate.zdd for r in records])
    g = z.shape[1]
    ez = coordinate_errors(z, truth_z, angular)
    ezd = zd - truth_zd
    ezdd = zdd - truth_zdd
    out = {
        "steps": len(records),
        "rmse": {"z": _rms(ez), "zd": _rms(ezd), "zdd": _rms(ezdd)},
        "max_error": {"z": np.max(np.abs(ez), axis=0).tolist(), "zd": np.max(np.abs(ezd), axis=0).tolist(),
                      "zdd": np.max(np.abs(ezdd), axis=0).tolist()},
    }
    covs = [r.estimate.cov for r in records]
    if all(c is not None for c in covs):
        ex = np.hstack([ez, ezd])
        v = nees(ex, np.array(covs))
        ok = np.isfinite(v)
        d = 2 * g
        lo, hi = chi2_band(d, int(ok.sum()))
        slo, shi = scipy.stats.chi2.ppf([0.025, 0.975], d)
        out["nees"] = {
            "mean": float(np.mean(v[ok])) if ok.any() else None,
            "dof": d,
            "band_95": [lo, hi],
            "fraction_in_step_band": float(np.mean((v[ok] >= slo) & (v[ok] <= shi))) if ok.any() else None,
            "in_band": bool(ok.any() and lo <= np.mean(v[ok]) <= hi),
        }
    nis_vals = [(r.update.nis, r.update.dof) for r in records if r.update is not None and r.update.nis is not None]
    if nis_vals:
        vals = np.array([x for x, _ in nis_vals], dtype=float)
        dofs = np.array([d for _, d in nis_vals])
        ok = np.isfinite(vals)
        total = int(dofs[ok].sum())
        n_upd = int(ok.sum())
        lo = scipy.stats.chi2.ppf(0.025, total) / n_upd if n_upd else None
        hi = scipy.stats.chi2.ppf(0.975, total) / n_upd if n_upd else None
        mean_dof = float(np.mean(dofs[ok])) if n_upd else None
        out["nis"] = {
            "mean": float(np.mean(vals[ok])) if n_upd else None,
            "mean_dof": mean_dof,
            "band_95": [lo, hi],
            "in_band": bool(n_upd and lo <= np.mean(vals[ok]) <= hi),
        }
        out["whiteness"] = whiteness([r.update.normalized_innovation for r in records
                                      if r.update is not None and r.update.normalized_innovation is not None])
    cost = np.array([r.cost for r in records])
    out["step_time_us"] = {"mean": float(np.mean(cost) * 1e6), "max": float(np.max(cost) * 1e6)}
    if duration:
        out["realtime_factor"] = float(np.sum(cost) / duration)
    return out


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
