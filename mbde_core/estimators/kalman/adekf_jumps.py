"""Input jumps of the ADE-KF, and the outliers they must not swallow (mixin of :class:`ADEKF`).

z and zd are integrals and cannot jump within a step, so a sudden change of the measured
accelerations is a sudden change of the inputs (a saturating controller, an impact). The
random walk of the inputs, tuned for their smooth part, would push such a mismatch into
the angle and speed, so a likelihood-ratio test lets the inputs jump (:meth:`_input_jump`).

Outliers: one reading cannot tell a change of the inputs from an outlier. With one
accelerometer and an unknown torque the filter's predicted reading is uncertain by the
torque's random-walk step (S = H P H^T + R, sqrt(S) ~ 4 m/s^2 on adekf_slider_crank while
its actual innovations are ~0.7 m/s^2: median NIS 0.04 against chi2_0.5(1) = 0.45), so a
100-sigma outlier (5 m/s^2) is within 1-2 sqrt(S): the gate passed it, and when it did not
the jump test explained it by a torque jump (``mbde bench faults``: RMSE x104 of the clean
run, 1 of 100 outliers rejected). A change of the inputs persists, an outlier does not,
so the decision waits for the next update (a two-hypothesis filter with one step of delay,
the generalised likelihood ratio of Willsky & Jones over a window of one reading):

- consistency: c = median(d^2) / chi2_0.5(dim) over the squared distances d^2 of the last
  ``CONSISTENCY_WINDOW`` fused readings (at least ``CONSISTENCY_FLOOR``, at most 1), the
  factor by which the filter's S overstates its actual innovations (the stage's
  :class:`~mbde_core.estimators.stage.guards.AdaptiveGate` only widens a gate, c >= 1);
- a reading is *suspect* when its distance under the prior S0 exceeds c times its gate,
  y_s^T S0_s^-1 y_s > c gate_s (the gate in units of the actual innovations); the filter
  fuses it as usual (with a jump of the inputs if the test asks: hypothesis F) and keeps
  the state before the update as hypothesis O (the reading was an outlier: rejected);
- both predict (same steps); at the next update, with the innovation y_h and
  S_h = H_h P_h H_h^T + R of each hypothesis h on the *new* readings, the one with the
  smaller -2 log-likelihood y_h^T (c S_h)^-1 y_h + ln det S_h is kept, the other dropped,
  and the update proceeds from it as usual -- O only if the new readings are not suspect
  under O itself (else the change persisted: keeping O would reject every reading of a
  real torque step, one after the other).

A real change (the next reading confirms it) keeps F: the filter without the test, so
clean runs change only where a lone large innovation is not confirmed. An isolated outlier
keeps O: the filter as if the gate had rejected it. A burst of outliers persists for its
10 readings and is taken as a change (as before); the re-acquisition rule handles its end.
"""
from __future__ import annotations

import math

import numpy as np

from collections import deque

from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.kalman.input_states import jump_variance
from mbde_core.estimators.kalman.algebra import gate_rows, innovation_stats

CONSISTENCY_WINDOW = 256   # fused readings in the median of the consistency c
CONSISTENCY_FLOOR = 0.02   # lowest c (a filter 50 x underconfident in S)


class InputJumps:
    """Input-jump test and the outlier hypothesis (module doc); needs the ADEKF's state
    x, P, q, its model and ``_innovation``/``linearize``."""

    def _consistency(self) -> float:
        """c (module doc) from the recent squared distances (1 until the window is full)."""
        hist = self._d2_hist
        if hist is None or len(hist) < CONSISTENCY_WINDOW:
            return 1.0
        if self._c_age >= 16:  # the median every 16 readings (it moves slowly)
            self._c = float(np.clip(np.median(hist), CONSISTENCY_FLOOR, 1.0))
            self._c_age = 0
        self._c_age += 1
        return self._c

    def _observe(self, res) -> None:
        """Add the squared distances (over chi2_0.5 of their sensor's dimension) of fused readings."""
        if self._d2_hist is None:
            self._d2_hist = deque(maxlen=CONSISTENCY_WINDOW)
            self._c, self._c_age = 1.0, 16
        for name, d2 in res.distances:
            if name in res.accepted and math.isfinite(d2):
                self._d2_hist.append(d2 / self._chi2_median(name))

    def _chi2_median(self, name) -> float:
        med = self.__dict__.setdefault("_chi2_medians", {})
        if name not in med:
            med[name] = float(chi2_ppf(0.5, self.sensors[name].dim))
        return med[name]

    def _suspect(self, names, dims, y, H, R, gates) -> bool:
        """Whether a reading is over c x its gate under the prior S0 (module doc)."""
        if not gates:
            return False
        c = self._consistency()
        scaled = {n: c * g for n, g in gates.items() if g is not None and math.isfinite(g)}
        return bool(scaled) and bool(gate_rows(names, dims, y, H @ self.P @ H.T + R, scaled)[1])

    def _swap(self) -> None:
        """Exchange the state (x, P, assembly guess q, linearisation) with the held hypothesis."""
        alt = self._alt
        self._alt = (self.x, self.P, self.q, self._lin)
        self.x, self.P, self.q, self._lin = alt

    def _score(self, names, dims, o, c, gates=None) -> float:
        """-2 log-likelihood (without 2 pi and ln c) of the readings o at the current state,
        their innovation covariance S scaled by the consistency c; inf if ``gates`` are
        given and the readings are suspect (over c x their gate)."""
        lin = self.linearize(names)
        y, R = self._innovation(names, dims, o, lin)
        if gates is not None and self._suspect(names, dims, y, lin.H, R, gates):
            return math.inf
        nis, _, logdet = innovation_stats(y, lin.H @ self.P @ lin.H.T + R)  # NaN: S not positive definite
        val = nis / c + logdet
        return val if math.isfinite(val) else math.inf

    def _decide(self, names, dims, o, gates) -> None:
        """Keep the hypothesis (fused or outlier) that better predicts the readings o; the
        outlier hypothesis only if it does not find them suspect itself (module doc)."""
        c = self._consistency()
        with np.errstate(all="ignore"):
            jump = self._score(names, dims, o, c)
            self._swap()
            outlier = self._score(names, dims, o, c, gates or {})
            if not outlier < jump:
                self._swap()
        if outlier < jump:
            self.outliers_undone += 1
        self._alt = None

    def _input_jump(self, y, H, R) -> None:
        """Let the inputs jump when a reading says so (an extension of the paper's random walk):
        the generalised likelihood-ratio test of :func:`input_states.jump_variance` with
        S0 = H P H^T + R, V <= ``jump_sigma``^2. Near a dead centre, where the sensors do not
        see the inputs (H_a ~ 0), S1 ~ S0 and nothing jumps.
        """
        g2 = 2 * self.g
        idx = np.arange(g2, g2 + self.na)
        V = jump_variance(self.P[idx, idx], y, H @ self.P @ H.T + R, H[:, g2 : g2 + self.na], self.jump_var, self.jump_nis)
        if V is not None:
            self.P = self.P.copy()
            self.P[idx, idx] = V
            self.jumps += 1
