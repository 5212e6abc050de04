"""Do the defaults transfer? Every estimator x every shipped scenario x {defaults, tuned}.

``mbde bench transfer --out DIR`` simulates every scenario of config/scenarios/ (or
``--scenarios``) into a bag (DIR/bags), then, on the run engine (:mod:`mbde_core.runs`,
``--jobs`` local processes or ``--scheduler``):

1. tunes every Kalman observer on every bag (``mbde tune``'s fit,
   :mod:`mbde_core.tuning`: plant-noise density by maximum innovation likelihood over the
   first ``--window`` s, from the readings alone);
2. replays every estimator on every bag (as ``mbde replay``: its stage, the bag's initial
   guess, seed ``--seed``) with its defaults (no --config: the default-tuning rule of
   :mod:`mbde_core.estimators.options.rule` for the Kalman observers, the particle filters'
   own defaults) and with the tuned options. The particle filters have no Gaussian
   innovations: the pf's "tuned" variant is fitted on its own marginal likelihood at its
   own step (``mbde tune``'s fit of the pf); the vipf's takes the tuned UKF's density of
   the same bag (noise.velocity = sqrt(q), a density: no step involved); their Gaussian
   follower (``refine``) runs with the tuned UKF's options.

Per run: RMSE of z (whole run), steady-state RMSE (t > 1 s after the first estimate),
mean NEES of [z, zd] against the truth and the acceptance band [0.3, 3] x 2g (2g its
degrees of freedom), pass/fail. The ADE-KF without a sensor that reads accelerations is
"n/a" (``mbde replay`` refuses it, exit status 2). Writes DIR/transfer.csv,
DIR/transfer.json, DIR/transfer.md (the README table) and prints the table.
"""
from __future__ import annotations

import glob
import json
import math
import os
import sys
import time

from mbde_bench.common import simulate_scenario_bag, write_csv
from mbde_bench.transfer_runs import run_task, tune_task
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.estimators.assess.suitability import UnsuitableError, precheck
from mbde_core.estimators.configure import defaults
from mbde_core.tuning.output import has_input_states, section

