"""One row of the motor benches (``mbde bench motors``, ``mbde bench smoother`` table 8):
an estimator or the smoother run on one bag's readings and scored against its truth.

A row is (RMSE of z [rad or m], mean NEES of [z, zd] over 2g, CPU s) for a run, the same
with a fourth item, the failure text, for a run that raised, or the string ``"n/a: <why>"``
for an estimator that cannot take the variant's input (its traits do not declare it:
``known_inputs`` for a measured torque, ``input_states`` for an unknown one; or its
``needs``, e.g. the ADE-KF's accelerometer). The rows read the traits, so an estimator
appears by itself once it declares the support.
"""
from __future__ import annotations

import time

import numpy as np

from mbde_core.estimators.assess.metrics import coordinate_errors, truth_at
from mbde_core.estimators.assess.suitability import precheck
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.registry import traits
from mbde_core.replay.runner import initial_state, run_estimator
from mbde_core.trajectory.smoother import BatchSmoother

SMOOTHER = "smoother"


def score(inputs, t, z, zd, cov) -> tuple[float, float]:
    """(RMSE of z, mean NEES of [z, zd] / 2g) of estimates (t, z, zd, cov) against the
    bag's truth (angles wrapped; NEES over the steps with a finite covariance)."""
    mech, tr = inputs.mechanism, inputs.truth
    ang = np.isin(mech.independent, mech.rel_columns)
    ez = coordinate_errors(z, truth_at(t, tr.t, tr.z, ang), ang)
    e = np.hstack([ez, zd - truth_at(t, tr.t, tr.zd)])
    ok = np.array([c is not None and np.all(np.isfinite(c)) for c in cov])
    nees = float(np.mean([ei @ np.linalg.solve(c, ei) for ei, c, o in zip(e, cov, ok) if o])) if ok.any() else float("nan")
    return float(np.sqrt(np.mean(ez**2))), nees / e.shape[1]


def not_applicable(name: str, variant: str, sensors) -> str | None:
    """``"n/a: <why>"`` if estimator ``name`` cannot take the variant ("measured": a read
    torque, "unknown": none, "released": no motor) with these sensors, else None."""
    tr = traits(name)
    if variant == "measured" and not tr.known_inputs:
        return "n/a: does not take a measured torque (traits.known_inputs)"
    if variant == "unknown" and not (tr.input_states or tr.noise_rule == "adekf"):
        return "n/a: no input states (traits.input_states)"
    try:
        precheck(name, sensors)
    except Exception as exc:  # noqa: BLE001 - UnsuitableError: the reason is the row
        return "n/a: " + str(exc).split(":")[0].removeprefix(f"{name} ")  # e.g. "needs a sensor that reads ..."
    return None


def filter_row(inputs, name: str, seed: int):
    """Estimator ``name`` with its default options through replay's stage
    (:func:`~mbde_core.replay.runner.run_estimator`), scored (module doc)."""
    c0 = time.process_time()
    try:
        run = run_estimator(inputs, name, defaults(name), seed, particle_budget=0)
        recs = run.records
        t = np.array([r.estimate.stamp for r in recs])
        z = np.array([r.estimate.z for r in recs])
        zd = np.array([r.estimate.zd for r in recs])
        return score(inputs, t, z, zd, [r.estimate.cov for r in recs]) + (time.process_time() - c0,)
    except Exception as exc:  # noqa: BLE001 - a failing estimator is a row, never stops the bench
        return (float("nan"), float("nan"), time.process_time() - c0, f"{type(exc).__name__}: {exc}"[:200])


def smoother_row(inputs) -> tuple[tuple, dict]:
    """(row, info) of the batch smoother with ``mbde smooth``'s default options (input states
    from the scenario's motor, plant noise from the data, :mod:`mbde_core.replay.smoothing`)
    on the whole run; info: its status and warnings."""
    c0 = time.process_time()
    try:
        sm = BatchSmoother(inputs.mechanism, inputs.sensors, None, None, scenario_context(inputs.scenario))
        tr = sm.smooth(inputs.measurements, initial_state(inputs, sm.config))
        row = score(inputs, tr.t, tr.z, tr.zd, list(tr.cov)) + (time.process_time() - c0,)
        return row, {"status": tr.info["status"], "warnings": list(tr.info["warnings"])}
    except Exception as exc:  # noqa: BLE001 - a failing smoother is a row
        row = (float("nan"), float("nan"), time.process_time() - c0, f"{type(exc).__name__}: {exc}"[:200])
        return row, {"status": "failed", "warnings": []}
