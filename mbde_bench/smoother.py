"""The batch smoother's cost and its windowed mode (``mbde bench smoother``).

Tables (paper 003 gyroscope scenarios: a reading every 5 ms step, gravity error 1 m/s^2):

1. speed of the whole-run smoother for runs of --lengths seconds: unknowns, residuals,
   Levenberg-Marquardt iterations, wall time split into the forward filter's initial
   guess, the solve and the marginal covariances, us per grid step (linear growth in
   the run's length shows as a constant), the CPU time of the smoothing process (the
   wall time on an idle core; the machine may be shared) and the peak resident memory
   of a fresh process doing only that run;
2. solver comparison on the same problem: the in-house banded Levenberg-Marquardt vs
   scipy.optimize.least_squares(method='trf', sparse Jacobian, LSMR), from the same
   initial guess (final cost, iterations, wall time);
3. windowed vs whole-run smoothing (--window, --overlap): the seam error
   |windowed - whole| / sigma_whole (max and RMS over all steps, z and zd), wall time
   and peak memory;
4. with --long SECONDS (e.g. 3600): one long run smoothed in windows, its readings made
   on the fly (a four-bar simulated by RK4 at the grid step): wall time, us per step,
   peak memory (bounded by the window, not by the run), RMSE against the simulation;
5. consistency (--nees-runs runs of --nees-length s per case): the mean NEES of [z, zd]
   on runs drawn from the smoother's own stochastic model (:func:`model_runs`: perfect
   model including its acceleration noise), sampled every 0.3 s, and its chi-square band;
6. with --cli-memory 60,180,600: peak memory of the command ``mbde smooth BAG --window``
   (streamed end to end) against the bag's length, beside the same smoother on the bag
   read whole into memory, and the difference of their results
   (:mod:`mbde_bench.smoother_cli`);
7. calibration (--calibration-runs N, default 20): mean NEES / dim and the coverage of the
   95 % intervals over N runs of every shipped scenario and of the linkages of
   config/bench/calibration, as shipped and with a 5 % mass error
   (:mod:`mbde_bench.smoother_calibration`);
8. the speed-step slider-crank of issue 42 (--motor-seeds N, default 5): the smoother
   against every default filter, torque unknown and measured (:mod:`mbde_bench.smoother_motor`).

``--tables`` picks the tables (default all: 1,2,3,5,7,8; 4 and 6 by their own options).
Tables 7 and 8 are the page of ``--results DIR`` (docs/results/smoother.md).

The truths of tables 1-3 are simulated once per case with RK4 at 1 ms. Targets
(reported, not asserted): 10 s four-bar <= 2 s wall, five-bar <= 4 s; time linear in
length. Writes smoother_bench.json into --out.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from mbde_bench.common import TruthRecord, in_fresh_process, peak_mb
from mbde_bench.smoother_calibration import tables_7_8
from mbde_bench.smoother_cli import add_arguments as cli_arguments, cli_memory
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators.assess.metrics import chi2_band, coordinate_errors, nees
from mbde_core.estimators.base import InitialState
from mbde_core.scenario import load_scenario
from mbde_core.trajectory.config import smoother_defaults
from mbde_core.trajectory.factors import SCHEMES
from mbde_core.trajectory.smoother import BatchSmoother
from mbde_core.trajectory.windowed import iter_windows, smooth_windowed
from mbde_core.types import Measurement

HELP = "batch smoother: wall time vs run length (10/60/300 s), LM vs scipy trf, windowed seams, 1 h run, mbde smooth memory"
CASES = ("fourbar_gyro", "fivebar_gyro")


def add_arguments(p):
    p.add_argument("--out", help="directory for smoother_bench.json (optional)")
    p.add_argument("--cases", default=",".join(CASES), help="scenarios (default %(default)s)")
    p.add_argument("--lengths", default="10,60,300", help="run lengths [s] of the speed table (default %(default)s)")
    p.add_argument("--trf-lengths", default="10", help="run lengths [s] of the LM vs trf table ('' = skip; default %(default)s)")
    p.add_argument("--window", type=float, default=10.0, help="window [s] of the seam table (default %(default)s)")
    p.add_argument("--overlap", type=float, default=2.0, help="overlap [s] of the seam table (default %(default)s)")
    p.add_argument("--seam-length", type=float, default=60.0, help="run length [s] of the seam table (0 = skip)")
    p.add_argument("--long", type=float, default=0.0, help="also smooth one run of this many seconds in windows (e.g. 3600)")
    p.add_argument("--nees-runs", type=int, default=10, help="runs per case of the consistency table (0 = skip)")
    p.add_argument("--nees-length", type=float, default=5.0, help="run length [s] of the consistency table")
    p.add_argument("--gravity-error", type=float, default=1.0, help="model error of the smoother [m/s^2] (default %(default)s)")
    p.add_argument("--tables", default="1,2,3,5,7,8", help="tables to run (default %(default)s)")
    p.add_argument("--calibration-runs", type=int, default=20, help="runs per case of table 7 (default %(default)s)")
    p.add_argument("--calibration-length", type=float, default=5.0, help="run length [s] of table 7 (default %(default)s)")
    p.add_argument("--calibration-cases", help="cases of table 7 (default: all)")
    p.add_argument("--motor-seeds", type=int, default=5, help="seeds of table 8 (default %(default)s)")

    cli_arguments(p)
    runs.add_arguments(p, "runs of tables 7 and 8")


def smooth_run(mech, sensors, meas, start, cfg):
    """(stamps, z, zd, cov, wall time per step [s]) of the smoother on one run (bench accuracy)."""
    cfg = dict(cfg)
    guess = cfg.pop("guess_config", None)
    res = BatchSmoother(mech, sensors, cfg, guess).smooth(meas, start)
    return res.t, res.z, res.zd, res.cov, res.info["wall_time_s"] / max(len(res), 1)


def model_runs(smoother, init, runs: int, steps: int, rng):
    """Runs drawn from the smoother's own stochastic model (a perfect model in the strict
    sense): [z_0, zd_0] ~ N(init, init sigmas), zdd_i = f(z_i, zd_i) + w_i with w_i ~
    N(0, sigma_a^2) (paper 000 eq. 11), the integrator scheme exact between steps (implicit
    in zdd_{i+1}: fixed-point iterations), every sensor read at every step with its noise.
    The runs are a batch axis. Returns (Z, ZD (runs, steps, g), measurements per run)."""
    mech, g, dt = smoother.mech, smoother.g, smoother.dt
    beta, gamma = SCHEMES[smoother.config["integrator"]]
    sz, szd = np.broadcast_to(init.sigma_z, (g,)), np.broadcast_to(init.sigma_zd, (g,))
    z = init.z + rng.standard_normal((runs, g)) * sz
    zd = init.zd + rng.standard_normal((runs, g)) * szd
    w = rng.standard_normal((steps, runs, g)) * smoother.sigma_a()
    q = np.tile(np.asarray(mech.q0 if init.q_hint is None else init.q_hint, float), (runs, 1))

    def model(z, zd, q):
        q, ok = kinematics.solve_position(mech, z, q)
        if not ok.all():
            raise RuntimeError("model run left the assembly")
        qd = kinematics.velocity(mech, q, zd)
        return dynamics.evaluate(mech, 0.0, q, qd).zdd, q, qd

    Z, ZD = np.empty((steps, runs, g)), np.empty((steps, runs, g))
    Q, QD = np.empty((steps, runs, mech.n)), np.empty((steps, runs, mech.n))
    f, q, qd = model(z, zd, q)
    a = f + w[0]
    Z[0], ZD[0], Q[0], QD[0] = z, zd, q, qd
    for i in range(1, steps):
        an = a
        for _ in range(4):  # the acceleration enters the step linearly: 4 iterations reach 1e-12
            zn = z + dt * zd + dt * dt * ((0.5 - beta) * a + beta * an)
            zdn = zd + dt * ((1.0 - gamma) * a + gamma * an)
            f, qn, qdn = model(zn, zdn, q)
            an = f + w[i]
        z, zd, a, q = zn, zdn, an, qn
        Z[i], ZD[i], Q[i], QD[i] = z, zd, qn, qdn
    meas = [[] for _ in range(runs)]
    for s in smoother.sensors.sensors:
        h = s.h(Q.reshape(-1, mech.n), QD.reshape(-1, mech.n)).reshape(steps, runs, -1)
        h = h + rng.standard_normal(h.shape) * s.noise.sigma
        for r in range(runs):
            meas[r] += [Measurement(i * dt, s.name, h[i, r]) for i in range(steps)]
    for m in meas:
        m.sort(key=lambda x: x.stamp)
    return Z.transpose(1, 0, 2), ZD.transpose(1, 0, 2), meas


def model_nees(case, runs: int, length: float, every: int = 60, seed: int = 0):
    """Consistency of the smoother on runs of its own model (:func:`model_runs`): NEES of
    [z, zd] at every ``every``-th step (nearly independent samples) of ``runs`` runs, its
    mean, the chi-square band of that mean, and the mean over all steps."""
    sc = load_scenario(config_path("scenarios", f"{case}.yaml")).with_overrides(gravity_error=0.0)
    mech, sensors, init = sc.estimator_mechanism(), sc.estimator_sensors(), sc.estimator_initial_state()
    g = mech.dof
    start = InitialState(init.z, init.zd, np.full(g, 0.05), np.full(g, 0.5), init.q, init.branch)
    sm = BatchSmoother(mech, sensors)
    steps = int(round(length / sm.dt)) + 1
    Z, ZD, meas = model_runs(sm, start, runs, steps, np.random.default_rng(seed))
    angular = np.isin(mech.independent, mech.rel_columns)
    sampled, whole = [], []
    for r in range(runs):
        res = sm.smooth(meas[r], start)
        ne = nees(np.hstack([coordinate_errors(res.z, Z[r], angular), res.zd - ZD[r]]), res.cov)
        sampled.append(ne[::every])
        whole.append(ne)
    sampled = np.concatenate(sampled)
    lo, hi = chi2_band(2 * g, sampled.size)
    return {"case": case, "runs": runs, "length_s": length, "dof": 2 * g, "samples": int(sampled.size),
            "mean_nees": float(sampled.mean()), "band": (lo, hi), "mean_nees_all_steps": float(np.mean(np.concatenate(whole)))}


def _setup(case, length, gerr):
    sc = load_scenario(config_path("scenarios", f"{case}.yaml"))
    sc = sc.with_overrides(settings=["integrator=rk4", "ground_truth_rate=200"])
    truth = TruthRecord(sc, length)
    est = truth.scenario.with_overrides(gravity_error=gerr)
    mech, sensors, init = est.estimator_mechanism(), est.estimator_sensors(), est.estimator_initial_state()
    start = InitialState(init.z, init.zd, np.full(mech.dof, 0.05), np.full(mech.dof, 0.5), init.q, init.branch)
    meas = truth.measurements(truth.scenario.sensors, 0.005, seed=1)
    return truth, mech, sensors, start, meas


def _speed_task(args):
    """One (case, length) in a fresh process: timings and peak memory of the smoothing."""
    case, length, gerr, solver = args

    truth, mech, sensors, start, meas = _setup(case, length, gerr)
    base = peak_mb()
    cfg = dict(smoother_defaults(), solver=solver)
    if solver == "trf":
        cfg["max_iterations"] = 200
    cpu0 = time.process_time()
    res = BatchSmoother(mech, sensors, cfg).smooth(meas, start)
    cpu = time.process_time() - cpu0
    i = res.info
    tz, _, _ = truth.at(res.t)
    err = res.z - tz
    return {"case": case, "length_s": length, "solver": solver, "steps": len(res), "unknowns": i["variables"],
            "residuals": i["residuals"], "iterations": i["iterations"], "status": i["status"],
            "initial_cost": i["initial_cost"], "final_cost": i["final_cost"], "guess_s": i["guess_time_s"],
            "solve_s": i["solve_time_s"], "covariance_s": i["covariance_time_s"], "wall_s": i["wall_time_s"],
            "us_per_step": 1e6 * i["wall_time_s"] / len(res), "cpu_s": cpu, "rmse_z": float(np.sqrt(np.mean(err**2))),
            "peak_mb": peak_mb(), "setup_peak_mb": base}


def _seam_task(args):
    case, length, gerr, window, overlap = args

    truth, mech, sensors, start, meas = _setup(case, length, gerr)
    sm = BatchSmoother(mech, sensors)
    full = sm.smooth(meas, start)
    win = smooth_windowed(sm, meas, start, window, overlap)
    sig = np.sqrt(np.einsum("kii->ki", full.cov))
    g = mech.dof
    d = np.hstack([win.z - full.z, win.zd - full.zd]) / sig
    return {"case": case, "length_s": length, "window_s": window, "overlap_s": overlap, "windows": win.info["windows"],
            "max_seam_z": float(np.abs(d[:, :g]).max()), "max_seam_zd": float(np.abs(d[:, g:]).max()),
            "rms_seam_z": float(np.sqrt(np.mean(d[:, :g] ** 2))), "rms_seam_zd": float(np.sqrt(np.mean(d[:, g:] ** 2))),
            "wall_full_s": full.info["wall_time_s"], "wall_windowed_s": win.info["wall_time_s"]}


def _long_task(args):
    """A long four-bar run, readings made on the fly, smoothed window by window."""
    length, gerr, window, overlap = args

    sc = load_scenario(config_path("scenarios", "fourbar_gyro.yaml"))
    true_mech = sc.truth_mechanism()
    est = sc.with_overrides(gravity_error=gerr)
    mech, sensors, init = est.estimator_mechanism(), est.estimator_sensors(), est.estimator_initial_state()
    gyro = sensors.sensors[0]
    dt = 0.005
    N = int(round(length / dt)) + 1
    t_sim = time.perf_counter()
    integ = get_integrator("rk4")
    s = MBState(sc.initial_state.q.copy(), sc.initial_state.qd.copy())
    z = np.empty((N, mech.dof))
    h = np.empty(N)
    for k in range(N):
        z[k] = s.q[true_mech.independent]
        h[k] = gyro.h(s.q, s.qd)[0]
        s = integ.step(true_mech, k * dt, s, dt)
    t_sim = time.perf_counter() - t_sim
    noise = np.random.default_rng(1).normal(0.0, gyro.noise.sigma[0], N)
    meas = (Measurement(k * dt, gyro.name, np.array([h[k] + noise[k]])) for k in range(N))
    start = InitialState(init.z, init.zd, np.full(mech.dof, 0.05), np.full(mech.dof, 0.5), init.q, init.branch)
    sm = BatchSmoother(mech, sensors)
    base = peak_mb()
    t0, cpu0 = time.perf_counter(), time.process_time()

    angular = np.isin(mech.independent, mech.rel_columns)
    sq, n, iters, worst, worst_rmse = 0.0, 0, 0, 0, 0.0
    for part in iter_windows(sm, meas, start, window, overlap):
        a, b = part.info["kept"]
        e = coordinate_errors(part.z, z[a:b], angular)
        sq += float(np.sum(e * e))
        n += e.size
        iters += part.info["iterations"]
        worst = max(worst, part.info["iterations"])
        worst_rmse = max(worst_rmse, float(np.sqrt(np.mean(e * e))))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"length_s": length, "cpu_s": cpu, "steps": N, "window_s": window, "overlap_s": overlap, "simulate_s": t_sim, "wall_s": wall,
            "us_per_step": 1e6 * wall / N, "iterations": iters, "max_window_iterations": worst,
            "rmse_z": float(np.sqrt(sq / n)), "worst_window_rmse_z": worst_rmse, "windows_retried": part.info["retried"],
            "windows_replaced": part.info["replaced"], "peak_mb": peak_mb(), "before_smoothing_mb": base}


def run(args) -> int:
    tables = {t.strip() for t in args.tables.split(",") if t.strip()}
    if not tables & {"1", "2", "3", "5"}:
        args.lengths, args.trf_lengths, args.seam_length, args.nees_runs = "", "", 0.0, 0
    else:
        args.lengths = args.lengths if "1" in tables else ""
        args.trf_lengths = args.trf_lengths if "2" in tables else ""
        args.seam_length = args.seam_length if "3" in tables else 0.0
        args.nees_runs = args.nees_runs if "5" in tables else 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    lengths = [float(v) for v in args.lengths.split(",") if v.strip()]
    trf_lengths = [float(v) for v in args.trf_lengths.split(",") if v.strip()]
    out = {"load_average": os.getloadavg(), "speed": [], "solvers": [], "seams": [], "long": None}
    print(f"load average at start: {out['load_average'][0]:.2f} (2 cores shared; timings are noisy under load)")
    if lengths:
        print("\n1. whole-run smoother: wall time vs run length (fresh process per row)")
    hdr = (f"{'case':<14}{'length s':>9}{'steps':>8}{'unknowns':>10}{'iter':>6}{'guess s':>9}{'solve s':>9}{'cov s':>7}"
           f"{'wall s':>8}{'CPU s':>8}{'us/step':>9}{'peak MB':>9}{'RMSE z':>9}")
    if lengths:
        print(hdr)
    for case in cases:
        for length in lengths:
            r = in_fresh_process(_speed_task, (case, length, args.gravity_error, "lm"))
            out["speed"].append(r)
            print(f"{case:<14}{length:>9g}{r['steps']:>8}{r['unknowns']:>10}{r['iterations']:>6}{r['guess_s']:>9.2f}"
                  f"{r['solve_s']:>9.2f}{r['covariance_s']:>7.2f}{r['wall_s']:>8.2f}{r['cpu_s']:>8.2f}{r['us_per_step']:>9.0f}"
                  f"{r['peak_mb']:>9.0f}{r['rmse_z']:>9.4f}")
    if trf_lengths:
        print("\n2. solver: banded Levenberg-Marquardt (lm) vs scipy least_squares trf + LSMR, same problem and guess")
        print(f"{'case':<14}{'length s':>9}{'solver':>7}{'status':>22}{'iter':>6}{'final cost':>13}{'solve s':>9}{'RMSE z':>9}")
        for case in cases:
            for length in trf_lengths:
                for solver in ("lm", "trf"):
                    r = in_fresh_process(_speed_task, (case, length, args.gravity_error, solver))
                    out["solvers"].append(r)
                    print(f"{case:<14}{length:>9g}{solver:>7}{str(r['status'])[:21]:>22}{r['iterations']:>6}"
                          f"{r['final_cost']:>13.6g}{r['solve_s']:>9.2f}{r['rmse_z']:>9.4f}")
    if args.seam_length > 0:
        print(f"\n3. windows of {args.window:g} s with {args.overlap:g} s margins vs the whole run "
              f"({args.seam_length:g} s): seam error in whole-run sigmas")
        print(f"{'case':<14}{'windows':>8}{'max z':>9}{'max zd':>9}{'rms z':>9}{'rms zd':>9}{'whole s':>9}{'windowed s':>11}")
        for case in cases:
            r = in_fresh_process(_seam_task, (case, args.seam_length, args.gravity_error, args.window, args.overlap))
            out["seams"].append(r)
            print(f"{case:<14}{r['windows']:>8}{r['max_seam_z']:>9.3g}{r['max_seam_zd']:>9.3g}{r['rms_seam_z']:>9.3g}"
                  f"{r['rms_seam_zd']:>9.3g}{r['wall_full_s']:>9.2f}{r['wall_windowed_s']:>11.2f}")
    if args.long > 0:
        print(f"\n4. a {args.long:g} s four-bar run in windows of {args.window:g} s (readings made on the fly)")
        r = in_fresh_process(_long_task, (args.long, args.gravity_error, args.window, args.overlap))
        out["long"] = r
        print(f"steps {r['steps']}, simulated in {r['simulate_s']:.0f} s; smoothed in {r['wall_s']:.1f} s wall, "
              f"{r['cpu_s']:.1f} s CPU ({r['us_per_step']:.0f} us/step, {r['iterations']} iterations, at most {r['max_window_iterations']} "
              f"per window); peak memory {r['peak_mb']:.0f} MB (before smoothing {r['before_smoothing_mb']:.0f} MB); "
              f"RMSE z {r['rmse_z']:.4f} rad (worst window {r['worst_window_rmse_z']:.4f}); windows retried over a "
              f"growing horizon {r['windows_retried']}, solution replaced {r['windows_replaced']}")
    if args.nees_runs > 0:
        print(f"\n5. consistency: mean NEES of [z, zd] on {args.nees_runs} runs x {args.nees_length:g} s drawn from the "
              "smoother's own model (perfect model with its acceleration noise), every 0.3 s")
        print(f"{'case':<14}{'dof':>5}{'samples':>9}{'mean NEES':>11}{'95 % band':>16}{'all steps':>11}")
        out["consistency"] = []
        for case in cases:
            r = model_nees(case, args.nees_runs, args.nees_length)
            out["consistency"].append(r)
            print(f"{case:<14}{r['dof']:>5}{r['samples']:>9}{r['mean_nees']:>11.2f}{r['band'][0]:>8.2f}-{r['band'][1]:<7.2f}"
                  f"{r['mean_nees_all_steps']:>11.2f}")
    cli_lengths = [float(v) for v in args.cli_memory.split(",") if v.strip()]
    if cli_lengths:
        print(f"\n6. `mbde smooth BAG --window {args.window:g}` (streamed) vs the bag read whole into memory: peak "
              "memory against the bag's length (fourbar_gyro, fresh process each)")
        out["cli_memory"] = cli_memory(cli_lengths, args.window, args.cli_bags)
    if tables & {"7", "8"}:
        tables_7_8(args, tables, out)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "smoother_bench.json"), "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2, default=float)
        print("\nresults: smoother_bench.json")
    return 0
