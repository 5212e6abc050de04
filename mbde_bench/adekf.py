"""mbde bench adekf: the ADE-KF experiments of paper 004 (sec. 5) and the MSC Adams check.

1. Learned map (paper 004 sec. 5.2): trains the 2 x 8 tanh MLP of the slider-crank's
   minimal-coordinate map (seeded, timed), reports its held-out accuracy against the
   exact map for the value and derivatives 1-3 and the cost of one evaluation (order 3)
   of each map; the weights go to OUT/slider_crank.map.npz.
2. Slider-crank (paper 004 sec. 5.2, Figs. 3-9): the scenario ``adekf_slider_crank``
   (PI speed controller 40 -> 50 -> 60 rad/s over 10 s, unmodelled slider friction) is
   simulated once; the ADE-KF fuses *only* the slider accelerometer (the motor encoder is
   a reference) through the same EstimatorStage as ``mbde replay``, with r_a = 1.5e-4 and
   5e-3 (the paper's values, see :mod:`mbde_core.estimators.kalman.adekf` for their units) and
   the tuned r_a of config/estimators/adekf.yaml, each with the exact and the learned map.
   Table: RMSE of crank angle, speed, slider acceleration and motor torque (after the
   first second, also in % of the torque range), max angle error, us per filter step.
   Plots: angle/speed/acceleration and torque, truth vs estimate, full and zoomed on the
   start-up and the two speed steps (Figs. 3-8), the augmented state with its 95 % band
   for the r_a values (Fig. 9), exact vs learned map.
   The scenario starts at a dead centre (crank angle 0), where the slider accelerometer
   cannot tell the direction of rotation: theta -> -theta gives the same readings (only
   gravity breaks the symmetry), so the bench starts the crank at ``--initial-angle``
   (default pi/2; the paper does not give its initial angle).
3. MSC Adams check: the four-bar of ../shared/reference/msc-adams-fourbar follows the
   prescribed crank angle theta(t) = 1.2 (1 - cos 2t); the engine computes q, qd, qdd from
   it (position/velocity/acceleration problems with the exact derivatives of theta(t)),
   a two-axis accelerometer on the coupler (body-frame axes, offset at mid-length: eqs.
   50-51) is read noise-free every 5 ms, and the ADE-KF's estimated crank torque is
   compared with the MSC torque column (negated: MSC's sign convention) -- next to the
   engine's inverse dynamics of the same motion.

Finishes in a few minutes (the budget is 10); ``--quick`` shortens the runs for a smoke test.
Writes OUT/tables.md, OUT/results.json, PNG figures and the learned maps.
"""
from __future__ import annotations

import copy
import json
import math
import os
import time

import numpy as np

from mbde_bench.adekf_figures import _wrap, figures
from mbde_core.config.paths import config_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import kinematics
from mbde_core.engine.inverse_dynamics import driver_forces
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import configure, load
from mbde_core.estimators.kalman.adekf import ADEKF
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.minimal import make_map
from mbde_core.minimal.learned import TOLERANCES, train_map
from mbde_core.model.mechanism import load_mechanism
from mbde_core.scenario.scenario import load_scenario
from mbde_core.sensors.config import load_sensors
from mbde_core.simulator import run as simulate
from mbde_core.types import Measurement

