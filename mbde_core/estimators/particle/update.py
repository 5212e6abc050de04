"""The update of the particle filter: Algorithm 1 lines 5-11 of paper 000 and the recovery tests.

Mixin of :class:`mbde_core.estimators.particle.filter.ParticleFilter`. One update fuses the readings of
a filter step: each reading's prediction by the cloud (with the likelihood gate of
:mod:`pf_gate`), the proposal of the step's noise and the weights (:mod:`pf_proposal`:
the adapted proposal, or the readings-based proposals of a fresh uniform set), the
tempered weights of the annealing after a uniform start, normalisation in log space
(log-sum-exp), the ESS, the NIS of the weighted mean prediction, then the tests of
:mod:`pf_lock` (lost: re-initialise; locked: inject fresh hypotheses, :mod:`pf_inject`,
as after the stage's disturbances) and the selective resampling (:mod:`pf_resample`).

Readings are predicted at their own stamps: a reading of the slot [t - dt/2, t + dt/2)
(the stage fuses a 1 kHz encoder's five readings in one 5 ms update) is compared with
the state extrapolated to its stamp, q + lag qd + lag^2/2 qdd, qd + lag qdd (second
order), not with the state at t (on pendulum_release: 0.04 rad = 100 sigma of its
encoder at 10 rad/s).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.particle import proposal as prop
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.particle.gate import _lse, kernel_whitening, predictive_d2
from mbde_core.estimators.particle.hold import HeldReadings, plain_log_likelihood, robust
from mbde_core.estimators.particle.outputs import wsum
from mbde_core.estimators.particle.resampling import effective_sample_size


class _Reading:
    """One accepted reading and the cloud's predictions of it."""

    __slots__ = ("m", "s", "pred", "r", "R", "W", "C", "y", "at_state", "G")

    def __init__(self, m, s, pred, r, R, W, C, y, at_state=False, G=None):
        self.m, self.s, self.pred, self.r, self.R, self.W, self.C, self.y = m, s, pred, r, R, W, C, y
        self.at_state = at_state  # pred = h(q, qd, qdd) at the particles' state (no lag)
        self.G = G  # (N, d, g) dh/dv of the step's noise if the gate computed it (pf_proposal.noise_jacobian)


def _velocity_linear(s) -> bool:
    return bool(getattr(s, "uses_qd", False)) and not s.uses_qdd


def _position_only(s) -> bool:
    return not getattr(s, "uses_qd", False) and not s.uses_qdd


