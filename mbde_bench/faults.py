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

import csv
import json
import math
import multiprocessing
import os
import time

import numpy as np

HELP = "fault injection (outliers, stamp anomalies, gaps, dropouts, drift...) on every scenario and estimator"
from mbde_core.estimators.registry import ESTIMATOR_NAMES as ESTIMATORS  # every estimator
TARGETS = {"outliers": ("ratio_steady", 1.5), "backward_jump": ("recovery_s", 1.0), "bag_loop": ("recovery_s", 1.0),
           "gap": ("recovery_s", 1.0)}
STOCHASTIC = ("pf", "vipf")  # estimators whose steady-state ratio is a median over seeds (_seed_mean)
STEADY_SEEDS = 3
COUNTERS = ("received", "rejected_gate", "gate_scale_max", "gate_believed", "reacquisitions", "multistarts", "out_of_order", "non_finite", "duplicates",
            "resets", "backward_jump_last", "future", "gap_resets", "diverged", "reconvergence_last", "estimator_errors")

_INPUTS = {}  # scenario -> ReplayInputs, filled before forking the workers


def add_arguments(p):
    from mbde_core.faults.kinds import FAULT_NAMES

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
    from mbde_core.config.paths import config_path

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

    from mbde_core.faults.kinds import inject
    from mbde_core.faults.score import ACQUISITION, errors, score
    from mbde_core.replay.runner import run_estimator

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
    from mbde_core.errors import DataError
    from mbde_core.faults.kinds import FAULT_NAMES
    from mbde_core.simulator.progress import ProgressBar

    if args.merge:
        return _merge(args, [d.strip() for d in args.merge.split(",") if d.strip()])

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    faults = ["clean"] + [f for f in faults if f != "clean"]
    bad = [n for n in names if n not in ESTIMATORS] + [f for f in faults if f not in FAULT_NAMES]
    if bad:
        raise DataError(f"unknown estimator(s) or fault(s): {', '.join(bad)}")
    from mbde_core.estimators.options.schema import load_estimator_configs

    configs = load_estimator_configs(args.config or None, names)  # defaults unless --config
    from mbde_bench.common import simulate_scenario_bag

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
    crashes = sum(_crashes(r) for r in rows)
    cpu = time.process_time() - c_start + sum(float(r.get("cpu_s", 0.0) or 0.0) for r in rows)
    print(f"\n{len(rows)} runs (+ {sum('ungated_rmse' in r for r in rows)} clean runs without the gate) in "
          f"{time.perf_counter() - t_start:.0f} s wall, {cpu:.0f} s CPU (--jobs {args.jobs}); crashes {crashes}; "
          f"target misses {len(misses)}; results: faults.csv, faults.json")
    return 0


def _merge(args, folders) -> int:
    """--merge: the rows of earlier runs' faults.json (non-finite values are kept as
    JSON's Infinity/NaN) in one set of tables; a (scenario, estimator, fault) given twice
    keeps the last folder's row."""
    from mbde_core.errors import DataError
    from mbde_core.faults.kinds import FAULT_NAMES

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
    print(f"\n{len(rows)} runs merged from {', '.join(folders)}; crashes {sum(_crashes(r) for r in rows)}; "
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
    from mbde_core.faults.score import ACQUISITION, errors, rms
    from mbde_core.replay.runner import run_estimator

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
    from mbde_core.replay.runner import suitability

    try:
        return suitability(inputs, name, cfg).level
    except Exception as exc:  # noqa: BLE001 - the verdict is informative only
        return type(exc).__name__


def _crashes(r) -> int:
    return int(r.get("raised", 0) or 0) + int(r.get("non_finite_estimates", 0) or 0) + int(r.get("bad_nees", 0) or 0)


def target_misses(rows) -> list:
    out = []
    for r in rows:
        key, limit = TARGETS.get(r["fault"], (None, None))
        if key is not None and not (r.get(key, math.inf) <= limit):
            out.append(r)
    return out


def _write(folder, rows):
    keys = ["scenario", "estimator", "fault", "rmse", "clean_rmse", "ratio", "rmse_steady", "clean_rmse_steady",
            "ratio_steady", "steady_seeds", "ratio_steady_seeds", "recovery_s", "rmse_after", "clean_rmse_after", "tolerance", "ungated_rmse", "suitability",
            "gated_steady", "rejected_steady", *COUNTERS, "raised", "non_finite_estimates", "bad_nees",
            "wall_s", "cpu_s", "error"]
    with open(os.path.join(folder, "faults.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(folder, "faults.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else str(x))


def _cell(r) -> str:
    if r is None:
        return "-"
    if r.get("rmse") is None:
        return "crash"
    text = _ratio_text(r)
    if "recovery_s" in r:
        rec = r["recovery_s"]
        text += f"/{rec:.2f}s" if math.isfinite(rec) else "/never"
    key, limit = TARGETS.get(r["fault"], (None, None))
    if key is not None and not (r.get(key, math.inf) <= limit):
        text += "!"
    if _crashes(r):
        text += f" C{_crashes(r)}"
    return text


def _ratio_text(r) -> str:
    """The whole-run ratio; for a fault whose target is the steady-state ratio, that one
    first and the whole-run ratio in parentheses."""
    whole = r.get("ratio", math.nan)
    whole = f"{whole:.2f}" if math.isfinite(whole) else "nan"
    if TARGETS.get(r["fault"], (None,))[0] != "ratio_steady":
        return whole
    steady = r.get("ratio_steady", math.nan)
    return (f"{steady:.2f}" if math.isfinite(steady) else "nan") + f" ({whole})"


def format_tables(rows, scenarios, names, faults) -> str:
    """Per scenario: RMSE ratio to clean (/recovery time) per fault and estimator, then the
    counters of the stage summed over the estimators."""
    by = {(r["scenario"], r["estimator"], r["fault"]): r for r in rows}
    lines = []
    w = max(len(f) for f in faults) + 2
    for s in scenarios:
        lines.append(f"\n{s}: RMSE(z) / clean RMSE [/ recovery time]; ! = misses its target, C = crashes")
        lines.append(f"{'fault':<{w}}" + "".join(f"{n:>16}" for n in names))
        for f in faults:
            lines.append(f"{f:<{w}}" + "".join(f"{_cell(by.get((s, n, f))):>16}" for n in names))
        clean = [by.get((s, n, "clean")) for n in names]
        lines.append(f"{'clean RMSE [rad]':<{w}}" + "".join(
            f"{(c['rmse'] if c and c.get('rmse') is not None else math.nan):>16.4f}" for c in clean))
    return "\n".join(lines)


def _worst(rs, key, default=math.nan):
    vals = [r.get(key) for r in rs if r.get(key) is not None]
    vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v))]
    return max(vals) if vals else default


