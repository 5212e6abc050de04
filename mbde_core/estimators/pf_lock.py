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
chi-square with dof = dim(o) for a consistent filter. The filter is locked when the
mean NIS per degree of freedom over the last ``lock_time`` seconds (at least that long
after the last (re)initialisation) exceeds ``lock_nis``: over 1 s of readings at 200 Hz
a consistent filter's mean is 1 +/- 0.1 (chi2(200)/200), model errors of the paper-003
size raise it to ~1.5-2; a lock stays above 3 (measured in ``mbde bench pf --only
multidof``). A lock does not erase the cloud -- the detector cannot know that the cloud
is wrong, only that it explains the readings poorly -- it adds ``recovery.inject`` x
(the uniform start's count) fresh particles from the uniform prior, proposed from the
current readings, carrying that fraction of the total weight (a defensive mixture, cf.
the random-particle injection of Augmented MCL, Thrun, Burgard & Fox 2005 sec. 8.3.5):
the next readings decide between the old cloud and the new hypotheses, and the
enlarged set shrinks back by KLD-sampling.
"""
from __future__ import annotations

import collections


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
    """Sum of NIS and of degrees of freedom over the last T seconds."""

    def __init__(self, T: float):
        self.T = float(T)
        self.hist = collections.deque()
        self.nis = 0.0
        self.dof = 0

    def clear(self):
        self.hist.clear()
        self.nis, self.dof = 0.0, 0

    def shift(self, dt):
        self.hist = collections.deque((a + dt, n, d) for a, n, d in self.hist)

    def add(self, t, nis, dof) -> float:
        self.hist.append((t, nis, dof))
        self.nis += nis
        self.dof += dof
        while self.hist and self.hist[0][0] < t - self.T - 1e-12:
            _, n, d = self.hist.popleft()
            self.nis -= n
            self.dof -= d
        return self.nis / max(self.dof, 1)


class LockDetector:
    """Mean NIS per degree of freedom over the last ``time`` s above ``limit``, or over the
    last FAST x ``time`` s above FAST_FACTOR x ``limit`` (a cloud that left the motion
    altogether: its readings are many sigmas off at once)."""

    FAST = 0.1
    FAST_FACTOR = 8.0

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
        nis = min(float(nis), 1e6 * dof)  # one absurd reading must not hold the mean for the whole window
        self.last = self.slow.add(t, nis, dof)
        fast = self.fast.add(t, nis, dof)
        age = t - self.since
        return (age >= self.slow.T - 1e-12 and self.last > self.limit) or \
            (age >= self.fast.T - 1e-12 and fast > self.FAST_FACTOR * self.limit)
