"""The innovation log-likelihood of a Kalman observer over recorded readings.

For a filter with Gaussian innovations y_k ~ N(0, S_k) (every accepted update of the
stage, :class:`~mbde_core.estimators.base.UpdateResult`), the log-likelihood of the
readings given the noise parameters theta is the prediction-error decomposition

    log L(theta) = -1/2 sum_k [ y_k^T S_k^-1 y_k + log det S_k + d_k log(2 pi) ]

(Schweppe 1965; Ljung 1999 ch. 7; Bar-Shalom et al. 2001 sec. 5.2.5): too little plant
noise makes the innovations larger than S predicts (large NIS), too much inflates
log det S. No ground truth is involved. The filter runs through its
:class:`~mbde_core.estimators.stage.core.EstimatorStage` exactly as in ``mbde replay``, with
the Mahalanobis gate off (a gated reading would leave the sum and favour bad candidates)
on the readings of a window of the bag.

A particle filter has no Gaussian innovations; its own likelihood of the readings is its
marginal likelihood, the product over updates of the normaliser of the weights,

    p(y_k | y_1:k-1) ~ sum_i w_i,k-1 p(y_k | x_i,k)      (log: ``_log_evidence``,
                                                          :func:`~mbde_core.estimators.particle.weights.normalise`)

(Doucet & Johansen 2011 eq. 31; with the adapted proposal, p(y_k | x_i) is the evidence of
each particle's step, the plant noise integrated out, :mod:`~mbde_core.estimators.particle.proposal`).
Its log, summed over the updates after the uniform start's annealing (whose tempered
weights are no likelihood), is the PF's score, a Monte Carlo estimate (deterministic for
a fixed seed).

``score_from``: only the updates after this stamp are summed (the held-out part of a
window: the filter runs through the fit part first, so the held-out readings are scored
by their one-step predictions given everything before them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbde_core.estimators import estimator_rng, make_estimator
from mbde_core.estimators.registry import traits
from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
from mbde_core.replay.runner import initial_state

LOG_2PI = math.log(2.0 * math.pi)


@dataclass
class InnovationFit:
    """Sums over the accepted updates: loglik [nats], channels (sum of d_k), updates,
    nis_sum; failed: the run raised or produced non-finite innovations."""

    loglik: float = 0.0
    channels: int = 0
    updates: int = 0
    nis_sum: float = 0.0
    failed: bool = False

    @property
    def mean_nis(self) -> float:
        """Mean NIS per update (chi-square with mean = dof per update for a consistent filter)."""
        return self.nis_sum / self.updates if self.updates else float("nan")

    @property
    def nis_per_channel(self) -> float:
        """NIS / dof averaged over the channels: 1 for a consistent filter."""
        return self.nis_sum / self.channels if self.channels else float("nan")

    @property
    def per_reading(self) -> float:
        """Log-likelihood per reading channel [nats] (-inf if failed)."""
        if self.failed or not self.channels:
            return -math.inf
        return self.loglik / self.channels


def tuning_config(options):
    """The (frozen) options for a likelihood run: the Mahalanobis gate (and with it re-acquisition) off."""
    return options.replace(gate=0.0)


def innovation_fit(source, readings, name: str, cfg, seed: int = 0, score_from: float | None = None) -> InnovationFit:
    """Run estimator ``name`` with the resolved (frozen) options ``cfg`` over ``readings`` (the
    source's model, sensors and initial guess, as ``mbde replay``) and sum its innovation
    log-likelihood -- a particle filter's: its marginal likelihood -- over the updates
    after ``score_from`` (module doc)."""
    fit = InnovationFit()
    particle = traits(name).noise_rule == "particle"
    est = None
    seen = {"updates": 0}

    def on_step(rec):
        u = rec.update
        if u is None or u.nis is None or not u.dof:
            return
        if particle:  # the normaliser of this update's weights, if the PF fused (not annealing)
            n = est.counts["updates"]
            fused, seen["updates"] = n > seen["updates"], n
            if not fused or (est._anneal_from is not None and est.anneal > 0):  # tempered: no likelihood
                return
        if score_from is not None and rec.estimate.stamp <= score_from:
            return
        if not (math.isfinite(u.nis) and u.logdet is not None and math.isfinite(u.logdet)):
            fit.failed = True
            return
        if particle:
            ev = float(est._log_evidence)
            if not math.isfinite(ev):
                fit.failed = True
                return
            fit.loglik += ev
        else:
            fit.loglik += -0.5 * (u.nis + u.logdet + u.dof * LOG_2PI)
        fit.channels += int(u.dof)
        fit.updates += 1
        fit.nis_sum += u.nis

    cfg = tuning_config(cfg)
    try:
        with np.errstate(all="ignore"):
            est = make_estimator(name, source.mechanism, source.sensors, cfg, rng=estimator_rng(seed, name))
            init = initial_state(source, cfg)
            stage = EstimatorStage.for_estimator(est, lambda t: init, on_step=on_step, keep=False, **STAGE_DEFAULTS)
            for m in readings:
                stage.feed(m)
            stage.flush()
    except (ArithmeticError, ValueError, np.linalg.LinAlgError, RuntimeError):
        fit.failed = True
    return fit