HELP = "paper 004 ADE-KF: slider-crank torque from one accelerometer, exact vs learned map, MSC Adams torque check"

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, os.pardir))  # the checkout (../shared beside it)
PAPER_R_A = (1.5e-4, 5e-3)
# The MSC four-bar's torque is ~20 times the slider-crank's and its data are noise-free
# and sampled every 5 ms: these options replace the config's for that run (r_a in (N m)^2
# per 5 ms step; the filter assumes 0.01 m/s^2 of sensor noise).
MSC_OVERRIDES = {"step": 0.005, "r_a": 1.0, "sensor_sigma": {"accel_coupler": 0.01}, "jump_nis": 25.0,
                 "jump_sigma": 20.0, "plant_noise": {"acceleration_psd": 0.0, "velocity_psd": 0.0}}


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--config", default=config_path("estimators", "adekf.yaml"),
                   help="estimator config with an `adekf` section (default: config/estimators/adekf.yaml)")
    p.add_argument("--scenario", default=config_path("scenarios", "adekf_slider_crank.yaml"), help="slider-crank scenario")
    p.add_argument("--initial-angle", type=float, default=math.pi / 2, help="initial crank angle [rad] (default pi/2)")
    p.add_argument("--msc-dir", default=os.path.normpath(os.path.join(_REPO, os.pardir, "shared", "reference", "msc-adams-fourbar")),
                   help="MSC Adams four-bar reference directory (skipped if missing)")
    p.add_argument("--quick", action="store_true", help="short runs (3 s slider-crank, 3 s MSC) for a smoke test")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--force", action="store_true", help="write into an existing output directory")


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def run_adekf(mech, sensors, cfg, measurements, init, cmap=None):
    """Run the ADE-KF through an EstimatorStage; returns a dict of arrays and the estimator.

    t (K,), z, zd, zdd (K, g), q, qd, qdd (K, n), a (K, n_a), a_sd (K, n_a), cost (K,) [s].
    ``cmap``: an already built coordinate map (shared between runs).
    """
    est = ADEKF(mech, sensors, configure("adekf", cfg, mech, sensors), coordinate_map=cmap)
    stage = EstimatorStage.for_estimator(est, lambda t: init)
    t0 = time.perf_counter()
    stage.feed(measurements)
    stage.flush()
    wall = time.perf_counter() - t0
    recs = stage.records
    e = [r.estimate for r in recs]
    out = {
        "t": np.array([s.stamp for s in e]), "z": np.array([s.z for s in e]), "zd": np.array([s.zd for s in e]),
        "zdd": np.array([s.zdd for s in e]), "q": np.array([s.q for s in e]), "qd": np.array([s.qd for s in e]),
        "qdd": np.array([s.qdd for s in e]), "a": np.array([s.inputs for s in e]),
        "a_sd": np.sqrt(np.array([np.diag(s.input_cov) for s in e])), "cost": np.array([r.cost for r in recs]),
        "wall": wall, "diagnostics": est.diagnostics(),
    }
    return out, est


def _rmse(x):
    x = np.asarray(x, float)
    return float(np.sqrt(np.mean(x**2))) if x.size else float("nan")


def slider_metrics(run, truth, coord, slider_col):
    """Errors of one slider-crank run against the ground truth (aligned on the filter grid)."""
    t = run["t"]
    idx = np.clip(np.searchsorted(truth["t"], t - 1e-9), 0, len(truth["t"]) - 1)
    ez = _wrap(run["z"][:, 0] - truth["q"][idx, coord])
    ezd = run["zd"][:, 0] - truth["qd"][idx, coord]
    eacc = run["qdd"][:, slider_col] - truth["qdd"][idx, slider_col]
    tau = truth["effort"][idx, coord]
    ea = run["a"][:, 0] - tau
    late = t >= t[0] + 1.0
    rng = float(np.ptp(tau[late])) if late.any() else float(np.ptp(tau))
    return {
        "angle_rmse": _rmse(ez), "angle_max": float(np.max(np.abs(ez))), "angle_rmse_after_1s": _rmse(ez[late]),
        "speed_rmse": _rmse(ezd), "speed_rmse_after_1s": _rmse(ezd[late]),
        "accel_rmse": _rmse(eacc), "torque_rmse": _rmse(ea), "torque_rmse_after_1s": _rmse(ea[late]),
        "torque_range_after_1s": rng, "torque_pct_after_1s": 100.0 * _rmse(ea[late]) / rng,
        "torque_max_err_after_1s": float(np.max(np.abs(ea[late]))) if late.any() else float("nan"),
        "us_per_step": float(np.mean(run["cost"]) * 1e6), "steps": int(len(t)),
        "input_jumps": int(run["diagnostics"].get("input_jumps", 0)),
    }


def map_cost(cmap, z, repeats=300) -> float:
    """us per single evaluation of a coordinate map (order 3), best of 3 rounds."""
    q = None
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeats):
            jet = cmap.evaluate(z, order=3, q_guess=q)
        q = jet.q[0]
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best * 1e6


