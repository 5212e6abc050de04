"""The motor-driven linkages in ``mbde bench trust``'s table 2 (runs of kind ``motors``).

Each scenario of ``mbde bench motors`` that has a motor (config/bench/motors, not the
``released`` reference) is simulated once per run (seed 100 + run, the motors bench's
seeds) for that bench's own duration (:data:`mbde_bench.motors.SCENARIOS`: the speed steps
at 5 s must be inside the run, whatever ``--duration`` says), with the scenario's own
estimator model, and replayed twice: the torque measured (its effort readings) and the
torque unknown (the same readings without them: input states). Nominal runs: the
estimators stay on track there (docs/results/motors.md), so a LOST is a false alarm (the
jump test once fired on 20-50 % of the time at the corners of the torque saturation,
:mod:`mbde_core.estimators.stage.trust_faults`). A row per estimator and variant, as
:func:`mbde_bench.trust_runs.run_case` writes them; the case is ``motors/NAME:VARIANT``.
"""
from __future__ import annotations

import copy
import os
import shutil

from mbde_bench.motors import MOTOR_VARIANTS, SCENARIOS, _simulate, variant_inputs
from mbde_bench.motors_rows import estimator_of, not_applicable
from mbde_bench.trust_runs import scored_run, variant_options
from mbde_core.config.paths import config_path
from mbde_core.scenario import load_scenario

KIND = "motors"
SEED = 100  # the motors bench's first seed


def motor_cases() -> list:
    """[(case, scenario name)] of the motors bench's scenarios with a motor, one per variant."""
    return [(f"{KIND}/{name}:{variant}", name) for name, (_, variants, _, _) in SCENARIOS.items()
            for variant in variants if variant in MOTOR_VARIANTS]


def run_motor_case(task) -> list:
    """Rows of one run (case ``motors/NAME:VARIANT``, run index, estimators, folder); the
    scenario's own model, the motors bench's duration."""
    case, run, names, folder = task
    name, variant = case.split("/", 1)[1].split(":")
    fname, _, duration, _ = SCENARIOS[name]
    sc = load_scenario(config_path("bench", "motors", fname + ".yaml"))
    doc = copy.deepcopy(sc.raw)
    doc["seed"], doc["duration"] = SEED + run, float(duration)
    path = os.path.join(folder, f"{KIND}_{name}_{variant}_{run}")
    try:
        _simulate(sc, doc, path)
        inputs = variant_inputs(variant, sc, doc, path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    rows = []
    for est in names:
        row = {"case": case, "model": "exact", "kind": KIND, "run": run, "estimator": est}
        name_ = est.partition("+")[0]
        why = not_applicable(name_, variant, inputs.sensors)
        if why:
            rows.append({**row, "status": "n/a", "note": why})
            continue
        base, opts = estimator_of(name_)  # a motors-bench row (pf_noinputs): its options over the defaults
        rows.append(scored_run(row, inputs, base, variant_options(est, base, opts), seed=SEED + run))
    return rows
