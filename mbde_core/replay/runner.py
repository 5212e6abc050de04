"""Run estimators through their stage on the readings of a bag and evaluate them.

Every estimator gets the same readings in stamp order, its own stage (fixed step from
its config), the same initial guess (the scenario's estimator initial state, or the
mechanism's initial configuration) with the config's initial standard deviations, and a
random generator seeded from (seed, estimator name). Metrics need the bag's ground truth and are omitted without it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.estimators import estimator_rng, make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.metrics import evaluate_run, truth_at
from mbde_core.estimators.stage import EstimatorStage


@dataclass
class EstimatorRun:
    name: str
    config: dict
    records: list
    counters: dict
    diagnostics: dict
    wall_time: float
    particles: list = field(default_factory=list)  # [(step index, ParticleCloud)]
    metrics: dict | None = None


def initial_state(inputs, cfg) -> InitialState:
    sig = cfg.get("initial_sigma", {"z": 0.05, "zd": 0.5})
    g = inputs.mechanism.dof
    return InitialState(inputs.initial_z.copy(), inputs.initial_zd.copy(), np.full(g, float(sig["z"])),
                        np.full(g, float(sig["zd"])), inputs.initial_q.copy(), inputs.initial_branch)


def run_estimator(inputs, name: str, cfg: dict, seed: int = 0, progress=None, particle_budget: int = 2_000_000) -> EstimatorRun:
    """Run one estimator over the replay inputs; progress(k, total) is called while feeding.

    seed: the run seed; the estimator's generator is ``estimator_rng(seed, name)``, the
    same for every position in a list of estimators and in the live node."""
    est = make_estimator(name, inputs.mechanism, inputs.sensors, cfg, rng=estimator_rng(seed, name))
    init = initial_state(inputs, cfg)
    particles = []
    state = {"k": 0, "every": None}

    def on_step(rec):
        cloud = est.particles()
        if cloud is not None:
            if state["every"] is None:
                per = cloud.z.size * 2 + 2 * len(cloud.weight)
                total_steps = max(int(inputs.duration / cfg["step"]) + 1, 1)
                state["every"] = max(1, int(np.ceil(per * total_steps / particle_budget)))
            if state["k"] % state["every"] == 0:
                cloud.stamp = rec.estimate.stamp
                particles.append((state["k"], cloud))
        state["k"] += 1

    stage = EstimatorStage(est, cfg["step"], lambda t: init, gate=cfg.get("gate", 0.0), on_step=on_step)
    ms = inputs.measurements
    total = len(ms)
    chunk = max(total // 200, 1)
    errors = {"count": 0, "last": None, "first_stamp": None}

    def guarded(fn, *args):
        # As the live node (mbde_core.live.estimator): an estimator failure is counted and
        # the track restarts from the initial guess at the next reading; the run goes on.
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - any estimator failure
            errors["count"] += 1
            errors["last"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            if errors["first_stamp"] is None and stage.time is not None:
                errors["first_stamp"] = stage.time
            stage.restart()

    t0 = time.perf_counter()
    for i in range(0, total, chunk):
        for m in ms[i : i + chunk]:  # one reading at a time, as the live node feeds them
            guarded(stage.feed, m)
        if progress is not None:
            progress(min(i + chunk, total), total)
    guarded(stage.flush)
    wall = time.perf_counter() - t0
    counters = stage.counters.as_dict()
    counters["estimator_errors"] = errors["count"]
    if errors["count"]:
        counters["last_estimator_error"] = errors["last"]
        counters["first_estimator_error_at"] = errors["first_stamp"]
    return EstimatorRun(name, cfg, stage.records, counters, est.diagnostics(), wall, particles)


def evaluate(inputs, run: EstimatorRun) -> dict:
    """Metrics of a run (with ground truth) or only costs and counters (without)."""
    mech = inputs.mechanism
    out = {}
    recs = run.records
    if inputs.truth is not None and recs:
        stamps = np.array([r.estimate.stamp for r in recs])
        angular = np.isin(mech.independent, mech.rel_columns)
        tr = inputs.truth
        tz = truth_at(stamps, tr.t, tr.z, angular)
        tzd = truth_at(stamps, tr.t, tr.zd)
        tzdd = truth_at(stamps, tr.t, tr.zdd)
        out = evaluate_run(recs, tz, tzd, tzdd, angular, inputs.duration)
        out["convergence"] = _convergence(inputs, recs, stamps, tz, angular)
        inputs_metrics = _input_metrics(inputs, recs, stamps)
        if inputs_metrics:
            out["inputs"] = inputs_metrics
    else:
        cost = np.array([r.cost for r in recs]) if recs else np.zeros(1)
        out = {"steps": len(recs), "step_time_us": {"mean": float(cost.mean() * 1e6), "max": float(cost.max() * 1e6)}}
        if inputs.duration:
            out["realtime_factor"] = float(cost.sum() / inputs.duration)
        nis = [r.update.nis for r in recs if r.update is not None and r.update.nis is not None]
        if nis:
            out["nis"] = {"mean": float(np.nanmean(nis))}
    out["counters"] = run.counters
    out["diagnostics"] = run.diagnostics
    out["wall_time_s"] = run.wall_time
    run.metrics = out
    return out


def _convergence(inputs, recs, stamps, tz, angular) -> dict:
    """Convergence time, settled RMSE and branch identification (replay/convergence.py)."""
    from mbde_core.estimators.metrics import coordinate_errors
    from mbde_core.replay.convergence import convergence_metrics

    err = coordinate_errors(np.array([r.estimate.z for r in recs]), tz, angular)
    probs = [r.estimate.branch_probabilities for r in recs]
    bp = true_branch = None
    if all(p is not None and len(p) for p in probs) and len({len(p) for p in probs}) == 1:
        bp = np.array(probs, dtype=float)
        tr = inputs.truth
        true_branch = np.asarray(tr.branch)[np.clip(np.searchsorted(tr.t, stamps), 0, len(tr.t) - 1)]
    return convergence_metrics(stamps - stamps[0], err, angular, inputs.mechanism.length_scale, bp, true_branch)


def _input_metrics(inputs, recs, stamps) -> dict:
    """RMSE of estimated generalized inputs against the true effort on the same coordinate."""
    tr = inputs.truth
    if tr.effort is None:
        return {}
    names = recs[-1].estimate.input_names
    if not names:
        return {}
    mech = inputs.mechanism
    out = {}
    for i, name in enumerate(names):
        if name not in mech.coordinate_names:
            continue
        c = mech.coordinate_names.index(name)
        truth = np.interp(stamps, tr.t, tr.effort[:, c])
        est = np.array([r.estimate.inputs[i] if r.estimate.inputs is not None else np.nan for r in recs])
        err = est - truth
        rng = float(np.ptp(truth)) or 1.0
        late = stamps >= stamps[0] + 1.0
        out[name] = {
            "rmse": float(np.sqrt(np.nanmean(err**2))),
            "rmse_after_1s": float(np.sqrt(np.nanmean(err[late] ** 2))) if late.any() else None,
            "truth_range": rng,
        }
    return out
