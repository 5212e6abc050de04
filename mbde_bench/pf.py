"""Paper 000 particle-filter experiments: ``mbde bench pf --out DIR [--runs N]``.

Five experiments on the four-bar ``fourbar_pf`` (z = crank angle), each over ``--runs``
seeded repetitions (noise seed and PF seed change; the true motion of a scenario is
simulated once, :class:`mbde_bench.common.TruthRecord`). Every filter runs through
its :class:`EstimatorStage`, as in ``mbde replay``.

1. tracking (sec. 6.1.1, Fig. 7): ``pf_sim`` (10 s, gyro on the rocker, 0.3 deg/s),
   uniform prior. Convergence time = first time after which the crank angle error stays
   below 2 deg until the end of the run; final RMSE = RMSE of the crank angle over
   t >= 1 s; Fig. 7: truth vs mean with the 95 % band, error with band. Three variants:
   ``mbde`` (config/estimators/pf_table1.yaml: Table 1's 100 particles, sigma_s 1 deg/s,
   sigma_a 1 m/s^2 = 8 rad/s^2, with mbde's additions of :mod:`mbde_core.estimators.particle.filter`),
   ``paper`` (the same, Algorithm 1 and eq. 22 only: 100 particles from the uniform prior,
   blind acceleration noise, no regularisation or lock injections) and ``defaults`` (no
   configuration: the rules of :mod:`mbde_core.estimators.particle.scales`).
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
5. speed (:mod:`mbde_bench.pf_speed`): particle-steps per second of a full filter
   step for N = 1e2 .. 1e5 particles, one thread and the default thread pool, and its ratio
   to the bare arithmetic bound (:mod:`mbde_bench.pf_bound`); targets (issue 43, reported,
   not asserted): >= 1e7 particle-steps/s at 1e5 particles, thread scaling >= 1.7x.
6. multidof (:mod:`mbde_bench.pf_multidof`, issue 13): the defaults from the uniform
   prior on every shipped scenario and on config/bench/pf_multidof/ (offset slider-crank,
   2 cm four-bar, Watt six-bar, 3-DOF loop), ``--multidof-runs`` seeds each: converged
   runs, time to converge, steady-state RMSE against the UKF started at the truth.

Writes DIR/tracking.csv, branches.csv, integrators.csv, sweep.csv, speed.csv, multidof.csv,
results.json and the figures tracking.png (Fig. 7), branches.png (Fig. 11), sweep.png
(Fig. 8), speed.png; prints the tables. Runs use ``--jobs`` local processes (default: CPU
count) or a Dask cluster (``--scheduler``); the speed part runs alone.
"""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from mbde_bench import pf_multidof as md
from mbde_bench.common import TruthRecord, write_csv
from mbde_bench.pf_figures import figure_branches, figure_speed, figure_sweep, figure_tracking
from mbde_bench.pf_multidof import scenario_paths, table as multidof_table
from mbde_bench.pf_runs import L1, PAPER_VARIANT, _TRUTHS, _configs, _fmt_s, _merge, _task
from mbde_bench.pf_speed import SPEED_N, TARGET, rtf_experiment, speed_experiment, speed_table
from mbde_bench.pf_tables import (INTEGRATOR_RUNS, SEPARATRIX_ERRORS, branch_table, integrator_table, separatrix_table,
                                   sweep_summary, sweep_table, tracking_table)
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.estimators.configure import defaults
from mbde_core.scenario import load_scenario

HELP = "paper 000 particle filter: convergence, branches, Fig. 8 sweep, speed; multi-DOF convergence (issue 13)"
SWEEP_SIGMAS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)  # m/s^2 (paper 000 Fig. 8 axis)
SWEEP_ERRORS = (0, 1, 2, 3)  # percent
SWEEP_RELEASE_DEG = 0.0  # crank angle the sweep's pf_sim variant is released from (see the docstring)
EXPERIMENTS = ("tracking", "branches", "integrators", "sweep", "speed", "multidof")
DEFAULT_ONLY = "tracking,branches,integrators,sweep,speed"


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--runs", type=int, default=5, help="seeded runs per cell (paper: 100; default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default %(default)s)")
    p.add_argument("--only", default=DEFAULT_ONLY,
                   help=f"comma-separated experiments to run, of {', '.join(EXPERIMENTS)} (default %(default)s)")
    p.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SWEEP_SIGMAS),
                   help="sweep: sigma_a values [m/s^2] (default %(default)s)")
    p.add_argument("--errors", default=",".join(str(e) for e in SWEEP_ERRORS),
                   help="sweep: crank length/mass errors [%%] (default %(default)s)")
    p.add_argument("--sweep-release", type=float, default=SWEEP_RELEASE_DEG,
                   help="sweep: crank angle [deg] pf_sim is released from (default %(default)s; pf_sim: 60)")
    p.add_argument("--duration", type=float, default=10.0, help="pf_sim duration [s] (default %(default)s)")
    p.add_argument("--particles", default=",".join(str(n) for n in SPEED_N),
                   help="speed: particle counts (default %(default)s)")
    p.add_argument("--threads", default="",
                   help="speed: thread counts of the propagation (default: 1 and the CPU count)")
    p.add_argument("--multidof-runs", type=int, default=20, help="multidof: seeds per scenario (default %(default)s)")
    p.add_argument("--multidof-duration", type=float, default=4.0,
                   help="multidof: seconds of each scenario (default %(default)s)")
    p.add_argument("--multidof-scenarios", default="",
                   help="multidof: comma-separated scenario names (default: all, see mbde_bench/pf_multidof.py)")

    runs.add_arguments(p, "filter runs")


