"""What the estimator stage emits and counts: a record per grid step and the counters of
every anomaly of the readings it handled (:mod:`~mbde_core.estimators.stage.core`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from mbde_core.estimators.base import UpdateResult
from mbde_core.types import MechanismSnapshot


@dataclass
class StepRecord:
    """One emitted grid step: the estimate, the update result (None if no readings), cost [s]
    and the trust verdict after it (:class:`~mbde_core.estimators.stage.trust.Verdict`)."""

    estimate: MechanismSnapshot
    update: UpdateResult | None
    cost: float
    trust: object = None


@dataclass
class StageCounters:
    received: int = 0
    fused: int = 0
    rejected_gate: int = 0
    gate_scale_max: float = 1.0       # largest scale of a gate threshold (stage_guards.AdaptiveGate)
    gate_believed: int = 0            # readings over the gate fused: their sensor persisted (AdaptiveGate)
    reacquisitions: int = 0
    multistarts: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    future: int = 0
    non_finite: int = 0
    unknown_sensor: int = 0
    resets: int = 0                   # backward time jumps
    backward_jump_last: float = 0.0   # s
    backward_jump_max: float = 0.0    # s
    gap_resets: int = 0
    diverged: int = 0                 # restarts of an estimate or covariance that overflowed
    reconvergence_last: float | None = None  # s
    reconvergence_max: float = 0.0    # s
    steps: int = 0
    inputs: int = 0                   # known-input readings held (stage.inputs)
    stale_inputs: int = 0             # steps predicted with a stale known input
    per_sensor_fused: dict = field(default_factory=dict)
    per_sensor_rejected: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)
