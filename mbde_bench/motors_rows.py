"""One row of the motor benches (``mbde bench motors``, ``mbde bench smoother`` table 8):
an estimator or the smoother run on one bag's readings and scored against its truth.

A row is a :class:`Row` -- the whole run's (RMSE of z [rad or m], mean NEES of [z, zd]
over 2g), the CPU s, the failure text of a run that raised (else None), and acquisition
versus tracking (:mod:`mbde_core.estimators.assess.acquisition`, the rule ``mbde replay``
reports): ``acquired_after`` [s] (from then on every coordinate within 5 sigma of the
estimate's own covariance, 0.5 deg floor, 10 deg cap, to the end, from a step at which its
own 2 sigma is within the cap; None: not on track at the end) and the RMSE of z and mean
NEES/dim over the steps from then on. A particle
filter starts from a uniform prior (paper 000 sec. 6.1): its whole-run RMSE mixes the
search with the tracking, the tracking RMSE does not. Or a row is the string
``"n/a: <why>"`` for an estimator that cannot take the variant's input (its traits do not
declare it: ``known_inputs`` for a measured torque, ``input_states`` for an unknown one; or
its ``needs``, e.g. the ADE-KF's accelerometer). The rows read the traits, so an estimator
appears by itself once it declares the support.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from mbde_core.estimators.assess.acquisition import acquisition_metrics
from mbde_core.estimators.assess.metrics import coordinate_errors, sigma_z, truth_at
from mbde_core.estimators.assess.suitability import precheck
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.registry import traits
from mbde_core.replay.runner import initial_state, run_estimator
from mbde_core.trajectory.smoother import BatchSmoother

SMOOTHER = "smoother"
OPTION_ROWS = {  # bench rows of a registered estimator with options over its defaults, run on one variant:
    "pf_noinputs": ("pf", {"inputs": []}, "unknown"),  # the PF without input states: the motor as acceleration noise
}


def estimator_of(name: str) -> tuple[str, dict]:
    """(registered estimator, options over its defaults) of a bench row name."""
    return OPTION_ROWS.get(name, (name, {}))[:2]


class Row(NamedTuple):
    """One run's scores (module doc); the first three items are the whole run's."""

    rmse: float  # whole run, z
    nees: float  # whole run, mean NEES of [z, zd] / 2g
    cpu: float  # s
    error: str | None = None  # the failure text of a run that raised
    acquired_after: float | None = 0.0  # s from the first estimate (None: never on track to the end)
    tracking_rmse: float | None = None  # z, from acquired_after on (None: the whole run's)
    tracking_nees: float | None = None  # mean NEES / 2g from acquired_after on

    @property
    def track(self) -> float:
        """The tracking RMSE of z (the whole run's for a row without one), nan if not acquired."""
        if self.acquired_after is None:
            return float("nan")
        return self.rmse if self.tracking_rmse is None else self.tracking_rmse


def failed(exc, cpu: float) -> Row:
    """The row of a run that raised."""
    return Row(float("nan"), float("nan"), cpu, f"{type(exc).__name__}: {exc}"[:200], None)


def score(inputs, t, z, zd, cov, cpu: float) -> Row:
    """The :class:`Row` of estimates (t, z, zd, cov) against the bag's truth (angles
    wrapped; NEES over the steps with a finite covariance)."""
    mech, tr = inputs.mechanism, inputs.truth
    ang = np.isin(mech.independent, mech.rel_columns)
    ez = coordinate_errors(z, truth_at(t, tr.t, tr.z, ang), ang)
    ezd = zd - truth_at(t, tr.t, tr.zd)
    e = np.hstack([ez, ezd])
    ok = np.array([c is not None and np.all(np.isfinite(c)) for c in cov])
    nees_k = np.array([ei @ np.linalg.solve(c, ei) if o else np.nan for ei, c, o in zip(e, cov, ok)])
    nees = float(np.nanmean(nees_k)) if ok.any() else float("nan")
    acq = acquisition_metrics(t, {"z": ez, "zd": ezd, "zdd": np.zeros_like(ez)}, ang, mech.length_scale,
                              sigma_z(list(cov), len(ang)) if ok.all() else None, nees_k if ok.any() else None)
    trk = acq.get("tracking") or {}
    t_rmse = float(np.sqrt(np.mean(np.square(trk["rmse"]["z"])))) if trk else None
    t_nees = trk["nees"]["mean"] / e.shape[1] if "nees" in trk else None
    return Row(float(np.sqrt(np.mean(ez**2))), nees / e.shape[1], cpu, None, acq["acquired_after"], t_rmse, t_nees)


def not_applicable(name: str, variant: str, sensors) -> str | None:
    """``"n/a: <why>"`` if estimator ``name`` cannot take the variant ("measured": a read
    torque, "unknown": none, "released": no motor) with these sensors, else None."""
    if name in OPTION_ROWS and variant != OPTION_ROWS[name][2]:
        return f"n/a: only with the torque {OPTION_ROWS[name][2]} (the {OPTION_ROWS[name][0]} row here)"
    name = estimator_of(name)[0]
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
    """Estimator ``name`` (or a row of :data:`OPTION_ROWS`) with its default options (and the
    row's over them) through replay's stage (:func:`~mbde_core.replay.runner.run_estimator`),
    scored (module doc)."""
    c0 = time.process_time()
    try:
        est, opts = estimator_of(name)
        run = run_estimator(inputs, est, {**defaults(est), **opts}, seed, particle_budget=0)
        recs = run.records
        t = np.array([r.estimate.stamp for r in recs])
        z = np.array([r.estimate.z for r in recs])
        zd = np.array([r.estimate.zd for r in recs])
        return score(inputs, t, z, zd, [r.estimate.cov for r in recs], time.process_time() - c0)
    except Exception as exc:  # noqa: BLE001 - a failing estimator is a row, never stops the bench
        return failed(exc, time.process_time() - c0)


def smoother_row(inputs) -> tuple[tuple, dict]:
    """(row, info) of the batch smoother with ``mbde smooth``'s default options (input states
    from the scenario's motor, plant noise from the data, :mod:`mbde_core.replay.smoothing`)
    on the whole run; info: its status and warnings."""
    c0 = time.process_time()
    try:
        sm = BatchSmoother(inputs.mechanism, inputs.sensors, None, None, scenario_context(inputs.scenario))
        tr = sm.smooth(inputs.measurements, initial_state(inputs, sm.config))
        cov = list(tr.cov) if tr.cov is not None else [None] * len(tr.t)
        row = score(inputs, tr.t, tr.z, tr.zd, cov, time.process_time() - c0)
        return row, {"status": tr.info["status"], "warnings": list(tr.info["warnings"])}
    except Exception as exc:  # noqa: BLE001 - a failing smoother is a row
        return failed(exc, time.process_time() - c0), {"status": "failed", "warnings": []}
