"""The trust verdict: OK / DEGRADED / LOST with its reason, from the readings alone.

Without ground truth the only evidence of an estimate's quality is how the readings agree
with what the estimator predicted. Over a sliding window of ``WINDOW`` s of grid steps the
stage (:mod:`~mbde_core.estimators.stage.core`, so replay and the live node share it)
keeps the sums of the updates' NIS y^T S^-1 y and their degrees of freedom, the readings
the gate accepted and rejected, and reads the estimate's branch probabilities:

- LOST when the readings contradict the estimate: the last ``REJECT_RUN`` readings in a
  row rejected by the gate, or at least half of the window's readings (and
  ``MIN_READINGS``) with the last one, or the innovations biased: for a channel the sum of
  its n normalised innovations over the window, |sum e| / sqrt(n), above ``BIAS_LOST``
  (each e is N(0, 1) and nearly white for a consistent estimator, so the statistic is
  N(0, 1); an estimate on a wrong state keeps correcting the same way: the four-bar UKF
  started 1 rad off with only a gyroscope, whose NIS stays near 2, reaches 7-10 within
  0.5 s), or the window's NIS sum above its
  chi-square quantile at 1 - ``P_LOST`` *and* above ``LOST_RATIO`` x its dof (innovations
  of ~3 sigma on average: for a consistent estimator the mean NIS over a window of n
  updates is 1 +- sqrt(2 / n));
- DEGRADED when they disagree more than chance allows, or the estimate is ambiguous: the
  NIS sum above its quantile at 1 - ``P_DEGRADED`` (the NIS of a consistent estimator is
  chi-square and nearly white: the test is the independent one), more than
  ``REJECT_DEGRADED`` of the readings rejected, the most probable assembly branch below
  ``BRANCH_P``, the track restarted within the window (the stage's re-acquisition or
  multi-start, a divergence, a particle filter's re-initialisation after its effective
  sample size collapsed or the fresh hypotheses its lock detector injected: the reason
  names which), a particle filter's effective sample size (after an update, before
  resampling) below ``ESS_DEGRADED`` of its particles at the median of the window's
  updates (the weights sit on a few particles: 1 % of the updates of a tracking PF on the
  shipped scenarios fall below 0.3), or no reading fused over the whole window
  (open-loop prediction);
- OK otherwise. A window of far too small NIS (the readings agree better than the
  estimator assumes: a conservative estimate, e.g. accelerometers widened by the default
  noise rule) stays OK; the reason says so.

The verdict follows the window, with hysteresis (:meth:`TrustMonitor.verdict`): LOST
stays until a whole window of readings agrees with the estimate, then it is DEGRADED
(recovering) until ``RECOVER`` s after the last LOST; the first ``ACQUIRE`` s of
readings are DEGRADED (acquiring). Far-off gyroscope-only starts (the four-bar UKF
0.6-1.3 rad off) otherwise returned to OK after one window while still locked 0.35 rad
(30 sigma) off, with white innovations of the right size. An estimate never OK whose
window NIS is inconsistent ``UNACQUIRED`` s after its first reading is LOST (not
acquired): errorEKF on adekf_slider_crank started 0.4-1.5 rad off with the mass error read
a mean NIS of 1.5-3 x its dof (below ``LOST_RATIO``) for 1.7 s while 30-600 sigma off.

While recovering, the evidence must be fresh: a DEGRADED window returns the estimate to
LOST, and so does a channel whose innovations since the last LOST window (at most
``SINCE_WINDOW`` s of them, ``BIAS_MIN`` at least) are biased beyond ``BIAS_RECOVER``
(|sum e| / sqrt(n), N(0, 1) for a consistent estimator, so a false hold has odds of
about 5e-4 per channel and test). The four-bar UKF locked 10-30 sigma off with only a
gyroscope keeps innovations of NIS near 1 but a steady bias of 3.5-6 sigma per window
for 1-2 s between its LOST windows: the sliding window alone called it recovering (and
then OK) there. A nominal run is never LOST, so these tests never act on it.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.stage.trust_faults import StepDetector, StuckReadings, stuck_reason
from mbde_core.estimators.stage.trust_sources import (add_sum, angular_coordinates, follower_fault, follower_verdict,
                                                      most_biased, remove_sum)

OK, DEGRADED, LOST = 0, 1, 2
LEVELS = ("OK", "DEGRADED", "LOST")
WINDOW = 1.0  # s
P_DEGRADED = 1e-3
P_LOST = 1e-6
LOST_RATIO = 10.0
REJECT_LOST = 0.5
REJECT_DEGRADED = 0.1
MIN_READINGS = 3
REJECT_RUN = 5
BRANCH_P = 0.9
BIAS_DEGRADED = 4.5
BIAS_LOST = 8.0
BIAS_MIN = 20  # innovations of a channel in the window before its bias is tested
BIAS_RECOVER = 3.5  # the bias of the innovations since the last LOST window that holds LOST
SINCE_WINDOW = 3.0  # s: at most this many seconds of them
LOW_P = 1e-3  # a NIS sum below its quantile at LOW_P: conservative (said, still OK)
ACQUIRE = 0.5  # s of readings before the first OK (evidence of less is no evidence)
UNACQUIRED = 1.0  # s of readings never OK, the window's innovations inconsistent: LOST (not acquired)
RECOVER = 1.0  # s after the last LOST before OK again
ESS_DEGRADED = 0.1  # median effective sample size / particles over the window's updates
RESTARTS = {  # what restarted the track (the stage's counters, a PF's recovery reasons)
    "reacquisitions": "the stage re-acquired the track", "multistarts": "the stage's multi-start",
    "diverged": "the estimate diverged", "pf:lock": "the particle filter's lock detector fired (its cloud disagreed "
    "with the readings): fresh hypotheses injected", "pf:ess": "the particle filter's effective sample size collapsed: "
    "re-initialised", "pf:likelihood": "no particle explained the readings: the particle filter re-initialised"}


class Verdict:
    """A level (OK, DEGRADED, LOST) and the figures behind it; ``reason`` the sentence."""

    __slots__ = ("level", "code", "ratio", "band", "rejected", "received", "branch_p", "window", "run", "bias", "detail")

    def __init__(self, level, code, ratio=None, band=None, rejected=0, received=0, branch_p=None, window=WINDOW,
                 run=0, bias=None, detail=None):
        self.level, self.code, self.ratio, self.band = level, code, ratio, band
        self.rejected, self.received, self.branch_p, self.window = rejected, received, branch_p, window
        self.run, self.bias, self.detail = run, bias, detail

    @property
    def name(self) -> str:
        return LEVELS[self.level]

    @property
    def reason(self) -> str:
        w = f"over the last {self.window:g} s"
        if self.code == "rejected_run":
            return f"the last {self.run} readings rejected by the gate"
        if self.code == "rejected":
            return f"{self.rejected} of {self.received} readings rejected by the gate {w}"
        if self.code == "nis":
            return (f"innovations too large: mean NIS {self.ratio:.3g} x its dof {w} "
                    f"(consistent: up to {self.band:.3g})")
        if self.code == "bias":
            return (f"innovations biased: {self.bias[0]} {self.bias[1]:+.3g} sigma of their sum {w} "
                    f"(consistent: within +-{BIAS_DEGRADED:g})")
        if self.code == "branch":
            return f"assembly branch uncertain: P = {self.branch_p:.2f}"
        if self.code == "restart":
            what = RESTARTS.get(self.detail) or "re-acquisition, multi-start or re-initialisation"
            return f"the track restarted {w}: {what}"
        if self.code == "ess":
            return (f"particle weights degenerate: median effective sample size {self.ratio:.2g} of the particles "
                    f"{w} (below {ESS_DEGRADED:g})")
        if self.code in ("fit", "unconverged", "stuck", "step", "follower", "unacquired"):
            return self.detail
        if self.code == "silent":
            return f"no reading fused {w}: predicting open loop"
        if self.code == "conservative":
            return (f"readings agree better than the estimate assumes: mean NIS {self.ratio:.3g} x its dof {w} "
                    "(a conservative estimate)")
        if self.code == "start":
            return "no readings yet"
        if self.code == "acquiring":
            return f"acquiring: {self.window:g} s of readings so far (OK after {ACQUIRE:g} s of consistent readings)"
        if self.code == "still_lost":
            return f"still lost: the readings since the estimate was LOST do not yet agree with it ({self.detail})"
        if self.code == "recovering":
            return (f"recovering: LOST {self.ratio:.2g} s ago, readings consistent since "
                    f"(OK {RECOVER:g} s after the last LOST)")
        nis = "" if self.ratio is None or not math.isfinite(self.ratio) else f" (mean NIS {self.ratio:.3g} x its dof)"
        return f"readings consistent with the estimate {w}{nis}"

    def as_dict(self) -> dict:
        return {"level": self.name, "reason": self.reason}


class TrustMonitor:
    """The sliding window of the module doc: :meth:`step` per emitted grid step."""

    def __init__(self, window: float = WINDOW):
        self.window = float(window)
        self.steps: collections.deque = collections.deque()  # (t, nis, dof, accepted, rejected)
        self.nis = 0.0
        self.dof = 0
        self.acc = 0
        self.rej = 0
        self.run = 0  # readings rejected in a row
        self.t_first = None
        self.sums: dict = {}  # (fused sensors, channel index) -> [sum of e, count] over the window
        self.events = None  # the stage's count of track restarts
        self.t_event = None  # time of the last restart
        self.parts: dict = {}  # the restart counters by source (RESTARTS' keys)
        self.what = None  # the source of the last restart
        self.ess: collections.deque = collections.deque()  # (t, ESS / particles) of a PF's updates
        self.ess_low = 0  # how many of self.ess are below ESS_DEGRADED (the median is read only when it may be)
        self.t_lost = None  # time of the last LOST verdict
        self.lost_reason = None  # the reason of the LOST that started the current loss (None: not lost)
        self.since: collections.deque = collections.deque()  # (t, key, e) since the last LOST window
        self.since_sums: dict = {}  # key -> [sum of e, count] over self.since
        self.stuck, self.jumps = StuckReadings(), StepDetector()  # sensor faults (:mod:`.trust_faults`)
        self.trusted = False  # the last verdict was OK (a step in the innovations may start)
        self.ever_ok = False  # a verdict was OK since the start (else still acquiring: UNACQUIRED)
        self.from_trust = False  # the verdicts since the last OK one followed a trusted estimate
        self.source = None  # which part of a particle filter publishes (follower or cloud, seed count)
        self.last = None  # the last verdict (a particle filter's follower's monitor is read by the stage's)
        self.published = None  # the verdict of a particle filter's follower that publishes the estimate

    def reset(self) -> None:
        events, parts = self.events, self.parts  # the stage's counts run on through its resets
        self.__init__(self.window)
        self.events, self.parts = events, parts

    def observe(self, stage, estimate, update, readings=None) -> Verdict:
        """:meth:`step` for an emitted step of an EstimatorStage: its restarts of the track
        are its re-acquisitions, multi-starts and divergences and a particle filter's
        re-initialisations; a stage that restarted at an earlier time (a backward jump, a
        bag loop) starts a new window. readings: the Measurements fused at this step (the
        stuck-channel test, :mod:`.trust_faults`)."""
        if self.steps and estimate.stamp < self.steps[-1][0]:
            self.reset()
        c, est = stage.counters, stage.est
        parts = {"reacquisitions": c.reacquisitions, "multistarts": c.multistarts, "diverged": c.diverged,
                 **{f"pf:{k}": v for k, v in getattr(est, "recovery_reasons", {}).items()}}
        grew = [k for k, v in parts.items() if v > self.parts.get(k, v)]
        if grew:
            self.what = grew[0]
        self.parts = parts
        n = getattr(est, "N", 0)
        if update is not None and n and getattr(est, "ess_before", None) is not None:
            f = float(est.ess_before) / n
            self.ess.append((estimate.stamp, f))
            self.ess_low += f < ESS_DEGRADED
        while self.ess and self.ess[0][0] <= estimate.stamp - self.window:
            self.ess_low -= self.ess.popleft()[1] < ESS_DEGRADED
        if readings:
            self.stuck.observe(estimate.stamp, readings, getattr(est, "sensors", None), estimate)
        self.published = follower_verdict(est)
        f = getattr(est, "follower", None)  # a particle filter switching between cloud and follower jumps: no evidence
        source = (bool(getattr(f, "following", False)), (getattr(f, "counts", None) or {}).get("seeds"))
        same, was, self.source = source == self.source, self.source, source
        if not same:
            self.jumps.episode = None
            fault = follower_fault(est) if was and was[0] and not source[0] else None
            if fault is not None:
                self.jumps.last = (estimate.stamp, fault)
        # the jump test anchored at a gate rejection: not for a particle filter (n > 0), whose
        # mean moves with its weights
        rejected = update is not None and bool(update.rejected)
        self.jumps.moved(estimate.stamp, estimate, angular_coordinates(getattr(est, "mech", None)),
                         self.from_trust and same, rejected, self.trusted and same and not n)
        return self.step(estimate.stamp, update, estimate.branch_probabilities, sum(parts.values()))

    def step(self, t: float, update, branch_probabilities=None, events: int | None = None) -> Verdict:
        """The verdict after grid step t with its update result (or None); events: the
        stage's running count of track restarts (a change is a restart at t)."""
        if events is not None:
            if self.events is not None and events > self.events:
                self.t_event = t
            self.events = events
        nis, dof, acc, rej = 0.0, 0, 0, 0
        if update is not None:
            acc, rej = len(update.accepted), len(update.rejected)
            self.run = 0 if acc else self.run + rej
            if update.nis is not None and math.isfinite(update.nis) and update.dof:
                nis, dof = float(update.nis), int(update.dof)
        if self.t_first is None:
            self.t_first = t
        key = e = None
        if update is not None and update.normalized_innovation is not None and update.accepted:
            e = np.asarray(update.normalized_innovation, float)
            key = tuple(update.accepted)
            if np.all(np.isfinite(e)):
                add_sum(self.sums, key, e)
                self.jumps.observe(t, key, e, self.trusted or self.from_trust)
            else:
                key = None
        self.steps.append((t, nis, dof, acc, rej, key, e))
        if key is not None:
            add_sum(self.since_sums, key, e)
            self.since.append((t, key, e))
        while self.since and self.since[0][0] <= t - SINCE_WINDOW:
            _, k, x = self.since.popleft()
            remove_sum(self.since_sums, k, x)
        self.nis += nis
        self.dof += dof
        self.acc += acc
        self.rej += rej
        while self.steps and self.steps[0][0] <= t - self.window:
            _, a, b, c, d, k, x = self.steps.popleft()
            self.nis -= a
            self.dof -= b
            self.acc -= c
            self.rej -= d
            if k is not None:
                remove_sum(self.sums, k, x)
        return self.verdict(t, branch_probabilities)

    def verdict(self, t: float, branch_probabilities=None) -> Verdict:
        """The window's verdict (:meth:`_window`) with hysteresis: once LOST, the estimate
        stays LOST until a window of readings agrees with it (a merely DEGRADED window is
        not enough: a filter pulled off the motion keeps being off while its innovations
        shrink), then DEGRADED (recovering) until ``RECOVER`` s after the last LOST; and an
        estimate with less than ``ACQUIRE`` s of readings is DEGRADED (acquiring), not OK."""
        v = self._window(t, branch_probabilities)
        jump = self.jumps.verdict(t)
        if jump is not None and jump[0] >= v.level:
            v = Verdict(jump[0], "step", v.ratio, window=v.window, detail=jump[1])
        f = self.published
        if f is not None and f[0] > v.level:
            v = Verdict(f[0], "follower", v.ratio, window=v.window, detail=f[1])
        if not self.ever_ok and self.lost_reason is None and v.code == "nis" and t - self.t_first >= UNACQUIRED:
            v = Verdict(LOST, "unacquired", v.ratio, window=v.window, detail=f"not acquired: never OK in "
                        f"{t - self.t_first:.2g} s of readings, {v.reason}")
        v = self._hysteresis(t, v)
        self.ever_ok = self.ever_ok or v.level == OK
        self.from_trust = v.level != OK and (self.trusted or self.from_trust)
        self.trusted, self.last = v.level == OK, v
        return v

    def _hysteresis(self, t: float, v: Verdict) -> Verdict:
        if v.level == LOST:
            self.t_lost = t
            self.lost_reason = self.lost_reason or v.reason
            self.since.clear()
            self.since_sums.clear()
            return v
        if self.lost_reason is not None:
            held = v.level == DEGRADED and v.code not in ("restart", "silent", "step")
            if held or v.level == OK:
                bias = most_biased(self.since_sums, BIAS_MIN)
                held = held or (bias is not None and abs(bias[1]) > BIAS_RECOVER)
            if held:
                self.t_lost = t
                return Verdict(LOST, "still_lost", v.ratio, window=v.window, detail=self.lost_reason)
            if t - self.t_lost >= RECOVER:
                self.lost_reason = None
        if v.level == OK and self.t_lost is not None and t - self.t_lost < RECOVER:
            return Verdict(DEGRADED, "recovering", t - self.t_lost, window=v.window)
        if v.level == OK and v.code != "start" and v.window < ACQUIRE:
            return Verdict(DEGRADED, "acquiring", window=v.window)
        return v

    def _window(self, t: float, branch_probabilities=None) -> Verdict:
        received = self.acc + self.rej
        span = min(self.window, t - self.t_first) if self.t_first is not None else 0.0
        kw = {"rejected": self.rej, "received": received, "window": round(max(span, 0.0), 3)}
        ratio = self.nis / self.dof if self.dof else None
        if self.run >= REJECT_RUN:
            return Verdict(LOST, "rejected_run", ratio, run=self.run, **kw)
        if received >= MIN_READINGS and self.rej >= REJECT_LOST * received and self.run:
            return Verdict(LOST, "rejected", ratio, **kw)
        bias = self._bias()
        if bias is not None and abs(bias[1]) > BIAS_LOST:
            return Verdict(LOST, "bias", ratio, bias=bias, **kw)
        stuck = self.stuck.verdict(t)
        if stuck is not None:
            return Verdict(DEGRADED, "stuck", ratio, detail=stuck_reason(stuck), **kw)
        if self.dof:
            hi_lost, hi, lo = _bounds(self.dof)
            if ratio > hi_lost and ratio > LOST_RATIO:
                return Verdict(LOST, "nis", ratio, hi, **kw)
            if ratio > hi:
                return Verdict(DEGRADED, "nis", ratio, hi, **kw)
        if bias is not None and abs(bias[1]) > BIAS_DEGRADED:
            return Verdict(DEGRADED, "bias", ratio, bias=bias, **kw)
        if received >= MIN_READINGS and self.rej > REJECT_DEGRADED * received:
            return Verdict(DEGRADED, "rejected", ratio, **kw)
        if self.t_event is not None and t - self.t_event < self.window:
            return Verdict(DEGRADED, "restart", ratio, detail=self.what, **kw)
        # the median is below ESS_DEGRADED only if at least half the window is (an exact skip)
        if len(self.ess) >= MIN_READINGS and 2 * self.ess_low >= len(self.ess) - 1:
            med = float(np.median([f for _, f in self.ess]))
            if med < ESS_DEGRADED:
                return Verdict(DEGRADED, "ess", med, **kw)
        if branch_probabilities is not None and len(branch_probabilities) > 1:
            p = float(np.max(branch_probabilities))
            if p < BRANCH_P:
                return Verdict(DEGRADED, "branch", ratio, branch_p=p, **kw)
        if not received:
            code = "start" if self.t_first is None or t - self.t_first < self.window else "silent"
            return Verdict(OK if code == "start" else DEGRADED, code, **kw)
        if not self.acc and span >= self.window:
            return Verdict(DEGRADED, "silent", **kw)
        if self.dof and ratio < lo:
            return Verdict(OK, "conservative", ratio, **kw)
        return Verdict(OK, "consistent", ratio, **kw)

    def _bias(self):
        """(channel name, |sum e| / sqrt(n) with its sign) of the window's most biased
        channel, None if no channel has BIAS_MIN innovations in the window."""
        return most_biased(self.sums, BIAS_MIN)


