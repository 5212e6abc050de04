"""The smoother against the filters on issue 42's speed-step slider-crank (``mbde bench
smoother``, table 8).

config/bench/calibration/slider_crank_speedstep.yaml: crank 0.1 m, rod 0.35 m, track
offset 0.04 m, a gyroscope on the rod (200 Hz), 10 s, viscous slider friction in the
truth only, a PI speed controller 15 -> 25 rad/s at 5 s with a 2 N m limit that the
estimators do not know. Each seed is simulated into a bag (``mbde simulate``), read back
as ``mbde replay`` reads it, and every default observer runs through replay's stage
(:func:`mbde_core.replay.runner.run_estimator`) next to the batch smoother of the same
readings (``mbde smooth``'s options: input states from the scenario's torque limit, plant
noise from the data). Variant ``measured``: the motor's torque is read too (an ``effort``
sensor, 0.02 N m, 200 Hz), a known input for the smoother and the Kalman observers (the
particle filter does not take it: its readings are counted, not fed). Per estimator: the median over
the seeds of the RMSE of z (the crank angle), the runs lost (RMSE > 0.1 rad), the mean
NEES of [z, zd] over dim, and the smoother's ratio to the best filter (target <= 1.2).
"""
from __future__ import annotations

import copy
import os
import shutil

import numpy as np

from mbde_bench.motors_rows import filter_row, smoother_row
from mbde_bench.results import table
from mbde_core import runs as R
from mbde_core.config.paths import config_path
from mbde_core.replay.inputs import load_inputs
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario
from mbde_core.simulator.bag import write_simulation_bag

FILTERS = ("ukf", "errorekf", "dekf", "cekf", "diekfpm", "pf")
EFFORT = {"name": "motor_torque", "type": "effort", "coordinate": "theta", "joint_name": "crank_joint", "rate": 200,
          "hold": "linear", "noise": {"sigma": 0.02}}  # a 1 kHz controller read at 200 Hz
LOST = 0.1  # rad


def _bag(variant: str, seed: int, folder: str):
    sc = load_scenario(config_path("bench", "calibration", "slider_crank_speedstep.yaml"))
    doc = copy.deepcopy(sc.raw)
    doc["seed"] = int(seed)
    if variant == "measured":
        doc["sensors"] = list(doc["sensors"]) + [dict(EFFORT)]
    sc = Scenario(doc, file=sc.file, base_dir=sc.base_dir)
    path = os.path.join(folder, f"{variant}_{seed}")
    if os.path.isdir(path):
        shutil.rmtree(path)
    write_simulation_bag(sc, path, processes=1)
    return load_inputs(path)


def motor_task(shared, task) -> dict:
    """(variant, seed, folder) -> {estimator: (rmse z, nees/dim, cpu s)} on one bag."""
    variant, seed, folder = task
    inputs = _bag(variant, seed, folder)
    out = {"variant": variant, "seed": seed, "estimators": {name: filter_row(inputs, name, seed) for name in FILTERS}}
    out["estimators"]["smoother"], info = smoother_row(inputs)
    out["smoother_status"] = info["status"]
    out["smoother_warnings"] = info["warnings"]
    return out


def motor_table(seeds: int, jobs, folder: str) -> tuple[list, str]:
    """(rows, Markdown) of table 8."""
    os.makedirs(folder, exist_ok=True)
    tasks = [(v, 100 + s, folder) for v in ("unknown", "measured") for s in range(seeds)]
    outcomes = R.run_tasks(motor_task, tasks, label="speed-step slider-crank", jobs=jobs)
    rows = [o.value for o in outcomes if o.ok]
    md = []
    for variant in ("unknown", "measured"):
        rs = [r for r in rows if r["variant"] == variant]
        if not rs:
            continue
        names = list(rs[0]["estimators"])
        med = {n: float(np.nanmedian([r["estimators"][n][0] for r in rs])) for n in names}
        best = min((med[n] for n in FILTERS if n in med and np.isfinite(med[n])), default=float("nan"))
        body = []
        for n in names:
            vals = [r["estimators"][n] for r in rs]
            lost = sum(not (v[0] < LOST) for v in vals)
            nees = float(np.nanmedian([v[1] for v in vals]))
            ratio = med[n] / best if np.isfinite(best) and best > 0 else float("nan")
            body.append([n, f"{med[n]:.2e}", f"{lost} / {len(vals)}", f"{nees:.3g}", f"{ratio:.2g}",
                         f"{np.median([v[2] for v in vals]):.1f}"])
        conv = sum(r["smoother_status"] == "converged" for r in rs)
        flagged = sum(bool(r["smoother_warnings"]) for r in rs)
        md.append(f"\n**torque {variant}** ({len(rs)} seeds; smoother converged in {conv}, warned in {flagged})\n\n"
                  + table(["estimator", "median RMSE z [rad]", "lost (> 0.1 rad)", "median NEES/dim",
                           "median RMSE / best filter's", "CPU s (median)"], body))
    return rows, "\n".join(md)
