"""mbde replay: run estimators on a ROS 2 bag and evaluate them (no ROS needed)."""
from __future__ import annotations

import os
import sys

from mbde_core.cli.outputs import DEFAULT_STORAGE

HELP = "run estimators on a ROS 2 bag; write metrics.json, an estimates bag, report.md and plots"
DESCRIPTION = """Replay the sensor readings of a ROS 2 bag (sqlite3 or mcap) through one or more
estimators, each in its fixed-step stage exactly as the live `estimator` node runs it.

The model and the sensors come from the bag's /mbde/description (bags written by
`mbde simulate`, including the scenario's model errors) or from --mechanism/--sensors.
If the bag has ground truth (/mbde/ground_truth), accuracy and consistency metrics are
computed; otherwise only costs and counters.

Writes into OUT: metrics.json (per estimator: RMSE of z, zd, zdd, max error, mean NEES
and NIS with their 95 % chi-square bands, fraction of steps in the band, innovation
whiteness, step time, real-time factor, rejected-reading counts), estimates/ (a ROS 2
bag with /mbde/<estimator>/state and /mbde/<estimator>/joint_states, playable with
`ros2 bag play`), report.md and PNG plots."""


def add_arguments(p):
    from mbde_core.estimators.registry import ESTIMATOR_NAMES

    p.add_argument("bag", help="ROS 2 bag directory")
    p.add_argument("--estimators", default="ukf,errorekf,dekf,cekf,diekfpm",
                   help=f"comma-separated list from: {', '.join(ESTIMATOR_NAMES)} (default: %(default)s)")
    p.add_argument("--config", help="estimator config YAML (see config/estimators/); default options otherwise")
    p.add_argument("--mechanism", help="mechanism YAML (instead of the bag's description)")
    p.add_argument("--sensors", help="sensor YAML with a `sensors:` list (with --mechanism)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default=DEFAULT_STORAGE,
                   help="storage of the estimates bag (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="run seed; each estimator draws from (seed, its name), whatever its position in --estimators (default 0)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args) -> int:
    from mbde_core.cli.outputs import prepare_output_dir, results_like
    from mbde_core.errors import DataError
    from mbde_core.estimators.config_schema import load_estimator_configs
    from mbde_core.estimators.registry import ESTIMATOR_NAMES
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.outputs import summary_table, write_estimates_bag, write_metrics, write_report
    from mbde_core.replay.runner import evaluate, run_estimator
    from mbde_core.simulator.progress import ProgressBar

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    bad = [n for n in names if n not in ESTIMATOR_NAMES]
    if bad or not names:
        raise DataError(f"--estimators: unknown {', '.join(bad) or '(empty)'} (choose from {', '.join(ESTIMATOR_NAMES)})")
    if args.sensors and not args.mechanism:
        raise DataError("--sensors needs --mechanism")
    configs = load_estimator_configs(args.config, names)
    prepare_output_dir(args.out, args.force, "replay", results_like("metrics.json", "report.md"))
    inputs = load_inputs(args.bag, args.mechanism, args.sensors)
    print(f"bag {args.bag}: {inputs.mechanism.name}, {inputs.duration:.3f} s, "
          + ", ".join(f"{k} {v} readings" for k, v in inputs.counts.items())
          + ("" if inputs.truth is not None else "; no ground truth"))
    runs = []
    for name in names:
        bar = ProgressBar(f"{name:<9}")
        r = run_estimator(inputs, name, configs[name], seed=args.seed, progress=bar)
        bar.close()
        if r.counters["estimator_errors"]:
            print(f"warning: {name} failed {r.counters['estimator_errors']} time(s), first at t = "
                  f"{r.counters['first_estimator_error_at']} s (last: {r.counters['last_estimator_error']}); "
                  "each failure restarted its track from the initial guess at the next reading, as the live node does",
                  file=sys.stderr)
        evaluate(inputs, r)
        runs.append(r)
    doc = write_metrics(os.path.join(args.out, "metrics.json"), inputs, runs)
    description = None
    if inputs.scenario is not None:
        from mbde_core.scenario.description import write_description

        description = write_description(inputs.scenario)
    write_estimates_bag(os.path.join(args.out, "estimates"), inputs, runs, args.storage, description)
    plots = []
    if not args.no_plots:
        from mbde_core.replay.plots import write_plots

        plots = write_plots(args.out, inputs, runs, doc)
    write_report(os.path.join(args.out, "report.md"), doc, plots)
    print(summary_table(doc))
    print(f"wrote {args.out}: metrics.json, estimates/ ({args.storage}), report.md" + (f", {len(plots)} plots" if plots else ""))
    return 0
