"""Shared pieces of ``mbde bench pf``: the configurations, the truths, one seeded PF run.

The truths (:class:`mbde_bench.common.TruthRecord`) are simulated once by
:func:`mbde_bench.pf.run` and shared with the worker processes (``_TRUTHS``); each
run draws its readings with its own noise seed and drives the filter through its
:class:`EstimatorStage`, as ``mbde replay`` does.
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np

from mbde_core.config.paths import config_path
from mbde_core.estimators import make_estimator
from mbde_core.estimators.assess.metrics import coordinate_errors, truth_at
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import load
from mbde_core.estimators.particle import outputs
from mbde_core.estimators.stage.core import EstimatorStage

L1 = 0.125  # crank length of fourbar_pf [m]: sigma_a [m/s^2] / L1 = sigma of theta'' [rad/s^2]
CONVERGED_DEG = 2.0
BRANCH_P = 0.99
# Algorithm 1 and eq. 22 only: none of mbde's additions (enlarged initial set and readings-based
# initial proposals, adapted proposal, regularisation, annealing, lock injections)
PAPER_VARIANT = {"uniform": {"particles": 0, "velocity_proposal": False, "position_proposal": False, "anneal": 0.0},
                 "proposal": "prior", "regularisation": {"enabled": False}, "recovery": {"lock_nis": 0.0}}

_TRUTHS: dict = {}  # key -> TruthRecord: filled by run(), and in each worker by _task
_MODELS: dict = {}  # per worker: (truth key, error %) -> (mechanism, sensors, scenario)


def _configs():
    """(Table 1, Table 2) PF options of paper 000: config/estimators/pf_table1.yaml, pf_rig.yaml."""
    sim = load(config_path("estimators", "pf_table1.yaml"), ["pf"])["pf"].as_dict()
    rig = load(config_path("estimators", "pf_rig.yaml"), ["pf"])["pf"].as_dict()
    for cfg in (sim, rig):
        cfg["gate"] = 0.0  # paper 000's filter has no gate (the shipped configs do: pf_gate.py)
    return sim, rig


def _merge(cfg: dict, over: dict) -> dict:
    out = copy.deepcopy(cfg)
    for k, v in over.items():
        if isinstance(v, dict):
            out[k] = _merge(out.get(k, {}), v)
        else:
            out[k] = v
    return out


def convergence_time(t: np.ndarray, err_deg: np.ndarray, threshold: float = CONVERGED_DEG) -> float:
    """First time (relative to t[0]) after which |err| stays below threshold; inf if never."""
    bad = np.nonzero(~(np.abs(err_deg) < threshold))[0]
    if bad.size == 0:
        return 0.0
    if bad[-1] + 1 >= len(t):
        return math.inf
    return float(t[bad[-1] + 1] - t[0])


def first_time(t: np.ndarray, flag: np.ndarray) -> float:
    """First time (relative to t[0]) where flag holds; inf if never."""
    idx = np.nonzero(flag)[0]
    return float(t[idx[0]] - t[0]) if idx.size else math.inf


def _model(key: str, error: float):
    """(mechanism, sensors, scenario) of the PF's model for a truth and a crank error [%]."""
    k = (key, float(error))
    if k not in _MODELS:
        truth = _TRUTHS[key]
        sc = truth.scenario
        if error:
            sc = sc.with_overrides(settings=[f"model_errors.bodies.crank.length={error}",
                                             f"model_errors.bodies.crank.mass={error}"])
        _MODELS[k] = (sc.estimator_mechanism(), sc.estimator_sensors(), sc)
    return _MODELS[k]