HELP = "every estimator x every shipped scenario x {defaults, tuned}: RMSE, steady-state RMSE, NEES band, pass/fail"
ESTIMATORS = ("ukf", "errorekf", "dekf", "cekf", "diekfpm", "viekf", "adekf", "pf", "vipf")
KALMAN = ("ukf", "errorekf", "dekf", "cekf", "diekfpm", "viekf", "adekf")
COLUMNS = ["scenario", "estimator", "variant", "status", "rmse", "rmse_ss", "nees", "band_lo", "band_hi", "psd", "step",
           "cpu_s", "errors", "rejected", "note"]


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--scenarios", default="", help="comma-separated scenario names (default: every config/scenarios/*.yaml)")
    p.add_argument("--estimators", default=",".join(ESTIMATORS), help="(default: %(default)s)")
    p.add_argument("--duration", type=float, default=10.0, help="simulated seconds per scenario (at most its own; default %(default)s)")
    p.add_argument("--window", type=float, default=10.0, help="seconds of readings each tuning evaluation uses (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="estimator seed (default %(default)s)")
    p.add_argument("--no-tuned", action="store_true", help="only the defaults")
    runs.add_arguments(p, "tunings and runs")


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    bad = [n for n in names if n not in ESTIMATORS]
    if bad or not names:
        raise DataError(f"--estimators: unknown {', '.join(bad) or '(empty)'} (choose from {', '.join(ESTIMATORS)})")
    paths = sorted(glob.glob(os.path.join(config_path("scenarios"), "*.yaml")))
    if args.scenarios:
        wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        known = {os.path.splitext(os.path.basename(p))[0]: p for p in paths}
        missing = [s for s in wanted if s not in known]
        if missing:
            raise DataError(f"--scenarios: unknown {', '.join(missing)} (choose from {', '.join(known)})")
        paths = [known[s] for s in wanted]
    os.makedirs(os.path.join(args.out, "bags"), exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    shared = {}
    for p in paths:
        name, inputs = simulate_scenario_bag(p, args.duration, os.path.join(args.out, "bags"))
        shared[name] = inputs
        print(f"bag {name}: {inputs.duration:g} s, " + ", ".join(f"{k} {v}" for k, v in inputs.counts.items()))
    scen = list(shared)
    tuned = {}
    if not args.no_tuned:
        ttasks = []
        for s in scen:
            for n in sorted(set(names) & (set(KALMAN) | {"pf"}) | ({"ukf"} if {"pf", "vipf"} & set(names) else set())):
                try:
                    precheck(n, shared[s].sensors)
                except UnsuitableError:
                    continue
                ttasks.append((s, n, args.window, args.seed))
        outs = runs.run_tasks(tune_task, ttasks, shared, label="tune", **runs.options(args))
        for t, o in zip(ttasks, outs):
            if o.ok:
                tuned[(t[0], t[1])] = o.value
            else:
                print(f"failed: tune {t[0]} {t[1]}: {o.error}", file=sys.stderr)
    rtasks = []
    for s in scen:
        for n in names:
            rtasks.append((s, n, "defaults", None, args.seed))
            if not args.no_tuned:
                cfg = _tuned_config(n, s, tuned)
                rtasks.append((s, n, "tuned", cfg, args.seed))
    outs = runs.run_tasks(run_task, [t for t in rtasks if not (t[2] == "tuned" and t[3] is None)], shared, label="runs",
                          **runs.options(args))
    rows, k = [], 0
    for t in rtasks:
        if t[2] == "tuned" and t[3] is None:
            rows.append({"scenario": t[0], "estimator": t[1], "variant": "tuned", "status": "n/a", "note": ""})
            continue
        o = outs[k]
        k += 1
        rows.append(o.value if o.ok else {"scenario": t[0], "estimator": t[1], "variant": t[2], "status": "error",
                                         "note": o.error})
    for row in rows:
        r = tuned.get((row["scenario"], row["estimator"] if row["estimator"] in KALMAN else "ukf"))
        if row["variant"] == "tuned" and r is not None and row.get("status") not in ("n/a", "error"):
            row["note"] = (f"plant noise x {10 ** r.log_factors['plant_noise']:.3g}" if row["estimator"] in KALMAN
                           else f"its own fit: sigma_a^2 x {10 ** tuned[(row['scenario'], 'pf')].log_factors['plant_noise']:.3g}"
                           if row["estimator"] == "pf" and (row["scenario"], "pf") in tuned
                           else f"sigma from the tuned ukf (q = {row.get('psd', 0.0):.3g})")
    _write(args.out, rows, tuned)
    text = table(rows, names, scen, not args.no_tuned)
    print(text)
    with open(os.path.join(args.out, "transfer.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    print(f"\n{len(rows)} rows; wall {time.perf_counter() - t0:.0f} s, CPU of this process {time.process_time() - c0:.0f} s; "
          f"results: transfer.csv, transfer.json, transfer.md")
    return 0


def _tuned_config(name, scen, tuned):
    """The tuned options of ``name`` on ``scen`` (None: not tuned / meaningless)."""
    if name in KALMAN:
        r = tuned.get((scen, name))
        return None if r is None else r.tuned
    ukf = tuned.get((scen, "ukf"))
    if ukf is None:
        return None
    import numpy as np

    q = float(np.max(np.atleast_1d(ukf.tuned.plant_noise.acceleration_psd)))
    cfg = defaults(name)
    if name == "pf":
        pf = tuned.get((scen, "pf"))
        if pf is None:
            return None
        cfg["acceleration_sigma"] = float(pf.tuned.acceleration_sigma)
    else:  # vipf: velocity noise density gamma^2 = q
        cfg["noise"] = dict(cfg["noise"], velocity=math.sqrt(q))
    if cfg["refine"]["estimator"] == "ukf" and not has_input_states(ukf):  # its follower: the tuned UKF (as mbde tune writes it)
        cfg["refine"] = dict(cfg["refine"], options={k: v for k, v in section(ukf).items() if k != "step"})
    return cfg


def _write(out, rows, tuned):
    write_csv(os.path.join(out, "transfer.csv"), rows, COLUMNS)
    doc = {"rows": rows, "tuning": {f"{s}/{n}": {"log10_factors": r.log_factors, "evaluations": r.evaluations,
                                                  "loglik_before": r.before.per_reading, "loglik_after": r.after.per_reading,
                                                  "nis_before": r.before.nis_per_channel, "nis_after": r.after.nis_per_channel,
                                                  "cpu_s": r.cpu_s} for (s, n), r in tuned.items()}}
    with open(os.path.join(out, "transfer.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=lambda x: None)


def table(rows, names, scenarios, with_tuned: bool) -> str:
    """Markdown table: one row per (scenario, estimator); defaults | tuned."""
    by = {(r["scenario"], r["estimator"], r["variant"]): r for r in rows}
    head = ["scenario", "estimator", "NEES band", "RMSE z", "RMSE z t>1s", "NEES", "ok"]
    if with_tuned:
        head += ["tuned RMSE z", "tuned RMSE z t>1s", "tuned NEES", "tuned ok", "tuning"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    count = {"defaults": [0, 0], "tuned": [0, 0]}
    for s in scenarios:
        for n in names:
            d = by.get((s, n, "defaults"), {})
            band = f"[{d['band_lo']:g}, {d['band_hi']:g}]" if "band_lo" in d else ""
            cells = [s, n, band] + _cells(d, count["defaults"])
            if with_tuned:
                t = by.get((s, n, "tuned"), {})
                cells += _cells(t, count["tuned"]) + [t.get("note", "") or ""]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"defaults: {count['defaults'][0]} of {count['defaults'][1]} runs with NEES in the band"
                 + (f"; tuned: {count['tuned'][0]} of {count['tuned'][1]}" if with_tuned else "")
                 + " (n/a rows excluded)")
    return "\n".join(lines)


def _cells(r, count) -> list[str]:
    st = r.get("status", "")
    if st in ("n/a", "error", ""):
        return ["-", "-", "-", st or "-"]
    count[1] += 1
    count[0] += st == "pass"
    return [_g(r.get("rmse")), _g(r.get("rmse_ss")), _g(r.get("nees")), "pass" if st == "pass" else "FAIL"]


def _g(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"
