"""EstimatorStage: drives an estimator on a fixed step with asynchronous multirate sensors.

The same stage runs inside ``mbde replay`` (fed from a bag in arrival order) and inside
the live ROS node (fed from subscriptions), so both produce identical results -- and
detect, count and handle every anomaly of the readings identically -- for the same input.

Time grid: t_k = t_0 + k dt, with t_0 the stamp of the first accepted measurement. A
reading stamped t belongs to the slot k = round((t - t_0)/dt). The stage predicts the
estimator slot by slot; when a slot closes (a reading of a later slot arrives, or
``advance_to``/``flush`` is called) all readings of that slot are fused in one update,
in stamp order, and the estimate of t_k is emitted. Slots without readings are pure
predictions (also emitted). Feeding readings one by one or in batches therefore gives
bit-identical results. Known inputs (a measured torque) are held from their slot on
(:mod:`.inputs`); with known inputs that change between readings (``hold: linear``) the
predictions into a slot wait until it closes (``_owed``: the torque read at the slot's
time then shapes the step into it); every
record carries the trust verdict (:mod:`.trust`). The slot
updates, predictions and emitted records are in :mod:`.steps`, the recovery in :mod:`.recovery`.

Robustness (each case counted in ``counters``, nothing crashes, see also
:mod:`mbde_core.estimators.stage.guards`):

- unknown sensor names and non-finite stamps/values are skipped (``unknown_sensor``,
  ``non_finite``);
- a ``reorder_window`` [s] buffers readings so that small arrival-order inversions
  between topics are re-sorted; a reading older than the current slot is still
  ``out_of_order`` (skipped);
- duplicate stamps: a second reading of one sensor with the stamp of its previous one
  is skipped (``duplicates``): the first is fused;
- backward time jumps (a reading older than the filter time by more than
  ``backward_jump`` s: a clock step or a bag loop), counted in ``resets`` with the jump's
  size (``backward_jump_last``, ``backward_jump_max`` [s]): the readings of the old time
  are finished, then the estimator restarts at the new time. Either the clock stepped
  while the mechanism moved on (the track goes on: its state and covariance, predicted
  to one sensor period after its last reading, at the new time, :meth:`Estimator.rebase`)
  or the motion restarted with it (``ros2 bag play --loop``, a restarted simulation: the
  initial guess). The stamps cannot tell (a clock stepping back by the elapsed time lands
  on the first stamp, as a loop does; a node started mid-recording sees a loop go further
  back), so with the multi-start bank on (the Kalman family) both run side by side for
  ``reacquire.window`` and the readings decide (:meth:`EstimatorStage._two_hypotheses`).
  Without it: back to (within ``LOOP_TOLERANCE`` of) the first stamp ever seen, the
  initial guess; elsewhere the track goes on and restarts from the initial guess if its
  readings are then rejected until the re-acquisition rule fires;
- readings far in the future (stamped more than ``backward_jump`` s after the stream)
  wait for the next reading: one in the same new time confirms a forward jump (then
  handled as a gap), one in the old time makes it a ``future`` reading (skipped);
- a forward gap longer than ``max_gap`` seconds restarts from the initial guess
  (``gap_resets``) instead of predicting through it; shorter gaps are predicted through;
- the per-reading Mahalanobis gate (chi-square probability ``gate``, on by default in
  every estimator's options) rejects outliers inside the estimator's update
  (``rejected_gate``), with a re-acquisition rule (``reacquisitions``): a run of mostly
  rejected readings of a sensor makes the estimator widen its uncertainty;
- a local observer (Kalman family) that is lost after a long-gap restart or a
  re-acquisition (its covariance covers the circle) re-acquires globally with a
  multi-start bank (:mod:`~mbde_core.estimators.stage.multistart`, ``multistarts``); after a
  gap predicted through (longer than ``LOST_CHECK_GAP``) the open-loop prediction is one
  member of such a bank, next to candidates over its 3-sigma range (every state if lost);
- an estimate or covariance that is no longer finite (a lost filter predicted open loop
  until its numbers overflowed) is never emitted: the estimator restarts from the
  initial guess at the same time, as after a long gap (``diverged``);
- after every restart or re-acquisition the time until the filter agrees with its
  readings again is measured (``reconvergence_last``, ``reconvergence_max`` [s]).
"""
from __future__ import annotations

