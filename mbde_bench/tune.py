"""Does ``mbde tune`` never make an estimator worse? Its hold-out decision checked against the truth.

``mbde bench tune --out DIR`` simulates each scenario (``--scenarios``: YAML paths; by
default the shipped fourbar_gyro, whose model has a 1 m/s^2 gravity error, and the two of
config/bench/tune/: a 3 m steel four-bar with a crank encoder, 5 % mass errors and
unmodelled pivot friction; the Watt six-bar with one gyroscope on its output link and 5 %
mass errors) for ``--duration`` s into DIR/bags, then per (bag, estimator), on the run
engine (:mod:`mbde_core.runs`):

1. ``mbde tune``'s fit (:func:`mbde_core.tuning.search.tune`): on the first 1 - ``--holdout``
   of the bag, from the readings alone, the start (the default-tuning rule) and the fit then
   scored on the held-out rest, the decision taken as ``mbde tune`` takes it;
2. the whole bag replayed with the start's options and with the fitted ones (as ``mbde
   replay``: its stage, the bag's initial guess, seed ``--seed``), RMSE of z (whole run and
   after the first second: tracking, a PF's acquisition left out) and mean NEES of [z, zd]
   against the simulated truth (never seen by step 1).

The table: the estimator's step, the fitted plant-noise factor (``!``: at the edge of the
widened grid), the held-out log-likelihood per reading of start and fit, the decision, the
RMSEs and NEES of start and fit, and ``truth agrees``: whether the decision kept the options
with the lower tracking RMSE (or RMSEs within 10 % of each other: either is fine). Writes
DIR/tune.json and DIR/tune.md and prints the table.
"""
from __future__ import annotations

import json
import math
import os
import time

from mbde_bench.common import simulate_scenario_bag
from mbde_bench.results import text_to_markdown
from mbde_bench.transfer_runs import run_task
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.replay.runner import resolved_options
from mbde_core.estimators.configure import load
from mbde_core.tuning.output import verdict
from mbde_core.tuning.search import tune

HELP = "mbde tune's held-out decision on a few bags: held-out score and RMSE/NEES against truth, start vs fitted"
SCENARIOS = (config_path("scenarios", "fourbar_gyro.yaml"),
             config_path("bench", "tune", "steel_fourbar_encoder.yaml"),
             config_path("bench", "tune", "watt_sixbar_gyro.yaml"),
             config_path("bench", "calibration", "slider_crank_speedstep.yaml"),
             config_path("bench", "calibration", "steel_fourbar_encoder.yaml"))
