"""Fault-injection benchmark: every fault of :mod:`mbde_core.faults.kinds` on simulated bags
of every shipped scenario, replayed through every estimator with its default options.

For each scenario a bag is simulated (``mbde simulate``, ``--duration`` seconds) into
``--out``/bags and read back as ``mbde replay`` reads it; each fault is injected into its
readings (arrival order) and every estimator replays them through the same code as
``mbde replay`` (:func:`mbde_core.replay.runner.run_estimator`: the shared estimator
stage, default stage options; ``--config`` replaces the default estimator options). Scores
(:mod:`mbde_core.faults.score`): RMSE of z over the run and its ratio to the clean run,
recovery time and RMSE after recovery for faults that end, the stage's counters, and
crashes: exceptions (caught by the replay driver or escaping it), non-finite estimates
and negative or non-finite NEES values. The clean readings are also replayed without the
gate (``gate: 0``): the summary gives the gate's false rejections (the clean readings it
rejected) and its cost on clean data (RMSE gated / ungated).

Targets (default options): outliers -> RMSE <= 1.5 x clean after the first second
(``ratio_steady``, :data:`mbde_core.faults.score.ACQUISITION`: a particle filter's
whole-run RMSE is its random acquisition from the uniform prior; the whole-run ratio is
printed beside it; for the particle filters the median ratio over ``STEADY_SEEDS``
estimator seeds); backward jump, bag loop and gap -> recovered within 1 s after the
data resumes; no crash of any kind. The gate's false rejections on clean data are given
over the whole run and after the first second (a particle filter's cloud still
converging disagrees with correct readings), with the suitability verdict of every
(scenario, estimator) (:mod:`mbde_core.estimators.assess.suitability`; ``weak``: the sensors or
the model cannot determine the state, e.g. a driven linkage for an estimator without
input states, and rejections there are those of a lost filter). The summary table
marks misses with ``!``. Writes ``faults.csv`` and ``faults.json`` into ``--out``; prints
the wall and CPU time (process time of the parent and of every run).

Cost: one (scenario, estimator) pair replays 16 runs (clean, clean without the gate, 14
faults; a particle filter 2 x (``STEADY_SEEDS`` - 1) more for the outlier ratio); pairs run in ``--jobs`` processes (``--jobs 1`` on a shared machine).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import time

import numpy as np

from mbde_bench.common import simulate_scenario_bag, write_csv
from mbde_bench.faults_tables import TARGETS, crash_count, format_summary, format_tables, target_misses
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.estimators.configure import load, validate
from mbde_core.faults.kinds import FAULT_NAMES, inject
from mbde_core.faults.score import ACQUISITION, errors, rms, score
from mbde_core.replay.runner import resolved_options, run_estimator, suitability
from mbde_core.simulator.progress import ProgressBar
from mbde_core.estimators.registry import ESTIMATOR_NAMES as ESTIMATORS  # every estimator

HELP = "fault injection (outliers, stamp anomalies, gaps, dropouts, drift...) on every scenario and estimator"
STOCHASTIC = ("pf", "vipf")  # estimators whose steady-state ratio is a median over seeds (_seed_mean)
STEADY_SEEDS = 3
COUNTERS = ("received", "rejected_gate", "gate_scale_max", "gate_believed", "reacquisitions", "multistarts", "out_of_order", "non_finite", "duplicates",
            "resets", "backward_jump_last", "future", "gap_resets", "diverged", "reconvergence_last", "estimator_errors")

_INPUTS = {}  # scenario -> ReplayInputs, filled before forking the workers


def add_arguments(p):
    p.add_argument("--scenario", "--scenarios", dest="scenarios", default="",
                   help="comma-separated scenario names or YAML files (default: every shipped scenario)")
    p.add_argument("--estimators", default=",".join(ESTIMATORS), help="estimators (default %(default)s)")
    p.add_argument("--faults", default=",".join(FAULT_NAMES), help="faults (default: all: %(default)s)")
    p.add_argument("--duration", type=float, default=5.0, help="simulated seconds per scenario (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the faults and of the stochastic estimators")
    p.add_argument("--config", default="", help="estimator options (YAML, as mbde replay --config; default: the "
                   "built-in defaults, which the targets are about)")
    p.add_argument("--out", default="faults_bench", help="output directory (default %(default)s)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes (default: CPU count)")
    p.add_argument("--merge", default="", metavar="DIR,DIR...",
                   help="run nothing: merge the faults.json of earlier runs (e.g. estimators or scenarios run "
                        "apart, or on other machines) into one table, written to --out")


def _scenarios(arg):
    if not arg:
        folder = config_path("scenarios")
        return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".yaml")]
    out = []
    for item in (a.strip() for a in arg.split(",") if a.strip()):
        out.append(item if item.endswith((".yaml", ".yml")) else config_path("scenarios", f"{item}.yaml"))
    return out


def _run_pair(task):
    """Every fault of one (scenario, estimator): clean first (the reference)."""
    import dataclasses

    scen, name, faults, seed, cfg = task
    inputs = _INPUTS[scen]
    mech = inputs.mechanism
    angular = np.isin(mech.independent, mech.rel_columns)
    target = next(iter(inputs.sensors)).name
    sigma = {s.name: np.sqrt(np.diag(s.covariance())) for s in inputs.sensors}
    rows, clean, clean_in = [], None, None
    for fault in ["clean"] + [f for f in faults if f != "clean"]:
        inj = inject(fault, inputs.measurements, target, sigma, seed)
        run_in = dataclasses.replace(inputs, measurements=inj.measurements)
        row = {"scenario": scen, "estimator": name, "fault": fault}
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            run = run_estimator(run_in, name, cfg, seed=seed, particle_budget=0)
            if fault == "clean":
                t, e, _ = errors(run.records, inj, inputs.truth, angular)
                clean = (t, e)
                # the same readings without the gate: what the gate costs on clean data
                off = run_estimator(run_in, name, {**cfg, "gate": 0.0}, seed=seed, particle_budget=0)
                row["ungated_rmse"] = float(np.sqrt(np.mean(errors(off.records, inj, inputs.truth, angular)[1] ** 2)))
                row.update(_steady_gate(run.records, inputs.truth.t[0] + ACQUISITION))
                row["suitability"] = _suitability(run_in, name, cfg)
            row.update(score(run.records, inj, inputs.truth, angular, clean))
            if fault == "clean":
                clean_in = (run_in, inj)
            elif TARGETS.get(fault, (None,))[0] == "ratio_steady" and name in STOCHASTIC:
                row.update(_seed_mean(row, name, cfg, seed, clean_in, (run_in, inj), inputs.truth, angular))
            row.update({k: run.counters.get(k, 0) for k in COUNTERS})
            row["raised"] = run.counters.get("estimator_errors", 0)
            if run.counters.get("last_estimator_error"):
                row["error"] = run.counters["last_estimator_error"][:200]
        except Exception as exc:  # noqa: BLE001 - reported as a crash, the benchmark goes on
            row.update(raised=1, error=f"{type(exc).__name__}: {exc}"[:200])
            if fault == "clean":
                return [row]
        row["wall_s"] = time.perf_counter() - t0
        row["cpu_s"] = time.process_time() - c0
        rows.append(row)  # clean always: the reference of the others and of the gate's false rejections
    return rows


def run(args) -> int:
    if args.merge:
        return _merge(args, [d.strip() for d in args.merge.split(",") if d.strip()])

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    faults = ["clean"] + [f for f in faults if f != "clean"]
    bad = [n for n in names if n not in ESTIMATORS] + [f for f in faults if f not in FAULT_NAMES]
    if bad:
        raise DataError(f"unknown estimator(s) or fault(s): {', '.join(bad)}")

    configs = {n: s.as_dict() for n, s in load(args.config or None, names).items()}  # defaults unless --config

    paths = _scenarios(args.scenarios)
    for p in paths:
        if not os.path.isfile(p):
            raise DataError(f"--scenario: no such scenario {p}")
    os.makedirs(os.path.join(args.out, "bags"), exist_ok=True)
    t_start, c_start = time.perf_counter(), time.process_time()
    order = []
    for p in paths:
        scen, inputs = simulate_scenario_bag(p, args.duration, os.path.join(args.out, "bags"))
        _INPUTS[scen] = inputs
        order.append(scen)
    tasks = [(s, n, faults, args.seed, configs[n]) for s in order for n in names]
    rows = []
    bar = ProgressBar("faults")
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, args.jobs)) as pool:
        for k, out in enumerate(pool.imap_unordered(_run_pair, tasks)):
            rows.extend(out)
            bar(k + 1, len(tasks))
    bar.close()
    rank = {s: i for i, s in enumerate(order)}
    rows.sort(key=lambda r: (rank[r["scenario"]], names.index(r["estimator"]), faults.index(r["fault"])))
    _write(args.out, rows)
    print(format_tables(rows, order, names, faults))
    print(format_summary(rows, names, faults))
    misses = target_misses(rows)
    crashes = sum(crash_count(r) for r in rows)
    cpu = time.process_time() - c_start + sum(float(r.get("cpu_s", 0.0) or 0.0) for r in rows)
    print(f"\n{len(rows)} runs (+ {sum('ungated_rmse' in r for r in rows)} clean runs without the gate) in "
          f"{time.perf_counter() - t_start:.0f} s wall, {cpu:.0f} s CPU (--jobs {args.jobs}); crashes {crashes}; "
          f"target misses {len(misses)}; results: faults.csv, faults.json")
    return 0


def _merge(args, folders) -> int:
    """--merge: the rows of earlier runs' faults.json (non-finite values are kept as
    JSON's Infinity/NaN) in one set of tables; a (scenario, estimator, fault) given twice
    keeps the last folder's row."""
    by = {}
    for folder in folders:
        path = os.path.join(folder, "faults.json")
        try:
            with open(path, encoding="utf-8") as fh:
                rows = json.load(fh)
        except OSError as exc:
            raise DataError(f"--merge: {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise DataError(f"--merge: {path}: not JSON ({exc})") from None
        try:
            by.update({(r["scenario"], r["estimator"], r["fault"]): r for r in rows})
        except (KeyError, TypeError) as exc:
            raise DataError(f"--merge: {path}: not a faults.json of mbde bench faults (no {exc})") from None
    rows = list(by.values())
    order = list(dict.fromkeys(r["scenario"] for r in rows))
    names = [n for n in ESTIMATORS if any(r["estimator"] == n for r in rows)]
    faults = [f for f in FAULT_NAMES if any(r["fault"] == f for r in rows)]
    rows.sort(key=lambda r: (order.index(r["scenario"]), names.index(r["estimator"]), faults.index(r["fault"])))
    os.makedirs(args.out, exist_ok=True)
    _write(args.out, rows)
    print(format_tables(rows, order, names, faults))
    print(format_summary(rows, names, faults))
    print(f"\n{len(rows)} runs merged from {', '.join(folders)}; crashes {sum(crash_count(r) for r in rows)}; "
          f"target misses {len(target_misses(rows))}; results: faults.csv, faults.json")
    return 0


def _seed_mean(row, name, cfg, seed, clean_in, fault_in, truth, angular) -> dict:
    """Steady-state ratio of a stochastic estimator over STEADY_SEEDS estimator seeds
    (seed, seed + 1, ...; the faults' seed fixed): the median of the per-seed ratios
    (faulty / clean), and the medians of the RMSEs. A particle filter's run depends on its
    whole random stream, which a rejected reading shifts: one seed's ratio is partly a new
    draw (a failed acquisition in either run, e.g. pf_rig_branch1 in about 1 of 6 seeds,
    gives 0.02x or 30x), so the median of three is reported, with every seed's ratio in
    ``ratio_steady_seeds``."""
    t_s = truth.t[0] + ACQUISITION
    sums = {"rmse_steady": [row["rmse_steady"]], "clean_rmse_steady": [row["clean_rmse_steady"]]}
    for k in range(1, STEADY_SEEDS):
        for key, (run_in, inj) in (("clean_rmse_steady", clean_in), ("rmse_steady", fault_in)):
            run = run_estimator(run_in, name, cfg, seed=seed + k, particle_budget=0)
            t, e, _ = errors(run.records, inj, truth, angular)
            sums[key].append(rms(e[t >= t_s]))
    ratios = [a / b if b > 0 else math.nan for a, b in zip(sums["rmse_steady"], sums["clean_rmse_steady"])]
    return {"rmse_steady": float(np.median(sums["rmse_steady"])),
            "clean_rmse_steady": float(np.median(sums["clean_rmse_steady"])),
            "ratio_steady": float(np.median(ratios)), "ratio_steady_seeds": " ".join(f"{r:.2f}" for r in ratios),
            "steady_seeds": STEADY_SEEDS}


def _steady_gate(records, t_s) -> dict:
    """Readings fused and rejected by the gate at estimate stamps >= t_s (clean run)."""
    fused = rejected = 0
    for rec in records:
        if rec.update is not None and rec.estimate.stamp >= t_s:
            fused += len(rec.update.accepted)
            rejected += len(rec.update.rejected)
    return {"gated_steady": fused + rejected, "rejected_steady": rejected}


def _suitability(inputs, name, cfg) -> str:
    """The suitability level of the estimator with these sensors ('?' if it cannot be assessed)."""
    try:
        return suitability(inputs, name, resolved_options(inputs, validate(name, cfg))).level
    except Exception as exc:  # noqa: BLE001 - the verdict is informative only
        return type(exc).__name__


def _write(folder, rows):
    keys = ["scenario", "estimator", "fault", "rmse", "clean_rmse", "ratio", "rmse_steady", "clean_rmse_steady",
            "ratio_steady", "steady_seeds", "ratio_steady_seeds", "recovery_s", "rmse_after", "clean_rmse_after", "tolerance", "ungated_rmse", "suitability",
            "gated_steady", "rejected_steady", *COUNTERS, "raised", "non_finite_estimates", "bad_nees",
            "wall_s", "cpu_s", "error"]
    write_csv(os.path.join(folder, "faults.csv"), rows, keys)
    with open(os.path.join(folder, "faults.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else str(x))


