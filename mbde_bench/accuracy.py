"""Paper 003 accuracy matrix: {fourbar, fivebar} x {encoders, gyroscopes} x sensor period
{1, 5, 10, 15} filter steps (5 ms) x gravity error {1, 4} m/s^2 x N seeded runs, all observers.

Scenarios: config/scenarios/{fourbar,fivebar}_{gyro,encoder}.yaml (paper 003 sec. 4: encoders
sigma 1 deg, gyroscopes sigma 1 deg/s; FourBars1/FiveBars1 moving under gravity). The
truth is simulated once per scenario; each variant samples its readings from it with its
own seed; the estimator's model has the gravity magnitude changed by the error. Every
observer runs through its EstimatorStage with the options of --config (default
config/estimators/paper003.yaml, the paper's explicit tuning and forward-Euler transition;
config/estimators/default.yaml gives the mechanism-derived defaults instead) and starts
from the true initial state.

Writes DIR/accuracy.csv (one row per run), DIR/accuracy.json (means over runs), figures
DIR/rmse_<mechanism>_<sensors>.png (RMSE vs sensor period per observer, paper 003
figs. 3-6) and DIR/cost.png (mean step time per observer, fig. 7), and prints the tables
(RMSE of z and zd, mean NEES of [z, zd]: chi-square with 2g degrees of freedom for a
consistent estimator, e.g. on perfect-model runs, --gravity-errors 0). ``smoother`` in
--estimators adds the batch smoother of paper 003 sec. 3.4 (options: the config's
``smoother:`` section; its "step time" is its wall time per grid step).
A run that raises or produces non-finite estimates counts as failed (shown as "fail").
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from mbde_bench.common import TruthRecord, write_csv
from mbde_bench.smoother import smooth_run
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.assess.metrics import coordinate_errors, nees
from mbde_core.estimators.base import InitialState, initial_sigmas
from mbde_core.estimators.configure import configure, load as configure_load
from mbde_core.estimators.options.rule import resolve_config
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.scenario import load_scenario
from mbde_core.trajectory.config import load_smoother_config

HELP = "paper 003 accuracy matrix (RMSE vs sensor period, gravity error, sensors) for all observers"
CASES = {
    "fourbar_gyro": ("fourbar", "gyroscopes"),
    "fourbar_encoder": ("fourbar", "encoders"),
    "fivebar_gyro": ("fivebar", "gyroscopes"),
    "fivebar_encoder": ("fivebar", "encoders"),
}
OBSERVERS = ("ukf", "errorekf", "dekf", "cekf", "diekfpm")
FILTER_STEP = 0.005
CSV_COLUMNS = ["case", "mechanism", "sensors", "period_steps", "gravity_error", "run", "estimator", "rmse_z", "rmse_zd",
               "nees", "step_us", "failed", "wall_s", "error"]


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--runs", type=int, default=20, help="seeded runs per cell (paper: 20; default %(default)s)")
    p.add_argument("--periods", default="1,5,10,15", help="sensor periods in filter steps (default %(default)s)")
    p.add_argument("--gravity-errors", default="1,4", help="gravity errors [m/s^2] (default %(default)s)")
    p.add_argument("--estimators", default=",".join(OBSERVERS),
                   help="observers, and `smoother` (the batch smoother of paper 003 sec. 3.4) (default %(default)s)")
    p.add_argument("--cases", default=",".join(CASES), help="scenarios (default %(default)s)")
    p.add_argument("--duration", type=float, default=5.0, help="simulated seconds per run (default %(default)s)")
    p.add_argument("--config", help="estimator config YAML (default config/estimators/paper003.yaml)")
    p.add_argument("--scaling", metavar="N,N", help="run the matrix on each of these numbers of local workers "
                   "(e.g. 1,2; instead of --jobs): speed-up, efficiency, identical results, and the estimated wall "
                   "time of 100 runs per cell on N workers")

    runs.add_arguments(p, "variants")


def _run_task(truths, task):
    """One (case, period, gravity error, run): every observer on the same readings.

    truths: {case: TruthRecord} shared by all tasks (simulated once by the caller)."""
    case, period, gerr, run, names, configs = task
    truth = truths[case]
    sc = truth.scenario.with_overrides(gravity_error=gerr)
    mech = sc.estimator_mechanism()
    sensors = sc.estimator_sensors()
    meas = truth.measurements(truth.scenario.sensors, period * FILTER_STEP, seed=10_000 * (run + 1) + int(1000 * gerr) + period)
    init = sc.estimator_initial_state()
    angular = np.isin(mech.independent, mech.rel_columns)
    rows = []
    for name in names:
        cfg = configs[name]
        row = {"case": case, "mechanism": CASES[case][0], "sensors": CASES[case][1], "period_steps": period,
               "gravity_error": gerr, "run": run, "estimator": name}
        t0 = time.perf_counter()
        try:
            if name != "smoother":
                cfg = configure(name, cfg, mech, sensors)  # `auto` options of a user config
            sz, szd = initial_sigmas(cfg["initial_sigma"] if name == "smoother" else cfg.initial_sigma, mech.dof)
            start = InitialState(init.z, init.zd, sz, szd, init.q, init.branch)
            if name == "smoother":
                stamps, z, zd, covs, step_s = smooth_run(mech, sensors, meas, start, cfg)
            else:
                est = make_estimator(name, mech, sensors, cfg, rng=np.random.default_rng(run))
                stage = EstimatorStage(est, cfg.step, lambda t: start, keep=True)
                stage.feed(meas)
                stage.advance_to(truth.t[-1] + 1e-9)
                stage.flush()
                recs = stage.records
                stamps = np.array([r.estimate.stamp for r in recs])
                z = np.array([r.estimate.z for r in recs])
                zd = np.array([r.estimate.zd for r in recs])
                covs = np.array([r.estimate.cov for r in recs]) if all(r.estimate.cov is not None for r in recs) else None
                step_s = float(np.mean([r.cost for r in recs]))
            tz, tzd, _ = truth.at(stamps)
            ez = coordinate_errors(z, tz, angular)
            ok = bool(np.all(np.isfinite(ez)) and np.all(np.isfinite(zd)))
            row.update(rmse_z=float(np.sqrt(np.mean(ez**2))) if ok else float("nan"),
                       rmse_zd=float(np.sqrt(np.mean((zd - tzd) ** 2))) if ok else float("nan"),
                       nees=float(np.nanmean(nees(np.hstack([ez, zd - tzd]), covs))) if ok and covs is not None else float("nan"),
                       step_us=step_s * 1e6, failed=not ok)
        except Exception as exc:  # a diverging observer must not stop the benchmark
            row.update(rmse_z=float("nan"), rmse_zd=float("nan"), nees=float("nan"), step_us=float("nan"), failed=True,
                       error=f"{type(exc).__name__}: {exc}"[:200])
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise DataError(f"--cases: unknown {', '.join(bad)} (choose from {', '.join(CASES)})")
    try:
        periods = [int(p) for p in args.periods.split(",")]
    except ValueError:
        raise DataError(f"--periods: expected comma-separated integers, got {args.periods!r}") from None
    try:
        gerrs = [float(g) for g in args.gravity_errors.split(",")]
    except ValueError:
        raise DataError(f"--gravity-errors: expected comma-separated numbers, got {args.gravity_errors!r}") from None
    cfg_file = args.config or config_path("estimators", "paper003.yaml")
    configs = configure_load(cfg_file, [n for n in names if n != "smoother"])
    if "smoother" in names:
        scfg, gcfg = load_smoother_config(cfg_file)
        configs["smoother"] = dict(scfg, guess_config=gcfg)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    truths = {}
    for case in cases:
        sc = load_scenario(config_path("scenarios", f"{case}.yaml"))
        truths[case] = TruthRecord(sc, args.duration)
        print(f"truth {case}: {args.duration:g} s simulated in {truths[case].wall_time:.1f} s")
    tasks = [(c, p, g, r, names, configs) for c in cases for p in periods for g in gerrs for r in range(args.runs)]
    scaling = None
    if args.scaling:  # the matrix once per worker count; the results are those of the last
        scaling, outcomes = _scaling(args, tasks, truths)
        wall_runs = scaling["rows"][-1]["wall_s"]
    else:
        t_runs = time.perf_counter()
        outcomes = runs.run_tasks(_run_task, tasks, truths, label="accuracy", **runs.options(args))
        wall_runs = time.perf_counter() - t_runs
    rows = [row for o in outcomes if o.ok for row in o.value]
    for line in runs.failures(outcomes, lambda i: "variant {} period {} gravity error {:g} run {}".format(*tasks[i][:4])):
        print(f"failed: {line}", file=sys.stderr)
    rows.sort(key=lambda r: (r["case"], r["gravity_error"], r["period_steps"], r["estimator"], r["run"]))
    write_csv(os.path.join(args.out, "accuracy.csv"), rows, CSV_COLUMNS)
    summary = _summarise(rows)
    with open(os.path.join(args.out, "accuracy.json"), "w", encoding="utf-8") as fh:
        json.dump({"runs": args.runs, "duration_s": args.duration, "filter_step_s": FILTER_STEP,
                   "cells": summary, "scaling": scaling}, fh, indent=2, default=lambda x: None)
    print(format_tables(summary, names, periods))
    if scaling:
        print(scaling_table(scaling))
    _figures(args.out, summary, names, periods, gerrs)
    cpu = sum(r["wall_s"] for r in rows)
    print(f"\n{len(tasks)} variants x {len(names)} observers in {time.perf_counter() - t_start:.0f} s "
          f"(runs {wall_runs:.0f} s wall, {cpu:.0f} s in the observers); "
          f"results: accuracy.csv, accuracy.json, rmse_*.png, cost.png")
    return 0


def _scaling(args, tasks, truths):
    """Wall time of the variants on each worker count of --scaling (local processes);
    returns (table data, outcomes of the last count)."""
    def key(outcomes):
        return [None if not o.ok else [(r["estimator"], r["rmse_z"], r["rmse_zd"]) for r in o.value] for o in outcomes]

    rows, first, out = [], None, None
    for jobs in [int(j) for j in args.scaling.split(",") if j.strip()]:
        t0 = time.perf_counter()
        out = runs.run_tasks(_run_task, tasks, truths, label=f"{jobs} worker(s)", jobs=jobs)
        first = first or key(out)
        rows.append({"workers": jobs, "wall_s": time.perf_counter() - t0, "identical": key(out) == first})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cells = len({t[:3] for t in tasks})
    return ({"variants": len(tasks), "cells": cells, "runs": args.runs, "duration_s": args.duration,
             "observers": len(tasks[0][4]), "rows": rows, "load_average_1min_after": load}, out)


def scaling_table(sc: dict) -> str:
    """Speed-up per worker count and the estimated wall time of 100 runs per cell."""
    rows = sc["rows"]
    base = next((r for r in rows if r["workers"] == 1), rows[0])
    per_variant = base["wall_s"] * base["workers"] / sc["variants"]
    lines = [f"\nScale-out: {sc['variants']} variants ({sc['cells']} cells x {sc['runs']} runs, {sc['observers']} observers, "
             f"{sc['duration_s']:g} s each) on local worker processes",
             f"{'workers':>8}{'wall [s]':>10}{'speed-up':>10}{'efficiency':>12}  identical to the first run"]
    eff = 1.0
    for r in rows:
        sp = base["wall_s"] * base["workers"] / r["wall_s"]
        e = sp / r["workers"]
        if r["workers"] > 1:
            eff = e
        lines.append(f"{r['workers']:>8}{r['wall_s']:>10.1f}{sp:>9.2f}x{100 * e:>11.0f}%  {'yes' if r['identical'] else 'NO'}")
    two = next((r for r in rows if r["workers"] == 2), None)
    if two is not None:
        sp2 = base["wall_s"] * base["workers"] / two["wall_s"]
        lines.append(f"speed-up 1 -> 2 workers: {sp2:.2f}x (target >= 1.8x: {'met' if sp2 >= 1.8 else 'NOT met'})")
    total = 100 * sc["cells"] * per_variant
    lines.append(f"estimated wall time of 100 runs per cell ({100 * sc['cells']} variants, {sc['duration_s']:g} s each; "
                 f"{per_variant:.2f} s per variant on one worker, {100 * eff:.0f} % efficiency):")
    lines.append("  " + ", ".join(f"{n} workers {_duration(total / (n * (eff if n > 1 else 1.0)))}"
                                  for n in (1, 2, 4, 8, 16, 32, 64)))
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def _summarise(rows):
    cells = {}
    for r in rows:
        key = (r["case"], r["gravity_error"], r["period_steps"], r["estimator"])
        cells.setdefault(key, []).append(r)
    out = []
    for (case, g, p, name), rs in sorted(cells.items()):
        ok = [r for r in rs if not r["failed"]]
        out.append({
            "case": case, "gravity_error": g, "period_steps": p, "estimator": name, "runs": len(rs), "failed": len(rs) - len(ok),
            "rmse_z": float(np.mean([r["rmse_z"] for r in ok])) if ok else None,
            "rmse_zd": float(np.mean([r["rmse_zd"] for r in ok])) if ok else None,
            "nees": float(np.nanmean([r["nees"] for r in ok])) if ok and any(np.isfinite(r["nees"]) for r in ok) else None,
            "step_us": float(np.nanmean([r["step_us"] for r in rs])) if any(np.isfinite(r["step_us"]) for r in rs) else None,
        })
    return out


def format_tables(summary, names, periods) -> str:
    """Text tables: mean RMSE of z [rad] and zd [rad/s] per observer and sensor period."""
    lines = []
    groups = {}
    for c in summary:
        groups.setdefault((c["case"], c["gravity_error"]), {})[(c["estimator"], c["period_steps"])] = c
    for (case, g), cells in groups.items():
        for quantity, unit in (("rmse_z", "rad"), ("rmse_zd", "rad/s"), ("nees", "mean over steps and runs")):
            lines.append(f"\n{case}, gravity error {g:g} m/s^2: mean {quantity} [{unit}] (failed runs in parentheses)")
            lines.append(f"{'observer':<10}" + "".join(f"{'T=' + str(p):>14}" for p in periods) + f"{'us/step':>10}")
            for name in names:
                vals = []
                for p in periods:
                    c = cells.get((name, p))
                    if c is None:
                        vals.append(f"{'-':>14}")
                        continue
                    v = "fail" if c[quantity] is None else f"{c[quantity]:.3g}"
                    if c["failed"]:
                        v += f" ({c['failed']})"
                    vals.append(f"{v:>14}")
                cost = [cells[(name, p)]["step_us"] for p in periods if (name, p) in cells and cells[(name, p)]["step_us"]]
                lines.append(f"{name:<10}" + "".join(vals) + f"{np.mean(cost) if cost else float('nan'):>10.0f}")
    return "\n".join(lines)


def _figures(out, summary, names, periods, gerrs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({c["case"] for c in summary})
    for case in cases:
        fig, axes = plt.subplots(2, len(gerrs), figsize=(5.5 * len(gerrs), 7), squeeze=False)
        for j, g in enumerate(gerrs):
            for i, (q, unit) in enumerate((("rmse_z", "rad"), ("rmse_zd", "rad/s"))):
                ax = axes[i, j]
                for name in names:
                    ys = []
                    for p in periods:
                        c = next((c for c in summary if c["case"] == case and c["gravity_error"] == g
                                  and c["period_steps"] == p and c["estimator"] == name), None)
                        ys.append(np.nan if c is None or c[q] is None else c[q])
                    ax.semilogy(periods, ys, "o-", label=name)
                ax.set_xlabel("sensor period [filter steps of 5 ms]")
                ax.set_ylabel(f"RMSE {q[5:]} [{unit}]")
                ax.set_title(f"{case}, gravity error {g:g} m/s^2")
                ax.set_xticks(periods)
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"rmse_{case}.png"), dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    mechs = sorted({c["case"].split("_")[0] for c in summary})
    width = 0.8 / max(len(mechs), 1)
    for k, m in enumerate(mechs):
        vals = [np.nanmean([c["step_us"] for c in summary if c["case"].startswith(m) and c["estimator"] == n and c["step_us"]] or [np.nan])
                for n in names]
        ax.bar(np.arange(len(names)) + k * width, vals, width, label=m)
    ax.set_xticks(np.arange(len(names)) + width * (len(mechs) - 1) / 2)
    ax.set_xticklabels(names)
    ax.set_ylabel("mean step time [us]")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cost.png"), dpi=100)
    plt.close(fig)