def run_pf(key: str, cfg: dict, seed: int, error: float = 0.0, series: bool = True) -> dict:
    """One PF run on the readings (noise seed ``seed``) of truth ``key``; returns metrics
    and, with ``series``, the time series (mean, 95 % interval, branch probabilities)."""
    truth = _TRUTHS[key]
    mech, sensors, sc = _model(key, error)
    meas = truth.measurements(truth.scenario.sensors, list(truth.scenario.sensors)[0].period, seed=1000 + seed)
    init = sc.estimator_initial_state()
    sig = cfg["initial_sigma"]
    start = InitialState(init.z, init.zd, np.full(mech.dof, sig["z"]), np.full(mech.dof, sig["zd"]), init.q, init.branch)
    est = make_estimator("pf", mech, sensors, cfg, rng=np.random.default_rng(seed))
    rows = []

    def on_step(rec):
        e = rec.estimate
        if series:
            iv = outputs.interval(est, 0.95)["z"]
            rows.append((e.stamp, e.z[0], iv[0][0], iv[1][0], *e.branch_probabilities, est.N, rec.cost))
        else:
            rows.append((e.stamp, e.z[0], *e.branch_probabilities, est.N, rec.cost))

    stage = EstimatorStage(est, est.options.step, lambda t: start, on_step=on_step, keep=False)
    c0, w0 = time.process_time(), time.perf_counter()
    stage.feed(meas)
    stage.advance_to(truth.t[-1] + 1e-9)
    stage.flush()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    A = np.array(rows, dtype=float)
    t = A[:, 0]
    angular = np.array([True])
    tz = truth_at(t, truth.t, truth.z, angular)
    err = np.degrees(coordinate_errors(A[:, [1]], tz, angular)[:, 0])
    K = est.K
    P = A[:, 4:4 + K] if series else A[:, 2:2 + K]
    b_true = int(truth.scenario.initial_state.branch)
    late = t - t[0] >= 1.0
    diag = est.diagnostics()
    out = {
        "convergence_s": convergence_time(t, err),
        "rmse_deg": float(np.sqrt(np.mean(err[late] ** 2))) if late.any() else float("nan"),
        "rmse_all_deg": float(np.sqrt(np.mean(err**2))),
        "branch_s": first_time(t, P[:, b_true] > BRANCH_P),
        "branch_stay_s": convergence_time(t, np.where(P[:, b_true] > BRANCH_P, 0.0, 1.0), 0.5),
        "final_branch_p": float(P[-1, b_true]),
        "recoveries": diag["recoveries"], "resamples": diag["resamples"],
        "cpu_s": cpu, "wall_s": wall, "duration_s": float(t[-1] - t[0]),
        "steps": len(t), "step_us": float(np.mean(A[:, -1]) * 1e6),
    }
    if series:
        tzu = np.unwrap(tz[:, 0])
        out["series"] = {"t": t - t[0], "truth": np.degrees(tzu), "mean": np.degrees(tzu) + err,
                         "lo": np.degrees(tzu) + err + np.degrees(A[:, 2] - A[:, 1]),
                         "hi": np.degrees(tzu) + err + np.degrees(A[:, 3] - A[:, 1]),
                         "err": err, "err_lo": np.degrees(A[:, 2] - A[:, 1]) + err,
                         "err_hi": np.degrees(A[:, 3] - A[:, 1]) + err, "P": P, "N": A[:, -2]}
    return out


def _task(truths, task):
    """One PF run (mbde_core.runs task); truths: {key: TruthRecord} shared by all tasks."""
    _TRUTHS.update(truths)
    kind, key, variant, cfg, seed, error, sigma, series = task
    try:
        res = run_pf(key, cfg, seed, error, series)
        res["failed"] = False
    except Exception as exc:  # a diverging run must not stop the benchmark
        res = {"failed": True, "error": f"{type(exc).__name__}: {exc}"[:200]}
    res.update(kind=kind, truth=key, variant=variant, seed=seed, error_pct=error, sigma_a=sigma)
    return res


def _stats(vals):
    v = np.array([x for x in vals if x is not None], dtype=float)
    fin = v[np.isfinite(v)]
    return {"median": float(np.median(fin)) if fin.size else math.inf, "max": float(np.max(v)) if v.size else math.nan,
            "mean": float(np.mean(fin)) if fin.size else math.nan, "finite": int(fin.size), "n": int(v.size)}


def _fmt_s(x):
    return "never" if not np.isfinite(x) else f"{x:.3f}"
