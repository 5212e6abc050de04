"""The particle filter's predictions of the readings, their likelihood and its gate.

A reading of the slot [t - dt/2, t + dt/2) off the grid time t (a jittered stamp, a sensor
whose period is not a multiple of the step; several readings of one sensor in a slot reach
the filter combined into one at t, :mod:`~mbde_core.estimators.stage.multirate`) is
predicted at its own stamp, from the state extrapolated to
it, q + lag qd + lag^2/2 qdd, qd + lag qdd (second order), not from the state at t (on
pendulum_release: 0.04 rad = 100 sigma of its encoder at 10 rad/s) (:func:`readings`); the
sensor's noise Sigma_s is ``sensor_sigma`` by name, else ``sensor_sigma_by_type``, else
its noise model (:func:`noise`), times the reading's ``variance_factor`` (several readings of a
slot combined into one, :mod:`~mbde_core.estimators.stage.multirate`). Each particle's log-likelihood is paper 000's eq. 10
(:func:`plain_log_likelihood`).

**The gate**: the Mahalanobis gate of the Kalman observers generalised to a particle
predictive density (anchor: robot_localization's rejection thresholds, see
:mod:`mbde_core.estimators.options.schema`).

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

from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.particle import compiled as pf_compiled
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.estimators.particle.prediction import (accelerations, h_memo, noise_jacobian,  # noqa: F401 (the update's names)
                                                     predict_at_state, r_columns, will_propose)
from mbde_core.estimators.particle.outputs import wsum

# [s] no gating after a uniform (re)initialisation: the cloud is still converging (issue
# 13's "converged within 1 s"), a reading it cannot yet explain is not an outlier (the
# gate rejected 4-8 % of pf_rig's clean readings there and stalled the convergence)
GATE_GRACE = 1.0
# ... the threshold is widened instead of dropped: x 25 in d^2 (4.9 -> 24 sigma), so a gross
# outlier (mbde bench faults: 100 sigma) is still rejected while the cloud converges
GRACE_WIDEN = 25.0
# ... unless HOLD: then a reading over the (un-widened) gate there waits one update and
# the next readings decide whether it was an outlier or news (pf_hold; pf on pf_sim and
# pf_rig_branch0/1 with mbde bench faults' outliers, seeds 0-11: acquisitions longer than
# 1 s 15 -> 9 of 72 runs, pf_sim 3 -> 0)
HOLD = True
# ... and there the readings that the noise proposal moves to (gyroscopes, accelerometers)
# are fused with the robust likelihood of likelihood.robust, k = ROBUST_K per dimension of
# the readings: a particle that misses them by more than k in log-likelihood loses e^k
# at most and draws its noise from the prior, not towards them. A wide cloud predicts a
# 100-sigma outlier within its gate (pf_rig_branch0, mbde bench faults' outliers at
# 0.29 s: d^2 = 10): fused plainly, the proposal moved the whole cloud to it and the
# particles that explained it took all the weight (steady RMSE over 1.5x clean in 4 of
# 8 seeds, up to 37x; k = 5: 1 of 8; k = 3: 0 of 8, clean acquisitions no slower). k per
# dimension: one k for the two gyroscopes of fivebar_gyro kept vipf's cloud wide and
# locking (2 of 2 seeds lost). Position readings keep their plain likelihood: a precise
# encoder must thin the cloud at once (robust encoders: sixbar_loop3_encoder 6 of 10).
ROBUST_K = 3.0

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


def lse(x: np.ndarray) -> float:
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


def candidates(logw: np.ndarray) -> np.ndarray:
    """The ``REFERENCES`` heaviest particles (all of them when fewer): the gate's candidate
    references (:func:`predictive_d2`)."""
    N = len(logw)
    k = min(REFERENCES, N)
    return np.argpartition(logw, N - k)[N - k :] if k < N else np.arange(N)


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
        top = lse(logw + ll)
        if limit is not None and -2.0 * top <= limit:
            return -2.0 * top
        N = len(logw)
        cand = candidates(logw)
        k = cand.size
        if w is None:
            w = np.exp(logw - logw.max())
            w = w / w.sum()
        refs = np.empty(k + 1, dtype=np.int64)
        refs[:k] = cand
        if pred.shape[1] == 1 and W.shape == (1, 1):  # scalar readings: the same products on (N,) rows
            p, w0 = pred[:, 0], W[0, 0]
            dm = residual(p, wsum(w, p)) * w0  # no BLAS (outputs.wsum)
            refs[k] = int(np.argmin(dm * dm))
            e = residual(p[refs][:, None], p[None, :]) * w0  # (K, N)
            a = logw[None, :] - 0.5 * (e * e)
        else:
            dm = np.einsum("nd,kd->nk", residual(pred, wsum(w, pred)[None, :]), W)  # no BLAS (outputs.wsum)
            refs[k] = int(np.argmin(np.einsum("ij,ij->i", dm, dm)))
            a = logw[None, :] - 0.5 * _whitened_sq(residual, pred, refs, W)
        m = a.max(axis=1, keepdims=True)
        m[~np.isfinite(m)] = 0.0
        ref = float(np.max(np.log(np.exp(a - m).sum(axis=1)) + m[:, 0]))
    return float(-2.0 * (top - ref))


def robust(ll: np.ndarray, k: float) -> np.ndarray:
    """log(e^ll_i + e^(max ll - k)): the log-likelihood (N,) of readings that are correct or,
    with a small prior probability, outliers, with the outliers' density e^-k of the best
    particle's (a mixture with a flat outlier component, as robust filters use). A particle
    that misses the readings loses e^k at most, so one outlier cannot hand the cloud to the
    few particles that happen to explain it, while a run of correct readings still
    multiplies their e^k."""
    top = np.max(ll) if ll.size else -np.inf
    if not np.isfinite(top):
        return ll
    return np.logaddexp(ll, top - k)


def plain_log_likelihood(readings, n: int) -> np.ndarray:
    """(n,) sum over readings of -|W r_i|^2 / 2 per particle (the readings' r and W;
    zeros without readings): the likelihood of paper 000 eq. 10 without the proposal."""
    ll = np.zeros(n)
    for x in readings:
        e = np.einsum("nd,kd->nk", x.r, x.W)
        ll -= 0.5 * np.einsum("ij,ij->i", e, e)
    return ll


class _Reading:
    """One accepted reading and the cloud's predictions of it."""

    __slots__ = ("m", "s", "pred", "r", "R", "W", "C", "y", "at_state", "G")

    def __init__(self, m, s, pred, r, R, W, C, y, at_state=False, G=None):
        self.m, self.s, self.pred, self.r, self.R, self.W, self.C, self.y = m, s, pred, r, R, W, C, y
        self.at_state = at_state  # pred = h(q, qd, qdd) at the particles' state (no lag)
        self.G = G  # (N, d, g) dh/dv of the step's noise if the gate computed it (proposal.noise_jacobian)


