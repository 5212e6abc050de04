"""When the particle filter is lost or locked: the triggers of its recovery.

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
evidence of the readings (:mod:`pf_inject`).
"""
from __future__ import annotations

import collections

import numpy as np


class LostDetector:
    """More than half of the updates of the last ``time`` s lost (see the module docstring)."""

    def __init__(self, time: float):
        self.T = float(time)
        self.hist = collections.deque()
        self.since = 0.0

    def restart(self, t: float) -> None:
        self.hist.clear()
        self.since = float(t)

    def shift(self, dt: float) -> None:
        self.since += dt
        self.hist = collections.deque((a + dt, lost) for a, lost in self.hist)

    def __call__(self, t: float, lost_now: bool) -> bool:
        T = self.T
        if T <= 0:
            return lost_now
        hist = self.hist
        hist.append((t, lost_now))
        while hist and hist[0][0] < t - T - 1e-12:
            hist.popleft()
        if t - self.since < T - 1e-12:
            return False
        return 2 * sum(flag for _, flag in hist) > len(hist)


class _Window:
    """NIS per degree of freedom of the updates of the last T seconds."""

    def __init__(self, T: float):
        self.T = float(T)
        self.hist = collections.deque()

    def clear(self):
        self.hist.clear()

    def shift(self, dt):
        self.hist = collections.deque((a + dt, r) for a, r in self.hist)

    def add(self, t, ratio) -> None:
        self.hist.append((t, ratio))
        while self.hist and self.hist[0][0] < t - self.T - 1e-12:
            self.hist.popleft()

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
        self.slow, self.fast = _Window(time), _Window(self.FAST * float(time))
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
        hist = self.slow.hist
        self.last = sum(v for _, v in hist) / len(hist)  # to rounding (diagnostics)
        age = t - self.since
        # the exact numpy statistics only when a cheap bound cannot decide (the same
        # decisions, without two numpy reductions per update): the mean is within
        # 1e-9 of the plain sum's, and a median above x needs at least half the values above x
        if age >= self.slow.T - 1e-12 and self.last > self.limit * (1.0 - 1e-9) - 1e-300 \
                and float(self.slow.values().mean()) > self.limit:
            return True
        if age >= self.fast.T - 1e-12:
            x = self.FAST_FACTOR * self.limit
            fh = self.fast.hist
            if 2 * sum(1 for _, v in fh if v > x) >= len(fh) - 1 and float(np.median(self.fast.values())) > x:
                return True
        return False
