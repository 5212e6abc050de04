"""The weights of the particle filter's update: Algorithm 1 lines 5-11 of paper 000.

:meth:`ParticleFilter.update <mbde_core.estimators.particle.filter.ParticleFilter.update>`
fuses the readings of a filter step: each reading's prediction by the cloud (with the
likelihood gate of :mod:`.likelihood`), the proposal of the step's noise and the weights (:mod:`.proposal`:
the adapted proposal, or the readings-based proposals of a fresh uniform set), the
tempered weights of the annealing after a uniform start, normalisation in log space
(log-sum-exp), the ESS, the NIS of the weighted mean prediction, then the tests of
:mod:`.recovery` (lost: re-initialise; locked: inject fresh hypotheses, :mod:`.recovery`,
as after the stage's disturbances) and the selective resampling (:mod:`.resampling`).

**A suspect reading of a converging particle filter waits one update: outlier or news?**

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

from mbde_core.engine import kinematics
from mbde_core.estimators.particle import compiled as pf_compiled
from mbde_core.estimators.particle import likelihood
from mbde_core.estimators.particle import proposal as prop
from mbde_core.estimators.particle.likelihood import lse, plain_log_likelihood, position_only, velocity_linear
from mbde_core.estimators.particle.resampling import effective_sample_size

ANNEAL_START = 0.1      # tempering exponent of the first update after a uniform start
WILD_SIGMAS = 10.0      # an adapted noise beyond this many sigma_a falls back to its prior


class HeldReadings:
    """Readings held out of one update and their per-particle log-likelihood."""

    def __init__(self, measurements: list, ll: np.ndarray, fallback: bool, fuse_ll: np.ndarray | None = None):
        self.measurements = list(measurements)
        self.names = [m.sensor for m in self.measurements]
        self.ll = np.where(np.isnan(ll), -np.inf, ll)  # judged with the plain likelihood
        self.fallback = bool(fallback)
        # fused, if news, with this one (the update's robust likelihood, :func:`.likelihood.robust_ll`)
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
            with_ = lse(a + ll_next) - lse(a)
            without = lse(logw + ll_next)
        if not without >= floor:
            return self.fallback
        return self.fallback and math.isfinite(with_) and with_ > without


def temper(pf, ll):
    """The annealed likelihood of the first ``uniform.anneal`` seconds after a uniform
    (re)initialisation: ll x beta, beta rising linearly from ANNEAL_START to 1."""
    T = pf.anneal
    if pf._anneal_from is None or not T > 0:
        return ll
    beta = (pf.t - pf._anneal_from) / T
    if beta >= 1.0:
        pf._anneal_from = None
        return ll
    return ll * max(beta, ANNEAL_START)


def adapted(pf, rd):
    """log-evidence (N,) of the readings, drawing the step's noise (:mod:`.proposal`), and the
    noise term of each reading's predictive covariance."""
    N, g = pf.N, pf.g
    dt = pf._pending or 0.0
    if not (pf.adapted and pf.sigma_a > 0):
        return plain_log_likelihood(rd, N), [np.zeros_like(x.R) for x in rd]
    qdd_full = None
    yws, Gws, extra = [], [], []
    w = pf.weights()
    s2 = pf.sigma_a**2
    fused = len(rd) == 1 and pf_compiled.for_set(pf)  # one compiled pass (compiled.adapted_reading)
    for x in rd:
        if x.s.uses_qdd and qdd_full is None:
            qdd_full = likelihood.accelerations(pf)
        G = x.G
        if G is None:
            G = likelihood.noise_jacobian(pf, x.s, qdd_full if x.s.uses_qdd else pf.qdd, x.pred if x.at_state else None)
        if fused:
            v, ll, bad, wild, e = pf_compiled.adapted_reading(pf.sigma_a, x.r, x.W, G, w, pf.rng,
                                                              WILD_SIGMAS * pf.sigma_a, pf.propagator.threads,
                                                              pf.normals_ahead)
            return _adapted_end(pf, rd, v, ll, wild, dt, g), [e]
        yws.append(np.einsum("nd,kd->nk", x.r, x.W))
        Gws.append(np.einsum("ij,njg->nig", x.W, G))
        extra.append(s2 * np.einsum("n,ndg,nkg->dk", w, G, G))
    yw, Gw = np.concatenate(yws, axis=1), np.concatenate(Gws, axis=1)
    bad = ~(np.isfinite(yw).all(axis=1) & np.isfinite(Gw).all(axis=(1, 2)))
    if bad.any():
        yw[bad], Gw[bad] = 0.0, 0.0
    if pf_compiled.for_set(pf):  # the same draws in one compiled pass on the thread pool
        v, ll = pf_compiled.adapted_noise(pf.sigma_a, yw, Gw, pf.rng, pf.propagator.threads, pf.normals_ahead)
    else:
        v, ll = prop.adapted_noise(pf.sigma_a, yw, Gw, pf.rng)
    ll[bad] = -np.inf
    # a reading that only an absurd noise could explain (an outlier, a particle far off)
    # must not drag the state: such particles draw v from its prior (their weight is
    # ~exp(-50) of the others' anyway)
    wild = bad | ~(np.abs(v).max(axis=1) <= WILD_SIGMAS * pf.sigma_a)
    return _adapted_end(pf, rd, v, ll, wild, dt, g), extra


