"""EstimatorStage: drives an estimator on a fixed step with asynchronous multirate sensors.

The same stage runs inside ``mbde replay`` (fed from a bag in stamp order) and inside
the live ROS node (fed from subscriptions), so both produce identical results for the
same input.

Time grid: t_k = t_0 + k dt, with t_0 the stamp of the first accepted measurement. A
reading stamped t belongs to the slot k = round((t - t_0)/dt). The stage predicts the
estimator slot by slot; when a slot closes (a reading of a later slot arrives, or
``advance_to``/``flush`` is called) all readings of that slot are fused in one update,
in stamp order, and the estimate of t_k is emitted. Slots without readings are pure
predictions (also emitted). Feeding readings one by one or in batches therefore gives
bit-identical results.

Robustness (each case counted in ``counters``, nothing crashes):

- unknown sensor names and non-finite stamps/values are skipped;
- a reading older than the current slot is ``out_of_order`` (skipped), unless it is
  older by more than ``backward_jump`` seconds: a backward time jump (bag loop,
  simulation restart) resets the estimator at the new time;
- a forward gap longer than ``max_gap`` seconds resets instead of predicting through it;
- an optional Mahalanobis gate per sensor (chi-square probability ``gate``) rejects
  outliers inside the estimator's update (``rejected_gate``);
- an optional ``reorder_window`` [s] buffers readings so that small arrival-order
  inversions between topics (live operation) are re-sorted before processing.
"""
from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from mbde_core.estimators.chi2 import chi2_ppf

from mbde_core.estimators.base import InitialState, UpdateResult
from mbde_core.types import MechanismSnapshot, Measurement


@dataclass
class StepRecord:
    """One emitted grid step: the estimate, the update result (None if no readings), cost [s]."""

    estimate: MechanismSnapshot
    update: UpdateResult | None
    cost: float


@dataclass
class StageCounters:
    received: int = 0
    fused: int = 0
    rejected_gate: int = 0
    out_of_order: int = 0
    non_finite: int = 0
    unknown_sensor: int = 0
    resets: int = 0
    gap_resets: int = 0
    steps: int = 0
    per_sensor_fused: dict = field(default_factory=dict)
    per_sensor_rejected: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class EstimatorStage:
    """Fixed-step driver of one estimator.

    Parameters
    ----------
    estimator: an :class:`mbde_core.estimators.base.Estimator`.
    step: filter step [s].
    initial: callable ``t -> InitialState`` used at start and after resets.
    gate: chi-square probability of the Mahalanobis gate (0 = off), a float for every
        sensor or a dict sensor -> probability.
    on_step: optional callback(StepRecord) for every emitted grid step.
    keep: keep the emitted StepRecords in ``self.records`` (replay) or not (live).
    """

    def __init__(self, estimator, step: float, initial: Callable[[float], InitialState], *,
                 gate=0.0, backward_jump: float = 1.0, max_gap: float = 10.0, reorder_window: float = 0.0,
                 on_step: Callable[[StepRecord], None] | None = None, keep: bool = True):
        if not step > 0:
            raise ValueError("step must be > 0")
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
        self._seq = itertools.count()
        self.reset()

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
        self.pending: list[Measurement] = []
        self._in_flight: Measurement | None = None  # see _process

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
        carry = self.buffered()
        self.reset()
        self.requeue(carry)

    @property
    def time(self) -> float | None:
        return None if self.t0 is None else self.t0 + self.k * self.dt

    def _start(self, t: float) -> None:
        self.t0 = t
        self.k = 0
        self.pending = []
        self.est.reset(t, self.initial(t))

    # -- input -------------------------------------------------------------------------------
    def feed(self, measurements) -> None:
        """Give one Measurement or an iterable of them (any order within the reorder window)."""
        if isinstance(measurements, Measurement):
            measurements = [measurements]
        for m in measurements:
            self.counters.received += 1
            if m.sensor not in self.sensors:
                self.counters.unknown_sensor += 1
                continue
            value = np.asarray(m.value, dtype=float)
            if not (math.isfinite(m.stamp) and value.shape == (self.sensors[m.sensor].dim,) and np.all(np.isfinite(value))):
                self.counters.non_finite += 1
                continue
            heapq.heappush(self._heap, (m.stamp, next(self._seq), Measurement(float(m.stamp), m.sensor, value)))
            self._latest = max(self._latest, m.stamp)
            if m.stamp < self._latest - self.backward_jump:  # a jump back: process at once
                self._latest = m.stamp
        self._drain(self._latest - self.reorder_window)

    def advance_to(self, t: float) -> None:
        """The clock says it is now t: process buffered readings and close slots up to t."""
        self._drain(t - self.reorder_window)
        if self.t0 is None:
            return
        k_target = int(math.floor((t - self.reorder_window - self.t0) / self.dt + 1e-9))
        if k_target > self.k:
            self._close_slot()
            self._step_to(k_target)

    def flush(self) -> None:
        """Process everything buffered and close the current slot (end of a replay)."""
        self._drain(math.inf)
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
            self.counters.resets += 1
            self._start(m.stamp)
            now = self.t0
        k_m = int(round((m.stamp - self.t0) / self.dt))
        if k_m < self.k:
            self.counters.out_of_order += 1
            return
        if k_m > self.k:
            self._in_flight = m
            self._close_slot()
            if (k_m - self.k) * self.dt > self.max_gap:
                self._in_flight = None
                self.counters.gap_resets += 1
                self._start(m.stamp)
                k_m = 0
            else:
                self._step_to(k_m)
            self._in_flight = None
        self.pending.append(m)

    # -- filter steps ----------------------------------------------------------------------------
    def _close_slot(self) -> None:
        """Fuse the pending readings at the current slot and emit its estimate."""
        readings, self.pending = self.pending, []
        t_start = time.perf_counter()
        result = None
        if readings:
            result = self.est.update(readings, self.gates)
            c = self.counters
            c.fused += sum(1 for m in readings if m.sensor in result.accepted)
            c.rejected_gate += len(result.rejected)
            for n in result.accepted:
                c.per_sensor_fused[n] = c.per_sensor_fused.get(n, 0) + 1
            for n in result.rejected:
                c.per_sensor_rejected[n] = c.per_sensor_rejected.get(n, 0) + 1
        cost = time.perf_counter() - t_start + getattr(self, "_predict_cost", 0.0)
        self._predict_cost = 0.0
        self._emit(result, cost)

    def _step_to(self, k_target: int) -> None:
        """Predict slot by slot up to k_target (emitting the empty slots in between)."""
        while self.k < k_target:
            t_start = time.perf_counter()
            self.est.predict(self.dt)
            self.k += 1
            self.counters.steps += 1
            cost = time.perf_counter() - t_start
            if self.k < k_target:
                self._emit(None, cost)
            else:
                self._predict_cost = cost  # emitted when this slot closes

    def _emit(self, result, cost) -> None:
        if not (self.keep or self.on_step):
            return
        est = self.est.estimate()
        est.stamp = self.t0 + self.k * self.dt  # exact grid time (no accumulated rounding)
        rec = StepRecord(est, result, cost)
        if self.keep:
            self.records.append(rec)
        if self.on_step is not None:
            self.on_step(rec)
