"""The particle filter's injections of fresh hypotheses: its recovery from a lock and
from the stage's disturbances (Blanco-Claraco et al. 2014 (paper 000) has neither; cf. the
random-particle injection of Augmented MCL, Thrun, Burgard & Fox 2005 sec. 8.3.5).

Mixin of :class:`mbde_core.estimators.particle.filter.ParticleFilter`. Three groups of particles leave
an injection, each with its log-weights normalised within it:

- the old cloud, as it was;
- with velocity readings (gyroscopes), a copy of the cloud keeping each particle's
  position and branch, its velocity drawn from the readings given that position
  (:func:`pf_proposal.velocity_proposal` with the particle's own velocity as the prior,
  widened by sigma_a x ``lock_time``);
- fresh particles from the uniform prior, placed by the readings-based proposals of a
  uniform start (:meth:`ParticleUpdate._fresh_weights`).

The group weights are prior share x the group's evidence of the injecting update's
readings, p(o | group) (a mixture proposal): the fresh particles' share is
``recovery.inject`` (a lock, a silence) or 0.5 (a jump back to the first stamp, where the
stamps cannot tell a restarted motion from a clock step), the old cloud and its copies
share the rest. The next readings decide; KLD-sampling shrinks the set back.

Why each part (measured with ``mbde bench pf --only multidof`` and ``mbde bench faults``):
the copies correct a cloud that kept the position but whose velocity drifted (the released
rig, pf_rig_branch0: unmodelled friction while the rocker gyroscope is blind at a dead
point; fresh particles alone took over on the other assembly branch: converged 17/20 ->
20/20); the evidence weighting stops a copy of a cloud on the wrong branch, which cannot
explain a coupler gyroscope at any velocity (e^-25 against e^-1), from taking half the
weight (the test rig of test_faults: 13 locks and 0.08 rad -> 1 lock and 0.0035 rad).
After a silence the hypotheses above the energy ceiling of a passive linkage are dropped
(:func:`multistart.energy_ceiling`): at rest after pf_rig_branch1's 2 s gap the stable and
the unstable dead point fit the gyroscope alike.

**A silence longer than the cloud can bridge is a fresh start.** When the stage reports a
silence and the open-loop cloud's position spread is at least ``BRIDGE`` (0.8) of the
uniform prior's in every independent coordinate (:meth:`_position_spread`: for an angle the
circular standard deviation sqrt(-2 ln R) over pi / sqrt(3), R the weighted mean resultant
length), the cloud knows no more than the prior: the filter re-initialises from the uniform
prior with the first acquisition's machinery (``uniform.particles``, the readings-based
position and velocity proposals at the first update, annealing, the gate's grace; counted
as a recovery, reason ``silence``) instead of injecting, the energy ceiling applied to the
fresh set (:meth:`_fresh_start`). A fresh start also supersedes a pending injection (the
lost test re-initialising at the first reading after the silence).

Measured (mbde bench faults' gap, 2 s, on pf_sim: one rocker gyroscope, up to 37 rad/s; a
script over estimator seeds 0-19, the bench's scoring): the cloud's spread after the gap is
0.86-1.0 of the prior's. Injected, the 300 (vipf: 100) old particles and their copies held
0.9 of the weight; when the first reading found the cloud lost (ESS < 5 %) and the lost
test re-initialised it, the pending injection re-mixed that fresh set at the next reading
(2500 particles, the gate's grace restarted). Either way the weights settled on the
mirrored motion (the other assembly branch, which a rocker gyroscope tells apart slowly:
NIS < 1 for 0.3 s) in some seeds (pf seed 2, vipf seed 0). Recovered within 1 s, seeds
0-9 / 0-19: pf 9/10 / 18/20 -> 9/10 / 17/20 (now 0.24-0.62 s when it recovers, was up to
0.86 s), vipf 8/10 / 14/20 -> 9/10 / 17/20. A uniform start on the same readings from the
resume on (no gap) converges in pf 10/10, vipf 8/10 seeds: the remaining misses are that
acquisition's own. pf seed 5: converged after 0.25 s, its collapsed cloud 1.2 rad/s off in
velocity lost the motion 0.35 s later, still in the gate's grace, where the robust
gyroscope likelihood (pf_update.ROBUST_K) keeps the readings from pulling it back; dropping
the robust likelihood once the cloud's spread is < 0.05 of the prior's re-acquires 6 of 6
such seeds (pf 18/20, vipf 19/20 over seeds 0-19) but the outliers it guards against then
cost vipf on pf_rig_branch1 1.11 -> 1.60x (a target miss): not done. Restarting the
annealing alone changes nothing on a 1-DOF linkage (``uniform.anneal`` = 0.3 s x g (g - 1) / 2 =
0). On fourbar_gyro (spread 0.43-0.71 of the prior's) and pf_rig_branch1 (0.25-0.3), where
the injection recovers within 0.2 s, the cloud bridges the gap and injects as before; so
does the 0.3 s silence of test_pf_faults.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.particle.gate import _lse
from mbde_core.estimators.particle.update import _position_only, _velocity_linear


class ParticleInjection:
    """Fresh hypotheses added to the cloud (see the module docstring)."""

    # a lock also injects copies of the cloud with velocities from the readings (_local_copies)
    LOCAL_COPIES = True

    # the share of the weight of the fresh hypotheses (add_restart_hypotheses): after a jump
    # back to the first stamp the stamps alone cannot tell a restarted motion (a bag loop)
    # from a clock that stepped back while the mechanism moved on, equal prior odds; after a
    # silence the open-loop cloud is one hypothesis among all, the lock's defensive share
    RESTART_SHARES = {"jump": 0.5}
    INJECT_WAIT = 0.05  # [s] a restart's fresh hypotheses wait this long at most for a position reading

    # a silence whose open-loop cloud spreads this much in every position coordinate (its
    # spread / the uniform prior's, _position_spread) is past what the cloud can bridge:
    # a fresh start (see the module docstring)
    BRIDGE = 0.8

    def _position_spread(self) -> np.ndarray:
        """Per independent coordinate, the weighted spread of the cloud's positions over the
        uniform prior's: angles, the circular standard deviation sqrt(-2 ln R) (R: the
        mean resultant length) over pi / sqrt(3), the standard deviation of z uniform on
        the circle (R = 0, the uniform circle: 1); other coordinates, the standard
        deviation over (z_hi - z_lo) / sqrt(12). Clipped to 1."""
        w, z = self.weights(), self.z
        out = np.ones(self.g)
        for k in range(self.g):
            if self.angular[k]:
                R = float(abs(np.sum(w * np.exp(1j * z[:, k]))))
                if R > 1e-12:
                    out[k] = math.sqrt(-2.0 * math.log(min(R, 1.0))) / (math.pi / math.sqrt(3.0))
            else:
                m = float(w @ z[:, k])
                out[k] = math.sqrt(float(w @ (z[:, k] - m) ** 2)) / max((self.z_hi[k] - self.z_lo[k]) / math.sqrt(12.0), 1e-300)
        return np.minimum(out, 1.0)

    def add_restart_hypotheses(self, reason: str, ceiling: float | None = None) -> bool:
        """The stage's two explanations of a disturbance in one cloud (a particle filter
        carries several hypotheses): ``jump`` (the clock jumped back to the first stamp)
        or ``silence`` (no reading for longer than the stage's lost check). The cloud goes
        on (rebased by the stage) and at the next update fresh particles from the uniform
        prior, proposed from the readings (and, with velocity readings, copies of the
        cloud with velocities from them: _inject), join it with
        RESTART_SHARES[reason] (default ``recovery.inject``) of the weight; the readings
        decide. ceiling: the largest mechanical energy the mechanism can have now (a passive
        mechanism after a silence, :func:`multistart.energy_ceiling`); every hypothesis
        above it is dropped. False (the stage restarts from the initial guess instead)
        unless the initial guess is the uniform prior. Counted in ``recovery_reasons``."""
        if self.options.init != "uniform":
            return False
        if reason == "silence" and (not np.isfinite(self.logw).any()
                                    or bool(np.all(self._position_spread() >= self.BRIDGE))):
            self._recover("silence")  # the cloud could not bridge the silence: a fresh start
            self._inject_next, self._fresh_ceiling = None, ceiling
            return True
        self._inject_next = (reason, float(self.RESTART_SHARES.get(reason, self.inject)), ceiling, self.t)
        return True

    def _cap_energy(self, ceiling: float) -> None:
        """Drop the particles whose mechanical energy exceeds ``ceiling`` (unless all do).

        After a silence a passive mechanism has lost energy to friction, known or not: the
        readings of a rocker gyroscope cannot tell the rig resting at its stable
        equilibrium from a state near the unstable one (both with the rocker at a dead
        point, pf_rig_branch1 after a 2 s gap), its energy can (multistart.energy_ceiling)."""
        E = self.mech.energy(self.q, self.qd)
        keep = np.isfinite(E) & (E <= ceiling)
        if keep.any() and not keep.all():
            self.logw = _share(np.where(keep, self.logw, -np.inf), 1.0)

    def _fresh_start(self, rd):
        """Weights of a fresh uniform set at its first readings (_fresh_weights), as at a
        first acquisition: a pending restart's injection is dropped (the fresh set holds
        every hypothesis already), its energy ceiling kept (_cap_energy)."""
        pending, self._inject_next = self._inject_next, None
        ceiling, self._fresh_ceiling = self._fresh_ceiling, None
        if pending is not None and pending[2] is not None:
            ceiling = pending[2]
        ll = self._fresh_weights(rd)
        if ceiling is not None:
            self._cap_energy(ceiling)
        return ll

    def _injection_due(self, measurements) -> bool:
        """A disturbance's fresh hypotheses are drawn at the first update that has a position
        reading when the sensors have one (the position proposal places them; drawn at a
        coupler gyroscope's reading alone, 500 of them spread over both branches and the
        circle left a handful near the truth: test_faults' loop, 0.3 s at 0.06-0.09 rad),
        or after INJECT_WAIT."""
        if not any(_position_only(s) for s in self.sensors):
            return True
        asked = self._inject_next[3]  # the time of the request (add_restart_hypotheses)
        return any(_position_only(self.sensors[m.sensor]) for m in measurements) or self.t - asked >= self.INJECT_WAIT

    def _inject(self, measurements, prior_logw=None, share=None, reason="lock"):
        """The lock's remedy (pf_lock), and the stage's disturbances (add_restart_hypotheses):
        add fresh uniform particles proposed from the readings and, when velocity readings
        exist, copies of the cloud whose velocities are re-proposed from the readings
        (_local_copies). The groups' prior shares are ``share`` (default
        ``recovery.inject``) for the fresh particles and the rest, halved between them,
        for the old cloud and its copies; each share is multiplied by its group's evidence
        of this update's readings (a mixture proposal: a copy of a cloud on the wrong
        assembly branch cannot explain a coupler gyroscope whatever its velocity, e^-25
        against e^-1 for the fresh particles on the right one), then the next readings
        decide."""
        if reason == "lock":
            self.counts["locks"] += 1
        self.recovery_reasons[reason] += 1
        old = (self.q, self.qd, self.qdd, self.v, self.label, self.logw)
        lost = (list(self.lost.hist), self.lost.since)  # the injection does not restart the lost test
        a = self.inject if share is None else float(share)
        ev_old = getattr(self, "_log_evidence", 0.0)  # of this update's readings (_normalise)
        local = self._local_copies(old, measurements, prior_logw)
        rest = (1.0 - a) * (0.5 if local is not None else 1.0)
        groups = [(old[:5], old[5], rest, ev_old)]  # (arrays, log-weights within, prior share, log-evidence)
        if local is not None:
            groups.append((local[0], local[1], rest, local[2]))
        M = max(self.N_init // 2, 1)
        self._set(*self._draw_uniform(M))
        rd, _ = self._readings(measurements, {})
        ll = self._fresh_weights(rd)
        groups.append(((self.q, self.qd, self.qdd, self.v, self.label), _share(ll, 1.0), a, _lse(ll) - math.log(M)))
        lg = np.array([math.log(g[2]) + g[3] if g[2] > 0 else -math.inf for g in groups])
        if not np.isfinite(lg).any():  # no group explains the readings: the prior shares
            lg = np.array([math.log(g[2]) if g[2] > 0 else -math.inf for g in groups])
        lg = lg - _lse(lg)
        self.q, self.qd, self.qdd, self.v, self.label = (np.concatenate(x) for x in zip(*(g[0] for g in groups)))
        self.N = self.q.shape[0]
        self.logw = np.concatenate([g[1] + x for g, x in zip(groups, lg)])
        self._fresh = False  # the old particles' qdd may be stale: recompute at the next step
        self._unique = self.N
        self.propagator.drop()
        self.lost.hist.extend(lost[0])
        self.lost.since = lost[1]
        self.lock.restart(self.t)

    def _local_copies(self, old, measurements, prior_logw):
        """A copy of each particle of the locked cloud keeping its position and branch, its
        velocity drawn from the velocity readings given that position (the proposal of a
        uniform start, pf_proposal.velocity_proposal), weighted by its weight before this
        update times the readings' evidence: ((q, qd, qdd, v, label), log-weights summing
        to 1, log-evidence of the readings), or None without velocity readings or when no copy explains them. The
        velocity's prior is the particle's own, widened by sigma_a x ``lock_time`` (the
        drift an unmodelled acceleration of one sigma_a causes over the lock's window): a
        reading blind to some velocity (a coupler gyroscope near a dead point) leaves it
        where it was instead of anywhere in the uniform range (the velocities of the test
        rig of test_faults scattered over +/- 10 rad/s, the mean with them).

        A cloud that tracks the position but whose velocity drifted from the truth (an
        unmodelled friction while a gyroscope was insensitive, near a dead point of the
        linkage: pf_rig) explains the returning readings badly and locks; fresh uniform
        particles alone then replace it with whatever far hypothesis fits a few readings
        (the other assembly branch on pf_rig), losing the track's history."""
        if prior_logw is None or not self.LOCAL_COPIES or not any(_velocity_linear(self.sensors[m.sensor]) for m in measurements):
            return None
        zd = old[1][:, self.iz]
        self._set(old[0], zd, old[4])
        rd, _ = self._readings(measurements, {})
        s = self.sigma_a * self.lock.slow.T  # the velocity an unmodelled acceleration of sigma_a adds over the lock's window
        ll = self._fresh_weights(rd, keep_z=True, zd_prior=(zd, np.full(self.g, s * s)) if s > 0 else None)
        lw = _share(prior_logw + ll, 1.0)
        if not np.isfinite(lw).any():
            return None
        return (self.q, self.qd, self.qdd, self.v, self.label), lw, _lse(prior_logw + ll)


def _share(ll, a):
    """log-weights proportional to exp(ll) summing to a (all -inf when none is finite)."""
    total = _lse(ll)
    if not math.isfinite(total):
        return np.full(ll.shape, -np.inf)
    return ll - total + math.log(a)