def format_summary(rows, names, faults) -> str:
    """Markdown table over every scenario: per fault and estimator the worst RMSE ratio to
    clean, the worst recovery time [s] and the worst RMSE-after-recovery ratio (faults
    that end), crashes; then the clean runs' false-rejection rate of the gate."""
    by = {}
    for r in rows:
        by.setdefault((r["fault"], r["estimator"]), []).append(r)
    scen = len({r["scenario"] for r in rows})
    lines = [f"\nAll {scen} scenario(s), worst case: RMSE / clean [/ recovery s, RMSE after recovery / clean]; "
             "! misses a target, C crashes", "", "| fault | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for f in faults:
        cells = []
        for n in names:
            rs = by.get((f, n), [])
            if not rs:
                cells.append("-")
                continue
            text = f"{_worst(rs, 'ratio'):.2f}"
            if TARGETS.get(f, (None,))[0] == "ratio_steady":
                text = f"{_worst(rs, 'ratio_steady'):.2f} ({text})"
            if any("recovery_s" in r for r in rs):
                rec = _worst(rs, "recovery_s", math.inf)
                after = [r["rmse_after"] / r["clean_rmse_after"] for r in rs
                         if r.get("rmse_after") is not None and r.get("clean_rmse_after")]
                text += f" / {rec:.2f} s" if math.isfinite(rec) else " / never"
                if after:
                    text += f", {max(after):.2f}"
            if any(r in target_misses(rs) for r in rs):
                text += " !"
            crashes = sum(_crashes(r) for r in rs)
            if crashes:
                text += f" C{crashes}"
            cells.append(text)
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    rates, steady, cost = [], [], []
    for n in names:
        rs = by.get(("clean", n), [])
        rec = sum(int(r.get("received", 0) or 0) for r in rs)
        rej = sum(int(r.get("rejected_gate", 0) or 0) for r in rs)
        rates.append(f"{100.0 * max(rej_rate(r) for r in rs):.2f} % max, {100.0 * rej / rec:.2f} % all" if rec else "-")
        steady.append(_steady_rates(rs))
        ratios = [r["rmse"] / r["ungated_rmse"] for r in rs if r.get("rmse") is not None and r.get("ungated_rmse")]
        cost.append(f"{max(ratios):.2f}" if ratios else "-")
    lines.append("| clean: gate rejections | " + " | ".join(rates) + " |")
    lines.append("| clean, t >= 1 s: gate rejections, suitable runs (weak runs) | " + " | ".join(steady) + " |")
    lines.append("| clean: RMSE / ungated RMSE | " + " | ".join(cost) + " |")
    return "\n".join(lines)


def _steady_rates(rs) -> str:
    """False-rejection rate after the first second over the runs whose suitability is ok
    (the largest of a run, and all their readings pooled), then the largest of the weak
    ones (where the estimator cannot follow the state)."""
    def rate(r):
        n = int(r.get("gated_steady", 0) or 0)
        return int(r.get("rejected_steady", 0) or 0) / n if n else 0.0

    ok = [r for r in rs if r.get("suitability") == "ok"]
    weak = [rate(r) for r in rs if r.get("suitability", "ok") != "ok"]
    n = sum(int(r.get("gated_steady", 0) or 0) for r in ok)
    pooled = sum(int(r.get("rejected_steady", 0) or 0) for r in ok) / n if n else 0.0
    text = f"{100.0 * max(map(rate, ok)):.2f} % max, {100.0 * pooled:.3f} % all" if ok else "-"
    return text + (f" ({100.0 * max(weak):.2f} %)" if weak else "")


def rej_rate(r) -> float:
    """Fraction of a run's readings rejected by the gate."""
    rec = int(r.get("received", 0) or 0)
    return int(r.get("rejected_gate", 0) or 0) / rec if rec else 0.0
