"""Likelihood gate of the particle filter: the Mahalanobis gate of the Kalman observers
generalised to a particle predictive density (anchor: robot_localization's rejection
thresholds, see :mod:`mbde_core.estimators.options.schema`).

The particle filter predicts a reading o by the mixture p(o) = sum_i w_i N(o; h_i, Sigma_s)
(h_i = h(x_i) of particle i, Sigma_s the noise it assumes). Its log-density relative to
the mixture's density at a reference reading o_ref,

    d^2(o) = -2 [log sum_i w_i exp(-d_i^2(o) / 2) - log sum_i w_i exp(-d_i^2(o_ref) / 2)],
    d_i^2(o) = r_i^T Sigma_s^-1 r_i,  r_i = o - h_i (angles wrapped),

is the squared Mahalanobis distance y^T S^-1 y of the Kalman gate when the particles'
predictions form a Gaussian cloud (then with S = Sigma_s + their covariance, and o_ref
the cloud's mode), and stays meaningful for the multimodal clouds of a particle filter
(branches, a uniform re-initialisation): the reading is compared with the density where
the filter expects readings most, not with one moment-matched Gaussian. o_ref is, among
the predictions of the ``REFERENCES`` heaviest particles and of the particle nearest the
weighted mean prediction, the one where the mixture density is highest (O(N) each). The
reading is rejected when d^2 exceeds the chi2(d) quantile of the ``gate`` probability,
as in the Kalman observers.

The gate's kernel is widened to Sigma_g = Sigma_s + b^2 C (C: the weighted covariance of
the predicted readings, b: Silverman's bandwidth factor (4 / (n (d + 2)))^(1 / (d + 4))
with n the effective sample size; the regularised particle filter's kernel, Musso,
Oudjane & Le Gland 2001): the particles are a sample of the predictive density, not its
only support. Without it a cloud whose spacing exceeds the sensor noise (a uniform
(re-)initialisation read by a precise encoder) has density spikes at its particles and
nearly every reading between them looks like an outlier (vipf on fourbar_encoder: 62 %
of the clean readings rejected, 32 % with the kernel). For a Gaussian cloud the
mixture's covariance becomes Sigma_s + (1 + b^2) C, slightly wider than the Kalman S.

On by default (``gate: 0.999999``, as the Kalman observers; ``mbde bench pf`` turns it off
to reproduce paper 000), always with the stage's adaptive scale
(:class:`~mbde_core.estimators.stage.guards.AdaptiveGate`): the particle filters' clouds
are overconfident once converged -- the default 100 particles collapse to a spread of
1e-3 rad while the error is 0.1-0.3 rad on fourbar_gyro -- so the fixed gate rejected
correct readings (pf 12 %, vipf 32 % of the clean fourbar_encoder readings) and the
re-acquisitions that followed made the estimate worse; the scale (the median of the
recent d^2 over its chi-square value) widens the gate by the cloud's actual
inconsistency. Measured on fourbar_gyro over 5 seeds, whole-run RMSE with the
100-sigma outliers of ``mbde bench faults`` over the clean RMSE (mean of the seeds): pf
1.82 ungated -> 1.28 gated, vipf 2.0 -> 1.33; the clean readings it still rejects are
those of a cloud that is confidently wrong (README, Sensor faults).
"""
from __future__ import annotations

import math

import numpy as np

REFERENCES = 16


def kernel_whitening(R: np.ndarray, C: np.ndarray, n_eff: float) -> np.ndarray:
    """W with W^T W = (R + b^2 C)^-1 (see the module docstring); R: (d, d) sensor noise,
    C: (d, d) weighted covariance of the predicted readings, n_eff: effective sample size."""
    d = R.shape[0]
    b2 = (4.0 / (max(n_eff, 1.0) * (d + 2))) ** (2.0 / (d + 4))
    Rg = R + b2 * 0.5 * (C + C.T)
    if d == 1:  # the same number without two LAPACK calls (a gyroscope's gate, every step)
        v = float(Rg[0, 0])
        if v > 0.0:
            return np.array([[1.0 / np.sqrt(v)]])
    return np.linalg.inv(np.linalg.cholesky(Rg))