# ------------------------------------------------------------------------------------------
# the experiments
# ------------------------------------------------------------------------------------------
def slider_crank(args, base_cfg, out, log):
    duration = 3.0 if args.quick else None
    sc = load_scenario(args.scenario).with_overrides(duration=duration,
                                                     settings=[f"initial_state.position.theta={args.initial_angle!r}"])
    t0 = time.perf_counter()
    res = simulate(sc)
    log(f"simulated {sc.name}: {sc.duration:g} s at {1 / sc.step:g} Hz in {time.perf_counter() - t0:.1f} s")
    mech = sc.estimator_mechanism()
    sensors = sc.estimator_sensors()
    coord = int(mech.independent[0])
    slider_col = int(mech.px[mech.point_index(mech.spec.sliders[0].point)])
    truth = {"t": res.t, "q": res.q, "qd": res.qd, "qdd": res.qdd, "effort": res.effort}

    names = sensors.names
    ms = []
    for n in names:
        ts, vs = res.measurements[n]
        ms += [Measurement(float(t), n, v) for t, v in zip(ts, vs)]
    ms.sort(key=lambda m: m.stamp)
    ini = sc.estimator_initial_state()
    sig = base_cfg["initial_sigma"]
    init = InitialState(ini.z, ini.zd, np.full(mech.dof, float(sig["z"])), np.full(mech.dof, float(sig["zd"])), ini.q, ini.branch)

    # -- learned map ---------------------------------------------------------------------
    t0 = time.perf_counter()
    learned, rep = train_map(mech, dict(base_cfg["learn"]))
    train_s = time.perf_counter() - t0
    learned.save(os.path.join(out, "slider_crank.map.npz"))
    exact = make_map(mech, "exact")
    zt = np.array([1.0])
    costs = {"exact": map_cost(exact, zt), "learned": map_cost(learned, zt)}
    acc = rep["accuracy"]
    log(f"learned map: {rep['samples']} samples, {rep['iterations']} L-BFGS iterations, {train_s:.1f} s")

    # -- runs ----------------------------------------------------------------------------
    tuned = float(base_cfg["r_a"])
    cases = [(f"paper r_a={r:g}", r) for r in PAPER_R_A] + [(f"tuned r_a={tuned:g}", tuned)]
    runs, metrics = {}, {}
    for label, r_a in cases:
        for source, cmap in (("exact", exact), ("learned", learned)):
            cfg = copy.deepcopy(base_cfg)
            cfg["r_a"] = r_a
            cfg["map"] = source
            key = f"{label}, {source} map"
            run, _ = run_adekf(mech, sensors, cfg, ms, init, cmap=cmap)
            runs[key] = run
            metrics[key] = slider_metrics(run, truth, coord, slider_col)
            m = metrics[key]
            log(f"  {key:<30} torque RMSE>1s {m['torque_rmse_after_1s']:.3f} N m ({m['torque_pct_after_1s']:.1f} %), "
                f"angle max {m['angle_max']:.3g} rad, {m['us_per_step']:.0f} us/step")
    return {"scenario": sc, "truth": truth, "runs": runs, "metrics": metrics, "map_report": rep, "map_costs": costs,
            "train_seconds": train_s, "tolerances": TOLERANCES, "accuracy": acc, "coord": coord, "slider_col": slider_col,
            "cases": cases, "mech": mech}