def velocity_linear(s) -> bool:
    return bool(getattr(s, "uses_qd", False)) and not s.uses_qdd


def position_only(s) -> bool:
    return not getattr(s, "uses_qd", False) and not s.uses_qdd


def in_grace(pf) -> bool:
    """In the GATE_GRACE seconds after a uniform (re)initialisation or an injection."""
    return pf._uniform_from is not None and pf.t - pf._uniform_from < GATE_GRACE


def robust_ll(pf, rd, ll):
    """(ll, far) of readings rd with per-particle log-likelihood ll (N,): the part of the
    readings that are not position-only made robust (likelihood.robust, k = ROBUST_K x their
    dimension; the position readings' plain part stays), and far (N,) True where the
    outlier component explains them better (None without such readings)."""
    moving = [x for x in rd if not position_only(x.s)]
    if not moving:
        return ll, None
    k = ROBUST_K * sum(int(x.s.dim) for x in moving)
    fixed = plain_log_likelihood([x for x in rd if position_only(x.s)], pf.N)
    with np.errstate(invalid="ignore"):
        rest = np.where(np.isfinite(fixed), ll - fixed, -np.inf)
    return fixed + robust(rest, k), ~(rest >= np.max(rest) - k)


def noise(pf, name: str):
    """(Sigma_s (d, d), W (d, d)) with W^T W = Sigma_s^-1 (whitening) for one sensor."""
    if name not in pf._sensor_noise:
        s = pf.sensors[name]
        by_name = pf.options.sensor_sigma
        by_type = pf.options.sensor_sigma_by_type.as_dict().get(s.kind)
        if name in by_name:
            R = np.diag(np.broadcast_to(np.asarray(by_name[name], dtype=float), (s.dim,)) ** 2)
        elif by_type is not None:
            R = np.eye(s.dim) * float(by_type) ** 2
        else:  # the noise model (accelerometers: plus the model-error term of pf_scale)
            R = pf_scale.sensor_covariance(s, pf.mech)
        pf._sensor_noise[name] = (R, np.linalg.inv(np.linalg.cholesky(R)))
    return pf._sensor_noise[name]


