"""Adaptive plant noise: one scale on the rule's Sigma^P estimated online from the innovations.

The default-tuning rule (:mod:`~mbde_core.estimators.options.rule`) sets the plant-noise
density for the worst model error it can bound; on an exact model that noise is absent
from the truth and the filters are cautious (``mbde bench trust`` table 1: NEES/dof near
0.5), while a bias-like model error needs it. ``plant_noise.adaptive: true`` (UKF,
errorEKF) multiplies Sigma^P by a scale s estimated from the innovations by maximum
likelihood over a sliding window (the one-parameter form of innovation-based adaptive
estimation, Mehra 1970; Mohamed & Schwarz 1999):

For each fused update, S = A + R with A = H P^- H^T the predicted state's share of the
innovation covariance. Scaling A by m, the log-likelihood's score and Fisher information
at m = 1 are ``1/2 tr(S^-1 A S^-1 (y y^T - S))`` and ``1/2 tr(S^-1 A S^-1 A)``. With the
share summarised by one number per update, f = 1 - (det R / det S)^(1/d) (exact for one
channel: f = A / S), they are

    score = d f (NIS/d - 1) / 2,        info = d f^2 / 2,

and one Fisher-scoring step over the window's updates, with a prior of information
``PRIOR_INFO`` at m = 1 (readings that hardly see the state leave m near 1), gives

    m = 1 + sum(score) / (sum(info) + PRIOR_INFO).

The scale follows ln s' = GAIN ln m, its rate bounded: at most ``RATE_DOWN`` per second
down and ``RATE_UP`` per second up (a bias step raises the NIS: Q then grows by at most
e^RATE_UP per second, and the gate's rejected readings never enter the window, so a
fault is not absorbed in the time the verdict needs to see it), and s stays within
[``LOW``, ``HIGH``] x the rule's value. Learning starts ``window`` seconds after a reset
(the initial covariance's transient is not plant noise).
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

LOW, HIGH = 0.01, 100.0   # bounds of the scale on the rule's Sigma^P
RATE_DOWN = 3.0           # [1/s] largest decrease of ln s per second
RATE_UP = 1.0             # [1/s] largest increase of ln s per second (a bias step's Q: x e per s at most)
GAIN = 2.0                # [1/s] ln s' = GAIN ln m
PRIOR_INFO = 1.0          # information of the prior m = 1 (of one update whose S is all A)


def score_and_information(y, S, A) -> tuple[float, float]:
    """(score, Fisher information) at m = 1 of the innovation y ~ N(0, R + m A), S = R + A."""
    try:
        W = np.linalg.solve(S, A)  # S^-1 A
        v = np.linalg.solve(S, y)  # S^-1 y
    except np.linalg.LinAlgError:
        return float("nan"), float("nan")
    return 0.5 * (float(v @ A @ v) - float(np.trace(W))), 0.5 * float(np.sum(W * W.T))


def summary_score(nis: float, d: int, logdet_s: float, logdet_r: float) -> tuple[float, float]:
    """(score, information) from the NIS and log det S of d channels alone, the predicted
    state's share f = 1 - (det R / det S)^(1/d) (exact for d = 1)."""
    if not (math.isfinite(nis) and math.isfinite(logdet_s) and math.isfinite(logdet_r)):
        return float("nan"), float("nan")
    f = min(max(1.0 - math.exp(min((logdet_r - logdet_s) / d, 0.0)), 0.0), 1.0)
    return 0.5 * f * (nis - d), 0.5 * d * f * f


class AdaptivePlantNoise:
    """Mixin of the Kalman observers: ``plant_noise`` scaled by ``noise_scale`` and, with
    ``plant_noise.adaptive``, the scale learnt from each update's UpdateResult
    (:meth:`learned`, through which the observer's ``update`` returns it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_adaptive()

    def reset(self, t, init) -> None:
        super().reset(t, init)
        self._reset_adaptive()

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), **self.adaptive_diagnostics()}

    def _init_adaptive(self) -> None:
        pn = self.options.plant_noise
        self._adaptive = bool(getattr(pn, "adaptive", False))
        self._adapt_window = float(getattr(pn, "adaptive_window", 1.0))
        self._logdet_r: dict = {}
        self._reset_adaptive()

    def _reset_adaptive(self) -> None:
        self.noise_scale = 1.0
        self._ln_scale = 0.0
        self._adapt_rows = deque()   # (t, score, info)
        self._adapt_sums = [0.0, 0.0]
        self._adapt_start = None     # time of the first update after a reset
        self._adapt_last = None      # time of the last learning step

    def plant_noise(self, dt: float) -> np.ndarray:
        Q = super().plant_noise(dt)
        return Q if self.noise_scale == 1.0 else Q * self.noise_scale

    def augmented_noise(self, dt: float) -> np.ndarray:
        """The input states' Sigma^P with the scaled plant-noise block."""
        Q = super().augmented_noise(dt)
        if self.noise_scale == 1.0:
            return Q
        Q = Q.copy()
        g2 = 2 * self.g
        Q[:g2, :g2] = self.plant_noise(dt)
        return Q

    def _log_det_r(self, names) -> float:
        key = tuple(names)
        v = self._logdet_r.get(key)
        if v is None:
            R = self.model.noise_covariance(list(names), self._sigma)
            sign, v = np.linalg.slogdet(R)
            v = float(v) if sign > 0 else float("nan")
            self._logdet_r[key] = v
        return v

    def learned(self, res, y=None, R=None, S=None, H=None, P=None):
        """``res`` (an update's UpdateResult), after one learning step from it; y, R: the
        fused readings' innovation and noise covariance, with S (the innovation
        covariance) or H and P^- (then S = H P^- H^T + R): the exact score and information
        per channel, else from ``res`` alone (module doc). Updates with a rejected reading
        are not learnt from. Nothing is computed without ``plant_noise.adaptive``."""
        if self._adaptive and res is not None and res.accepted and not res.rejected:
            A = S - R if S is not None and R is not None else None
            if A is None and H is not None and P is not None:
                A = H @ P @ H.T
            self._learn(res, y, None if A is None or R is None else A + R, A)
        return res

    def _learn(self, res, y, S, A) -> None:
        if S is not None and A is not None and y is not None and S.shape[0] > 1:
            score, info = score_and_information(y, S, A)
        else:
            d = int(res.dof)
            if res.nis is None or res.logdet is None or d <= 0:
                return
            score, info = summary_score(float(res.nis), d, float(res.logdet), self._log_det_r(res.accepted))
        if not (math.isfinite(score) and math.isfinite(info)):
            return
        t = float(self.t)
        if self._adapt_start is None:
            self._adapt_start = t
        rows, sums = self._adapt_rows, self._adapt_sums
        rows.append((t, score, info))
        sums[0] += score
        sums[1] += info
        while rows and rows[0][0] < t - self._adapt_window:
            _, s0, i0 = rows.popleft()
            sums[0] -= s0
            sums[1] -= i0
        last, self._adapt_last = self._adapt_last, t
        if t - self._adapt_start < self._adapt_window or last is None or t <= last:
            return
        m = 1.0 + sums[0] / (max(sums[1], 0.0) + PRIOR_INFO)
        step = GAIN * math.log(max(m, 1e-3)) * (t - last)
        step = min(max(step, -RATE_DOWN * (t - last)), RATE_UP * (t - last))
        self._ln_scale = min(max(self._ln_scale + step, math.log(LOW)), math.log(HIGH))
        self.noise_scale = math.exp(self._ln_scale)

    def adaptive_diagnostics(self) -> dict:
        return {"plant_noise_scale": self.noise_scale} if self._adaptive else {}