def msc_check(args, base_cfg, out, log):
    mech_file = os.path.join(args.msc_dir, "fourbars1-with-rel-angle.yaml")
    tab = os.path.join(args.msc_dir, "InverseDynamics_4bars_MSC.tab")
    traj = os.path.join(args.msc_dir, "fourbars1-with-rel-angle-trajectory.txt")
    if not all(os.path.exists(p) for p in (mech_file, tab, traj)):
        log(f"MSC check skipped: {args.msc_dir} not found")
        return None
    mech = load_mechanism(mech_file)
    msc = np.loadtxt(tab, comments="%")
    tr = np.loadtxt(traj, comments="%")
    if args.quick:
        msc, tr = msc[:600], tr[:600]
    t = tr[:, 0]
    th, thd, thdd = 1.2 * (1 - np.cos(2 * t)), 2.4 * np.sin(2 * t), 4.8 * np.cos(2 * t)
    if not np.allclose(th, tr[:, 1], atol=1e-6):
        log("MSC check: the trajectory file does not follow theta = 1.2 (1 - cos 2t); using the file's samples")
        th = tr[:, 1]
    # engine: the motion from the prescribed trajectory (position, velocity, acceleration problems)
    q = mech.q0.copy()
    Q, QD, QDD = [], [], []
    for k in range(len(t)):
        q, qd, qdd, ok = kinematics.full_state(mech, q, th[k : k + 1], thd[k : k + 1], thdd[k : k + 1])
        Q.append(q), QD.append(qd), QDD.append(qdd)
    Q, QD, QDD = np.array(Q), np.array(QD), np.array(QDD)
    sensors = load_sensors(parse_yaml(
        "- {name: accel_coupler, type: accelerometer, body: 1, offset: [1.0, 0.0], axes: [0, pi/2], rate: 200,"
        " noise: {sigma: 0}}"), mech)
    acc = sensors["accel_coupler"]
    vals = acc.h(Q, QD, QDD)
    ms = [Measurement(float(tk), "accel_coupler", v) for tk, v in zip(t, vals)]
    id_tau, _ = driver_forces(mech, t, tr[:, 1], [int(mech.independent[0])])
    ref = -msc[:, 1]  # MSC sign convention: minus the torque the motor applies
    cfg = copy.deepcopy(base_cfg)
    cfg.update(copy.deepcopy(MSC_OVERRIDES))
    init = InitialState(np.array([th[0]]), np.array([thd[0]]), np.full(1, float(cfg["initial_sigma"]["z"])),
                        np.full(1, float(cfg["initial_sigma"]["zd"])), Q[0], 0)
    rows, runs = {}, {}
    for source in ("exact", "learned"):
        c = copy.deepcopy(cfg)
        c["map"] = source
        cmap = make_map(mech, "exact") if source == "exact" else None
        if source == "learned":
            cmap, _ = train_map(mech, dict(cfg["learn"]))
            cmap.save(os.path.join(out, "fourbar_msc.map.npz"))
        run, _ = run_adekf(mech, sensors, c, ms, init, cmap=cmap)
        idx = np.clip(np.searchsorted(run["t"], t - 1e-9), 0, len(run["t"]) - 1)
        est = run["a"][idx, 0]
        err = est - ref
        late = t >= 1.0
        rows[source] = {"rmse": _rmse(err), "rmse_after_1s": _rmse(err[late]), "max_after_1s": float(np.max(np.abs(err[late]))),
                        "rel_rmse_after_1s_pct": 100 * _rmse(err[late]) / float(np.ptp(ref)),
                        "angle_rmse": _rmse(_wrap(run["z"][idx, 0] - th)), "us_per_step": float(np.mean(run["cost"]) * 1e6)}
        runs[source] = (run, est)
        log(f"  MSC four-bar ADE-KF ({source}): torque RMSE {rows[source]['rmse']:.3f} N m, after 1 s "
            f"{rows[source]['rmse_after_1s']:.3f} N m ({rows[source]['rel_rmse_after_1s_pct']:.2f} % of range)")
    e_id = id_tau[:, 0] - ref
    rows["inverse dynamics"] = {"rmse": _rmse(e_id), "rmse_after_1s": _rmse(e_id[t >= 1.0]),
                                "max_after_1s": float(np.max(np.abs(e_id[t >= 1.0]))),
                                "rel_rmse_after_1s_pct": 100 * _rmse(e_id[t >= 1.0]) / float(np.ptp(ref))}
    return {"t": t, "ref": ref, "id": id_tau[:, 0], "rows": rows, "runs": runs, "range": float(np.ptp(ref)), "cfg": cfg}