def readings(pf, measurements, gates, suspects=None):
    """The cloud's predictions of each reading; gated readings are rejected. In the
    first GATE_GRACE seconds after a uniform (re)initialisation (the cloud is still
    converging) they are appended to ``suspects`` instead if HOLD and a list is given
    (:mod:`.weights`), else the threshold is GRACE_WIDEN times wider."""
    if gates is None:  # not driven by a stage: the ``gate`` option
        gates = {}
        if pf.default_gate > 0:
            gates = {s.name: float(chi2_ppf(pf.default_gate, s.dim)) for s in pf.sensors}
    grace = in_grace(pf)
    hold = grace and HOLD
    if grace and not hold:
        gates = {k: v * GRACE_WIDEN for k, v in gates.items()}
    w = pf.weights()
    n_eff = 1.0 / float(np.einsum("n,n->", w, w))
    lag_floor = max(1e-9, 4.0 * math.ulp(pf.t))
    qdd_full = None
    out, rejected = [], []
    for m in measurements:
        s = pf.sensors[m.sensor]
        if s.uses_qdd and qdd_full is None:
            qdd_full = accelerations(pf)
        qdd = qdd_full if s.uses_qdd else pf.qdd
        lag = float(m.stamp) - pf.t  # 0 to a few ulps of t at Unix time (2.4e-7 s): at the state
        at_state = not (abs(lag) > lag_floor and not s.uses_qdd)
        if not at_state:  # a reading of the slot, not of its time
            q = pf.q + lag * pf.qd + (0.5 * lag * lag) * qdd
            pred = s.h(q, pf.qd + lag * qdd, qdd)
        limit = gates.get(m.sensor)
        G = None
        if at_state:  # the prediction, and dh/dv of the step's noise where it is drawn now
            pred, G = predict_at_state(pf, s, qdd, (limit is not None and limit > 0) or will_propose(pf))
        R, W = noise(pf, m.sensor)
        f = float(getattr(m, "variance_factor", 1.0))
        if f != 1.0:  # several readings of the slot combined into one (stage.multirate): c R
            R, W = R * f, W / math.sqrt(f)
        value = np.asarray(m.value, dtype=float)
        mean = wsum(w, pred)
        if s.angular.any():
            mean = np.where(s.angular, np.arctan2(wsum(w, np.sin(pred)), wsum(w, np.cos(pred))), mean)
        dev = s.residual(pred, mean[None, :])
        C = np.einsum("n,ni,nj->ij", w, dev, dev)
        r = s.residual(value[None, :], pred)
        if limit is not None and limit > 0:
            # the step's acceleration noise widens each particle's prediction too: with the
            # adapted proposal p(o | x_i) = N(h_i, R + sigma_a^2 G_i G_i^T) (:mod:`.proposal`),
            # its weighted mean in the kernel (without it pf_rig_branch1 rejected 6 correct
            # gyroscope readings in a row at 20 rad/s, near a dead point where G changes
            # 300-fold in 10 ms, and drifted off)
            if G is None:
                G = noise_jacobian(pf, s, qdd, pred if at_state else None)
            Rn = R if G is None else R + pf.sigma_a ** 2 * np.einsum("n,ndg,nkg->dk", w, G, G)
            Wg = kernel_whitening(Rn, C, n_eff)
            eg = np.einsum("nd,kd->nk", r, Wg)
            ll_r = -0.5 * np.einsum("ij,ij->i", eg, eg)
            d2 = None
            if pred.shape[1] == 1 and pf_compiled.for_set(pf):  # the scalar branch in one compiled pass
                d2 = pf_compiled.gate_d2(ll_r, pf.logw, w, pred[:, 0], Wg[0, 0], s.angular[0], candidates(pf.logw))
            if d2 is None:
                d2 = predictive_d2(ll_r, pf.logw, pred, s.residual, Wg, w=w)
            pf._distances.append((m.sensor, d2))  # UpdateResult.distances: the stage's adaptive gate scale
            if not d2 <= limit:
                if hold and suspects is not None:  # judged at the next update (:mod:`.weights`)
                    suspects.append(_Reading(m, s, pred, r, R, W, C, s.residual(value, mean), at_state, G))
                    pf._suspect_fallback &= d2 <= limit * GRACE_WIDEN
                else:
                    rejected.append(m.sensor)
                continue
        out.append(_Reading(m, s, pred, r, R, W, C, s.residual(value, mean), at_state, G))
    return out, rejected


def log_likelihood(pf, measurements, gates=None):
    """Per-particle log-likelihood of the readings at the current states (eq. 10),
    with gating: (ll (N,), accepted names, rejected names, innovations, their S)."""
    pf._distances = []
    rd, rejected = readings(pf, measurements, gates)
    ll = plain_log_likelihood(rd, pf.N)
    return ll, [x.m.sensor for x in rd], rejected, [x.y for x in rd], [x.C + x.R for x in rd]


def innovation_stats(ys, blocks):
    """(nis, e, logdet) of the stacked innovations y = [y_1, ...] with the block-diagonal
    S = diag(S_1, ...) (one block per reading), or (None, None, None) if a block is not
    positive definite: the Cholesky factor of S is the blocks' factors on its diagonal, so
    e = L^-1 y and log det S = 2 sum log diag L are those of the blocks, stacked and summed
    (the full factor's values to rounding, without assembling S; a 1 x 1 block in scalar
    arithmetic: an encoder's or a gyroscope's reading costs no LAPACK call)."""
    es, nis, logdet = [], 0.0, 0.0
    for y, S in zip(ys, blocks):
        if S.shape == (1, 1):
            s = float(S[0, 0])
            if not s > 0.0:
                return None, None, None
            l = math.sqrt(s)
            e = np.array([float(y[0]) / l])
            logdet += math.log(s)
        else:
            try:
                L = np.linalg.cholesky(S)
            except np.linalg.LinAlgError:
                return None, None, None
            e = np.linalg.solve(L, y)
            logdet += float(2.0 * np.log(np.diagonal(L)).sum())
        nis += float(e @ e)
        es.append(e)
    return nis, (es[0] if len(es) == 1 else np.concatenate(es)), logdet
