"""The particle filter's recovery: when it is lost or locked, and the fresh hypotheses it adds.

**Lost** (``recovery.log_likelihood_floor``, ``ess_fraction``, ``time``): at an update
every particle's log-likelihood is below the floor (default -745: exp() underflows for
all of them) or the ESS before resampling is below ``ess_fraction`` N. Weights live in
log space, so a lost update still ranks the particles and the filter often comes back
by itself; when more than half of the updates of the last ``time`` seconds were lost
(0: at the first one) the filter re-initialises from the uniform prior.

**Locked** (``recovery.lock_nis``, ``lock_time``): the cloud agrees with the readings
well enough to keep its weights alive but worse than a filter on the true motion would:
an anti-phase motion of a Watt six-bar, the mirrored assembly of a five-bar, a crank
angle off by a constant. The statistic is the normalised innovation squared of the
weighted mean prediction, NIS = y^T S^-1 y with y = o - E_w[h] and S = Cov_w[h] +
E_w[G G^T] sigma_a^2 + Sigma_s (the particles' predictive covariance, noise included):
chi-square with dof = dim(o) for a consistent filter. The filter is locked (at least
``lock_time`` after the last (re)initialisation) when the mean NIS per degree of freedom
over the last ``lock_time`` seconds, each update's capped at 25, exceeds ``lock_nis``
(over 1 s of readings at 200 Hz a consistent filter's mean is 1 +/- 0.1, chi2(200)/200;
the filter's own predictive S is wide with the adapted proposal, so on the benchmark
scenarios a correct track stays well below 1), or sooner when the median over the last
tenth of that window exceeds 8 x ``lock_nis`` (the cloud left the motion). A lock does
not erase the cloud -- the detector cannot know that the cloud is wrong, only that it
explains the readings poorly -- it adds half a uniform start's count of fresh particles
from the uniform prior, proposed from the current readings, carrying ``recovery.inject``
of the total weight (a defensive mixture, cf. the random-particle injection of
Augmented MCL, Thrun, Burgard & Fox 2005 sec. 8.3.5): the next readings decide between
the old cloud and the new hypotheses (a fraction of 0.1 is ln 9 = 2.2 nats of prior
odds, little against the evidence of a few readings), and the enlarged set shrinks
back by KLD-sampling. With velocity readings (gyroscopes) a copy of the cloud with its
velocities re-drawn from the readings joins too, and each group's share is weighted by its
evidence of the readings (:mod:`.recovery`).

**The injections of fresh hypotheses**: the recovery from a lock and from the stage's
disturbances (Blanco-Claraco et al. 2014 (paper 000) has neither; cf. the random-particle
injection of Augmented MCL, Thrun, Burgard & Fox 2005 sec. 8.3.5). Three groups of
particles leave an injection (:func:`inject`), each with its log-weights normalised within it:

- the old cloud, as it was;
- with velocity readings (gyroscopes), a copy of the cloud keeping each particle's
  position and branch, its velocity drawn from the readings given that position
  (:func:`proposal.velocity_proposal` with the particle's own velocity as the prior,
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
gyroscope likelihood (likelihood.ROBUST_K) keeps the readings from pulling it back; dropping
the robust likelihood once the cloud's spread is < 0.05 of the prior's re-acquires 6 of 6
such seeds (pf 18/20, vipf 19/20 over seeds 0-19) but the outliers it guards against then
cost vipf on pf_rig_branch1 1.11 -> 1.60x (a target miss): not done. Restarting the
annealing alone changes nothing on a 1-DOF linkage (``uniform.anneal`` = 0.3 s x g (g - 1) / 2 =
0). On fourbar_gyro (spread 0.43-0.71 of the prior's) and pf_rig_branch1 (0.25-0.3), where
the injection recovers within 0.2 s, the cloud bridges the gap and injects as before; so
does the 0.3 s silence of test_pf_faults.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from mbde_core.estimators.particle import likelihood, weights
from mbde_core.estimators.particle.likelihood import lse, position_only, velocity_linear

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


class LostDetector:
    """More than half of the updates of the last ``time`` s lost (see the module docstring).
    ``hist``: (t, lost, running count of lost updates), the window's count the last item's
    minus the first's plus its flag; saved and restored whole (an injection), items keep it."""

    def __init__(self, time: float):
        self.T = float(time)
        self.hist = collections.deque()
        self.since = 0.0

    def restart(self, t: float) -> None:
        self.hist.clear()
        self.since = float(t)

    def shift(self, dt: float) -> None:
        self.since += dt
        self.hist = collections.deque((a + dt, *rest) for a, *rest in self.hist)

    def __call__(self, t: float, lost_now: bool) -> bool:
        T = self.T
        if T <= 0:
            return lost_now
        hist = self.hist
        flag = 1 if lost_now else 0
        hist.append((t, flag, (hist[-1][2] if hist else 0) + flag))
        while hist and hist[0][0] < t - T - 1e-12:
            hist.popleft()
        if t - self.since < T - 1e-12:
            return False
        return 2 * (hist[-1][2] - hist[0][2] + hist[0][1]) > len(hist)