class ParticleUpdate:
    """Weights of a particle set given a step's readings (see the module docstring)."""

    ANNEAL_START = 0.1      # tempering exponent of the first update after a uniform start
    WILD_SIGMAS = 10.0      # an adapted noise beyond this many sigma_a falls back to its prior
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
    # are fused with the robust likelihood of pf_hold.robust, k = ROBUST_K per dimension of
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

    def _temper(self, ll):
        """The annealed likelihood of the first ``uniform.anneal`` seconds after a uniform
        (re)initialisation: ll x beta, beta rising linearly from ANNEAL_START to 1."""
        T = self.anneal
        if self._anneal_from is None or not T > 0:
            return ll
        beta = (self.t - self._anneal_from) / T
        if beta >= 1.0:
            self._anneal_from = None
            return ll
        return ll * max(beta, self.ANNEAL_START)

    def _in_grace(self) -> bool:
        """In the GATE_GRACE seconds after a uniform (re)initialisation or an injection."""
        return self._uniform_from is not None and self.t - self._uniform_from < self.GATE_GRACE

    def _robust_ll(self, rd, ll):
        """(ll, far) of readings rd with per-particle log-likelihood ll (N,): the part of the
        readings that are not position-only made robust (pf_hold.robust, k = ROBUST_K x their
        dimension; the position readings' plain part stays), and far (N,) True where the
        outlier component explains them better (None without such readings)."""
        moving = [x for x in rd if not _position_only(x.s)]
        if not moving:
            return ll, None
        k = self.ROBUST_K * sum(int(x.s.dim) for x in moving)
        fixed = plain_log_likelihood([x for x in rd if _position_only(x.s)], self.N)
        with np.errstate(invalid="ignore"):
            rest = np.where(np.isfinite(fixed), ll - fixed, -np.inf)
        return fixed + robust(rest, k), ~(rest >= np.max(rest) - k)

    def _accelerations(self):
        """qdd of every particle including its acceleration noise: R (f + v) + R'zd.

        Memoised on the identity of the particle arrays and the time (the readings and the
        proposal of one update both need it; the arrays are replaced, never edited in place)."""
        key = (self.q, self.qd, self.qdd, self.v, self.t)
        memo = self._acc_memo
        if memo is not None and all(a is b for a, b in zip(memo[0][:4], key[:4])) and memo[0][4] == key[4]:
            return memo[1]
        zdd = self.qdd[:, self.iz] + self.v
        out = kinematics.acceleration(self.mech, self.q, self.qd, zdd, t=self.t)
        self._acc_memo = (key, out)
        return out

    def _h_memo(self) -> dict:
        """The sensors' ``h_many`` memo at the current q (emptied when q is replaced)."""
        memo = self.__dict__.get("_h_memo_q")
        if memo is None or memo[0] is not self.q:
            memo = self._h_memo_q = (self.q, {})
        return memo[1]

    def _readings(self, measurements, gates, suspects=None):
        """The cloud's predictions of each reading; gated readings are rejected. In the
        first GATE_GRACE seconds after a uniform (re)initialisation (the cloud is still
        converging) they are appended to ``suspects`` instead if HOLD and a list is given
        (pf_hold), else the threshold is GRACE_WIDEN times wider."""
        if gates is None:  # not driven by a stage: the ``gate`` option
            gates = {}
            if self.default_gate > 0:
                gates = {s.name: float(chi2_ppf(self.default_gate, s.dim)) for s in self.sensors}
        grace = self._in_grace()
        hold = grace and self.HOLD
        if grace and not hold:
            gates = {k: v * self.GRACE_WIDEN for k, v in gates.items()}
        w = self.weights()
        n_eff = 1.0 / float(np.einsum("n,n->", w, w))
        qdd_full = None
        out, rejected = [], []
        for m in measurements:
            s = self.sensors[m.sensor]
            if s.uses_qdd and qdd_full is None:
                qdd_full = self._accelerations()
            qdd = qdd_full if s.uses_qdd else self.qdd
            lag = float(m.stamp) - self.t
            at_state = not (abs(lag) > 1e-9 and not s.uses_qdd)
            if not at_state:  # a reading of the slot, not of its time
                q = self.q + lag * self.qd + (0.5 * lag * lag) * qdd
                pred = s.h(q, self.qd + lag * qdd, qdd)
            else:
                pred = s.h_many(self.q, [(self.qd, qdd)], self._h_memo())[0]  # (N, d)
            R, W = self._noise(m.sensor)
            value = np.asarray(m.value, dtype=float)
            mean = wsum(w, pred)
            if s.angular.any():
                mean = np.where(s.angular, np.arctan2(wsum(w, np.sin(pred)), wsum(w, np.cos(pred))), mean)
            dev = s.residual(pred, mean[None, :])
            C = np.einsum("n,ni,nj->ij", w, dev, dev)
            r = s.residual(value[None, :], pred)
            limit = gates.get(m.sensor)
            G = None
            if limit is not None and limit > 0:
                # the step's acceleration noise widens each particle's prediction too: with the
                # adapted proposal p(o | x_i) = N(h_i, R + sigma_a^2 G_i G_i^T) (pf_proposal),
                # its weighted mean in the kernel (without it pf_rig_branch1 rejected 6 correct
                # gyroscope readings in a row at 20 rad/s, near a dead point where G changes
                # 300-fold in 10 ms, and drifted off)
                G = self._noise_jacobian(s, qdd_full if s.uses_qdd else self.qdd, pred if at_state else None)
                Rn = R if G is None else R + self.sigma_a ** 2 * np.einsum("n,ndg,nkg->dk", w, G, G)
                Wg = kernel_whitening(Rn, C, n_eff)
                eg = np.einsum("nd,kd->nk", r, Wg)
                d2 = predictive_d2(-0.5 * np.einsum("ij,ij->i", eg, eg), self.logw, pred, s.residual, Wg, w=w)
                self._distances.append((m.sensor, d2))  # UpdateResult.distances: the stage's adaptive gate scale
                if not d2 <= limit:
                    if hold and suspects is not None:  # judged at the next update (pf_hold)
                        suspects.append(_Reading(m, s, pred, r, R, W, C, s.residual(value, mean), at_state, G))
                        self._suspect_fallback &= d2 <= limit * self.GRACE_WIDEN
                    else:
                        rejected.append(m.sensor)
                    continue
            out.append(_Reading(m, s, pred, r, R, W, C, s.residual(value, mean), at_state, G))
        return out, rejected

    def log_likelihood(self, measurements, gates=None):
        """Per-particle log-likelihood of the readings at the current states (eq. 10),
        with gating: (ll (N,), accepted names, rejected names, innovations, their S)."""
        self._distances = []
        rd, rejected = self._readings(measurements, gates)
        ll = plain_log_likelihood(rd, self.N)
        return ll, [x.m.sensor for x in rd], rejected, [x.y for x in rd], [x.C + x.R for x in rd]

    def _noise_jacobian(self, s, qdd, h0):
        """G (N, d, g) of sensor s for the step's pending noise (pf_proposal.noise_jacobian),
        or None when the proposal draws no noise now. The columns R of the current particle
        arrays are memoised with them."""
        dt = self._pending or 0.0
        if not (self.adapted and self.sigma_a > 0):
            return None
        return prop.noise_jacobian(s, self.q, self.qd, qdd, self._r_columns(), dt, h0, self._h_memo())

    def _r_columns(self):
        """prop.r_columns at the current particles (memoised on the identity of q)."""
        memo = self.__dict__.get("_rc_memo")
        if memo is None or memo[0] is not self.q:
            memo = self._rc_memo = (self.q, prop.r_columns(self.mech, self.q, self._aux))
        return memo[1]

    def _adapted_weights(self, rd):
        """log-evidence (N,) of the readings, drawing the step's noise (pf_proposal), and the
        noise term of each reading's predictive covariance."""
        N, g = self.N, self.g
        dt = self._pending or 0.0
        if not (self.adapted and self.sigma_a > 0):
            return plain_log_likelihood(rd, N), [np.zeros_like(x.R) for x in rd]
        qdd_full = None
        yws, Gws, extra = [], [], []
        w = self.weights()
        s2 = self.sigma_a**2
        for x in rd:
            if x.s.uses_qdd and qdd_full is None:
                qdd_full = self._accelerations()
            G = x.G
            if G is None:
                G = self._noise_jacobian(x.s, qdd_full if x.s.uses_qdd else self.qdd, x.pred if x.at_state else None)
            yws.append(np.einsum("nd,kd->nk", x.r, x.W))
            Gws.append(np.einsum("ij,njg->nig", x.W, G))
            extra.append(s2 * np.einsum("n,ndg,nkg->dk", w, G, G))
        yw, Gw = np.concatenate(yws, axis=1), np.concatenate(Gws, axis=1)
        bad = ~(np.isfinite(yw).all(axis=1) & np.isfinite(Gw).all(axis=(1, 2)))
        if bad.any():
            yw[bad], Gw[bad] = 0.0, 0.0
        v, ll = prop.adapted_noise(self.sigma_a, yw, Gw, self.rng)
        ll[bad] = -np.inf
        far = None
        if self._in_grace():
            ll, far = self._robust_ll(rd, ll)
        # a reading that only an absurd noise could explain (an outlier, a particle far off)
        # must not drag the state: such particles draw v from its prior (their weight is
        # ~exp(-50) of the others' anyway)
        wild = bad | ~(np.abs(v).max(axis=1) <= self.WILD_SIGMAS * self.sigma_a)
        if far is not None:
            wild |= far
        if wild.any():
            v[wild] = self.sigma_a * self.rng.standard_normal((int(wild.sum()), g))
        if dt > 0:
            self._impulse(v, dt, self._r_columns())
        else:
            self.v, self._pending = v, None
        return ll, extra

    def _fresh_weights(self, rd, keep_z=False, zd_prior=None):
        """Weights (N,) of a freshly drawn uniform set at its first readings: position and
        velocity proposals (pf_proposal), then the other readings' evidence. keep_z: no
        position proposal (the set's positions are the old cloud's, see _inject); zd_prior:
        the velocity proposal's Gaussian prior (mean (N, g), variance (g,)) instead of the
        uniform range's."""
        uni = self.options.uniform
        ll = np.zeros(self.N)
        used = set()
        pos = [x for x in rd if _position_only(x.s)]
        if pos and uni.position_proposal and not keep_z:
            sigma0 = np.maximum((self.z_hi - self.z_lo) / math.sqrt(12.0), 1e-9)  # the prior's own spread
            q, lp = prop.position_proposal(self.mech, self.sensors, self._noise, self.atlas, self.q, self.label,
                                           sigma0, self.t, self.rng, [x.m for x in pos])
            zd = self.qd[:, self.iz]
            self.q, self.qd = q, kinematics.velocity(self.mech, q, zd, t=self.t)
            ll += lp
            used |= {x.m.sensor for x in pos}
        vel = [x for x in rd if _velocity_linear(x.s)]
        if vel and uni.velocity_proposal:
            zd, lv = prop.velocity_proposal(self.mech, self.sensors, self._noise, self.q, self.zd_lo, self.zd_hi,
                                            self.t, self.rng, [x.m for x in vel], prior=zd_prior)
            self.qd = kinematics.velocity(self.mech, self.q, zd, t=self.t)
            ll += lv
            used |= {x.m.sensor for x in vel}
        if used:
            self.qdd = prop.model_accelerations(self.mech, self.t, self.q, self.qd)
            self._fresh = True
            self.propagator.drop()
        rest = [m for m in (x.m for x in rd) if m.sensor not in used]
        if rest:
            rd2, _ = self._readings(rest, {})
            ll2, _ = self._adapted_weights(rd2)
            ll = ll + ll2
        return np.where(np.isnan(ll), -np.inf, ll)

    def update(self, measurements, gates=None) -> UpdateResult:
        """Line 5 (proposal and weights), lines 7-14 (normalise, ESS, resample, regularise)."""
        self._distances = []  # (sensor, d^2) of the gated readings
        self._suspects = []   # readings held for the next update (pf_hold)
        self._suspect_fallback = True
        rd, rejected = self._readings(measurements, gates, self._suspects)
        rd, late, rejected = self._judge_held(rd, rejected, gates or {})
        if not rd:
            return UpdateResult(late, rejected, distances=self._distances)
        accepted = late + [x.m.sensor for x in rd]
        self.counts["updates"] += 1
        if self._propose:
            self._propose = False
            ll = self._fresh_start(rd)  # pf_inject
            extra = [np.zeros_like(x.R) for x in rd]
        else:
            ll, extra = self._adapted_weights(rd)
            ll = np.where(np.isnan(ll), -np.inf, ll)
        self._vel_readings = [x.m for x in rd if _velocity_linear(x.s) or _position_only(x.s)]
        y = np.concatenate([x.y for x in rd])
        S = prop.block_diag([x.C + x.R + e for x, e in zip(rd, extra)])
        try:
            Ls = np.linalg.cholesky(S)
            e = np.linalg.solve(Ls, y)
            nis = float(e @ e)
            logdet = float(2.0 * np.log(np.diagonal(Ls)).sum())
        except np.linalg.LinAlgError:
            nis, e, logdet = None, None, None
        result = UpdateResult(accepted, rejected, nis, int(y.size), y, e, logdet, distances=self._distances)
        underflow = not ll.max() >= self.ll_floor
        prior_logw = self.logw
        ess, w = self._normalise(self._temper(ll))
        collapse = ess is None or ess < self.collapse_fraction * self.N
        if self.recovery and self.lost(self.t, underflow or collapse):
            self._recover("likelihood" if underflow else "ess")
            rd2, _ = self._readings([x.m for x in rd], {})
            self._propose = False
            ll = self._fresh_start(rd2)
            if ll.max() >= self.ll_floor:  # else the new uniform set stays unweighted
                self._normalise(ll)
            return result
        if self._inject_next is not None and self._injection_due(measurements):  # the stage's disturbance
            reason, share, ceiling, _ = self._inject_next  # (add_restart_hypotheses)
            self._inject_next = None
            # every reading of the slot proposes the fresh hypotheses and judges the groups,
            # also those the gate rejected against the old cloud (a restarted motion's encoder)
            off = [m for m in measurements if m.sensor in rejected]
            if off:
                self._log_evidence += _lse(self.logw + plain_log_likelihood(self._readings(off, {})[0], self.N))
            self._inject(list(measurements), prior_logw, share, reason)
            if ceiling is not None:
                self._cap_energy(ceiling)
            self._uniform_from = self.t  # the gate's grace, as after a uniform start: the fresh hypotheses converge
            w = self.weights()
            ess = effective_sample_size(w)
        elif self.lock(self.t, nis, int(y.size)):
            self._inject([x.m for x in rd], prior_logw)
            w = self.weights()
            ess = effective_sample_size(w)
        if ess is not None and ess < self.ess_threshold * self.N and self._held is None:
            self._resample(w, ess)  # not while a reading is held: its likelihood is per particle
        return result

    def _judge_held(self, rd, rejected, gates):
        """The held readings of the previous update judged by this update's readings
        (pf_hold); this update's suspects are held in turn, or fused at once if the held
        readings were news. Returns (readings to fuse, names fused late, rejected names)."""
        held, self._held = getattr(self, "_held", None), None
        late = []
        if getattr(self, "_held_dropped", None):  # held when the set was replaced: not fused
            rejected, self._held_dropped = rejected + self._held_dropped, []
        if held is not None:
            judge = rd + self._suspects
            floor = -0.5 * sum(gates.get(x.m.sensor, math.inf) for x in judge)
            if judge and held.is_news(self.logw, plain_log_likelihood(judge, self.N), floor):
                a = self.logw + held.fuse_ll
                self.logw = a - (a.max() + math.log(float(np.sum(np.exp(a - a.max())))))
                late = held.names
                rd, self._suspects = rd + self._suspects, []  # news: this update's suspects too
            else:
                rejected = rejected + held.names
        if self._suspects:  # held only in the grace: fused with the robust likelihood if news
            ll = plain_log_likelihood(self._suspects, self.N)
            self._held = HeldReadings([x.m for x in self._suspects], ll, self._suspect_fallback,
                                      self._robust_ll(self._suspects, ll)[0])
        return rd, late, rejected

    def _normalise(self, ll):
        """Lines 7-11: log w += ll, normalised in log space; (ESS, w) or (None, None) when
        every weight is exactly zero (the prior weights then stay)."""
        logw = self.logw + ll
        top = logw.max()
        if not np.isfinite(top):
            self._log_evidence = -math.inf
            return None, None
        e = np.exp(logw - top)
        total = float(np.sum(e))
        self._log_evidence = top + math.log(total)  # log p(readings | cloud) (weights summed to 1)
        self.logw = logw - self._log_evidence
        w = e / total
        self._w = w
        ess = effective_sample_size(w)
        self.ess_before = ess
        self._ess_sum += ess
        return ess, w
