"""A suspect reading of a converging particle filter waits one update: outlier or news?

In the first ``GATE_GRACE`` seconds after a uniform (re)initialisation
(:class:`~mbde_core.estimators.particle.update.ParticleUpdate`) the cloud is still converging,
and a reading over the gate means one of two things: an outlier (the reading is wrong), or
a cloud that has settled on a wrong motion (the cloud is wrong and the reading is the
news that corrects it). A hard gate cannot tell them apart -- widened, it let 100-sigma
outliers through while the cloud was wide (pf on pf_sim: acquisition 0.24 s clean, up to
2.9 s with ``mbde bench faults``' outliers); narrow, it rejected the correct readings of
a wrongly settled cloud in runs of 7-12 (pf_rig_branch0) and stalled the acquisition.
The next reading tells them apart, as in the ADE-KF's one-step test
(:mod:`mbde_core.estimators.kalman.adekf_jumps`): the suspect reading o_k is held out of the
update (no weights, no proposal, no resampling), its per-particle log-likelihood
l_i = log p(o_k | x_i) is kept, and at the next update, with the log-likelihood
m_i = log p(o_k+1 | x_i) of its readings at the propagated particles, the evidence for
o_k+1 under the two hypotheses,

    with o_k (news):      log sum_i w_i e^(l_i + m_i) - log sum_i w_i e^(l_i),
    without (outlier):    log sum_i w_i e^(m_i),

(w: the normalised weights; the Bayes factor of the two hypotheses given o_k+1, equal
prior odds) decides: news -> the held weights e^(l_i) are applied (the reading is fused
late, counted as accepted; fusing it instead through the adapted proposal with the next
readings, at its own stamp, converged later on pf_rig and pf_sim); outlier -> it is
dropped (counted as a gate rejection).
An isolated outlier is explained only by particles the next reading contradicts; a
correct reading that the cloud mispredicted is explained by the particles the next
reading confirms. If the next update has no reading to judge by, or the set changed
(re-initialisation, lock injection), the held reading is dropped.

The test needs a cloud that explains the next readings: when even the "without"
evidence is below ``floor`` (-1/2 the sum of the next readings' gate thresholds: they
too are over the gate), the cloud is off the motion (pf_rig_branch1 after its first
swing through the dead point at 30 rad/s: next readings 22 sigma off, and the particles
that best explain o_k explain o_k+1 worse still, because no proposal moved them), so
the Bayes factor only ranks two bad fits; the reading is then fused if it is within the
widened gate (``fallback``: the behaviour without holding), so the adapted proposal can
move the cloud to it.

A reading beyond that widened gate (24 sigma) is an outlier whatever the Bayes factor says:
its likelihood is ~e^-5000 at every particle (a 100-sigma gyroscope reading), so the
weights e^(l_i) only pick the particles nearest to it, and whether the next readings
favour those is a coin toss (fourbar_imu, ``mbde bench faults``' outliers: 4 of 8 held
outliers judged news, a 0.04 rad error for the next 0.5 s).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.particle.gate import _lse


class HeldReadings:
    """Readings held out of one update and their per-particle log-likelihood."""

    def __init__(self, measurements: list, ll: np.ndarray, fallback: bool, fuse_ll: np.ndarray | None = None):
        self.measurements = list(measurements)
        self.names = [m.sensor for m in self.measurements]
        self.ll = np.where(np.isnan(ll), -np.inf, ll)  # judged with the plain likelihood
        self.fallback = bool(fallback)
        # fused, if news, with this one (the update's robust likelihood, pf_update)
        self.fuse_ll = self.ll if fuse_ll is None else np.where(np.isnan(fuse_ll), -np.inf, fuse_ll)

    def is_news(self, logw: np.ndarray, ll_next: np.ndarray, floor: float) -> bool:
        """The Bayes factor of the module docstring: True if the held readings are to be
        fused (the next readings are better explained with them than without; if the
        cloud explains the next readings worse than ``floor``, ``fallback``)."""
        if self.ll.shape != logw.shape or ll_next.shape != logw.shape:
            return False
        ll_next = np.where(np.isnan(ll_next), -np.inf, ll_next)
        a = logw + self.ll
        with np.errstate(divide="ignore", invalid="ignore"):
            with_ = _lse(a + ll_next) - _lse(a)
            without = _lse(logw + ll_next)
        if not without >= floor:
            return self.fallback
        return self.fallback and math.isfinite(with_) and with_ > without


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
