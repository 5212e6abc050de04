"""Recovery of the estimator stage (:class:`mbde_core.estimators.stage.core.EstimatorStage`):
backward time jumps, diverged estimates, the gate's re-acquisition and the multi-start
banks after silences and re-acquisitions.

A mixin: the methods use the stage's state (``est``, ``t0``, ``k``, ``dt``, ``pending``,
``counters``, ``reacq``, ``gate_adapt``, ``bank_size``, ``bank_window``, ``_bank``, ...).
See the stage's module docstring for the rules; the methods' docstrings give the
reasons and the measurements behind them.
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.innovation import DEFAULT_CAP, is_lost
from mbde_core.estimators.stage.multistart import MultiStart, candidates, energy_ceiling
from mbde_core.types import Measurement

LOST_CHECK_GAP = 0.1        # s: after a silence this long the stage checks whether the estimate is lost
LOOP_TOLERANCE = 0.1        # s: a jump back to within this of the first stamp is a loop of the recording


class StageRecovery:
    """Backward jumps, divergence, the gate's re-acquisition, the energy ceiling and the
    multi-start banks of the stage (mixin)."""

    def _diverged(self, t: float) -> None:
        """The estimate or its covariance overflowed (a lost filter predicting through a
        gap: a UKF at 3e3 rad/s whose covariance squared every step): it is lost, restart
        it from the initial guess at the same grid time, as a long gap does (counted)."""
        self.counters.diverged += 1
        self._bank = None
        self.est.reset(t, self.initial(t))
        if self.reacq is not None:
            self.reacq.clear()
        if self.gate_adapt is not None:
            self.gate_adapt.clear()
        self._disturbed(t)
        self._unknown = True  # the multi-start bank waits for the next reading

    def _watch(self, result: UpdateResult) -> None:
        """Re-convergence time, the gate's scale and re-acquisition rule after an update."""
        t = self.t0 + self.k * self.dt
        disagreed = result
        if self.gate_adapt is not None and result.distances:
            c = self.counters
            believed = self.gate_adapt.observe(t, result.distances)
            c.gate_believed += len(believed)
            c.gate_scale_max = max(c.gate_scale_max, max(self.gate_adapt.scale.values()))
            if believed:  # for the re-acquisition rule they disagreed with the filter
                acc = list(result.accepted)
                for n in believed:
                    acc.remove(n)
                disagreed = UpdateResult(acc, list(result.rejected) + believed)
        took = self.reconv.observe(t, result)
        if took is not None:
            self._after_jump = False
            self.counters.reconvergence_last = took
            self.counters.reconvergence_max = max(self.counters.reconvergence_max, took)
        if self._bank is not None and self._bank.done(t):
            self._bank.adopt()
            self._bank = None
        if self.reacq is None or not self.reacq.observe(t, disagreed):
            return
        self.counters.reacquisitions += 1
        if self._after_jump:  # the motion restarted with the clock (a bag loop): the initial guess
            self._bank = None
            self.est.reset(t, self.initial(t))
        else:
            self._active.reacquire(self.inflation)
        self._after_jump = False
        self.reconv.disturbed(t)
        self._multistart(t)

    def _jumped_back(self, m: Measurement, now: float) -> None:
        """A backward time jump to m.stamp: close the old time, restart from the estimate."""
        size = now - m.stamp
        c = self.counters
        c.resets += 1
        c.backward_jump_last = size
        c.backward_jump_max = max(c.backward_jump_max, size)
        self._in_flight = m
        self._settle()
        if self.pending:
            self._close_slot()
        self._in_flight = None
        loop = self.first is not None and abs(m.stamp - self.first) <= LOOP_TOLERANCE
        self._carry_on(m)
        if self._two_hypotheses(m.stamp, loop):
            return
        if loop and not self._active.add_restart_hypotheses("jump"):
            self._start(m.stamp)  # back to where the data started: a bag loop, the initial guess fits
            self._disturbed(m.stamp)
            return
        # (a particle filter carries both explanations of a loop in its cloud: it goes on
        # below, and the initial guess's hypotheses join it at the next update)
        # the same state at the new time: _carry_on predicted it to one sensor period after its
        # last reading (fused into the last old slot's state, m put the ADE-KF a step behind)
        self.t0, self.k, self.pending, self._last_stamp = m.stamp, 0, [], {}
        self._active.rebase(m.stamp)
        if self.reacq is not None:
            self.reacq.clear()
        self._disturbed(m.stamp)
        self._after_jump = True

    def _carry_on(self, m: Measurement) -> None:
        """Before a backward jump to m.stamp: if the mechanism moved on, m was read one
        period of its sensor after that sensor's last reading L (old time), i.e. at
        L + T, while the filter is at its last slot t_k <= L + T (a fast mechanism moves
        on meanwhile: pf_rig_branch1 at 7.8 rad/s, a track left one 6 ms period behind
        had its first reading rejected). The track is predicted n = round((L + T - t_k) / dt)
        steps (not emitted: old time) before it is rebased to m.stamp."""
        last, period = self._last_stamp.get(m.sensor), self._period.get(m.sensor)
        if last is None or period is None or self.t0 is None:
            return
        n = int(round((last + period - (self.t0 + self.k * self.dt)) / self.dt))
        for _ in range(max(0, min(n, int(math.ceil(LOST_CHECK_GAP / self.dt))))):
            self._active.predict(self.dt)

    def _two_hypotheses(self, t: float, loop: bool) -> bool:
        """After a backward jump to t, with the multi-start bank on (a local observer): let
        the readings decide between the two explanations of the jump instead of guessing
        from the stamps. H1, the clock stepped while the mechanism moved on: the track
        goes on from its estimate, now at t (:meth:`Estimator.rebase`). H0, the motion
        restarted with the clock (a bag loop, a restarted simulation): the initial guess.
        A jump back to the first stamp is not proof of H0 (a clock stepping back by
        exactly the elapsed time; a loop of a recording whose mechanism came to rest where
        it started), nor is any other size proof of H1 (a node started mid-recording sees
        a loop go further back). Both run side by side as a bank
        (:class:`~mbde_core.estimators.stage.multistart.MultiStart` with ``keep``) for
        ``reacquire.window`` seconds; the one whose predictions explain the readings best
        (the smallest sum of min(NIS, cap) + log det S) goes on. The stamps are evidence
        nonetheless: the hypothesis they suggest (``loop``, back to the first stamp: H0;
        else H1) starts one gate rejection (cap) ahead, i.e. is emitted until the readings
        favour the other by a likelihood ratio of exp(cap / 2) (pf_rig_branch1 without
        it: the initial guess explained the first reading after a mid-run jump a little
        better and was emitted for one step, 2.9 rad off). False if the bank is off."""
        if self.bank_size < 2:
            return False
        bank_was = self._bank
        if bank_was is not None:  # a bank was deciding already: its best candidate is the track
            bank_was.adopt()
            self._bank = None
        self.t0, self.k, self.pending, self._last_stamp = t, 0, [], {}
        try:
            self.est.rebase(t)
            bank = MultiStart(self.est, t, [self.initial(t)], self.bank_window, self._cap(), keep=True,
                              prior=(-1.0 if loop else 1.0) * (self._cap() or DEFAULT_CAP))
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            return False
        if len(bank) < 2:
            return False
        self._bank = bank
        self.counters.multistarts += 1
        if self.reacq is not None:
            self.reacq.clear()
        if self.gate_adapt is not None:
            self.gate_adapt.clear()  # the scale of the distances at the old time
        self._disturbed(t)
        return True

    def _ceiling(self) -> float | None:
        """The energy ceiling after a silence starting now (:func:`multistart.energy_ceiling`)
        for the multi-start bank or an estimator carrying its own hypotheses (the PF)."""
        if self._bank is not None:
            return None
        try:
            return energy_ceiling(self.est, self.est.estimate())
        except (ValueError, ArithmeticError, np.linalg.LinAlgError, AttributeError):
            return None

    def _multistart(self, t: float, unknown: bool = False, anywhere_if_lost: bool = False,
                    after_gap: bool = False, ceiling: float | None = None, zd_hint=None) -> None:
        """Start a multi-start bank (:mod:`multistart`) if the estimate is lost (or its
        whereabouts ``unknown``) and the option is on. anywhere_if_lost: a lost estimate's
        candidates cover every state (after a gap predicted open loop, whose linearised
        covariance understates how lost it is), not only its 3-sigma range.

        after_gap: the estimate was predicted open loop through a silence; lost or not, the
        open-loop prediction is one hypothesis among the candidates (the estimator itself
        is member 0 of the bank, ``keep``), not a certainty: a mechanism whose unmodelled
        forces (friction) changed its motion in the gap is elsewhere than predicted while
        the predicted covariance stays below the lost threshold, and its first readings
        then pull the filter only slowly (pf_rig_branch0 after a 2 s gap: the UKF's
        prediction 0.2 rad off with sigma 0.22 rad, still 0.12 rad off 0.4 s later). The
        candidates cover the prediction's 3-sigma range (every state if lost), the readings
        of ``reacquire.window`` decide, among those whose mechanical energy is within
        ``ceiling`` (a passive mechanism cannot gain energy in the gap,
        :func:`~mbde_core.estimators.stage.multistart.energy_ceiling`; None: no bound).

        zd_hint: the velocity the readings last saw (before a silence), the centre of a lost
        estimate's candidate velocities instead of the open-loop prediction (a driven crank
        predicted for 2 s with its last torque: +49 -> -400 rad/s, and the ADE-KF locked
        onto the mirrored motion)."""
        unknown, self._unknown = unknown or self._unknown, False
        if self.bank_size < 2 or self._bank is not None:
            return
        try:
            snap = self.est.estimate()
            lost = unknown or is_lost(self.est, snap)
            if not lost and not after_gap:
                return
            if unknown or (anywhere_if_lost and lost):
                snap.cov = np.diag(np.full(2 * len(snap.z), np.inf))
                if zd_hint is not None and anywhere_if_lost and not unknown:
                    snap.zd = np.array(zd_hint, dtype=float)
            starts = candidates(self.est, snap, self.bank_size, self.initial(t))
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            return
        bank = MultiStart(self.est, t, starts, self.bank_window, self._cap(), keep=after_gap, ceiling=ceiling)
        if len(bank) >= 2:
            self._bank = bank
            self.counters.multistarts += 1
            self.reconv.disturbed(t)
