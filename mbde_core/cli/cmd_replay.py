"""mbde replay: run estimators on a ROS 2 bag and evaluate them (no ROS needed)."""
from __future__ import annotations

import sys

from mbde_core import runs
from mbde_core.cli.argtypes import seed_type
from mbde_core.cli.outputs import DEFAULT_STORAGE, Output
from mbde_core.errors import DataError
from mbde_core.estimators.configure import load
from mbde_core.estimators.registry import ESTIMATOR_NAMES, names as estimator_names
from mbde_core.replay.outputs import summary_table
from mbde_core.replay.pipeline import find_bags, replay, summary_rows, summary_text

HELP = "run estimators on a ROS 2 bag; write metrics.json, an estimates bag, report.md and plots"
DESCRIPTION = """Replay the sensor readings of a ROS 2 bag (sqlite3 or mcap) through one or more
estimators, each in its fixed-step stage exactly as the live `estimator` node runs it.

The model and the sensors come from the bag's /mbde/description (bags written by
`mbde simulate`, including the scenario's model errors) or from --mechanism/--sensors.
If the bag has ground truth (/mbde/ground_truth), accuracy and consistency metrics are
computed; otherwise only costs and counters, unless `--reference smoother`: then each
bag is first smoothed (`mbde smooth`, options from the config's `smoother:` section) and
RMSE and NEES compare with the smoothed trajectory (NEES with the filter's covariance
minus the smoother's); metrics.json ("reference") and the report say which reference
was used.

Writes into OUT: metrics.json (per estimator: RMSE of z, zd, zdd, max error, mean NEES
and NIS with their 95 % chi-square bands, fraction of steps in the band, innovation
whiteness, step time, real-time factor, rejected-reading counts), estimates/ (a ROS 2
bag with /mbde/<estimator>/state and /mbde/<estimator>/joint_states, playable with
`ros2 bag play`), report.md and PNG plots. Everything is written into a hidden folder beside
OUT and renamed into place when complete: a run that fails (any estimator), Ctrl-C or
SIGTERM (exit 130 / 143) leaves OUT as it was."""


def add_arguments(p):
    p.add_argument("bag", nargs="+", help="ROS 2 bag directories, or folders holding bags")
    p.add_argument("--estimators", default="ukf,errorekf,dekf,cekf,diekfpm",
                   help=f"comma-separated list from: {', '.join(estimator_names())} (default: %(default)s)")
    p.add_argument("--config", help="estimator config YAML (see config/estimators/); default options otherwise")
    p.add_argument("--mechanism", help="mechanism YAML (instead of the bag's description)")
    p.add_argument("--sensors", help="sensor YAML with a `sensors:` list (with --mechanism)")
    p.add_argument("--out", required=True, help="output directory (several bags: one sub-folder per bag + summary)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default=DEFAULT_STORAGE,
                   help="storage of the estimates bag (default %(default)s)")
    p.add_argument("--reference", choices=("truth", "smoother"), default="truth",
                   help="what RMSE/NEES compare with: the bag's ground truth (default; none: metrics omitted) "
                        "or the batch smoother of the same readings (bags without ground truth)")
    p.add_argument("--reorder-window", type=float, default=None, metavar="S",
                   help="the estimator stage's reorder window [s], as the live node's reorder_window parameter "
                        "(default: its default, 0.02): raise it for bags whose readings were recorded late")
    p.add_argument("--seed", type=seed_type, default=0, help="run seed (a non-negative integer); each estimator draws "
                   "from (seed, its name), whatever its position in --estimators (default 0)")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde replay` at --out (and --timings)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--timings", metavar="FILE", help="write the wall-time breakdown (load, estimators, writing, "
                   "metrics, report, plots) as JSON (used by `mbde bench replay`)")
    runs.add_arguments(p, "(bag, estimator) runs")


def run(args) -> int:
    import time

    t_run = time.time()

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    bad = [n for n in names if n not in estimator_names()]
    if bad or not names:
        raise DataError(f"--estimators: unknown {', '.join(bad) or '(empty)'} (choose from {', '.join(estimator_names())})")
    if len(set(names)) != len(names):
        raise DataError(f"--estimators: {args.estimators!r} names an estimator twice")
    if args.sensors and not args.mechanism:
        raise DataError("--sensors needs --mechanism")
    if args.reorder_window is not None and not 0.0 <= args.reorder_window <= 60.0:
        raise DataError(f"--reorder-window: must be in [0, 60] s, got {args.reorder_window}")
    runs.check_options(args)
    configs = load(args.config, names)
    bags = find_bags(args.bag)
    inputs = list(args.bag) + bags + [args.config, args.mechanism, args.sensors]
    timings = Output(args.timings, "replay --timings", force=args.force, inputs=inputs + [args.out], kind="file",
                     what="--timings") if args.timings else None  # (not inside --out: that is replaced whole)
    with Output(args.out, "replay", force=args.force, inputs=inputs) as out:
        if timings is not None:
            timings.open()
        try:
            outcomes = replay(bags, names, configs, out.tmp, storage=args.storage, seed=args.seed,
                              plots=not args.no_plots, mechanism_file=args.mechanism, sensors_file=args.sensors,
                              reference=args.reference, config_file=args.config, reorder_window=args.reorder_window,
                              **runs.options(args))
            failed = [(bo.bag, name) for bo in outcomes for name, _ in bo.failed]
            if failed:
                total = sum(len(bo.results) + len(bo.failed) for bo in outcomes)
                print(f"mbde replay: {len(failed)} of {total} run(s) failed (see above): {args.out} not written",
                      file=sys.stderr)
                return 1
            if timings is not None:
                _write_timings(timings.tmp, t_run, outcomes)
            out.commit()
            if timings is not None:
                timings.commit()
        finally:
            if timings is not None and not timings.committed:
                timings.abort()
    for bo in outcomes:
        if len(outcomes) == 1 and bo.doc is not None:
            print(summary_table(bo.doc))
        print(f"wrote {out.shown(bo.out)}: metrics.json, estimates/ ({args.storage}), report.md"
              + (f", {len(bo.plots)} plots" if bo.plots else ""))
    if len(outcomes) > 1:
        print(summary_text(summary_rows(outcomes)))
        print(f"wrote {args.out}/summary.csv, summary.md")
    if timings is not None:
        print(f"wrote {args.timings}")
    return 0


def _write_timings(path: str, t_run: float, outcomes) -> None:
    import json
    import time

    doc = {"run_start_unix": t_run, "run_end_unix": time.time(),
           "bags": [{"bag": bo.bag, "phases": bo.timings,
                     "estimators": {r.name: {"wall": r.wall_time, **r.timings} for r in bo.results}}
                    for bo in outcomes]}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