def fit_verdict(info: dict) -> Verdict:
    """The batch smoother's verdict from its goodness of fit (``info``: a solution's or a
    window's solver info, :mod:`mbde_core.trajectory.calibration`): LOST when the solver
    did not converge, DEGRADED for a poor fit (the normalised cost or a sensor's variance
    factor outside its band: its first warning is the reason), else OK."""
    status, warnings = info.get("status"), info.get("warnings") or []
    cost = (info.get("fit") or {}).get("normalised_cost")
    if status not in (None, "converged", "poor fit"):
        return Verdict(LOST, "unconverged", cost, detail=f"the smoother's solution {status}")
    if status == "poor fit" or warnings:
        return Verdict(DEGRADED, "fit", cost, detail="poor fit: " + (warnings[0] if warnings else "see the warnings"))
    fits = "the smoother's solution fits the readings" + ("" if cost is None else f" (normalised cost {cost:.3g})")
    return Verdict(OK, "fit", cost, detail=fits)


_BOUNDS: dict = {}


def _bounds(dof: int) -> tuple:
    """(LOST, DEGRADED, conservative) bounds of the mean NIS of a window with ``dof`` degrees of freedom."""
    b = _BOUNDS.get(dof)
    if b is None:
        if len(_BOUNDS) > 4096:
            _BOUNDS.clear()
        b = _BOUNDS[dof] = tuple(float(v) / dof for v in chi2_ppf([1 - P_LOST, 1 - P_DEGRADED, LOW_P], dof))
    return b