class _Window:
    """NIS per degree of freedom of the updates of the last T seconds; their running ``total``
    (summed afresh every RESUM removals and while not finite) and count above ``above``."""

    RESUM = 1024

    def __init__(self, T: float, above: float = math.inf):
        self.T, self.above = float(T), float(above)
        self.hist = collections.deque()
        self.total, self.over, self._pops = 0.0, 0, 0

    def clear(self):
        self.hist.clear()
        self.total, self.over, self._pops = 0.0, 0, 0

    def shift(self, dt):
        self.hist = collections.deque((a + dt, r) for a, r in self.hist)

    def add(self, t, ratio) -> None:
        hist = self.hist
        hist.append((t, ratio))
        self.total += ratio
        self.over += ratio > self.above
        while hist and hist[0][0] < t - self.T - 1e-12:
            r = hist.popleft()[1]
            self.total -= r
            self.over -= r > self.above
            self._pops += 1
        if self._pops >= self.RESUM or not math.isfinite(self.total):
            self.total, self._pops = sum(r for _, r in hist), 0

    def values(self) -> np.ndarray:
        return np.fromiter((r for _, r in self.hist), dtype=float, count=len(self.hist))


class LockDetector:
    """Locked when the mean of min(NIS / dof, CAP) over the last ``time`` s exceeds
    ``limit``, or when the median NIS / dof over the last FAST x ``time`` s exceeds
    FAST_FACTOR x ``limit`` (a cloud that left the motion altogether: most readings many
    sigmas off). The cap and the median keep a single absurd reading (an outlier, a
    transient the cloud recovers from within a step) from triggering."""

    FAST = 0.1
    FAST_FACTOR = 8.0
    CAP = 25.0

    def __init__(self, limit: float, time: float):
        self.limit = float(limit)
        self.slow, self.fast = _Window(time), _Window(self.FAST * float(time), self.FAST_FACTOR * self.limit)
        self.since = 0.0
        self.last = None  # the last slow-window mean (diagnostics)

    def restart(self, t: float) -> None:
        self.slow.clear()
        self.fast.clear()
        self.since = float(t)

    def shift(self, dt: float) -> None:
        self.since += dt
        self.slow.shift(dt)
        self.fast.shift(dt)

    def __call__(self, t: float, nis: float | None, dof: int) -> bool:
        if not self.limit > 0 or nis is None or not dof:
            return False
        r = float(nis) / dof
        self.slow.add(t, min(r, self.CAP))
        self.fast.add(t, r)
        self.last = self.slow.total / len(self.slow.hist)  # to rounding (diagnostics)
        age = t - self.since
        # the exact numpy statistics only when a cheap bound cannot decide (the same
        # decisions, without two numpy reductions per update): the mean is within
        # 1e-9 of the plain sum's, and a median above x needs at least half the values above x
        if age >= self.slow.T - 1e-12 and self.last > self.limit * (1.0 - 1e-9) - 1e-300 \
                and float(self.slow.values().mean()) > self.limit:
            return True
        if age >= self.fast.T - 1e-12:
            x = self.FAST_FACTOR * self.limit
            if 2 * self.fast.over >= len(self.fast.hist) - 1 and float(np.median(self.fast.values())) > x:
                return True
        return False