def _logsumexp(x: np.ndarray, axis=None):
    """log sum exp(x) along ``axis`` (numpy only: scipy's array-API wrapper costs ~0.3 ms a call)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out.reshape(()) if axis is None else np.squeeze(out, axis=axis)


def _lse(x: np.ndarray) -> float:
    """log sum exp(x) of a 1-D array as a float (:func:`_logsumexp` without its array
    bookkeeping: the gate's hot path); -inf when every entry is -inf."""
    m = float(x.max())
    if not np.isfinite(m):
        m = 0.0
    total = float(np.exp(x - m).sum())
    return math.log(total) + m if total > 0.0 else -math.inf


def _whitened_sq(residual, pred: np.ndarray, refs: np.ndarray, W: np.ndarray) -> np.ndarray:
    """|W r_ki|^2 (K, N) of the residuals r_ki = residual(pred[refs[k]], pred[i]).

    The residuals are laid out channel-major (their inputs are (d, .) arrays seen as
    (., ., d)), so every operation runs along the N particles; the (K, N, d) matmul and
    einsum over a last axis of length d cost ~2.5x more at N = 300, d = 2. The same sums
    as ``(r @ W.T)`` squared and summed over d, to rounding (no BLAS)."""
    PT = np.ascontiguousarray(pred.T)  # (d, N)
    r = residual(PT[:, refs][:, :, None].transpose(1, 2, 0), PT[:, None, :].transpose(1, 2, 0)).transpose(2, 0, 1)
    d = r.shape[0]
    out = None
    for j in range(d):
        e = r[0] * W[j, 0]
        for i in range(1, d):
            e += r[i] * W[j, i]
        out = e * e if out is None else out + e * e
    return out


def predictive_d2(ll: np.ndarray, logw: np.ndarray, pred: np.ndarray, residual, W: np.ndarray,
                  limit: float | None = None, w: np.ndarray | None = None) -> float:
    """d^2 of a reading (see the module docstring).

    ll: (N,) -d_i^2(o)/2 of the reading; logw: (N,) normalised log-weights; pred: (N, d)
    predicted readings h_i; residual(a, b): the sensor's residual a - b (angles wrapped,
    broadcasting); W: (d, d) whitening, W^T W = Sigma_s^-1. With ``limit``, a reading whose
    upper bound -2 log sum_i w_i exp(-d_i^2/2) >= d^2 (the reference term is <= 0) is
    within it is answered with that bound (one pass over the particles). The reference
    densities of the candidates are evaluated in one (K, N) array. w: the normalised
    weights exp(logw) if the caller has them (equal to rounding; they only choose the
    particle nearest the mean).
    """
    with np.errstate(divide="ignore", under="ignore", over="ignore"):
        top = _lse(logw + ll)
        if limit is not None and -2.0 * top <= limit:
            return -2.0 * top
        N = len(logw)
        k = min(REFERENCES, N)
        cand = np.argpartition(logw, N - k)[N - k :] if k < N else np.arange(N)
        if w is None:
            w = np.exp(logw - logw.max())
            w = w / w.sum()
        refs = np.empty(k + 1, dtype=np.int64)
        refs[:k] = cand
        if pred.shape[1] == 1 and W.shape == (1, 1):  # scalar readings: the same products on (N,) rows
            p, w0 = pred[:, 0], W[0, 0]
            dm = residual(p, w @ p) * w0
            refs[k] = int(np.argmin(dm * dm))
            e = residual(p[refs][:, None], p[None, :]) * w0  # (K, N)
            a = logw[None, :] - 0.5 * (e * e)
        else:
            dm = residual(pred, (w @ pred)[None, :]) @ W.T
            refs[k] = int(np.argmin(np.einsum("ij,ij->i", dm, dm)))
            a = logw[None, :] - 0.5 * _whitened_sq(residual, pred, refs, W)
        m = a.max(axis=1, keepdims=True)
        m[~np.isfinite(m)] = 0.0
        ref = float(np.max(np.log(np.exp(a - m).sum(axis=1)) + m[:, 0]))
    return float(-2.0 * (top - ref))
