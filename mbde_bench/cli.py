"""mbde bench NAME: benchmarks that reproduce the papers' experiments and print tables.

Each benchmark is a module ``mbde_bench.<name>`` with ``HELP``, ``add_arguments(parser)``
and ``run(args) -> int``. Speed targets are reported by these tables, never asserted in
unit tests.
"""
from __future__ import annotations

import importlib

from mbde_bench import results
from mbde_core import runs
from mbde_core.cli.argtypes import int_range, nonnegative, seed_type
from mbde_core.cli.outputs import Output

HELP = ("benchmarks: accuracy (paper 003 matrix), speed, pf (paper 000), adekf (paper 004), identify (paper 001), "
        "replay, vi (paper 002), smoother, faults, transfer, tune, safety, motors, realtime, trust")
DESCRIPTION = """Run a benchmark; each prints tables and writes CSV/JSON and figures into --out.

  accuracy   paper 003 matrix: {fourbar, fivebar} x {encoders, gyroscopes} x sensor period
             {1, 5, 10, 15} x gravity error {1, 4} m/s^2 x seeded runs, all observers
  speed      us per filter step of each observer; our UKF vs FilterPy's with the same model
  pf         paper 000 particle-filter experiments (convergence, branches, sweep, speed)
  adekf      paper 004 ADE-KF experiments (slider-crank, exact vs learned map, MSC Adams)
  identify   paper 001 identification: coverage of seeded runs, iterations, wall time, and
             the paper-003 gravity-error bags replayed before/after calibration
  replay     mbde replay at scale: wall-time breakdown of a 10 s replay, hour-long bags (time, memory)
  vi         paper 002 variational-integrator filters (oscillator clouds, symplectic Kalman,
             crane VI PF vs RK4/Euler PF, VI-EKF vs errorEKF, VI step speed)
  smoother   batch smoother: wall time vs run length, LM vs scipy trf, windowed seams, 1 h run, `mbde smooth` memory
  faults     sensor faults (outliers, stamp anomalies, gaps, dropouts, drift) injected into
             simulated bags of every scenario, replayed by every estimator
  transfer   every estimator x every shipped scenario x {defaults, tuned (mbde tune)}: RMSE,
             steady-state RMSE, mean NEES against its band [0.3, 3] x 2g, pass/fail
  tune       mbde tune's held-out decision (start vs fitted) on a few bags, checked against
             the truth: held-out score, RMSE and NEES of both
  motors     motor-driven linkages: every Kalman observer with the motor torque measured (an
             effort sensor) vs unknown (input states) vs the linkage released, seeded runs
  realtime   every estimator's CPU per step and ratio to real time (one core, pass <= 25 %) on
             every shipped scenario; the PF's thread scaling and acquisition rate over seeds
  trust      can the user trust the estimates? filters', smoother's and identification's
             uncertainty, the OK/DEGRADED/LOST verdict (nominal, far-off starts, faults) and
             mbde tune's held-out decision against the truth, shipped scenarios and
             config/bench/trust, with and without a 5 % mass error
  safety     data safety: --out vs inputs, --force, concurrent runs, Ctrl-C/SIGTERM, bags cut
             short, bad numbers, failed runs, unusable bags (each row run through the CLI)

Run `mbde bench NAME --help` for the options of each."""

BENCHES = ("accuracy", "speed", "pf", "adekf", "identify", "replay", "vi", "smoother", "faults", "transfer", "tune", "safety",
           "motors", "realtime", "trust")
SIGNED = {"initial_angle", "offset", "gravity_error"}  # numeric options that may be negative
AT_LEAST_ONE = {"jobs", "runs", "repeat", "particles", "max_particles", "multidof_runs", "nees_runs"}


def _bounded(parser) -> None:
    """Range types for the benchmarks' numeric options: seeds in [0, 2^63), counts >= 1
    (AT_LEAST_ONE) or >= 0, durations and the like >= 0 (finite: mbde_core.cli.main)."""
    for a in parser._actions:
        if a.dest in SIGNED or a.type not in (int, float):
            continue
        if a.dest == "seed":
            a.type = seed_type
        elif a.type is int:
            a.type = int_range(1 if a.dest in AT_LEAST_ONE else 0)
        else:
            a.type = nonnegative


def add_arguments(p):
    sub = p.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name in BENCHES:
        try:
            mod = importlib.import_module(f"mbde_bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"mbde_bench.{name}":
                raise
            continue
        sp = sub.add_parser(name, help=getattr(mod, "HELP", name), description=mod.__doc__)
        mod.add_arguments(sp)
        _bounded(sp)
        if not any("--force" in a.option_strings for a in sp._actions):
            sp.add_argument("--force", action="store_true", help="replace an earlier output of the same benchmark at --out")
        sp.add_argument("--results", metavar="DIR",
                        help=f"also write the tables as a Markdown page DIR/{name}.md with the machine, date and "
                             "commit at the top (e.g. docs/results: the documentation's results pages)")
        sp.set_defaults(_bench_module=mod, _bench_name=name)


def _run_module(args) -> int:
    """The benchmark itself; with --results its printed tables also become a results page."""
    if not args.results:
        return int(args._bench_module.run(args) or 0)
    load_start = results.load_average()
    with results.captured() as printed:
        status = int(args._bench_module.run(args) or 0)
    if status == 0:
        print(f"wrote {results.bench_page(args._bench_name, args._bench_module, args, printed.text(), load_start)}")
    return status


def run(args) -> int:
    """Run the benchmark with its --out written atomically (mbde_core.cli.outputs): into a
    hidden folder beside --out, renamed into place when the benchmark finished with exit
    status 0; an interrupted or failed benchmark leaves --out as it was."""
    runs.check_options(args)
    out = getattr(args, "out", None)
    if not out:
        return _run_module(args)
    inputs = [getattr(args, k, None) for k in ("config", "mechanism", "bag", "scenario")]
    with Output(out, f"bench {args._bench_name}", force=args.force, inputs=[i for i in inputs if isinstance(i, str)]) as o:
        args.out = o.tmp
        try:
            rc = _run_module(args)
        finally:
            args.out = out
        if rc == 0:
            o.commit()
            print(f"wrote {out}")
        else:
            print(f"mbde bench {args._bench_name}: exit status {rc}: {out} not written")
    return rc
