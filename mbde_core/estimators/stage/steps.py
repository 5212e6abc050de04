"""The filter steps of the estimator stage (:class:`mbde_core.estimators.stage.core.EstimatorStage`):
closing a slot (one update with its readings, counted; several readings of one sensor
combined into one where the estimator takes such, :mod:`.multirate`), predicting slot by slot, the held
known inputs of each step, and emitting each grid step's record with its trust verdict.

A mixin: the methods use the stage's state (``est``, ``t0``, ``k``, ``dt``, ``pending``,
``counters``, ``gates``, ``gate_adapt``, ``held``, ``trust``, ``keep``, ``on_step``,
``records``, ...) and its recovery (:class:`~mbde_core.estimators.stage.recovery.StageRecovery`:
``_watch``, ``_diverged``). See the stage's module docstring for the time grid.
"""
from __future__ import annotations

import time

from mbde_core.estimators.stage.guards import finite_snapshot
from mbde_core.estimators.stage.multirate import combine
from mbde_core.estimators.stage.records import StepRecord


class StageSteps:
    """Slot updates, predictions, held inputs and emitted records of the stage (mixin)."""

    def _close_slot(self) -> None:
        """Fuse the pending readings at the current slot and emit its estimate."""
        self._settle()
        readings, self.pending = self.pending, []
        t_start = time.perf_counter()
        result = None
        if readings:
            self._hold(0.0)  # the current torque: an accelerometer reads it now
            counts = {}
            if len(readings) > 1 and getattr(self.est, "combines_readings", False):  # a sensor faster than the step
                readings, counts = combine(readings, self.est.sensors, self.t0 + self.k * self.dt)
            result = self._active.update(readings, self._current_gates())
            c = self.counters
            c.fused += sum(counts.get(n, 1) for n in result.accepted)  # readings (a sensor may have several)
            c.rejected_gate += sum(counts.get(n, 1) for n in result.rejected)
            for n in result.accepted:
                c.per_sensor_fused[n] = c.per_sensor_fused.get(n, 0) + counts.get(n, 1)
            for n in result.rejected:
                c.per_sensor_rejected[n] = c.per_sensor_rejected.get(n, 0) + counts.get(n, 1)
            self._watch(result)
        cost = time.perf_counter() - t_start + getattr(self, "_predict_cost", 0.0)
        self._predict_cost = 0.0
        self._fused = readings  # the verdict's stuck-channel test reads them (stage.trust_faults)
        self._emit(result, cost)
        self._fused = None

    def _open(self) -> int:
        """The open slot: the one the next readings join (ahead of the estimator's while
        its predictions are owed)."""
        return self.k if self._owed is None else self._owed

    def _settle(self) -> None:
        """The predictions owed to the open slot (known inputs: the stage predicts into a
        slot when it closes, :mod:`.inputs`)."""
        if self._owed is not None:
            k, self._owed = self._owed, None
            self._step_to(k)

    def _current_gates(self) -> dict[str, float]:
        """The gate thresholds for the next update (stage_guards.AdaptiveGate)."""
        return self.gates if self.gate_adapt is None else self.gate_adapt.thresholds()

    def _cap(self) -> float:
        return max(self.gates.values(), default=0.0)

    def _step_to(self, k_target: int) -> None:
        """Predict slot by slot up to k_target (emitting the empty slots in between)."""
        while self.k < k_target:
            t_start = time.perf_counter()
            self._hold(self.dt)
            self._active.predict(self.dt)
            self.k += 1
            self.counters.steps += 1
            cost = time.perf_counter() - t_start
            if self.k < k_target:
                self._emit(None, cost)
            else:
                self._predict_cost = cost  # emitted when this slot closes

    def _hold(self, dt: float) -> None:  # the held known inputs for the step [t, t + dt] (stage.inputs)
        if self.held is not None:
            u, var, stale = self.held.current(self.t0 + self.k * self.dt, dt)
            self.counters.stale_inputs += bool(dt and stale.any())
            self._active.set_known_inputs(u, var)

    def _emit(self, result, cost) -> None:
        if not (self.keep or self.on_step):
            return
        est = self._active.estimate()
        if not finite_snapshot(est):  # a lost filter predicted open loop until its numbers overflowed
            self._diverged(self.t0 + self.k * self.dt)
            est = self._active.estimate()
        est.stamp = self.t0 + self.k * self.dt  # exact grid time (no accumulated rounding)
        if result is not None and result.accepted:
            self._seen_zd = est.zd
        rec = StepRecord(est, result, cost, self.trust.observe(self, est, result, getattr(self, "_fused", None)))
        if self.keep:
            self.records.append(rec)
        if self.on_step is not None:
            self.on_step(rec)