import heapq
import itertools
import math
from typing import Callable

import numpy as np

from mbde_core.estimators.blas_threads import single_blas
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.chi2 import chi2_ppf
from mbde_core.estimators.options.common import Reacquire
from mbde_core.estimators.stage.multistart import MultiStart
from mbde_core.estimators.stage.guards import AdaptiveGate, ForwardJumpGuard, Reacquisition, Reconvergence
from mbde_core.estimators.stage.inputs import HeldInputs
from mbde_core.estimators.stage.records import StageCounters, StepRecord  # noqa: F401 (the stage's outputs)
from mbde_core.estimators.stage.recovery import LOST_CHECK_GAP, StageRecovery
from mbde_core.estimators.stage.steps import StageSteps
from mbde_core.estimators.stage.trust import TrustMonitor
from mbde_core.types import Measurement

# Stage options shared by `mbde replay` and the live node (node parameters of the same names)
STAGE_DEFAULTS = {"reorder_window": 0.02, "backward_jump": 1.0, "max_gap": 10.0}
DUPLICATE_TOLERANCE = 1e-9  # s: equal stamps


class EstimatorStage(StageSteps, StageRecovery):
    """Fixed-step driver of one estimator.

    Parameters
    ----------
    estimator: an :class:`mbde_core.estimators.base.Estimator`.
    step: filter step [s].
    initial: callable ``t -> InitialState`` used at start and after resets.
    gate: chi-square probability of the Mahalanobis gate (0 = off), a float for every
        sensor or a dict sensor -> probability.
    gate_window: [s] window of the gate's scale (:class:`~mbde_core.estimators.stage.guards.AdaptiveGate`);
        0 = the fixed chi-square threshold.
    gate_persist: readings of a sensor over the gate in a row after which its next readings
        are fused ungated until one agrees again (0 = never).
    reacquire: re-acquisition rule of the gate and the multi-start bank (the ``reacquire``
        options: rejections, time, inflation, candidates, window; see
        :class:`~mbde_core.estimators.stage.guards.Reacquisition`); None = off.
    backward_jump, max_gap, reorder_window [s]: see the module docstring.
    on_step: optional callback(StepRecord) for every emitted grid step.
    keep: keep the emitted StepRecords in ``self.records`` (replay) or not (live).
    """

    def __init__(self, estimator, step: float, initial: Callable[[float], InitialState], *,
                 gate=0.0, gate_window: float = 0.0, gate_persist: int = 0, reacquire=None, backward_jump: float = 1.0,
                 max_gap: float = 10.0,
                 reorder_window: float = 0.0, on_step: Callable[[StepRecord], None] | None = None,
                 keep: bool = True):
        if not step > 0:
            raise ValueError("step must be > 0")
        single_blas()  # BLAS on one thread (mbde_core.estimators.blas_threads), once per process
        self.est = estimator
        self.sensors = estimator.sensors
        self.dt = float(step)
        self.initial = initial
        self.backward_jump = float(backward_jump)
        self.max_gap = float(max_gap)
        self.reorder_window = float(reorder_window)
        self.on_step = on_step
        self.keep = keep
        self.records: list[StepRecord] = []
        self.counters = StageCounters()
        self.gates = self._gates(gate)
        dims = {s.name: s.dim for s in self.sensors}
        adapt = self.gates and (gate_window > 0 or gate_persist > 0)
        self.gate_adapt = AdaptiveGate(self.gates, dims, gate_window, gate_persist) if adapt else None
        rq = Reacquire.from_dict(reacquire) if isinstance(reacquire, dict) else reacquire
        self.reacq = Reacquisition(rq.rejections, rq.time) if rq is not None else None
        self.inflation = float(rq.inflation) if rq is not None else 0.0
        self.bank_size = int(rq.candidates) if rq is not None and estimator.traits.local else 0
        self.bank_window = float(rq.window) if rq is not None else 0.0
        self._bank: MultiStart | None = None
        self.first: float | None = None  # stamp of the first reading ever (a loop jumps back to it)
        self.reconv = Reconvergence()
        self.guard = ForwardJumpGuard(self.backward_jump)
        self._seq = itertools.count()
        self._period: dict[str, float] = {}  # sensor -> last interval between its readings [s]
        self.trust, self.held = TrustMonitor(), HeldInputs.of(estimator)  # verdict; held measured torques (or None)
        getattr(estimator, "attach_trust", lambda m: None)(TrustMonitor)  # a PF's follower: judged by its own
        self.reset()

    @classmethod
    def for_estimator(cls, estimator, initial, **kw) -> "EstimatorStage":
        """The stage of an estimator as its options say (step, gate, gate_window, gate_persist,
        reacquire); kw: the other constructor arguments (stage options, on_step, keep)."""
        o = estimator.options
        return cls(estimator, o.step, initial, gate=o.gate, gate_window=o.gate_window, gate_persist=o.gate_persist,
                   reacquire=o.reacquire, **kw)

    def _gates(self, gate) -> dict[str, float]:
        probs = gate if isinstance(gate, dict) else {s.name: gate for s in self.sensors}
        out = {}
        for s in self.sensors:
            p = float(probs.get(s.name, 0.0) or 0.0)
            if p > 0:
                out[s.name] = float(chi2_ppf(p, s.dim))
        return out

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything (including buffered readings); the next reading starts a new grid."""
        self._heap = []
        self._latest = -math.inf
        self.t0: float | None = None
        self.k: int = -1  # current slot index (estimator is at t0 + k dt)
        self._owed: int | None = None  # the open slot while its predictions wait for it to close (known inputs)
        self.pending: list[Measurement] = []
        self._in_flight: Measurement | None = None  # see _process
        self._last_stamp: dict[str, float] = {}
        self._after_jump = False  # restarted warm after a backward jump, not re-converged yet
        self._seen_zd = None  # zd of the last estimate that fused readings (multi-start after a silence)
        self._unknown = False  # restarted after a divergence: re-acquire globally at the next reading
        self.guard.drop_all()
        if self.held is not None:
            self.held.clear()
        if self.reacq is not None:
            self.reacq.clear()

    def buffered(self) -> list[Measurement]:
        """Readings fed but not yet fused, oldest first: those waiting for the current
        slot to close, the reorder buffer and, after a failure of the current track's
        filter steps, the reading whose processing it interrupted (not the readings of
        the failed update itself)."""
        out = list(self.pending)
        if self._in_flight is not None:
            out.append(self._in_flight)
        return out + [m for _, _, m in sorted(self._heap, key=lambda item: item[:2])]

    def requeue(self, readings) -> None:
        """Buffer readings again (already counted as received), e.g. :meth:`buffered` of a
        previous stage."""
        for m in readings:
            heapq.heappush(self._heap, (m.stamp, next(self._seq), m))
            self._latest = max(self._latest, m.stamp)

    def restart(self) -> None:
        """After an estimator failure: forget the track (the next reading starts a new one
        from the initial guess) but keep the readings not yet fused (:meth:`buffered`)."""
        carry, held = self.buffered(), self.guard.suspects
        self.reset()
        self.requeue(carry)
        self.guard.suspects = held  # still waiting for a reading to decide

    @property
    def time(self) -> float | None:
        return None if self.t0 is None else self.t0 + self.k * self.dt

    @property
    def newest(self) -> float | None:
        """Newest stamp of the stream (readings held as possibly from the future excluded)."""
        return self._latest if math.isfinite(self._latest) else None

    @property
    def _active(self):
        """What the filter steps run on: the estimator, or its multi-start bank meanwhile."""
        return self.est if self._bank is None else self._bank

    def _start(self, t: float, init: InitialState | None = None) -> None:
        if self.first is None:
            self.first = t
        self.t0 = t
        self.k, self._owed = 0, None
        self.pending = []
        self._last_stamp = {}
        self._bank = None
        self._seen_zd = None
        self.est.reset(t, self.initial(t) if init is None else init)
        if self.reacq is not None:
            self.reacq.clear()
        if self.gate_adapt is not None:
            self.gate_adapt.clear()

    # -- input -------------------------------------------------------------------------------
    def feed(self, measurements) -> None:
        """Give one Measurement or an iterable of them (any order within the reorder window)."""
        if isinstance(measurements, Measurement):
            measurements = [measurements]
        for m in measurements:
            self.counters.received += 1
            held = self.held is not None and m.sensor in self.held
            if not held and m.sensor not in self.sensors:
                self.counters.unknown_sensor += 1
                continue
            value = np.asarray(m.value, dtype=float)
            if not (math.isfinite(m.stamp) and value.shape == ((1,) if held else (self.sensors[m.sensor].dim,))
                    and (math.isfinite(value[0]) if value.shape == (1,) else np.isfinite(value).all())):
                self.counters.non_finite += 1
                continue
            ready, refuted = self.guard.admit(Measurement(float(m.stamp), m.sensor, value), self._latest)
            self.counters.future += refuted
            for r in ready:
                if r.stamp < self._latest - self.backward_jump:  # a jump back: finish the old time first
                    self._drain(math.inf)
                    self._latest = r.stamp
                heapq.heappush(self._heap, (r.stamp, next(self._seq), r))
                self._latest = max(self._latest, r.stamp)
        self._drain(self._latest - self.reorder_window)

    def advance_to(self, t: float) -> None:
        """The clock says it is now t: process buffered readings and close slots up to t
        (never predicting further than ``max_gap`` past the current slot)."""
        self._drain(t - self.reorder_window)
        if self.t0 is None:
            return
        k_target = int(math.floor((t - self.reorder_window - self.t0) / self.dt + 1e-9))
        if k_target > self._open() and (k_target - self.k) * self.dt <= self.max_gap:
            self._close_slot()
            self._step_to(k_target)

    def flush(self) -> None:
        """Process everything buffered and close the current slot (end of a replay); readings
        still held as possibly from the future are dropped (``future``)."""
        self.counters.future += self.guard.drop_all()
        self._drain(math.inf)
        self._settle()
        if self.t0 is not None and self.pending:
            self._close_slot()

    def _drain(self, horizon: float) -> None:
        while self._heap and self._heap[0][0] <= horizon:
            _, _, m = heapq.heappop(self._heap)
            self._process(m)

    def _process(self, m: Measurement) -> None:
        # _in_flight: m while the current track's steps (update of the pending readings,
        # predictions) run before m joins the pending readings; if they raise, m is not
        # lost (buffered()). Not while a new track starts at m (an estimator that cannot
        # start at m would fail again on it).
        if self.t0 is None:
            self._start(m.stamp)
        now = self.t0 + self.k * self.dt
        if m.stamp < now - self.backward_jump:
            self._jumped_back(m, now)
        last = self._last_stamp.get(m.sensor)
        if last is not None and abs(m.stamp - last) <= DUPLICATE_TOLERANCE:
            self.counters.duplicates += 1
            return
        k_m = int(round((m.stamp - self.t0) / self.dt))
        if k_m < self._open():
            self.counters.out_of_order += 1
            return
        if k_m > self._open():
            self._in_flight = m
            self._close_slot()
            silence = (k_m - self.k) * self.dt
            if silence > self.max_gap:
                self._in_flight = None
                self.counters.gap_resets += 1
                self._start(m.stamp)
                self._disturbed(m.stamp)
                self._multistart(m.stamp, unknown=True)  # where is it now? anywhere
                k_m = 0
            else:
                ceiling = self._ceiling() if silence > LOST_CHECK_GAP else None
                if self.held is not None and self.held.defers and silence <= LOST_CHECK_GAP and not self._unknown:
                    self._owed = k_m  # predicted when the slot closes, with its held inputs (.inputs)
                else:
                    self._step_to(k_m)
                if silence > LOST_CHECK_GAP:  # lost in the gap: anywhere (an open-loop covariance is optimistic)
                    self._active.add_restart_hypotheses("silence", ceiling)  # a particle filter: in its cloud
                    self._multistart(self.t0 + self.k * self.dt, anywhere_if_lost=True, after_gap=True,
                                     ceiling=ceiling, zd_hint=self._seen_zd)
            self._in_flight = None
        if self._unknown:
            self._multistart(self.t0 + self.k * self.dt)
        if last is not None and m.stamp > last:
            self._period[m.sensor] = m.stamp - last
        self._last_stamp[m.sensor] = m.stamp
        if self.held is not None and m.sensor in self.held:
            self.held.hold(m)  # the current input from this slot on
            self.counters.inputs += 1
        else:
            self.pending.append(m)

    def _disturbed(self, t: float) -> None:
        self._after_jump = False
        self.reconv.disturbed(t)