# ------------------------------------------------------------------------------ experiments
def _tracking_tasks(args, sim_cfg):
    tasks = []
    for variant, cfg in (("mbde", sim_cfg), ("paper", _merge(sim_cfg, PAPER_VARIANT)), ("defaults", defaults("pf"))):
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


def _integrator_tasks(args, sim_cfg):
    tasks = []
    for integ in INTEGRATOR_RUNS:
        cfg = _merge(sim_cfg, {"integrator": integ, "init": "gaussian"})
        for r in range(args.runs):
            tasks.append(("integrators", "sim3", integ, cfg, args.seed + r, 0.0, None, False))
    return tasks


# ------------------------------------------------------------------------------ figures
# ------------------------------------------------------------------------------ main
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


def _multidof(args, only_keys):
    """The multi-DOF experiment (mbde_bench.pf_multidof): (rows, truths)."""
    truths = md.simulate_truths(args.multidof_duration, only_keys)
    tasks = [(key, args.seed + r) for key in truths for r in range(args.multidof_runs)]
    outcomes = runs.run_tasks(md.task, tasks, truths, label="pf multidof runs", **runs.options(args))
    rows = []
    for o, (key, seed) in zip(outcomes, tasks):
        rows.append(o.value if o.ok else {"scenario": key, "seed": seed, "dof": truths[key].scenario.estimator_mechanism().dof,
                                          "failed": True, "converged": False, "error": o.error})
    return rows, truths


def run(args) -> int:
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
        threads = [int(n) for n in args.threads.split(",") if n.strip()] or None
    except ValueError as exc:
        raise DataError(f"--sigmas/--errors/--particles/--threads: {exc}") from None
    md_keys = {k.strip() for k in args.multidof_scenarios.split(",") if k.strip()}
    if "multidof" in only:
        unknown = md_keys - {k for k, _ in scenario_paths()}
        if unknown:
            raise DataError(f"--multidof-scenarios: unknown {', '.join(sorted(unknown))} "
                            f"(choose from {', '.join(k for k, _ in scenario_paths())})")
        if args.multidof_runs < 1 or not args.multidof_duration > 1.0:
            raise DataError("--multidof-runs must be >= 1 and --multidof-duration > 1 s (the steady state is t > 1 s)")
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
        write_csv(os.path.join(args.out, "tracking.csv"), rows, keys)
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
        write_csv(os.path.join(args.out, "branches.csv"), rows, keys)
        text.append(branch_table(rows))
        doc["branches"] = [_clean(r) for r in rows]
        series = {int(r["truth"][-1]): r for r in rows if "series" in r and r["truth"].startswith("rig")}
        if series:
            figure_branches(os.path.join(args.out, "branches.png"), series)
            figures.append("branches.png")
    if "integrators" in only:
        rows = [r for r in results if r["kind"] == "integrators"]
        write_csv(os.path.join(args.out, "integrators.csv"), rows, keys)
        text.append(integrator_table(rows))
        doc["integrators"] = [_clean(r) for r in rows]
    if "sweep" in only:
        rows = [r for r in results if r["kind"] == "sweep"]
        sep = [r for r in results if r["kind"] == "separatrix"]
        write_csv(os.path.join(args.out, "sweep.csv"), rows + sep, keys)
        summary = sweep_summary(rows, sigmas, errors)
        text.append(sweep_table(summary, sigmas, errors, args.sweep_release))
        text.append(separatrix_table(sep))
        doc["sweep"] = {"release_deg": args.sweep_release, "cells": summary,
                        "pf_sim_as_shipped": [_clean(r) for r in sep]}
        figure_sweep(os.path.join(args.out, "sweep.png"), summary, sigmas, errors, args.sweep_release)
        figures.append("sweep.png")
    if "multidof" in only:
        rows, truths = _multidof(args, md_keys)
        mkeys = ["scenario", "dof", "seed", "converged", "t_conv", "converged_abs", "t_conv_abs", "rmse_pf", "rmse_ukf",
                 "ratio", "ratio_cloud", "follower_seeds", "p_true_final", "recoveries", "locks", "particles_init", "particles", "sigma_a", "cpu_s", "failed", "error"]
        write_csv(os.path.join(args.out, "multidof.csv"), rows, mkeys)
        text.append(multidof_table(rows, truths))
        doc["multidof"] = {"runs": args.multidof_runs, "duration_s": args.multidof_duration, "rows": [_clean(r) for r in rows]}
    if "speed" in only:
        print("speed ...", flush=True)
        rows = speed_experiment(counts, args.seed, threads)
        rtf = rtf_experiment(rig_cfg, args.seed)
        write_csv(os.path.join(args.out, "speed.csv"), rows, list(rows[0]))
        text.append(speed_table(rows, rtf))
        doc["speed"] = {"rows": rows, "realtime": rtf, "target_particle_steps_per_s": TARGET}
        figure_speed(os.path.join(args.out, "speed.png"), rows)
        figures.append("speed.png")
    if failed:
        text.append(f"\n{len(failed)} run(s) raised: " + "; ".join(sorted({r['error'] for r in failed}))[:500])
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(_clean(doc), fh, indent=2)
    print("\n".join(text))
    print(f"\n{len(tasks)} paper-000 filter runs ({args.runs} per cell) in {time.perf_counter() - t_start:.0f} s in all; "
          f"results: results.json, *.csv, {', '.join(figures)}")
    return 0