AGREE = 0.10  # RMSEs within 10 % of each other: either choice agrees with the truth


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory (bags, tune.json, tune.md)")
    p.add_argument("--scenarios", help="comma-separated scenario YAML paths (default: fourbar_gyro and config/bench/tune/)")
    p.add_argument("--estimators", default="ukf,errorekf,pf", help="estimators to tune (default %(default)s)")
    p.add_argument("--duration", type=float, default=8.0, help="seconds simulated per bag (default %(default)s)")
    p.add_argument("--holdout", type=float, default=0.3, help="fraction of the bag held out of the fit (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="estimator seed (default %(default)s)")
    runs.add_arguments(p, "tunings and runs")


def _tune_task(shared, task):
    scen, name, holdout, seed = task
    src = shared[scen]
    spec = load(None, [name])[name]
    return tune(src, list(src.measurements), name, resolved_options(src, spec), seed=seed,
                split=src.start + (1.0 - holdout) * src.duration)


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    paths = [p.strip() for p in args.scenarios.split(",")] if args.scenarios else list(SCENARIOS)
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise DataError(f"--scenarios: no such file {', '.join(missing)}")
    if not 0.0 < args.holdout < 1.0:
        raise DataError(f"--holdout: must be in (0, 1), got {args.holdout:g}")
    folder = os.path.join(args.out, "bags")
    os.makedirs(folder, exist_ok=True)
    c0 = time.process_time()
    shared = {}
    for p in paths:
        scen, inputs = simulate_scenario_bag(p, args.duration, folder)
        shared[scen] = inputs
        print(f"bag {scen}: {inputs.duration:g} s, " + ", ".join(f"{k} {v}" for k, v in inputs.counts.items()))
    tasks = [(s, n, args.holdout, args.seed) for s in shared for n in names]
    outs = runs.run_tasks(_tune_task, tasks, shared, label="tune", **runs.options(args))
    fits = {}
    for t, o in zip(tasks, outs):
        if o.ok:
            fits[(t[0], t[1])] = o.value
            print(f"{t[0]}: " + verdict(o.value))
        else:
            print(f"failed: tune {t[0]} {t[1]}: {o.error}")
    rtasks = [(s, n, v, getattr(r, v), args.seed) for (s, n), r in fits.items() for v in ("start", "tuned")]
    routs = runs.run_tasks(run_task, rtasks, shared, label="runs", **runs.options(args))
    metrics = {(t[0], t[1], t[2]): (o.value if o.ok else {"status": "error", "note": o.error}) for t, o in zip(rtasks, routs)}
    rows = [_row(s, n, r, metrics.get((s, n, "start"), {}), metrics.get((s, n, "tuned"), {})) for (s, n), r in fits.items()]
    text = table(rows)
    print(text)
    with open(os.path.join(args.out, "tune.md"), "w", encoding="utf-8") as fh:
        fh.write(text_to_markdown(text) + "\n")
    with open(os.path.join(args.out, "tune.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1, default=lambda x: None)
    agree = [r["truth_agrees"] for r in rows if r["truth_agrees"] is not None]
    print(f"\n{len(rows)} fits; the decision agrees with the truth in {sum(agree)} of {len(agree)}; "
          f"CPU of this process {time.process_time() - c0:.0f} s (the runs' own CPU: the table)")
    return 0


def _row(scen, name, r, start, tuned) -> dict:
    rs, rt = start.get("rmse_ss", math.nan), tuned.get("rmse_ss", math.nan)
    agrees = None
    if math.isfinite(rs) and math.isfinite(rt):
        close = abs(rs - rt) <= AGREE * max(rs, rt)
        agrees = bool(close or (rt < rs) == (r.decision == "tuned"))
    return {"bag": scen, "estimator": name, "step": r.step, "log10_factor": r.log_factors.get("plant_noise", 0.0),
            "edge": r.edge, "widened": r.widened, "held_start": r.held_start.per_reading,
            "held_tuned": r.held_tuned.per_reading, "decision": r.decision, "rmse_start": start.get("rmse", math.nan),
            "rmse_tuned": tuned.get("rmse", math.nan), "rmse_ss_start": rs, "rmse_ss_tuned": rt,
            "nees_start": start.get("nees", math.nan), "nees_tuned": tuned.get("nees", math.nan),
            "dim": start.get("dof"), "truth_agrees": agrees, "tune_cpu_s": r.cpu_s,
            "run_cpu_s": (start.get("cpu_s") or 0.0) + (tuned.get("cpu_s") or 0.0)}


def table(rows) -> str:
    cols = ["bag", "estimator", "step [s]", "plant noise x", "held-out loglik start", "tuned", "decision",
            "RMSE z start", "tuned", "t>1s start", "tuned", "NEES start", "tuned", "truth agrees", "CPU tune [s]"]
    out = []
    for r in rows:
        out.append([r["bag"], r["estimator"], f"{r['step']:g}", _f(10 ** r["log10_factor"]) + ("!" if r["edge"] else ""),
                    _f(r["held_start"], 5), _f(r["held_tuned"], 5), r["decision"], _f(r["rmse_start"]),
                    _f(r["rmse_tuned"]), _f(r["rmse_ss_start"]), _f(r["rmse_ss_tuned"]), _f(r["nees_start"]), _f(r["nees_tuned"]),
                    "-" if r["truth_agrees"] is None else "yes" if r["truth_agrees"] else "NO", f"{r['tune_cpu_s']:.0f}"])
    w = [max(len(c), *(len(x[i]) for x in out)) if out else len(c) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w[i]) if i < 2 else v.rjust(w[i]) for i, v in enumerate(vals))  # noqa: E731
    return "\n".join([line(cols)] + [line(x) for x in out]
                     + ["", "plant noise x: the fitted factor on the start's plant noise (a PF: on sigma_a^2); "
                            "!: at the edge of the widened grid; RMSE z [rad or m]: whole run, t>1s: after the first second; "
                            "truth agrees: the decision kept the lower t>1s RMSE, or the two are within 10 %"])


def _f(v, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}g}"
