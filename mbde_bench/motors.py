"""Motor-driven mechanisms (issue 42): the Kalman observers with the motor's torque
(a) measured -- an ``effort`` sensor, a known input held by the stage
(:mod:`mbde_core.estimators.stage.inputs`) -- and (b) unknown (the same bag without the
effort readings: input states ``inputs: auto`` from the scenario's torque limit), against
the same linkage released without a motor.

Scenarios (config/bench/motors): ``speedstep`` -- issue 42's slider-crank (crank 0.1 m, rod
0.35 m, track offset 0.04 m, gyroscope on the rod at 200 Hz, viscous slider friction in
the truth only, PI speed controller 15 -> 25 rad/s at 5 s, 2 N m limit) started at rest at
pi/2, where the rod gyroscope cannot tell theta from pi - theta (suitability's coordinate
mirror); ``moving`` -- the same started at 15 rad/s; ``released`` -- no motor, from
20 rad/s (1.5 s); ``adekf`` -- paper 004's slider-crank (slider accelerometer, 5 N m
servo 40/50/60 rad/s) with its torque read at 1 kHz. Each seed is simulated into a bag
(``mbde simulate``) and replayed by every estimator through replay's stage
(:func:`mbde_core.replay.runner.run_estimator`, default options). Per scenario, variant
and estimator: the median over the seeds of the RMSE of z, the runs lost (RMSE > 0.1
rad), the median mean NEES of [z, zd] over its dimension, CPU seconds (process time).
"""
from __future__ import annotations

import copy
import os
import shutil
import sys
import time

import numpy as np

from mbde_bench.results import table
from mbde_bench.smoother_motor import _errors
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.estimators.configure import defaults
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import run_estimator
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario
from mbde_core.sensors.sensor_set import SensorSet
from mbde_core.simulator.bag import write_simulation_bag

HELP = "motor-driven linkages: every Kalman observer with the motor torque measured vs unknown vs released"
SCENARIOS = {  # name: (file in config/bench/motors, variants, estimators beyond the common ones, duration [s])
    "speedstep": ("slider_crank_speedstep_effort", ("measured", "unknown"), (), 10.0),
    "moving": ("slider_crank_speedstep_moving", ("measured", "unknown"), (), 7.0),   # the step at 5 s
    "released": ("slider_crank_released", ("released",), (), 1.5),
    "adekf": ("adekf_slider_crank_effort", ("measured", "unknown"), ("adekf",), 4.0),  # 40 -> 50 rad/s at 3.3 s
}
ESTIMATORS = ("ukf", "errorekf", "dekf", "cekf", "diekfpm", "viekf")
LOST = 0.1  # rad
QUICK = {"seeds": 1, "duration": 1.0}


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory (bags, motors.md)")
    p.add_argument("--seeds", type=int, default=3, help="seeded runs per scenario (default 3)")
    p.add_argument("--duration", type=float, default=0.0,
                   help="simulated seconds per run (default: speedstep 10, moving 7, released 1.5, adekf 4)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {', '.join(SCENARIOS)}")
    p.add_argument("--estimators", default=",".join(ESTIMATORS), help="comma-separated Kalman observers")
    p.add_argument("--quick", action="store_true", help="one seed of 1 s per scenario (a smoke run)")
    runs.add_arguments(p, "runs")


