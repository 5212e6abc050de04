"""Guards of the estimator stage against faulty readings and clocks (used by :mod:`stage`).

- :class:`ForwardJumpGuard`: a reading stamped more than ``limit`` seconds after the
  newest reading of the stream is either the first reading after a gap or a reading
  from the future (a corrupt stamp). It is held until the next reading decides: one
  stamped within ``limit`` of it confirms the new time (both are processed: a gap), one
  that continues the old time refutes it (dropped, counted as ``future``). At the end of
  a replay an unconfirmed reading is dropped. Both drivers see the same decisions,
  since only readings (never the node clock) decide.
- :class:`Reacquisition`: the re-acquisition rule of the Mahalanobis gate. A gate
  protects the estimate from outliers, but after a real jump of the state (an impact, a
  slip, a wrong reset) every reading would be rejected forever. After ``rejections``
  rejections of one sensor's readings, spanning at least ``time`` seconds, in a run of
  its readings that starts with a rejection and in which rejections outnumber
  acceptances (a lost filter still accepts a reading now and then, e.g. where its wrong
  motion crosses the true one; an isolated outlier or a short burst ends its run at the
  following accepted readings), the estimator widens its uncertainty
  (:meth:`Estimator.reacquire`: Kalman covariances x ``inflation``, the particle filter
  re-initialises) and the next readings are tested against it; repeated while the
  rejections go on.
- :class:`AdaptiveGate`: the gate's threshold follows the filter's actual consistency. A
  filter whose innovations are larger than its S predicts (an overconfident covariance:
  unmodelled friction, readings fused up to half a step off their stamps, a plant noise
  too small for a fast motion) has its fixed gate reject correct readings, and with the
  corrections gone it loses the mechanism (``mbde bench faults`` on pendulum_release,
  pf_rig_*, pf_sim with the fixed gate: up to 60 % of the clean readings rejected, RMSE
  x10 to x180 of the ungated filter). If the innovations are N(0, c S), the squared
  distances d^2 are c chi2(d), so c = median(d^2) / median(chi2(d)) (robust: isolated
  outliers and bursts are a minority of the window) and the gate c chi2_p(d) again
  rejects 1 - p of the correct readings. Per sensor, c is the median of the d^2 of its
  readings (accepted or not) of the last ``gate_window`` seconds over chi2_0.5(d), at
  least 1 (a consistent filter keeps the nominal gate), once the sensor's readings span
  the window (and at least ``GATE_MIN_READINGS``). The median turns after half a window
  of disagreement, later than the re-acquisition rule (``reacquire.time`` 0.2 s < 0.25 s),
  so a real jump of the state still widens the covariance. An outlier is judged in units of the filter's actual errors, not of its
  claimed ones. Until a sensor's scale is estimated (the first window after a start or
  a reset: a filter converging from its initial guess, or a fast first swing whose
  unmodelled forces the plant noise under-covers), nothing says the filter is
  consistent, so the threshold is ``WARMUP_SCALE`` x chi2_p(d), not chi2_p(d): 2x the
  distance in standard deviations (d^2 = 95.7 for p = 1 - 1e-6, d = 1; a 100-sigma
  outlier of a filter with S <= 100 R still exceeds it). Measured on pf_rig_branch0
  (``mbde bench faults``): the rig's first swing through the rocker's dead point at
  31 rad/s (the gyro blind to the crank's speed, the friction unmodelled) gave 4 gyro
  readings at d^2 = 25.6-30.5 > 23.9 in a row, 0.6 % of the clean readings rejected. A median needs half a window of large distances: it does not follow an
  inconsistency that lasts tens of milliseconds (a fast swing); ``gate_persist`` (off by
  default) then fuses a sensor's readings ungated after it disagreed that many times in a
  row, until one agrees again (counted as ``gate_believed``): the filter is believed to
  be wrong, not the sensor -- which also lets a burst of outliers through after
  ``gate_persist`` readings (measured in the README).
- :class:`Reconvergence`: after a reset (backward jump, long gap) or a re-acquisition,
  the time until the filter agrees with its readings again: the first update that
  closes a run of ``CONVERGED_UPDATES`` accepted updates whose mean NIS per degree of
  freedom is at most ``CONVERGED_NIS``.
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque

import numpy as np

from mbde_core.estimators.chi2 import chi2_ppf

CONVERGED_UPDATES = 10
CONVERGED_NIS = 3.0   # mean NIS per dof over the run of updates (chi2(10)/10 95 %: 1.83)
MAX_SUSPECTS = 64
GATE_MIN_READINGS = 10  # readings in the window before the gate's scale is estimated
WARMUP_SCALE = 4.0      # gate scale before a sensor's scale is estimated (module doc)


class ForwardJumpGuard:
    """Holds readings that jump ahead of the stream until another reading confirms them."""

    def __init__(self, limit: float):
        self.limit = float(limit)
        self.suspects: list = []

    def admit(self, m, newest: float) -> tuple[list, int]:
        """(readings to queue now, readings refuted as future) for the new reading m;
        newest: the newest stamp of the stream so far (-inf before the first reading)."""
        if not math.isfinite(newest) or m.stamp <= newest + self.limit:
            refuted = len(self.suspects)
            self.suspects = []
            return [m], refuted
        close = [s for s in self.suspects if abs(s.stamp - m.stamp) <= self.limit]
        if close:
            refuted = len(self.suspects) - len(close)
            self.suspects = []
            return close + [m], refuted
        self.suspects.append(m)
        if len(self.suspects) > MAX_SUSPECTS:
            self.suspects.pop(0)
            return [], 1
        return [], 0

    def drop_all(self) -> int:
        """Forget the held readings (end of a replay, reset): their number."""
        n = len(self.suspects)
        self.suspects = []
        return n


class Reacquisition:
    """Runs of mostly rejected readings per sensor; True when the estimator must widen."""

    def __init__(self, rejections: int, time: float):
        self.rejections = max(int(rejections), 1)
        self.time = float(time)
        self.clear()

    def clear(self) -> None:
        self.streaks: dict[str, list] = {}  # sensor -> [rejected, accepted, time of the first rejection]

    def observe(self, t: float, result) -> bool:
        if result is None:
            return False
        for name in result.accepted:
            streak = self.streaks.get(name)
            if streak is not None:
                streak[1] += 1
                if streak[1] >= streak[0]:  # no longer mostly rejected: the run ends
                    del self.streaks[name]
        fire = False
        for name in result.rejected:
            streak = self.streaks.setdefault(name, [0, 0, t])
            streak[0] += 1
            fire |= streak[0] >= self.rejections and t - streak[2] >= self.time - 1e-12
        if fire:
            self.clear()
        return fire


class AdaptiveGate:
    """Per-sensor gate thresholds: the chi-square quantiles ``base`` scaled by the recent
    squared distances, and lifted for a sensor that disagreed ``persist`` times in a row
    (module doc)."""

    def __init__(self, base: dict, dims: dict, window: float, persist: int):
        self.base = dict(base)
        self.window = float(window)
        self.persist = int(persist)
        self.median = {name: float(chi2_ppf(0.5, dims[name])) for name in self.base}
        self.clear()

    def clear(self) -> None:
        self.hist = {name: deque() for name in self.base}
        self.ordered = {name: [] for name in self.base}  # the d^2 of hist, sorted (median in O(1))
        self.since = {}  # sensor -> time of its first reading since clear()
        self.scale = {name: (WARMUP_SCALE if self.window > 0 else 1.0) for name in self.base}
        self.run = {name: 0 for name in self.base}  # consecutive readings over the gate
        self._used = {n: g * self.scale[n] for n, g in self.base.items()}

    def thresholds(self) -> dict:
        """The thresholds of the next update (inf: the sensor is believed, not gated)."""
        self._used = {n: (math.inf if self.persist and self.run[n] >= self.persist else g * self.scale[n])
                      for n, g in self.base.items()}
        return self._used

    def observe(self, t: float, distances) -> list:
        """Add the (sensor, d^2) of the update at time t; returns the names of the readings
        over their scaled gate that were fused because their sensor persisted."""
        touched, believed = set(), []
        for name, d2 in distances:
            hist = self.hist.get(name)
            if hist is None or math.isnan(d2):
                continue
            over = not d2 <= self.base[name] * self.scale[name]
            if over and self._used[name] == math.inf:
                believed.append(name)
            self.run[name] = self.run[name] + 1 if over else 0
            if self.window > 0:
                hist.append((t, d2))
                insort(self.ordered[name], d2)
                touched.add(name)
                self.since.setdefault(name, t)
        for name in touched:
            hist, ordered = self.hist[name], self.ordered[name]
            while hist and hist[0][0] < t - self.window - 1e-12:
                del ordered[bisect_left(ordered, hist.popleft()[1])]
            if len(hist) >= GATE_MIN_READINGS and t - self.since[name] >= self.window - 1e-12:
                med = _median(ordered)
                self.scale[name] = max(1.0, med / self.median[name]) if med < math.inf else math.inf
        return believed


def _median(ordered: list) -> float:
    """The median of sorted floats, as numpy.median: the middle one, or the mean (a + b) / 2
    of the middle two (an insertion-sorted window instead of a partition per update)."""
    n = len(ordered)
    h = n // 2
    return float(ordered[h]) if n % 2 else (ordered[h - 1] + ordered[h]) / 2.0


class Reconvergence:
    """Time from a disturbance (reset, re-acquisition) to agreement with the readings."""

    def __init__(self):
        self.since = None
        self.run: list = []
        self.last = None
        self.max = 0.0

    def disturbed(self, t: float) -> None:
        if self.since is None:
            self.since = t
        self.run = []

    def observe(self, t: float, result) -> float | None:
        """Feed an update result at time t; returns the re-convergence time when reached."""
        if self.since is None or result is None:
            return None
        if result.rejected or not result.accepted or result.nis is None or not math.isfinite(result.nis):
            self.run = []
            return None
        self.run.append(result.nis / max(result.dof, 1))
        if len(self.run) < CONVERGED_UPDATES:
            return None
        if sum(self.run[-CONVERGED_UPDATES:]) / CONVERGED_UPDATES > CONVERGED_NIS:
            return None
        took = t - self.since
        self.since, self.run = None, []
        self.last = took
        self.max = max(self.max, took)
        return took


def finite_snapshot(snap) -> bool:
    """Whether an estimate's z, zd and covariance are finite (small arrays as floats:
    numpy's fixed cost per call exceeds the test itself)."""
    cov = snap.cov
    if cov is not None and np.size(cov) > 64:
        return bool(np.isfinite(snap.z).all() and np.isfinite(snap.zd).all() and np.isfinite(cov).all())
    isfinite = math.isfinite
    return (all(map(isfinite, _flat(snap.z))) and all(map(isfinite, _flat(snap.zd)))
            and (cov is None or all(map(isfinite, _flat(cov)))))


def _flat(x) -> list:
    """np.ravel(x).tolist() (an array's own ravel: no numpy dispatch on the hot path)."""
    return x.ravel().tolist() if isinstance(x, np.ndarray) else np.ravel(x).tolist()
