"""Paper 000 particle-filter experiments: ``mbde bench pf --out DIR [--runs N]``.

Five experiments on the four-bar ``fourbar_pf`` (z = crank angle), each over ``--runs``
seeded repetitions (noise seed and PF seed change; the true motion of a scenario is
simulated once, :class:`mbde_core.bench.common.TruthRecord`). Every filter runs through
its :class:`EstimatorStage`, as in ``mbde replay``.

1. tracking (sec. 6.1.1, Fig. 7): ``pf_sim`` (10 s, gyro on the rocker, 0.3 deg/s),
   uniform prior, config/estimators/pf.yaml (Table 1: 100 particles, sigma_s 1 deg/s,
   sigma_a 1 m/s^2 = 8 rad/s^2). Convergence time = first time after which the crank
   angle error stays below 2 deg until the end of the run; final RMSE = RMSE of the
   crank angle over t >= 1 s; Fig. 7: truth vs mean with the 95 % band, error with band.
   Two variants: ``mbde`` (the shipped defaults: enlarged initial set and velocity
   proposal, see :mod:`mbde_core.estimators.pf`) and ``paper`` (Algorithm 1 and eq. 22
   only: 100 particles from the uniform prior, no proposal).
2. branches (Fig. 11): for each assembly branch as the ground truth, the time until the
   PF's P(true branch) first exceeds 0.99 (paper: < 6 readings, 36 ms, on the real rig),
   on ``pf_rig_branch{0,1}`` (Table 2 settings, config/estimators/pf_rig.yaml: 50
   particles, 3 ms, gyro every 6 ms, joint friction in the truth only) and on ``pf_sim``
   released on either branch (Table 1). Fig. 11: crank angle with the 95 % band and the
   branch probabilities vs time on the rig.
3. sweep (sec. 6.1.2, Fig. 8): crank length and mass errors {0, 1, 2, 3} % in the PF's
   model x sigma_a in {0.1 .. 4} m/s^2 (/ L1 -> rad/s^2), mean RMSE over t >= 1 s of
   ``--runs`` runs (paper: 100; uniform prior, default options) of pf_sim released from
   ``--sweep-release`` = 0 deg. pf_sim itself releases the crank at 60 deg, 10 deg from
   the unstable top of the potential (70 deg on branch 0): its motion keeps grazing the
   separatrix, and a 1 % model error changes it qualitatively (over the top or back),
   which no sigma_a can track with a rocker gyro; that case is reported separately
   (errors {0, 1, 3} %, sigma_a 1 m/s^2). The paper does not state its release angle.
4. integrators (paper 002 sec. 3): rk4, midpoint, symplectic_euler and euler on the
   first 3 s of pf_sim from a known start (Table 1 settings, 5 ms).
5. speed: particle-steps per second of a full filter step (predict + update with one
   gyro reading + estimate) for N = 1e2 .. 1e5 particles and the integrators rk4 (the
   default), euler and midpoint (variational); CPU time of this process (not the wall
   clock of a shared machine); the real-time factor at the rig settings (50 particles,
   3 ms, pf_rig_branch0, 4 s) against the paper's 83.75 % of real time; target
   (reported, not asserted): >= 2e6 particle-steps/s at 1e4 particles.

Writes DIR/tracking.csv, branches.csv, integrators.csv, sweep.csv, speed.csv, results.json and the figures
tracking.png (Fig. 7), branches.png (Fig. 11), sweep.png (Fig. 8), speed.png; prints the
tables. Runs use ``--jobs`` local processes (default: CPU count) or a Dask cluster (``--scheduler``); the speed part runs alone.
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import time

import numpy as np

HELP = "paper 000 particle filter: convergence, branch identification, robustness sweep, speed"
L1 = 0.125  # crank length of fourbar_pf [m]: sigma_a [m/s^2] / L1 = sigma of theta'' [rad/s^2]
CONVERGED_DEG = 2.0
LOST_DEG = 10.0  # a run whose RMSE over t >= 1 s exceeds this has lost track
BRANCH_P = 0.99
SWEEP_SIGMAS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)  # m/s^2 (paper 000 Fig. 8 axis)
SWEEP_ERRORS = (0, 1, 2, 3)  # percent
SWEEP_RELEASE_DEG = 0.0  # crank angle the sweep's pf_sim variant is released from (see the docstring)
SEPARATRIX_ERRORS = (0, 1, 3)
SPEED_N = (100, 1000, 10000, 100000)
SPEED_INTEGRATORS = ("rk4", "euler", "midpoint")
INTEGRATOR_RUNS = ("rk4", "midpoint", "symplectic_euler", "euler")
TARGET = 2e6  # particle-steps/s at 1e4 particles (issue 5)
EXPERIMENTS = ("tracking", "branches", "integrators", "sweep", "speed")
PAPER_VARIANT = {"uniform": {"particles": 0, "velocity_proposal": False}}

_TRUTHS: dict = {}  # key -> TruthRecord: filled by run(), and in each worker by _task
_MODELS: dict = {}  # per worker: (truth key, error %) -> (mechanism, sensors, scenario)


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--runs", type=int, default=5, help="seeded runs per cell (paper: 100; default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default %(default)s)")
    p.add_argument("--only", default="tracking,branches,integrators,sweep,speed",
                   help="comma-separated experiments to run (default %(default)s)")
    p.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SWEEP_SIGMAS),
                   help="sweep: sigma_a values [m/s^2] (default %(default)s)")
    p.add_argument("--errors", default=",".join(str(e) for e in SWEEP_ERRORS),
                   help="sweep: crank length/mass errors [%%] (default %(default)s)")
    p.add_argument("--sweep-release", type=float, default=SWEEP_RELEASE_DEG,
                   help="sweep: crank angle [deg] pf_sim is released from (default %(default)s; pf_sim: 60)")
    p.add_argument("--duration", type=float, default=10.0, help="pf_sim duration [s] (default %(default)s)")
    p.add_argument("--particles", default=",".join(str(n) for n in SPEED_N),
                   help="speed: particle counts (default %(default)s)")
    from mbde_core import runs

    runs.add_arguments(p, "filter runs")


# ------------------------------------------------------------------------------ helpers
def _configs():
    from mbde_core.bench.common import config_path
    from mbde_core.estimators.config_schema import load_estimator_configs

    sim = load_estimator_configs(config_path("estimators", "pf.yaml"), ["pf"])["pf"]
    rig = load_estimator_configs(config_path("estimators", "pf_rig.yaml"), ["pf"])["pf"]
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
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.base import InitialState
    from mbde_core.estimators.metrics import coordinate_errors, truth_at
    from mbde_core.estimators.stage import EstimatorStage

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
            iv = est.interval(0.95)["z"]
            rows.append((e.stamp, e.z[0], iv[0][0], iv[1][0], *e.branch_probabilities, est.N, rec.cost))
        else:
            rows.append((e.stamp, e.z[0], *e.branch_probabilities, est.N, rec.cost))

    stage = EstimatorStage(est, cfg["step"], lambda t: start, on_step=on_step, keep=False)
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


# ------------------------------------------------------------------------------ experiments
def _tracking_tasks(args, sim_cfg):
    tasks = []
    for variant, cfg in (("mbde", sim_cfg), ("paper", _merge(sim_cfg, PAPER_VARIANT))):
        for r in range(args.runs):
            tasks.append(("tracking", "sim0", variant, cfg, args.seed + r, 0.0, None, r == 0))
    return tasks


def _branch_tasks(args, sim_cfg, rig_cfg):
    tasks = []
    for b in (0, 1):
        for r in range(args.runs):
            tasks.append(("branches", f"rig{b}", "rig (Table 2)", rig_cfg, args.seed + r, 0.0, None, r == 0))
            tasks.append(("branches", f"simb{b}", "sim (Table 1)", sim_cfg, args.seed + r, 0.0, None, False))
            tasks.append(("branches", f"simb{b}", "sim paper-only", _merge(sim_cfg, PAPER_VARIANT), args.seed + r, 0.0, None, False))
    return tasks


def _sweep_tasks(args, sim_cfg, sigmas, errors):
    tasks = []
    for e in errors:
        for s in sigmas:
            cfg = _merge(sim_cfg, {"acceleration_sigma": s / L1})
            for r in range(args.runs):
                tasks.append(("sweep", "sweep", "mbde", cfg, args.seed + r, float(e), float(s), False))
    for e in SEPARATRIX_ERRORS:  # the same on pf_sim as shipped (released 10 deg from the top)
        for r in range(args.runs):
            tasks.append(("separatrix", "sim0", "mbde", sim_cfg, args.seed + r, float(e), 1.0, False))
    return tasks


def separatrix_table(rows) -> str:
    lines = ["", "The same on pf_sim as shipped (released at 60 deg, 10 deg from the unstable top of the potential at "
             "70 deg), sigma_a 1 m/s^2: mean RMSE over t >= 1 s [deg] (lost runs)"]
    for e in SEPARATRIX_ERRORS:
        rs = [r for r in rows if r["error_pct"] == float(e) and not r["failed"]]
        if rs:
            v = np.array([r["rmse_deg"] for r in rs])
            lines.append(f"  crank error {e:g} %: {np.mean(v):.3g} ({int(np.sum(v > LOST_DEG))} of {len(v)} lost)")
    return "\n".join(lines)


def tracking_table(rows) -> str:
    lines = ["", "Tracking, paper 000 sec. 6.1.1 (pf_sim, uniform prior, Table 1): convergence = error < 2 deg "
             "for the rest of the run; RMSE over t >= 1 s", 
             f"{'variant':<8}{'runs':>6}{'converged':>11}{'conv. median [s]':>18}{'conv. max [s]':>15}"
             f"{'RMSE median [deg]':>19}{'RMSE mean [deg]':>17}{'recoveries':>12}"]
    for variant in ("mbde", "paper"):
        rs = [r for r in rows if r["variant"] == variant and not r["failed"]]
        if not rs:
            continue
        conv = _stats([r["convergence_s"] for r in rs])
        rm = _stats([r["rmse_deg"] for r in rs])
        lines.append(f"{variant:<8}{len(rs):>6}{conv['finite']:>7}/{len(rs):<3}{_fmt_s(conv['median']):>18}"
                     f"{_fmt_s(conv['max']):>15}{rm['median']:>19.3f}{rm['mean']:>17.3f}"
                     f"{sum(r['recoveries'] for r in rs):>12}")
    return "\n".join(lines)


def branch_table(rows) -> str:
    lines = ["", f"Branch identification: time until P(true branch) > {BRANCH_P} first (and from when on it stays "
             "above); paper: < 6 readings = 36 ms on the rig",
             f"{'case':<16}{'branch':>7}{'runs':>6}{'identified':>12}{'first: median':>15}{'max [s]':>9}"
             f"{'readings':>10}{'stays: median':>15}{'max [s]':>9}{'RMSE t>=1s [deg]':>18}"]
    for variant in ("rig (Table 2)", "sim (Table 1)", "sim paper-only"):
        for b in (0, 1):
            key = f"rig{b}" if variant.startswith("rig") else f"simb{b}"
            rs = [r for r in rows if r["variant"] == variant and r["truth"] == key and not r["failed"]]
            if not rs:
                continue
            st = _stats([r["branch_s"] for r in rs])
            stay = _stats([r["branch_stay_s"] for r in rs])
            period = 0.006 if variant.startswith("rig") else 0.005
            reads = f"{st['median'] / period + 1:.0f}" if np.isfinite(st["median"]) else "-"
            rm = _stats([r["rmse_deg"] for r in rs])
            lines.append(f"{variant:<16}{b:>7}{len(rs):>6}{stay['finite']:>8}/{len(rs):<3}{_fmt_s(st['median']):>15}"
                         f"{_fmt_s(st['max']):>9}{reads:>10}{_fmt_s(stay['median']):>15}{_fmt_s(stay['max']):>9}"
                         f"{rm['median']:>18.2f}")
    lines.append("(identified = runs whose P(true branch) ends above the threshold; readings = gyro readings "
                 "up to the first crossing, median)")
    return "\n".join(lines)


def _integrator_tasks(args, sim_cfg):
    tasks = []
    for integ in INTEGRATOR_RUNS:
        cfg = _merge(sim_cfg, {"integrator": integ, "init": "gaussian"})
        for r in range(args.runs):
            tasks.append(("integrators", "sim3", integ, cfg, args.seed + r, 0.0, None, False))
    return tasks


def integrator_table(rows) -> str:
    lines = ["", "Integrators (paper 002 sec. 3): pf_sim, first 3 s, known start (init: gaussian), Table 1 "
             "settings, 5 ms step: RMSE of the crank angle over the run [deg]",
             f"{'integrator':<18}{'runs':>6}{'RMSE median':>13}{'RMSE max':>10}{'lost (>10 deg)':>16}{'us/step':>9}"]
    for integ in INTEGRATOR_RUNS:
        rs = [r for r in rows if r["variant"] == integ and not r["failed"]]
        if not rs:
            continue
        v = np.array([r["rmse_all_deg"] for r in rs])
        lines.append(f"{integ:<18}{len(rs):>6}{np.median(v):>13.3f}{np.max(v):>10.3f}{int(np.sum(v > 10)):>16}"
                     f"{np.mean([r['step_us'] for r in rs]):>9.0f}")
    return "\n".join(lines)


def sweep_summary(rows, sigmas, errors):
    out = []
    for e in errors:
        for s in sigmas:
            rs = [r for r in rows if r["error_pct"] == float(e) and r["sigma_a"] == float(s)]
            ok = [r for r in rs if not r["failed"] and np.isfinite(r["rmse_deg"])]
            out.append({"error_pct": float(e), "sigma_a_ms2": float(s), "sigma_a_rads2": float(s) / L1, "runs": len(rs),
                        "failed": len(rs) - len(ok),
                        "rmse_mean_deg": float(np.mean([r["rmse_deg"] for r in ok])) if ok else None,
                        "rmse_median_deg": float(np.median([r["rmse_deg"] for r in ok])) if ok else None,
                        "lost": int(sum(r["rmse_deg"] > LOST_DEG for r in ok)),
                        "recoveries": int(sum(r.get("recoveries", 0) for r in ok))})
    return out


def sweep_table(summary, sigmas, errors, release) -> str:
    lines = ["", f"Robustness sweep, paper 000 Fig. 8 (pf_sim released from {release:g} deg, uniform prior): mean RMSE "
             f"[deg] of the crank angle over t >= 1 s (runs with RMSE > {LOST_DEG:g} deg = lost track); rows: crank "
             "length and mass error; columns: sigma_a in m/s^2 (rad/s^2 = m/s^2 / L1)",
             f"{'error':<8}" + "".join(f"{f'{s:g} ({s / L1:g})':>15}" for s in sigmas)]
    cells = {(c["error_pct"], c["sigma_a_ms2"]): c for c in summary}
    for e in errors:
        vals = []
        for s in sigmas:
            c = cells[(float(e), float(s))]
            v = "fail" if c["rmse_mean_deg"] is None else f"{c['rmse_mean_deg']:.3g}"
            v += f" ({c['lost']})"
            if c["failed"]:
                v += f" {c['failed']}f"
            vals.append(f"{v:>15}")
        lines.append(f"{f'{e:g} %':<8}" + "".join(vals))
    lines.append(f"{'median':<8}" + "".join(" " * 15 for _ in sigmas))
    for e in errors:
        vals = []
        for s in sigmas:
            c = cells[(float(e), float(s))]
            vals.append(f"{'-' if c['rmse_median_deg'] is None else format(c['rmse_median_deg'], '.3g'):>15}")
        lines.append(f"{f'{e:g} %':<8}" + "".join(vals))
    return "\n".join(lines)


def speed_experiment(counts, seed: int = 0):
    """Rows {integrator, N, ms/step, particle-steps/s, shares of predict/update/estimate}.

    The filter tracks pf_sim's gyro readings from a Gaussian start at the true state,
    so resampling happens as often as in a real run (ESS < N/2)."""
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.base import InitialState

    sim_cfg, _ = _configs()
    truth = _TRUTHS["sim0"]
    mech, sensors, sc = _model("sim0", 0.0)
    dt = sim_cfg["step"]
    meas = truth.measurements(truth.scenario.sensors, dt, seed=7 + seed)
    init = sc.estimator_initial_state()
    sig = sim_cfg["initial_sigma"]
    start = InitialState(init.z, init.zd, np.full(mech.dof, sig["z"]), np.full(mech.dof, sig["zd"]), init.q, init.branch)
    rows = []
    for integ in SPEED_INTEGRATORS:
        for N in counts:
            cfg = _merge(sim_cfg, {"particles": int(N), "integrator": integ, "init": "gaussian", "uniform": {"particles": 0}})
            est = make_estimator("pf", mech, sensors, cfg, rng=np.random.default_rng(seed))
            est.reset(meas[0].stamp, start)
            est.update([meas[0]])
            times = []
            budget = 1.5 if integ == "rk4" else 0.8
            k = 1
            while k < len(meas):
                c0 = time.process_time()
                est.predict(dt)
                c1 = time.process_time()
                est.update([meas[k]])
                c2 = time.process_time()
                est.estimate()
                c3 = time.process_time()
                k += 1
                if k > 4:  # three warm-up steps
                    times.append((c1 - c0, c2 - c1, c3 - c2))
                if len(times) >= 5 and sum(map(sum, times)) > budget:
                    break
            T = np.array(times)
            step = float(np.median(T.sum(axis=1)))  # median: robust to other processes' bursts
            share = T.sum(axis=0) / T.sum()
            rows.append({"integrator": integ, "particles": int(N), "ms_per_step": step * 1e3,
                         "particle_steps_per_s": N / step, "steps": len(T),
                         "predict_share": share[0], "update_share": share[1],
                         "estimate_share": share[2], "resamples": est.counts["resamples"]})
    return rows


def speed_table(rows, rtf) -> str:
    lines = ["", "Speed: full filter step (predict + update of one gyro reading + estimate) tracking pf_sim, median CPU "
             "time of this process per step; shares of the three parts",
             f"{'integrator':<11}{'N':>8}{'ms/step':>10}{'particle-steps/s':>18}{'predict':>9}{'update':>8}{'estimate':>9}"]
    for r in rows:
        lines.append(f"{r['integrator']:<11}{r['particles']:>8}{r['ms_per_step']:>10.3f}{r['particle_steps_per_s']:>18.3g}"
                     f"{100 * r['predict_share']:>8.0f}%{100 * r['update_share']:>7.0f}%{100 * r['estimate_share']:>8.0f}%")
    at = [r for r in rows if r["integrator"] == "rk4" and r["particles"] == 10000]
    if at:
        v = at[0]["particle_steps_per_s"]
        lines.append(f"target >= {TARGET:.0e} particle-steps/s at 1e4 particles (rk4): {v:.3g} "
                     f"({'met' if v >= TARGET else f'{v / TARGET:.0%} of it'}); the 2014 C++ code: ~2e4/s")
    for r in rtf:
        lines.append(f"real-time factor, {r['case']}: {r['rtf_cpu']:.3f} (CPU), {r['rtf_wall']:.3f} (wall); "
                     f"mean step {r['step_us']:.0f} us (paper 000: 0.8375 with 50 particles in C++)")
    return "\n".join(lines)


def rtf_experiment(rig_cfg, seed: int = 0):
    """Real-time factor at the rig settings (pf_rig_branch0, 50 particles, 3 ms)."""
    out = []
    for case, cfg in (("rig settings, uniform start (3000 -> 50 particles)", rig_cfg),
                      ("rig settings, 50 particles throughout (gaussian start)", _merge(rig_cfg, {"init": "gaussian", "uniform": {"particles": 0}}))):
        r = run_pf("rig0", cfg, seed, 0.0, series=False)
        out.append({"case": case, "rtf_cpu": r["cpu_s"] / r["duration_s"], "rtf_wall": r["wall_s"] / r["duration_s"],
                    "step_us": r["step_us"], "duration_s": r["duration_s"]})
    return out


# ------------------------------------------------------------------------------ figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_tracking(path, res):
    plt = _plt()
    s = res["series"]
    fig, ax = plt.subplots(3, 1, figsize=(8, 8.5))
    ax[0].fill_between(s["t"], s["lo"], s["hi"], color="0.75", lw=0, label="95 % interval")
    ax[0].plot(s["t"], s["truth"], "k-", lw=1.4, label="ground truth")
    ax[0].plot(s["t"], s["mean"], "r-", lw=0.9, label="PF mean")
    ax[0].set_ylabel("crank angle [deg]")
    ax[0].set_title("(a) paper 000 Fig. 7: crank angle, uniform prior (pf_sim, Table 1)")
    ax[0].legend(loc="upper right", fontsize=8)
    for a, tmax in ((ax[1], s["t"][-1]), (ax[2], 1.0)):
        sel = s["t"] <= tmax
        a.fill_between(s["t"][sel], s["err_lo"][sel], s["err_hi"][sel], color="0.75", lw=0, label="95 % interval")
        a.plot(s["t"][sel], s["err"][sel], "r-", lw=0.8, label="error")
        a.axhline(0, color="k", lw=0.5)
        for y in (-CONVERGED_DEG, CONVERGED_DEG):
            a.axhline(y, color="b", lw=0.5, ls="--")
        if np.isfinite(res["convergence_s"]) and res["convergence_s"] <= tmax:
            a.axvline(res["convergence_s"], color="b", lw=0.8, ls=":", label=f"converged {res['convergence_s']:.3f} s")
        a.set_ylabel("error [deg]")
        a.legend(loc="upper right", fontsize=8)
    ax[1].set_ylim(-10, 10)
    ax[1].set_title("(b) error and its 95 % interval (zoom +/- 10 deg)")
    ax[2].set_title("(c) the first second")
    ax[2].set_xlabel("t [s]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_branches(path, runs):
    plt = _plt()
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for b in (0, 1):
        res = runs.get(b)
        if res is None:
            continue
        s = res["series"]
        a = ax[0, b]
        a.fill_between(s["t"], s["lo"], s["hi"], color="0.75", lw=0, label="95 % interval")
        a.plot(s["t"], s["truth"], "k-", lw=1.3, label="ground truth")
        a.plot(s["t"], s["mean"], "r-", lw=0.8, label="PF mean")
        a.set_title(f"({'ab'[b]}) rig, true branch {b}: crank angle")
        a.set_ylabel("crank angle [deg]")
        a.legend(loc="upper right", fontsize=8)
        a = ax[1, b]
        sel = s["t"] <= 0.5
        for k in range(s["P"].shape[1]):
            a.plot(s["t"][sel], s["P"][sel, k], "-", lw=1.3, label=f"P(B = {k})")
        if np.isfinite(res["branch_s"]):
            a.axvline(res["branch_s"], color="k", ls=":", lw=0.8, label=f"P(true) > {BRANCH_P} at {res['branch_s'] * 1e3:.0f} ms")
        a.set_ylim(-0.02, 1.02)
        a.set_xlabel("t [s]")
        a.set_title(f"({'cd'[b]}) branch probabilities (eq. 20), true branch {b}")
        a.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_sweep(path, summary, sigmas, errors, release):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for e in errors:
        cs = [c for c in summary if c["error_pct"] == float(e)]
        x = [c["sigma_a_ms2"] for c in cs]
        y = [c["rmse_mean_deg"] if c["rmse_mean_deg"] is not None else np.nan for c in cs]
        ax.plot(x, y, "o-", label=f"{e:g} % crank error")
    ax.set_xscale("log")
    ax.set_xticks(list(sigmas))
    ax.set_xticklabels([f"{s:g}" for s in sigmas])
    ax.minorticks_off()
    ys = [c["rmse_mean_deg"] for c in summary if c["rmse_mean_deg"]]
    if ys and min(ys) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("sigma_a [m/s^2]  (x 8 = rad/s^2 on the crank angle)")
    ax.set_ylabel("mean RMSE of the crank angle [deg]")
    ax.set_title(f"paper 000 Fig. 8: model error x acceleration noise (release {release:g} deg)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_speed(path, rows):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for integ in SPEED_INTEGRATORS:
        rs = [r for r in rows if r["integrator"] == integ]
        ax.plot([r["particles"] for r in rs], [r["particle_steps_per_s"] for r in rs], "o-", label=integ)
    ax.axhline(TARGET, color="k", ls="--", lw=0.8, label="target 2e6 (at 1e4)")
    ax.axhline(2e4, color="0.5", ls=":", lw=0.8, label="2014 C++ (~2e4)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("particles")
    ax.set_ylabel("particle-steps / s (CPU)")
    ax.set_title("PF speed on fourbar_pf (predict + update + estimate)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ main
def _write_csv(path, rows, keys):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def _clean(obj):
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items() if k != "series"}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def run(args) -> int:
    from mbde_core.bench.common import TruthRecord, config_path
    from mbde_core.errors import DataError
    from mbde_core.scenario import load_scenario
    from mbde_core import runs

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    bad = only - set(EXPERIMENTS)
    if bad or not only:
        raise DataError(f"--only: unknown {', '.join(sorted(bad)) or '(empty)'} (choose from {', '.join(EXPERIMENTS)})")
    if args.runs < 1:
        raise DataError("--runs must be >= 1")
    try:
        sigmas = [float(s) for s in args.sigmas.split(",") if s.strip()]
        errors = [float(e) for e in args.errors.split(",") if e.strip()]
        counts = [int(float(n)) for n in args.particles.split(",") if n.strip()]
    except ValueError as exc:
        raise DataError(f"--sigmas/--errors/--particles: {exc}") from None
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    sim_cfg, rig_cfg = _configs()
    sim = load_scenario(config_path("scenarios", "pf_sim.yaml"))
    need = set()
    if only & {"tracking", "sweep"}:
        need.add("sim0")
    if "sweep" in only:
        need.add("sweep")
    if "branches" in only:
        need |= {"rig0", "rig1", "simb0", "simb1"}
    if "integrators" in only:
        need.add("sim3")
    if "speed" in only:
        need |= {"rig0", "sim0"}
    for key in sorted(need):
        if key == "sim0":
            sc, dur = sim, args.duration
        elif key.startswith("simb"):
            sc, dur = sim.with_overrides(settings=[f"initial_state.branch={key[-1]}"]), min(args.duration, 2.0)
        elif key == "sim3":
            sc, dur = sim, min(args.duration, 3.0)
        elif key == "sweep":
            sc = sim.with_overrides(settings=[f"initial_state.release_from.theta=deg2rad({args.sweep_release:g})"])
            dur = args.duration
        else:
            sc = load_scenario(config_path("scenarios", f"pf_rig_branch{key[-1]}.yaml"))
            dur = sc.duration
        _TRUTHS[key] = TruthRecord(sc, dur)
        print(f"truth {key}: {dur:g} s of {sc.name} simulated in {_TRUTHS[key].wall_time:.1f} s", flush=True)
    tasks = []
    if "tracking" in only:
        tasks += _tracking_tasks(args, sim_cfg)
    if "branches" in only:
        tasks += _branch_tasks(args, sim_cfg, rig_cfg)
    if "integrators" in only:
        tasks += _integrator_tasks(args, sim_cfg)
    if "sweep" in only:
        tasks += _sweep_tasks(args, sim_cfg, sigmas, errors)
    results = []
    if tasks:
        tasks.sort(key=lambda t: (t[1] not in ("sim0", "sweep"), t[0] != "sweep"))  # long runs first
        outcomes = runs.run_tasks(_task, tasks, dict(_TRUTHS), label="pf runs", **runs.options(args))
        for o, task in zip(outcomes, tasks):
            if o.ok:
                results.append(o.value)
            else:  # the worker itself failed: report the run as failed, keep the others
                kind, key, variant, _, seed, error, sigma, _ = task
                results.append({"failed": True, "error": o.error, "kind": kind, "truth": key, "variant": variant,
                                "seed": seed, "error_pct": error, "sigma_a": sigma})
    doc = {"runs": args.runs, "seed": args.seed, "duration_s": args.duration}
    text = []
    keys = ["kind", "truth", "variant", "error_pct", "sigma_a", "seed", "convergence_s", "rmse_deg", "rmse_all_deg",
            "branch_s", "branch_stay_s", "final_branch_p", "recoveries", "resamples", "step_us", "cpu_s", "wall_s", "failed", "error"]
    figures = []
    failed = [r for r in results if r["failed"]]
    if "tracking" in only:
        rows = [r for r in results if r["kind"] == "tracking"]
        _write_csv(os.path.join(args.out, "tracking.csv"), rows, keys)
        text.append(tracking_table(rows))
        doc["tracking"] = [_clean(r) for r in rows]
        first = [r for r in rows if r["variant"] == "mbde" and "series" in r]
        if first:
            figure_tracking(os.path.join(args.out, "tracking.png"), first[0])
            figures.append("tracking.png")
            text.append(f"first run ({first[0]['seed']}): convergence {_fmt_s(first[0]['convergence_s'])} s, "
                        f"RMSE over t >= 1 s {first[0]['rmse_deg']:.3f} deg, over the whole run {first[0]['rmse_all_deg']:.2f} deg")
    if "branches" in only:
        rows = [r for r in results if r["kind"] == "branches"]
        _write_csv(os.path.join(args.out, "branches.csv"), rows, keys)
        text.append(branch_table(rows))
        doc["branches"] = [_clean(r) for r in rows]
        series = {int(r["truth"][-1]): r for r in rows if "series" in r and r["truth"].startswith("rig")}
        if series:
            figure_branches(os.path.join(args.out, "branches.png"), series)
            figures.append("branches.png")
    if "integrators" in only:
        rows = [r for r in results if r["kind"] == "integrators"]
        _write_csv(os.path.join(args.out, "integrators.csv"), rows, keys)
        text.append(integrator_table(rows))
        doc["integrators"] = [_clean(r) for r in rows]
    if "sweep" in only:
        rows = [r for r in results if r["kind"] == "sweep"]
        sep = [r for r in results if r["kind"] == "separatrix"]
        _write_csv(os.path.join(args.out, "sweep.csv"), rows + sep, keys)
        summary = sweep_summary(rows, sigmas, errors)
        text.append(sweep_table(summary, sigmas, errors, args.sweep_release))
        text.append(separatrix_table(sep))
        doc["sweep"] = {"release_deg": args.sweep_release, "cells": summary,
                        "pf_sim_as_shipped": [_clean(r) for r in sep]}
        figure_sweep(os.path.join(args.out, "sweep.png"), summary, sigmas, errors, args.sweep_release)
        figures.append("sweep.png")
    if "speed" in only:
        print("speed ...", flush=True)
        rows = speed_experiment(counts, args.seed)
        rtf = rtf_experiment(rig_cfg, args.seed)
        _write_csv(os.path.join(args.out, "speed.csv"), rows, list(rows[0]))
        text.append(speed_table(rows, rtf))
        doc["speed"] = {"rows": rows, "realtime": rtf, "target_particle_steps_per_s_at_1e4": TARGET}
        figure_speed(os.path.join(args.out, "speed.png"), rows)
        figures.append("speed.png")
    if failed:
        text.append(f"\n{len(failed)} run(s) raised: " + "; ".join(sorted({r['error'] for r in failed}))[:500])
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(_clean(doc), fh, indent=2)
    print("\n".join(text))
    print(f"\n{len(tasks)} filter runs ({args.runs} per cell) + speed in {time.perf_counter() - t_start:.0f} s; "
          f"wrote {args.out}: results.json, *.csv, {', '.join(figures)}")
    return 0
