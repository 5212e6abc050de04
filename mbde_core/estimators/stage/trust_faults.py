"""Sensor faults the trust verdict (:mod:`.trust`) reads from the readings: a stuck channel
and a step in a channel's innovations.

**Stuck** (:class:`StuckReadings`). A sensor's reading is its model h(q, qd, qdd) plus noise
of variance sigma^2 + step^2 / 12 (a quantisation ``step``): while the mechanism moves, two
consecutive readings of a channel are equal only if the change of h between them is
hidden by the quantisation. A channel whose last ``STUCK_N`` readings (at least) are
bit-identical while the estimate's own prediction of that reading moved by more than
``STUCK_MOVE`` sigma plus one quantisation step is stuck: the readings cannot be the
mechanism's. An encoder at rest repeats its count and predicts no change (no flag); a
slowly turning one changes its count before its prediction moves by two steps. A channel
whose noise makes a repeat improbable is stuck whatever the estimate predicts: two
readings of N(0, sigma^2) noise fall into the same quantisation step q with probability
about q / (2 sigma sqrt(pi)) (:func:`repeat_probability`), so ``STUCK_N`` (at least)
identical readings with a probability below ``P_REPEAT`` cannot be noise (the estimate may
follow a frozen gyroscope: pf_rig_branch1's UKF held its predicted rate 2 sigma from the
frozen reading and drifted 600 sigma in 0.2 s while its verdict stayed OK; a noiseless
quantised encoder, probability 1, is left to the motion test). The stuck
channel is named; the verdict holds it for ``STUCK_HOLD`` s after its readings change
again (the estimate it pulled is still off then: the Watt six-bar's gyroscope stuck for
1 s, the errorEKF 60 sigma off when it resumed).

**Step** (:class:`StepDetector`). A sensor whose readings jump (a bias step, a slip of an
encoder, a stuck channel's return) pulls the estimate with it; the estimate absorbs the
shift within a few readings, after which the innovations are white again and the sliding
window (:mod:`.trust`) sees nothing while the estimate follows the shifted sensor (an
encoder-only pendulum after a 10-sigma bias step reads consistent and is 20-30 sigma of its
own covariance off for the rest of the run). Two tests, both only while the estimate is
trusted (its previous verdict OK) or in an episode of distrust that started from a trusted
estimate (a far-off start's settling never was trusted), as said:

- the estimate jumped, in an episode of distrust that started from a trusted estimate (the
  gate's rejections of the first readings of a step end the trust): a mechanism's
  position does not jump, so the corrections of z over ``JUMP_TIME`` s, each step's change
  beyond the trapezoid of the estimate's own velocities (z_k - z_{k-1} - (zd_{k-1} + zd_k)
  dt / 2: exact for a constant acceleration within the step, whatever its jump between
  steps; a constant-acceleration extrapolation from the last step missed by half the
  acceleration's jump times dt^2 there: the slider-crank with its torque measured, a
  held torque reading stepping at the saturation, LOST on 11-37 % of its nominal runs),
  summed and measured in the
  covariance of z predicted at constant velocity over the span from its start
  (:func:`spread`: the velocity's uncertainty moves the position too), stay within a few
  sigma; beyond ``JUMP_SIGMA`` the estimate before or after the jump is off by about that
  much (the pendulum's 1 kHz encoder: 6 readings rejected by the gate, the re-acquisition
  widens the covariance and the estimate moves 25 sigma in 4 readings). Measured in the
  covariance of z alone, the motors bench's slider-crank with its torque unknown (input
  states; its velocity uncertain by 0.04-0.29 rad/s between the rod gyroscope's readings,
  3-20 sigma of z over 50 ms) jumped 10-13 sigma at the corners of the torque saturation
  while on track within 1-3 sigma: LOST on 21 % of the run. Not while the estimate is
  plainly trusted: at the fast crank of pf_sim (zd 15 -> 20 rad/s in 20 ms) the
  extrapolation of zd alone missed by 11 sigma of a consistent estimate;
- the estimate jumped after the gate rejected a reading of a trusted estimate: the
  gate's re-acquisition widens the covariance, and the next readings it accepts pull the
  estimate onto a shifted sensor within one or two readings (the steel four-bar's 50 Hz
  encoder after a 10-sigma bias step: one rejection, then 8 sigma in one reading, the
  innovations white again and the window OK while 10-12 sigma off). The corrections of z
  from the rejection on (until ``JUMP_TIME`` s after the last rejection, at most
  ``REJECT_SPAN`` s), measured in the covariance of z *before* the rejection (the one
  the trusted estimate claimed), beyond ``JUMP_ANCHORED`` sigma: the estimate before or
  after is off by about that much. A consistent estimate whose reading is rejected by
  chance moves by one correction of its widened covariance (about 2 of those sigma for
  the steel four-bar's 2.4x widening), and such rejections are rare: none on the nominal
  runs of the shipped scenarios and the bench's own linkages (UKF, errorEKF, exact and
  +5 % mass, 3 s each), while the bias steps moved 7.3-29 sigma. Not for a particle
  filter's published estimate (its mean moves with its weights: pf_rig_branch1's PF, a
  nominal run, moved 6.2 sigma after a rejection while 0.8 sigma off);
- a step in a channel's innovations: Page's two-sided CUSUM (E. S. Page 1954, "Continuous
  inspection schemes", Biometrika 41) on its normalised innovations e,
  g+_k = max(0, g+_{k-1} + e_k - kappa), g-_k = max(0, g-_{k-1} - e_k - kappa), with
  kappa = ``STEP_DRIFT``, alarm at g > ``STEP_ALARM``: a shift the gate lets through (a
  10-sigma step absorbed 30 % per reading: the second reading); for N(0, 1) innovations the
  in-control average run length is about e^(2 kappa h) / 2 = 3e21 readings (Siegmund's
  approximation), and a smaller lasting shift (a mean of 1.5 sigma: each term -1 on
  average) is left to the window's bias test, which ends with the shift;
- a burst of large innovations of either sign: the same CUSUM on their squares,
  c_k = max(0, c_{k-1} + e_k^2 - ``BURST_DRIFT``), alarm at c > ``BURST_ALARM`` (a test of
  a change in the innovations' variance, the chi-square form of Page's scheme; Basseville
  & Nikiforov 1993, "Detection of abrupt changes", sec. 2.2). A filter whose gain is near
  one follows a step within a few readings, and its innovations overshoot: pendulum_release's
  1 kHz encoder (five readings combined per 5 ms step) read innovations of 3.5, 4.2 and
  -4.6 sigma after a 10-sigma bias step, then white ones while the estimate stayed 24 sigma
  off; the signed CUSUM sums to 2.7 there, this one to 34.5. With kappa = 6 (beyond 2.45
  sigma) an N(0, 1) innovation adds to c with probability 0.014; the nominal runs of the
  shipped scenarios and the bench's own linkages (UKF, errorEKF, exact and +5 % mass, 3 s)
  reached at most 11.4 (pf_rig_branch0's gyroscope, model error), the bias steps 34.5
  (pendulum_release) and 63 (fivebar_gyro).

The verdict is LOST for ``STEP_LOST`` s after the last alarm, then DEGRADED for
``STEP_DEGRADED`` s (the readings cannot tell whether the estimate follows a shifted
sensor or was off before the jump: the shift of an encoder-only estimate never shows
again); a reset of the track clears it.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.sensors.base import wrap_angle

STUCK_N = 5  # identical readings in a row at least
STUCK_MOVE = 3.0  # sigma (plus one quantisation step) the estimate's prediction must have moved
P_REPEAT = 1e-6  # a run of identical readings less probable than this under the sensor's noise: stuck
STUCK_HOLD = 1.0  # s: the verdict holds a stuck channel after its readings change again
STEP_DRIFT = 2.5  # the CUSUM's allowance kappa per innovation [sigma]
STEP_ALARM = 10.0  # its alarm threshold h [sigma]
BURST_DRIFT = 6.0  # the squared-innovation CUSUM's allowance per innovation [sigma^2]
BURST_ALARM = 25.0  # its alarm threshold [sigma^2]
JUMP_TIME = 0.05  # s: the span of a jump of the estimate
JUMP_SIGMA = 10.0  # sigma of the estimate's own covariance: a jump
JUMP_ANCHORED = 6.0  # sigma of the covariance before a trusted estimate's gate rejection: a jump
REJECT_SPAN = 1.0  # s: the longest episode of gate rejections the anchored jump test follows
STEP_LOST = 3.0  # s: LOST after a step or jump
STEP_DEGRADED = 10.0  # s: then DEGRADED


class StuckReadings:
    """Runs of bit-identical readings per sensor channel (module doc)."""

    def __init__(self):
        self.runs: dict = {}  # sensor -> [value, t first, n, h first (d,), moved (d,) [sigma]]
        self.found = None  # (sensor[channel], n, span [s], moved [sigma], t last identical)

    def observe(self, t: float, readings, sensors, estimate) -> None:
        """The readings fused at grid step t (Measurement list), the estimator's sensor
        models (a SensorSet or None) and its estimate after the step."""
        for m in readings or ():
            s = _sensor(sensors, m.sensor)
            v = np.asarray(m.value, float)
            run = self.runs.get(m.sensor)
            if run is None or run[0].shape != v.shape or not np.array_equal(run[0], v):
                self.runs[m.sensor] = [v, t, 1, None, None]
                continue
            run[2] += 1
            if s is None or run[2] < 2:
                continue
            if run[2] >= STUCK_N:
                p = repeat_probability(s.noise)
                if p ** (run[2] - 1) < P_REPEAT:
                    self.found = (m.sensor, run[2], t - run[1], None, t)
            h = _predicted(s, estimate)
            if h is None:
                continue
            if run[3] is None:
                run[3], run[4] = h, np.zeros_like(h)
                continue
            d = h - run[3]
            d = np.where(s.angular, wrap_angle(d), d)
            var = s.noise.variance()
            step = s.noise.quantization
            with np.errstate(divide="ignore", invalid="ignore"):
                moved = np.where(var > 0, np.maximum(np.abs(d) - step, 0.0) / np.sqrt(var), 0.0)
            run[4] = np.maximum(run[4], moved)
            i = int(np.argmax(run[4]))
            if run[2] >= STUCK_N and run[4][i] > STUCK_MOVE:
                name = m.sensor + (f"[{i}]" if len(v) > 1 else "")
                self.found = (name, run[2], t - run[1], float(run[4][i]), t)

    def verdict(self, t: float):
        """(channel, n readings, span [s], predicted move [sigma], ended [s] or 0) of a stuck
        channel now or within ``STUCK_HOLD`` s, else None."""
        if self.found is None:
            return None
        name, n, span, moved, last = self.found
        if t - last > STUCK_HOLD:
            self.found = None
            return None
        return name, n, span, moved, t - last


class StepDetector:
    """Jumps of a trusted estimate and steps in its channels' innovations (module doc)."""

    def __init__(self):
        self.g: dict = {}  # (key, channel) -> [g+, g-, n+, n-, sum+, sum-, c (squares), its terms]
        self.last = None  # (t, sentence) of the last alarm
        self.prev = None  # (t, z, zd, cov) of the last estimate
        self.span: list = []  # (t, change of z beyond the extrapolation, covariance of [z, zd] and t before)
        self.episode = None  # [t first rejection, t last, covariance of z before it, summed change] (module doc)

    def observe(self, t: float, key, e, armed: bool) -> None:
        """Normalised innovations e of the readings ``key`` (accepted sensors) at t."""
        if key is None:
            return
        for i, x in enumerate(np.asarray(e, float)):
            ch = (key, i)
            if not armed:
                self.g.pop(ch, None)
                continue
            st = self.g.setdefault(ch, [0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0])
            st[0], st[2], st[4] = _page(st[0], st[2], st[4], x)
            st[1], st[3], st[5] = _page(st[1], st[3], st[5], -x)
            c = st[6] + x * x - BURST_DRIFT
            st[6], st[7] = (c, st[7] + 1) if c > 0.0 else (0.0, 0)
            name = f"{'+'.join(key)}[{i}]"
            for sign, (g, n, total) in ((1, st[0:5:2]), (-1, st[1:6:2])):
                if g > STEP_ALARM:
                    size = sign * total / max(n, 1)
                    self.last = (t, f"readings of {name} stepped by {size:+.3g} sigma at {t:.3f} s")
                    self.g[ch] = [0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0]
                    break
            else:
                if st[6] > BURST_ALARM:
                    rms = math.sqrt((st[6] + BURST_DRIFT * st[7]) / max(st[7], 1))  # c + kappa n: their sum
                    what = f"{st[7]} innovation{'s' if st[7] > 1 else ''}"
                    self.last = (t, f"readings of {name} jumped: {what} of {rms:.3g} sigma (rms) at {t:.3f} s")
                    self.g[ch] = [0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0]

    def moved(self, t: float, estimate, angular, armed: bool, rejected: bool = False, trusted: bool = False) -> None:
        """The estimate after grid step t: the jump tests (module doc); armed: in an episode
        of distrust that started from a trusted estimate; rejected: the gate rejected a
        reading at this step; trusted: the previous verdict was OK (and the same source
        publishes)."""
        z, zd, cov = (getattr(estimate, k, None) for k in ("z", "zd", "cov"))
        prev, self.prev = self.prev, None
        if z is None or zd is None or cov is None or not np.all(np.isfinite(cov)):
            self.span, self.episode = [], None
            return
        z, zd = np.asarray(z, float), np.asarray(zd, float)
        self.prev = (t, z, zd, np.asarray(cov, float))
        if prev is None or len(prev[1]) != len(z) or not t > prev[0]:
            self.span, self.episode = [], None
            return
        dt = t - prev[0]
        dz = z - (prev[1] + 0.5 * (prev[2] + zd) * dt)  # beyond the trapezoid of its own velocities
        if angular is not None and len(angular) == len(dz):
            dz = np.where(angular, wrap_angle(dz), dz)
        g = len(z)
        self._rejections(t, dz, prev[3][:g, :g], rejected, trusted)
        if not armed:
            self.span = []
            return
        self.span.append((t, dz, prev[3], prev[0]))
        while self.span and self.span[0][0] <= t - JUMP_TIME:
            self.span.pop(0)
        self._alarm(t, np.sum([x[1] for x in self.span], axis=0), spread(self.span[0][2], g, t - self.span[0][3]))

    def _rejections(self, t, dz, cov, rejected: bool, trusted: bool) -> None:
        """The jump test anchored at a trusted estimate's gate rejection (module doc)."""
        ep = self.episode
        if ep is None:
            if not (rejected and trusted):
                return
            ep = self.episode = [t, t, cov, np.zeros_like(dz)]
        elif rejected:
            ep[1] = t
        ep[3] = ep[3] + dz
        if self._alarm(t, ep[3], ep[2], "after the gate rejected a reading", JUMP_ANCHORED) or t - ep[1] > JUMP_TIME \
                or t - ep[0] > REJECT_SPAN:
            self.episode = None

    def _alarm(self, t, d, cov, what="", limit=JUMP_SIGMA) -> bool:
        try:
            m = float(d @ np.linalg.solve(cov, d))
        except (np.linalg.LinAlgError, ValueError):
            return False
        if m > limit ** 2:
            when = f" {what}" if what else ""
            self.last = (t, f"the estimate jumped {math.sqrt(m):.3g} sigma of its own covariance{when} at {t:.3f} s")
            self.span = []
            return True
        return False

    def verdict(self, t: float):
        """(level 2 LOST or 1 DEGRADED, sentence) after an alarm, else None."""
        if self.last is None:
            return None
        age = t - self.last[0]
        if age < STEP_LOST:
            return 2, f"{self.last[1]} (a sensor bias or jump, or the estimate was off before it)"
        if age < STEP_LOST + STEP_DEGRADED:
            return 1, f"{self.last[1]}, {age:.2g} s ago: the estimate may still follow a shifted sensor"
        self.last = None
        return None


