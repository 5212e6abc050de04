"""mbde tune: fit the observers' plant-noise density (and sensor sigmas) to a bag's readings."""
from __future__ import annotations

import sys
import tempfile

from mbde_core import runs
from mbde_core.cli.argtypes import positive, seed_type
from mbde_core.cli.outputs import Output
from mbde_core.errors import DataError
from mbde_core.estimators.assess.suitability import precheck
from mbde_core.estimators.configure import load
from mbde_core.estimators.registry import names, traits
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import resolved_options
from mbde_core.tuning import output
from mbde_core.tuning.search import tune

HELP = "fit the estimators' plant noise (and sensor sigmas) to a bag's readings; kept only if it predicts held-out readings better"
DESCRIPTION = """Fit the plant-noise density of Kalman observers (and, with --sensors-sigma, the
sigma of every sensor) and the particle filter's acceleration_sigma to the readings of a
ROS 2 bag alone -- no ground truth -- by maximising their log-likelihood (prediction-error
method): a Kalman observer's innovations, -1/2 sum (y^T S^-1 y + log det S + d log 2 pi);
the particle filter's own marginal likelihood (the log of its weights' normaliser per
update). Each evaluation is one filter run, at the estimator's own resolved step, over the
fit part of the window (the first 1 - --holdout of the first --window seconds), through
the same stage as `mbde replay`; scipy.optimize searches a factor on the starting values
(the --config's, else the default-tuning rule's) in log space (a grid over +-3 decades,
+-2 for the PF, widened when the best point is at an end; then Brent's bounded method;
Powell for the sensor sigmas).

The start and the fitted options then both run over the whole window and are scored on
the held-out rest: the fitted options are written only if they predict the held-out
readings better, else the start's numbers are (and it says so). Prints, per estimator,
the mean NIS per channel (1 for a consistent filter) and the log-likelihood per reading
on both parts, and writes the chosen options (explicit numbers) to --out for `mbde replay
--config` and the estimator node (config_file). What can be tuned is each estimator's
traits' ``tunable`` (mbde_core/estimators/traits.py)."""


def tunable():
    """(kalman, particle): the estimators whose plant noise the innovation likelihood fits,
    and those whose acceleration_sigma their own marginal likelihood fits (their traits)."""
    fitted = tuple(n for n in names() if "plant_noise" in traits(n).tunable)
    derived = tuple(n for n in names() if "acceleration_sigma" in traits(n).tunable)
    return fitted, derived


def add_arguments(p):
    p.add_argument("bag", help="ROS 2 bag directory")
    p.add_argument("--estimators", default="ukf,errorekf",
                   help="comma-separated: Kalman observers (ukf, errorekf, viekf, dekf, cekf, diekfpm, adekf) and pf "
                        "(default: %(default)s)")
    p.add_argument("--out", help="write the tuned config YAML here (default: print it)")
    p.add_argument("--sensors-sigma", action="store_true", help="also fit one factor on each sensor's sigma")
    p.add_argument("--window", type=positive, default=10.0, metavar="S",
                   help="seconds of readings from the start of the bag used by each evaluation (default %(default)s)")
    p.add_argument("--holdout", type=float, default=0.3, metavar="F",
                   help="fraction of the window held out of the fit to judge it (0: no hold-out; default %(default)s)")
    p.add_argument("--config", help="starting options (estimator config YAML); default: the default-tuning rule")
    p.add_argument("--mechanism", help="mechanism YAML (instead of the bag's description)")
    p.add_argument("--sensors", help="sensor YAML with a `sensors:` list (with --mechanism)")
    p.add_argument("--seed", type=seed_type, default=0, help="estimator seed, a non-negative integer (default 0)")
    p.add_argument("--verbose", action="store_true", help="print every evaluation")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde tune` at --out")
    runs.add_arguments(p, "estimators")


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    fitted, derived = tunable()
    bad = [n for n in names if n not in fitted + derived]
    if bad or not names:
        raise DataError(f"--estimators: cannot tune {', '.join(bad) or '(empty)'} (choose from {', '.join(fitted + derived)})")
    if len(set(names)) != len(names):
        raise DataError(f"--estimators: {args.estimators!r} names an estimator twice")
    if args.sensors and not args.mechanism:
        raise DataError("--sensors needs --mechanism")
    if not 0.0 <= args.holdout < 1.0:
        raise DataError(f"--holdout: must be in [0, 1), got {args.holdout:g}")
    if args.force and not args.out:
        raise DataError("--force: applies to --out only (without --out the tuned options are printed)")
    runs.check_options(args)
    out = None
    if args.out:
        out = Output(args.out, "tune", force=args.force, kind="file",
                     inputs=[args.bag, args.config, args.mechanism, args.sensors]).open()
    try:
        return _tune(args, names, fitted, derived, out)
    finally:
        if out is not None and not out.committed:
            out.abort()


def _tune(args, names, fitted, derived, out) -> int:
    configs = load(args.config, names)
    source = load_inputs(args.bag, args.mechanism, args.sensors)
    for note in source.notes:
        print(f"warning: {note}", file=sys.stderr)
    readings = [m for m in source.measurements if m.stamp <= source.start + args.window]
    if not readings:
        raise DataError(f"{args.bag}: no readings in the first {args.window:g} s")
    for n in names:
        precheck(n, source.sensors)
    window = min(args.window, source.duration)
    split = source.start + (1.0 - args.holdout) * window if args.holdout > 0 else None
    fit_s = None if split is None else split - source.start
    if split is not None and (not any(m.stamp <= split for m in readings) or not any(m.stamp > split for m in readings)):
        raise DataError(f"--holdout {args.holdout:g}: the fit or the held-out part of the {window:g} s has no readings")
    print(f"bag {args.bag}: {source.mechanism.name}, {len(readings)} readings in the first {window:g} s; tuning "
          f"{', '.join(names)}" + (" (plant noise and sensor sigmas)" if args.sensors_sigma else " (plant noise)")
          + ("" if split is None else f"; fit on the first {fit_s:g} s, judged on the next {window - fit_s:g} s"))
    tasks = [(n, resolved_options(source, configs[n]), bool(args.sensors_sigma) and n in fitted, int(args.seed),
              bool(args.verbose), split) for n in names]
    outcomes = runs.run_tasks(_tune_task, tasks, (source, readings), label="tune", **runs.options(args))
    results = [o.value for o in outcomes if o.ok]
    for o, t in zip(outcomes, tasks):
        if not o.ok:
            print(f"failed: {t[0]}: {o.error}", file=sys.stderr)
    if len(results) < len(tasks):
        print(f"mbde tune: {len(tasks) - len(results)} of {len(tasks)} estimator(s) failed: "
              + (f"{args.out} not written" if args.out else "no tuned options"), file=sys.stderr)
        return 1
    print(output.table(results))
    for r in results:
        print(output.verdict(r) + f" ({r.evaluations} filter runs, {r.cpu_s:.1f} s CPU)")
    if out is not None:
        output.write_config(out.tmp, args.bag, window, results, fit_s)
        out.commit()
        print(f"wrote {args.out}")
    else:
        with tempfile.NamedTemporaryFile("r", suffix=".yaml") as tmp:
            output.write_config(tmp.name, args.bag, window, results, fit_s)
            print(open(tmp.name, encoding="utf-8").read(), end="")
    return 0


def _tune_task(shared, task):
    source, readings = shared
    name, cfg, sensors_sigma, seed, verbose, split = task
    return tune(source, readings, name, cfg, sensors_sigma, seed, log=print if verbose else None, split=split)