def _adapted_end(pf, rd, v, ll, wild, dt, g):
    """The end of :func:`adapted`: the robust likelihood in the grace (its far particles are
    wild too), the wild particles' noise redrawn from its prior, the impulse applied."""
    if likelihood.in_grace(pf):
        ll, far = likelihood.robust_ll(pf, rd, ll)
        if far is not None:
            wild = wild | far
    if wild.any():
        v[wild] = pf.sigma_a * pf.rng.standard_normal((int(wild.sum()), g))
    if dt > 0:
        pf._impulse(v, dt, likelihood.r_columns(pf))
    else:
        pf.v, pf._pending = v, None
    return ll


def fresh(pf, rd, keep_z=False, zd_prior=None):
    """Weights (N,) of a freshly drawn uniform set at its first readings: position and
    velocity proposals (:mod:`.proposal`), then the other readings' evidence. keep_z: no
    position proposal (the set's positions are the old cloud's, see _inject); zd_prior:
    the velocity proposal's Gaussian prior (mean (N, g), variance (g,)) instead of the
    uniform range's."""
    uni = pf.options.uniform
    ll = np.zeros(pf.N)
    used = set()
    pos = [x for x in rd if position_only(x.s)]
    if pos and uni.position_proposal and not keep_z:
        sigma0 = np.maximum((pf.z_hi - pf.z_lo) / math.sqrt(12.0), 1e-9)  # the prior's own spread
        q, lp = prop.position_proposal(pf.mech, pf.sensors, pf._noise, pf.atlas, pf.q, pf.label,
                                       sigma0, pf.t, pf.rng, [x.m for x in pos])
        zd = pf.qd[:, pf.iz]
        pf.q, pf.qd = q, kinematics.velocity(pf.mech, q, zd, t=pf.t)
        ll += lp
        used |= {x.m.sensor for x in pos}
    vel = [x for x in rd if velocity_linear(x.s)]
    if vel and uni.velocity_proposal:
        zd, lv = prop.velocity_proposal(pf.mech, pf.sensors, pf._noise, pf.q, pf.zd_lo, pf.zd_hi,
                                        pf.t, pf.rng, [x.m for x in vel], prior=zd_prior)
        pf.qd = kinematics.velocity(pf.mech, pf.q, zd, t=pf.t)
        ll += lv
        used |= {x.m.sensor for x in vel}
    if used:
        pf.qdd = prop.model_accelerations(pf.mech, pf.t, pf.q, pf.qd)
        pf._fresh = True
        pf.propagator.drop()
    rest = [m for m in (x.m for x in rd) if m.sensor not in used]
    if rest:
        rd2, _ = likelihood.readings(pf, rest, {})
        ll2, _ = adapted(pf, rd2)
        ll = ll + ll2
    return np.where(np.isnan(ll), -np.inf, ll)


def judge_held(pf, rd, rejected, gates):
    """The held readings of the previous update judged by this update's readings
    (:mod:`.weights`); this update's suspects are held in turn, or fused at once if the held
    readings were news. Returns (readings to fuse, names fused late, rejected names)."""
    held, pf._held = getattr(pf, "_held", None), None
    late = []
    if getattr(pf, "_held_dropped", None):  # held when the set was replaced: not fused
        rejected, pf._held_dropped = rejected + pf._held_dropped, []
    if held is not None:
        judge = rd + pf._suspects
        floor = -0.5 * sum(gates.get(x.m.sensor, math.inf) for x in judge)
        if judge and held.is_news(pf.logw, plain_log_likelihood(judge, pf.N), floor):
            a = pf.logw + held.fuse_ll
            pf.logw = a - (a.max() + math.log(float(np.sum(np.exp(a - a.max())))))
            late = held.names
            rd, pf._suspects = rd + pf._suspects, []  # news: this update's suspects too
        else:
            rejected = rejected + held.names
    if pf._suspects:  # held only in the grace: fused with the robust likelihood if news
        ll = plain_log_likelihood(pf._suspects, pf.N)
        pf._held = HeldReadings([x.m for x in pf._suspects], ll, pf._suspect_fallback,
                                likelihood.robust_ll(pf, pf._suspects, ll)[0])
    return rd, late, rejected


def normalise(pf, ll):
    """Lines 7-11: log w += ll, normalised in log space; (ESS, w) or (None, None) when
    every weight is exactly zero (the prior weights then stay)."""
    logw = pf.logw + ll
    top = logw.max()
    if not np.isfinite(top):
        pf._log_evidence = -math.inf
        return None, None
    e = np.exp(logw - top)
    total = float(np.sum(e))
    pf._log_evidence = top + math.log(total)  # log p(readings | cloud) (weights summed to 1)
    pf.logw = logw - pf._log_evidence
    w = e / total
    pf._w = w
    ess = effective_sample_size(w)
    pf.ess_before = ess
    pf._ess_sum += ess
    return ess, w
