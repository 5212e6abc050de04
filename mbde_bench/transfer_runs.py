"""Tasks of ``mbde bench transfer``: tune one observer on a bag, run one estimator on a bag.

Both are module-level functions ``fn(shared, task)`` for :func:`mbde_core.runs.run_tasks`;
``shared`` is {scenario name: ReplayInputs} (the simulated bags, loaded once by the
parent and inherited by forked workers).
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np

from mbde_core.estimators.assess.metrics import coordinate_errors, nees, record_arrays, truth_at
from mbde_core.estimators.assess.suitability import UnsuitableError, precheck
from mbde_core.estimators.configure import defaults, validate
from mbde_core.replay.runner import resolved_options, run_estimator
from mbde_core.tuning.search import tune

STEADY = 1.0  # s: steady state = t > first estimate + STEADY
BAND = (0.3, 3.0)  # x the degrees of freedom 2g: the acceptance band of the mean NEES


def tune_task(shared, task):
    """(scenario, name, window, seed) -> TuneResult of the observer on the scenario's bag."""
    scen, name, window, seed = task
    src = shared[scen]
    readings = [m for m in src.measurements if m.stamp <= src.start + window]
    return tune(src, readings, name, resolved_options(src, validate(name)), seed=seed)


def run_task(shared, task):
    """(scenario, name, variant, config or None, seed) -> row dict of metrics."""
    scen, name, variant, cfg, seed = task
    src = shared[scen]
    mech = src.mechanism
    g = mech.dof
    row = {"scenario": scen, "estimator": name, "variant": variant, "dof": 2 * g,
           "band_lo": BAND[0] * 2 * g, "band_hi": BAND[1] * 2 * g}
    try:
        precheck(name, src.sensors)
    except UnsuitableError as exc:
        row.update(status="n/a", note=str(exc).split(":")[0])
        return row
    t_cpu = time.process_time()
    run = run_estimator(src, name, copy.deepcopy(cfg) if cfg is not None else defaults(name), seed)
    a = record_arrays(run.records)
    angular = np.isin(mech.independent, mech.rel_columns)
    tr = src.truth
    tz = truth_at(a["stamps"], tr.t, tr.z, angular)
    ez = coordinate_errors(a["z"], tz, angular)
    ezd = a["zd"] - truth_at(a["stamps"], tr.t, tr.zd)
    covs = a["covs"]
    ne = nees(np.hstack([ez, ezd]), np.array(covs)) if all(c is not None for c in covs) else np.full(len(ez), np.nan)
    late = a["stamps"] > a["stamps"][0] + STEADY
    finite = np.isfinite(ez).all(axis=1)
    mean_nees = float(np.nanmean(ne)) if np.isfinite(ne).any() else math.nan
    row.update(
        rmse=float(np.sqrt(np.mean(ez[finite] ** 2))) if finite.any() else math.nan,
        rmse_ss=float(np.sqrt(np.mean(ez[late & finite] ** 2))) if (late & finite).any() else math.nan,
        nees=mean_nees,
        status="pass" if BAND[0] * 2 * g <= mean_nees <= BAND[1] * 2 * g else "fail",
        cpu_s=time.process_time() - t_cpu,
        errors=run.counters.get("estimator_errors", 0),
        rejected=run.counters.get("rejected_gate", 0),
        psd=_psd(run.config),
        step=float(run.config.get("step", math.nan)),
    )
    return row


def _psd(cfg) -> float | None:
    if "plant_noise" in cfg:
        return float(np.max(np.atleast_1d(cfg["plant_noise"]["acceleration_psd"])))
    if "noise" in cfg and cfg["noise"].get("velocity"):  # vipf: velocity noise density gamma^2 = q
        return float(cfg["noise"]["velocity"]) ** 2
    if cfg.get("acceleration_sigma") is not None:  # None: derived inside the PF (pf_scale)
        return float(cfg["acceleration_sigma"]) ** 2 * float(cfg.get("step", 0.005))
    return None