def spread(cov, g: int, span: float):
    """The covariance of z after ``span`` s at constant velocity from a covariance of [z, zd]
    (2g, 2g): P_zz + T (P_zzd + P_zdz) + T^2 P_zdzd, the spread a consistent estimate's
    position may move by over the span beyond its own extrapolation (the velocity's
    uncertainty moves it; input states make that uncertainty large between readings)."""
    cov = np.asarray(cov, float)
    if cov.shape[0] < 2 * g:
        return cov[:g, :g]
    zz, zv, vv = cov[:g, :g], cov[:g, g:], cov[g:, g:]
    return zz + span * (zv + zv.T) + span * span * vv


def _page(g: float, n: int, total: float, x: float) -> tuple:
    """One step of a one-sided CUSUM: (g, terms since it left zero, their sum)."""
    g = g + x - STEP_DRIFT
    if g <= 0.0:
        return 0.0, 0, 0.0
    return g, n + 1, total + x


def _sensor(sensors, name):
    try:
        return sensors[name] if sensors is not None and name in sensors else None
    except (KeyError, TypeError):
        return None


def _predicted(sensor, estimate):
    """The estimate's prediction h(q, qd, qdd) of a sensor's reading, None if unavailable."""
    try:
        h = np.asarray(sensor.h(estimate.q, estimate.qd, estimate.qdd), float)
    except (ValueError, ArithmeticError, AttributeError, TypeError, IndexError):
        return None
    return h if np.all(np.isfinite(h)) else None


def repeat_probability(noise) -> float:
    """The probability that two consecutive readings of a sensor are bit-identical by
    chance: per channel, that two draws of N(0, sigma^2) fall into the same quantisation
    step q, about q / (2 sigma sqrt(pi)) for sigma >> q (0 without quantisation, 1 without
    noise), multiplied over the channels (the whole reading repeats)."""
    sig = np.atleast_1d(np.asarray(noise.sigma, float))
    q = np.broadcast_to(np.atleast_1d(np.asarray(noise.quantization, float)), sig.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(sig > 0, np.minimum(q / (2.0 * sig * math.sqrt(math.pi)), 1.0), 1.0)
    return float(np.prod(p))


def stuck_reason(found) -> str:
    name, n, span, moved, ended = found
    now = "" if ended <= 0 else f", {ended:.2g} s ago"
    if moved is None:
        return (f"sensor {name} stuck: {n} identical readings over {span:.2g} s, which its noise makes "
                f"improbable (below {P_REPEAT:g}){now}")
    return (f"sensor {name} stuck: {n} identical readings over {span:.2g} s while the estimate predicts a change "
            f"of {moved:.3g} sigma{now}")