def position_spread(pf) -> np.ndarray:
    """Per independent coordinate, the weighted spread of the cloud's positions over the
    uniform prior's: angles, the circular standard deviation sqrt(-2 ln R) (R: the
    mean resultant length) over pi / sqrt(3), the standard deviation of z uniform on
    the circle (R = 0, the uniform circle: 1); other coordinates, the standard
    deviation over (z_hi - z_lo) / sqrt(12). Clipped to 1."""
    w, z = pf.weights(), pf.z
    out = np.ones(pf.g)
    for k in range(pf.g):
        if pf.angular[k]:
            R = float(abs(np.sum(w * np.exp(1j * z[:, k]))))
            if R > 1e-12:
                out[k] = math.sqrt(-2.0 * math.log(min(R, 1.0))) / (math.pi / math.sqrt(3.0))
        else:
            m = float(w @ z[:, k])
            out[k] = math.sqrt(float(w @ (z[:, k] - m) ** 2)) / max((pf.z_hi[k] - pf.z_lo[k]) / math.sqrt(12.0), 1e-300)
    return np.minimum(out, 1.0)


def add_restart_hypotheses(pf, reason: str, ceiling: float | None = None) -> bool:
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
    if pf.options.init != "uniform":
        return False
    if reason == "silence" and (not np.isfinite(pf.logw).any()
                                or bool(np.all(position_spread(pf) >= BRIDGE))):
        pf._recover("silence")  # the cloud could not bridge the silence: a fresh start
        pf._inject_next, pf._fresh_ceiling = None, ceiling
        return True
    pf._inject_next = (reason, float(RESTART_SHARES.get(reason, pf.inject)), ceiling, pf.t)
    return True


def cap_energy(pf, ceiling: float) -> None:
    """Drop the particles whose mechanical energy exceeds ``ceiling`` (unless all do).

    After a silence a passive mechanism has lost energy to friction, known or not: the
    readings of a rocker gyroscope cannot tell the rig resting at its stable
    equilibrium from a state near the unstable one (both with the rocker at a dead
    point, pf_rig_branch1 after a 2 s gap), its energy can (multistart.energy_ceiling)."""
    E = pf.mech.energy(pf.q, pf.qd)
    keep = np.isfinite(E) & (E <= ceiling)
    if keep.any() and not keep.all():
        pf.logw = _share(np.where(keep, pf.logw, -np.inf), 1.0)


def fresh_start(pf, rd):
    """Weights of a fresh uniform set at its first readings (_fresh_weights), as at a
    first acquisition: a pending restart's injection is dropped (the fresh set holds
    every hypothesis already), its energy ceiling kept (_cap_energy)."""
    pending, pf._inject_next = pf._inject_next, None
    ceiling, pf._fresh_ceiling = pf._fresh_ceiling, None
    if pending is not None and pending[2] is not None:
        ceiling = pending[2]
    ll = weights.fresh(pf, rd)
    if ceiling is not None:
        cap_energy(pf, ceiling)
    return ll