# ------------------------------------------------------------------------------------------
# tables and figures
# ------------------------------------------------------------------------------------------
def tables(sl, msc) -> str:
    lines = []
    acc = sl["accuracy"]
    rep = sl["map_report"]
    lines.append("### Learned map vs exact map (slider-crank, held-out configurations)\n")
    lines.append(f"tanh MLP {'-'.join(map(str, rep['sizes']))} ({rep['parameters']} parameters), "
                 f"{rep['samples']} training configurations, {acc['held_out']} held-out, "
                 f"trained in {sl['train_seconds']:.1f} s ({rep['iterations']} L-BFGS iterations).\n")
    lines.append("| order | quantity | rel. max error | rel. RMS error | tolerance |")
    lines.append("|---|---|---|---|---|")
    labels = ["q = g_n(z)", "dq/dz", "d2q/dz2", "d3q/dz3"]
    for k in range(4):
        lines.append(f"| {k} | {labels[k]} | {acc['rel_max'][k]:.2e} | {acc['rel_rms'][k]:.2e} | {sl['tolerances'][k]:.0e} |")
    lines.append("")
    lines.append(f"Cost of one map evaluation with derivatives up to order 3: exact {sl['map_costs']['exact']:.0f} us, "
                 f"learned {sl['map_costs']['learned']:.0f} us.\n")
    lines.append("### Slider-crank, paper 004 sec. 5 (only the slider accelerometer fused)\n")
    lines.append("| r_a, map | angle RMSE [rad] | angle max [rad] | speed RMSE [rad/s] | slider acc. RMSE [m/s^2] "
                 "| torque RMSE >1 s [N m] | % of range | torque max err >1 s [N m] | jumps | us/step |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for key, m in sl["metrics"].items():
        lines.append(f"| {key} | {m['angle_rmse']:.4f} | {m['angle_max']:.4f} | {m['speed_rmse']:.3f} | {m['accel_rmse']:.3f} | "
                     f"{m['torque_rmse_after_1s']:.3f} | {m['torque_pct_after_1s']:.1f} | {m['torque_max_err_after_1s']:.2f} | "
                     f"{m['input_jumps']} | {m['us_per_step']:.0f} |")
    any_m = next(iter(sl["metrics"].values()))
    lines.append(f"\nTorque range after the first second: {any_m['torque_range_after_1s']:.3f} N m "
                 "(truth: the PI controller's torque; the estimate also absorbs the unmodelled slider friction).\n")
    if msc is not None:
        lines.append("### MSC Adams four-bar: estimated crank torque vs the MSC column\n")
        lines.append(f"Noise-free two-axis coupler accelerometer every 5 ms, torque range {msc['range']:.2f} N m "
                     f"(MSC column negated), r_a = {msc['cfg']['r_a']:g} (N m)^2 per step.\n")
        lines.append("| source | torque RMSE [N m] | RMSE after 1 s [N m] | max error after 1 s [N m] | RMSE after 1 s [% of range] |")
        lines.append("|---|---|---|---|---|")
        for k, r in msc["rows"].items():
            name = f"ADE-KF, {k} map" if k in ("exact", "learned") else "engine inverse dynamics"
            lines.append(f"| {name} | {r['rmse']:.4f} | {r['rmse_after_1s']:.4f} | {r['max_after_1s']:.4f} | {r['rel_rmse_after_1s_pct']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def run(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    base = load(args.config, ["adekf"])["adekf"].as_dict()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    sl = slider_crank(args, base, args.out, log)
    msc = msc_check(args, base, args.out, log)
    text = tables(sl, msc)
    figs = [] if args.no_plots else figures(sl, msc, args.out)
    elapsed = time.perf_counter() - t_start
    text += f"\nTotal bench time: {elapsed:.0f} s.\n"
    with open(os.path.join(args.out, "tables.md"), "w", encoding="utf-8") as fh:
        fh.write("# mbde bench adekf\n\n" + text)
    doc = {"slider_crank": {"metrics": sl["metrics"], "map_accuracy": sl["accuracy"], "map_costs_us": sl["map_costs"],
                            "train_seconds": sl["train_seconds"], "initial_angle": args.initial_angle},
           "msc": None if msc is None else {"rows": msc["rows"], "range": msc["range"]},
           "seconds": elapsed, "figures": [os.path.basename(p) for p in figs]}
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    print(text)
    print("results: tables.md, results.json" + (f", {len(figs)} figures" if figs else ""))
    return 0
