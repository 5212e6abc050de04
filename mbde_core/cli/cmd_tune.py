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

HELP = "fit the observers' plant noise (and sensor sigmas) to a bag's readings (max innovation likelihood)"
DESCRIPTION = """Fit the plant-noise density of Kalman observers (and, with --sensors-sigma, the
sigma of every sensor) to the readings of a ROS 2 bag alone -- no ground truth -- by
maximising the innovation log-likelihood -1/2 sum (y^T S^-1 y + log det S + d log 2 pi)
(prediction-error method): each evaluation is one filter run over the first --window
seconds of the bag, through the same stage as `mbde replay`; scipy.optimize searches a
factor on the starting values (the --config's, else the default-tuning rule's) in log
space (a grid over +-3 decades, then Brent's bounded method; Powell for the sensor sigmas).

Prints, per estimator, the mean NIS per channel (1 for a consistent filter) and the
log-likelihood per reading before and after, and writes the tuned options (explicit
numbers) to --out for `mbde replay --config` and the estimator node (config_file).
`pf` in --estimators: the particle filter has no Gaussian innovations; its
acceleration_sigma is set to the tuned Kalman density's equivalent sqrt(q / step).
What can be tuned is each estimator's traits' ``tunable`` (mbde_core/estimators/traits.py)."""


def tunable():
    """(fitted, derived): the estimators whose plant noise the innovation likelihood fits,
    and those whose acceleration_sigma is derived from a fitted one (their traits)."""
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
    kalman = [n for n in names if n in fitted]
    particle = [n for n in names if n in derived]
    if particle and not kalman:  # the PF's sigma_a comes from a tuned Kalman observer (the first that can follow it)
        kalman = [next(n for n in fitted if traits(n).follower)]
    configs = load(args.config, kalman + particle)
    source = load_inputs(args.bag, args.mechanism, args.sensors)
    for note in source.notes:
        print(f"warning: {note}", file=sys.stderr)
    readings = [m for m in source.measurements if m.stamp <= source.start + args.window]
    if not readings:
        raise DataError(f"{args.bag}: no readings in the first {args.window:g} s")
    for n in kalman:
        precheck(n, source.sensors)
    print(f"bag {args.bag}: {source.mechanism.name}, {len(readings)} readings in the first "
          f"{min(args.window, source.duration):g} s; tuning {', '.join(kalman)}"
          + (" (plant noise and sensor sigmas)" if args.sensors_sigma else " (plant noise)"))
    tasks = [(n, resolved_options(source, configs[n]), bool(args.sensors_sigma), int(args.seed), bool(args.verbose))
             for n in kalman]
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
    pf = {}
    for n in particle:
        pf[n] = output.pf_section(results, output.pf_step(configs[n]), n)
        print(pf[n][1])
    for r in results:
        print(f"{r.name}: " + ", ".join(f"{k} x {10 ** v:.3g}" for k, v in r.log_factors.items())
              + f" ({r.evaluations} filter runs, {r.cpu_s:.1f} s CPU)")
    if out is not None:
        output.write_config(out.tmp, args.bag, args.window, results, pf)
        out.commit()
        print(f"wrote {args.out}")
    else:
        with tempfile.NamedTemporaryFile("r", suffix=".yaml") as tmp:
            output.write_config(tmp.name, args.bag, args.window, results, pf)
            print(open(tmp.name, encoding="utf-8").read(), end="")
    return 0


def _tune_task(shared, task):
    source, readings = shared
    name, cfg, sensors_sigma, seed, verbose = task
    return tune(source, readings, name, cfg, sensors_sigma, seed, log=print if verbose else None)