def injection_due(pf, measurements) -> bool:
    """A disturbance's fresh hypotheses are drawn at the first update that has a position
    reading when the sensors have one (the position proposal places them; drawn at a
    coupler gyroscope's reading alone, 500 of them spread over both branches and the
    circle left a handful near the truth: test_faults' loop, 0.3 s at 0.06-0.09 rad),
    or after INJECT_WAIT."""
    if not any(position_only(s) for s in pf.sensors):
        return True
    asked = pf._inject_next[3]  # the time of the request (add_restart_hypotheses)
    return any(position_only(pf.sensors[m.sensor]) for m in measurements) or pf.t - asked >= INJECT_WAIT


def inject(pf, measurements, prior_logw=None, share=None, reason="lock"):
    """The lock's remedy (:mod:`.recovery`), and the stage's disturbances (add_restart_hypotheses):
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
        pf.counts["locks"] += 1
    pf.recovery_reasons[reason] += 1
    old = (pf.q, pf.qd, pf.qdd, pf.v, pf.label, pf.logw)
    lost = (list(pf.lost.hist), pf.lost.since)  # the injection does not restart the lost test
    a = pf.inject if share is None else float(share)
    ev_old = getattr(pf, "_log_evidence", 0.0)  # of this update's readings (_normalise)
    local = local_copies(pf, old, measurements, prior_logw)
    rest = (1.0 - a) * (0.5 if local is not None else 1.0)
    groups = [(old[:5], old[5], rest, ev_old)]  # (arrays, log-weights within, prior share, log-evidence)
    if local is not None:
        groups.append((local[0], local[1], rest, local[2]))
    M = max(pf.N_init // 2, 1)
    pf._set(*pf._draw_uniform(M))
    rd, _ = likelihood.readings(pf, measurements, {})
    ll = weights.fresh(pf, rd)
    groups.append(((pf.q, pf.qd, pf.qdd, pf.v, pf.label), _share(ll, 1.0), a, lse(ll) - math.log(M)))
    lg = np.array([math.log(g[2]) + g[3] if g[2] > 0 else -math.inf for g in groups])
    if not np.isfinite(lg).any():  # no group explains the readings: the prior shares
        lg = np.array([math.log(g[2]) if g[2] > 0 else -math.inf for g in groups])
    lg = lg - lse(lg)
    pf.q, pf.qd, pf.qdd, pf.v, pf.label = (np.concatenate(x) for x in zip(*(g[0] for g in groups)))
    pf.N = pf.q.shape[0]
    pf.logw = np.concatenate([g[1] + x for g, x in zip(groups, lg)])
    pf._fresh = False  # the old particles' qdd may be stale: recompute at the next step
    pf._unique = pf.N
    pf.propagator.drop()
    pf.lost.hist.extend(lost[0])
    pf.lost.since = lost[1]
    pf.lock.restart(pf.t)


def local_copies(pf, old, measurements, prior_logw):
    """A copy of each particle of the locked cloud keeping its position and branch, its
    velocity drawn from the velocity readings given that position (the proposal of a
    uniform start, proposal.velocity_proposal), weighted by its weight before this
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
    if prior_logw is None or not LOCAL_COPIES or not any(velocity_linear(pf.sensors[m.sensor]) for m in measurements):
        return None
    zd = old[1][:, pf.iz]
    pf._set(old[0], zd, old[4])
    rd, _ = likelihood.readings(pf, measurements, {})
    s = pf.sigma_a * pf.lock.slow.T  # the velocity an unmodelled acceleration of sigma_a adds over the lock's window
    ll = weights.fresh(pf, rd, keep_z=True, zd_prior=(zd, np.full(pf.g, s * s)) if s > 0 else None)
    lw = _share(prior_logw + ll, 1.0)
    if not np.isfinite(lw).any():
        return None
    return (pf.q, pf.qd, pf.qdd, pf.v, pf.label), lw, lse(prior_logw + ll)


def _share(ll, a):
    """log-weights proportional to exp(ll) summing to a (all -inf when none is finite)."""
    total = lse(ll)
    if not math.isfinite(total):
        return np.full(ll.shape, -np.inf)
    return ll - total + math.log(a)