def motor_task(shared, task) -> dict:
    """(scenario, seed, duration, folder, estimators) -> rows {variant: {estimator: (rmse, nees/dim, cpu)}}."""
    name, seed, duration, folder, estimators = task
    fname, variants, extra, default = SCENARIOS[name]
    sc = load_scenario(config_path("bench", "motors", fname + ".yaml"))
    doc = copy.deepcopy(sc.raw)
    doc["seed"] = int(seed)
    doc["duration"] = float(duration or default)
    path = os.path.join(folder, f"{name}_{seed}")
    if os.path.isdir(path):
        shutil.rmtree(path)
    write_simulation_bag(Scenario(doc, file=sc.file, base_dir=sc.base_dir), path, processes=1)
    out = {"scenario": name, "seed": seed, "variants": {}}
    for variant in variants:
        inputs = load_inputs(path)
        if variant == "unknown":  # the same readings without the torque
            inputs.sensors = SensorSet(list(inputs.sensors), ())
            inputs.measurements = [m for m in inputs.measurements if m.sensor in inputs.sensors]
        rows = out["variants"].setdefault(variant, {})
        for est in tuple(estimators) + tuple(extra):
            c0 = time.process_time()
            try:
                run = run_estimator(inputs, est, defaults(est), seed, particle_budget=0)
                recs = run.records
                t = np.array([r.estimate.stamp for r in recs])
                z = np.array([r.estimate.z for r in recs])
                zd = np.array([r.estimate.zd for r in recs])
                rows[est] = _errors(inputs, t, z, zd, [r.estimate.cov for r in recs]) + (time.process_time() - c0,)
            except Exception as exc:  # noqa: BLE001 - a failing estimator is a row, never stops the bench
                rows[est] = (float("nan"), float("nan"), time.process_time() - c0, f"{type(exc).__name__}: {exc}")
    shutil.rmtree(path, ignore_errors=True)
    return out


def summary_tables(rows, names) -> str:
    """Markdown: one table per scenario, a row per estimator, columns per variant."""
    md = []
    for name in names:
        rs = [r for r in rows if r["scenario"] == name]
        if not rs:
            continue
        variants = list(rs[0]["variants"])
        ests = list(rs[0]["variants"][variants[0]])
        head = ["estimator"]
        for v in variants:
            head += [f"{v}: median RMSE z [rad]", f"{v}: lost", f"{v}: NEES/dim", f"{v}: CPU s"]
        body = []
        for e in ests:
            row = [e]
            for v in variants:
                vals = [r["variants"][v][e] for r in rs if e in r["variants"][v]]
                rm = np.array([x[0] for x in vals], float)
                lost = int(np.sum(~(rm < LOST)))
                row += [f"{np.nanmedian(rm):.2e}" if np.isfinite(rm).any() else "failed", f"{lost} / {len(vals)}",
                        f"{np.nanmedian([x[1] for x in vals]):.3g}" if np.isfinite(rm).any() else "-",
                        f"{np.median([x[2] for x in vals]):.1f}"]
            body.append(row)
        errors = sorted({x[3] for r in rs for v in r["variants"].values() for x in v.values() if len(x) > 3})
        note = ("\n\nfailed: " + "; ".join(errors)) if errors else ""
        md.append(f"## {name} ({SCENARIOS[name][0]}.yaml, {len(rs)} seed(s))\n\n{table(head, body)}{note}\n")
    return "\n".join(md)


def run(args) -> int:
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        raise DataError(f"--scenarios: unknown {', '.join(bad)} (choose from {', '.join(SCENARIOS)})")
    ests = [e.strip() for e in args.estimators.split(",") if e.strip()]
    seeds, duration = (QUICK["seeds"], QUICK["duration"]) if args.quick else (args.seeds, args.duration)
    os.makedirs(args.out, exist_ok=True)
    folder = os.path.join(args.out, "bags")
    os.makedirs(folder, exist_ok=True)
    tasks = [(n, 100 + s, duration, folder, ests) for n in names for s in range(seeds)]
    t0 = time.perf_counter()
    outcomes = runs.run_tasks(motor_task, tasks, label="motor-driven runs", **runs.options(args))
    for line in runs.failures(outcomes, lambda i: "{} seed {}".format(*tasks[i][:2])):
        print(f"failed: {line}", file=sys.stderr)
    rows = [o.value for o in outcomes if o.ok]
    shutil.rmtree(folder, ignore_errors=True)
    md = ("# Motor-driven linkages: the torque measured vs unknown\n\n"
          f"Default options; {seeds} seed(s); {f'{duration:g} s runs' if duration else 'durations: ' + ', '.join(f'{n} {SCENARIOS[n][3]:g} s' for n in names)}; "
          f"lost: RMSE z > {LOST} rad; NEES/dim: mean NEES of [z, zd] over 2g (1 = consistent); CPU: process "
          "time of the replay (other processes were running).\n\n" + summary_tables(rows, names))
    print(md)
    with open(os.path.join(args.out, "motors.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    print(f"{len(tasks)} runs in {time.perf_counter() - t0:.0f} s")
    return 0 if rows else 1
