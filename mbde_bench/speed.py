"""Cost of one filter step of every observer, and our UKF against FilterPy's.

Each observer runs through its EstimatorStage on the paper-003 gyroscope scenarios
(fourbar_gyro, fivebar_gyro; a reading every 5 ms step) and the mean and median wall
time per step (predict + update) are reported in microseconds, after a warm-up.

The reference is FilterPy's ``UnscentedKalmanFilter`` (Labbe, filterpy 1.4.5) with the
same model plugged in: the same Merwe sigma points (alpha, beta, kappa), the same
forward-Euler multibody transition and the same sensor model, but called once per
sigma point through FilterPy's Python callbacks ``fx(x, dt)`` / ``hx(x)``, where ours
evaluates all sigma points as one numpy batch. Targets (reported, not asserted):
errorEKF <= 100 us/step and UKF <= 300 us/step on the four-bar; our UKF >= 3x faster
than FilterPy's.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from mbde_bench.common import TruthRecord, paper003_config
from mbde_core.config.paths import config_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.scenario import load_scenario

HELP = "us per filter step of each observer on fourbar/fivebar, and our UKF vs FilterPy's"
OBSERVERS = ("ukf", "errorekf", "dekf", "cekf", "diekfpm")
CASES = ("fourbar_gyro", "fivebar_gyro")


def add_arguments(p):
    p.add_argument("--out", help="directory for speed.json (optional)")
    p.add_argument("--duration", type=float, default=2.0, help="simulated seconds per measurement (default %(default)s)")
    p.add_argument("--estimators", default=",".join(OBSERVERS), help="observers (default %(default)s)")
    p.add_argument("--no-filterpy", action="store_true", help="skip the FilterPy comparison")


def _measure(name, sc, truth, meas, warmup):
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    cfg = paper003_config(name)
    init = sc.estimator_initial_state()
    start = InitialState(init.z, init.zd, np.full(mech.dof, 0.05), np.full(mech.dof, 0.5), init.q, init.branch)
    est = make_estimator(name, mech, sensors, cfg, rng=np.random.default_rng(0))
    stage = EstimatorStage(est, est.options.step, lambda t: start)
    stage.feed(meas)
    stage.flush()
    cost = np.array([r.cost for r in stage.records[warmup:]]) * 1e6
    return float(cost.mean()), float(np.median(cost))


def _filterpy_ukf(sc, meas, warmup):
    """Mean/median us per step of FilterPy's UKF with our multibody model as callbacks."""
    from filterpy.kalman import MerweScaledSigmaPoints, UnscentedKalmanFilter

    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    cfg = paper003_config("ukf")  # forward Euler, as fx below
    g = mech.dof
    L = 2 * g
    kappa = 3.0 - L if cfg["kappa"] is None or cfg["kappa"] < 0 else cfg["kappa"]
    pts = MerweScaledSigmaPoints(L, alpha=cfg["alpha"], beta=cfg["beta"], kappa=kappa)
    names = [s.name for s in sensors]
    dt = cfg["step"]
    state = {"q": sc.estimator_initial_state().q.copy()}

    def assemble(x):
        q, ok = kinematics.solve_position(mech, x[:g], state["q"])
        return q, kinematics.velocity(mech, q, x[g:])

    def fx(x, dt):
        q, qd = assemble(x)
        zdd = dynamics.forward(mech, 0.0, q, qd)[0]
        return np.concatenate([x[:g] + dt * x[g:], x[g:] + dt * zdd])

    def hx(x):
        q, qd = assemble(x)
        return np.concatenate([sensors[n].h(q, qd) for n in names])

    ukf = UnscentedKalmanFilter(dim_x=L, dim_z=sum(sensors[n].dim for n in names), dt=dt, hx=hx, fx=fx, points=pts)
    init = sc.estimator_initial_state()
    ukf.x = np.concatenate([init.z, init.zd])
    ukf.P = np.diag(np.concatenate([np.full(g, 0.05**2), np.full(g, 0.5**2)]))
    ukf.Q = kinematic_plant_noise(g, dt, cfg["plant_noise"]["acceleration_psd"])
    ukf.R = np.diag(np.concatenate([sensors[n].noise.variance() for n in names]))
    by_t = {}
    for m in meas:
        by_t.setdefault(round(m.stamp / dt), {})[m.sensor] = m.value
    costs = []
    for k in sorted(by_t)[1:]:
        t0 = time.perf_counter()
        ukf.predict()
        state["q"] = assemble(ukf.x)[0]
        z = np.concatenate([by_t[k][n] for n in names])
        ukf.update(z)
        state["q"] = assemble(ukf.x)[0]
        costs.append(time.perf_counter() - t0)
    c = np.array(costs[warmup:]) * 1e6
    return float(c.mean()), float(np.median(c))


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    warmup = 20
    results = {}
    for case in CASES:
        sc = load_scenario(config_path("scenarios", f"{case}.yaml"))
        truth = TruthRecord(sc, args.duration)
        meas = truth.measurements(sc.sensors, 0.005, seed=1)
        results[case] = {}
        for name in names:
            results[case][name] = _measure(name, truth.scenario, truth, meas, warmup)
        if not args.no_filterpy and "ukf" in names:
            results[case]["filterpy-ukf"] = _filterpy_ukf(truth.scenario, meas, warmup)
    rows = names + (["filterpy-ukf"] if not args.no_filterpy and "ukf" in names else [])
    print(f"\nus per filter step (predict + update, 5 ms step, a gyroscope reading every step; {args.duration:g} s of data)")
    print(f"{'observer':<14}" + "".join(f"{c + ' mean':>20}{'median':>10}" for c in CASES))
    for name in rows:
        print(f"{name:<14}" + "".join(f"{results[c][name][0]:>20.0f}{results[c][name][1]:>10.0f}" for c in CASES))
    if "filterpy-ukf" in rows:
        print("\nFilterPy UKF / our UKF (mean step time ratio): "
              + ", ".join(f"{c}: {results[c]['filterpy-ukf'][0] / results[c]['ukf'][0]:.1f}x" for c in CASES))
    print("targets (four-bar): errorekf <= 100 us, ukf <= 300 us, FilterPy/ours >= 3x")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "speed.json"), "w", encoding="utf-8") as fh:
            json.dump({c: {n: {"mean_us": v[0], "median_us": v[1]} for n, v in r.items()} for c, r in results.items()}, fh, indent=2)
    return 0
