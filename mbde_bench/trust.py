"""Can the user trust what the tool says of its own estimates? Its uncertainty and its
trust verdict checked against the simulated truth on many runs (``mbde bench trust``).

Cases: every shipped scenario (config/scenarios) and the linkages of config/bench/trust
that no paper uses (an open 2-DOF chain with an IMU on each link, a 1-DOF Watt six-bar with
one gyroscope on its output link, a 3 m steel four-bar with only a crank encoder), each
with the scenario's own estimator model and with a 5 % mass error added
(:mod:`mbde_bench.trust_runs`). ``--seeds`` runs per case and model, ``--duration`` s each.

1. Calibration. Filters: per case x model x estimator (default options), the median over
   the runs of the mean NEES / dof, the coverage of the 95 % intervals and the runs flagged
   ``(!)`` / ``(u)`` by replay's consistency band (:mod:`mbde_bench.trust_tables`). The
   batch smoother: the same figures from ``mbde bench smoother``'s calibration runs
   (:func:`mbde_bench.smoother_calibration.run_case`) on the same cases. Identification:
   the coverage of its 95 % intervals from ``mbde bench identify``'s seeded runs
   (:func:`mbde_bench.identify.run_case`) on ``--identify-cases``.
2. The trust verdict against truth: the nominal runs, far-off starts (the estimators'
   initial guess of the first angle 0.4-1.5 rad off) and injected faults (``--faults``,
   :mod:`mbde_core.faults.kinds`), every case and model, and nominal runs of the motors
   bench's scenarios with the torque measured and unknown (``--motors``,
   :mod:`mbde_bench.trust_motors`): OK steps within 3 sigma
   (target >= 95 %), steps off by more than 10 sigma for at least 1 s called LOST
   (target >= 90 %).
3. ``mbde tune``'s held-out decision checked against the truth (``mbde bench tune``,
   :func:`mbde_bench.tune.run`) on ``--tune-scenarios``.

Writes DIR/trust.json (every run's row and the summaries), DIR/trust.md (the tables) and
prints them; DIR/tune holds table 3's bags and files.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import time

from mbde_bench import identify, smoother_calibration, trust_tables, tune
from mbde_bench.results import table
from mbde_bench.trust_motors import KIND as MOTORS, motor_cases, run_motor_case
from mbde_bench.trust_runs import MODELS, run_case
from mbde_core import runs
from mbde_core.config.paths import config_path
from mbde_core.errors import DataError
from mbde_core.faults.kinds import FAULT_NAMES

HELP = "trust: filters', smoother's and identification's uncertainty, the OK/DEGRADED/LOST verdict and mbde tune vs truth"
FAULTS = "bursts,bias_step,stuck"  # value faults: the readings' stamps stay true
TRUST_CASES = config_path("bench", "trust")


def add_arguments(p):
    p.add_argument("--out", default="trust_bench", help="output directory (default %(default)s)")
    p.add_argument("--seeds", type=int, default=5, help="runs per case and model (default %(default)s)")
    p.add_argument("--duration", type=float, default=6.0, help="simulated seconds per run (default %(default)s)")
    p.add_argument("--scenarios", default="",
                   help="comma-separated scenario names (config/scenarios) or YAML paths (default: every shipped "
                        "scenario and config/bench/trust)")
    p.add_argument("--estimators", default="ukf,errorekf,pf",
                   help="filters of tables 1-2; NAME+adaptive: with plant_noise.adaptive (default %(default)s)")
    p.add_argument("--faults", default=FAULTS, help="injected faults of table 2 ('' for none; default %(default)s)")
    p.add_argument("--far", action=argparse.BooleanOptionalAction, default=True,
                   help="far-off starts in table 2 (default on)")
    p.add_argument("--motors", action=argparse.BooleanOptionalAction, default=True,
                   help="table 2's nominal runs of the motors bench's scenarios, torque measured and unknown, "
                        "each for that bench's duration (default on)")
    p.add_argument("--tables", default="1,2,3", help="tables to run (default %(default)s)")
    p.add_argument("--smoother-runs", type=int, default=None, help="smoother runs per case (default: --seeds; 0: none)")
    p.add_argument("--identify-cases", default="pendulum,fourbar_gyro,motor_pendulum_disturbed",
                   help=f"identification cases (of {', '.join(identify.CASES)}; '' for none; default %(default)s)")
    p.add_argument("--identify-runs", type=int, default=None, help="identification runs per case (default: --seeds)")
    p.add_argument("--tune-scenarios", default="",
                   help="scenario YAML paths of table 3 (default: mbde bench tune's and config/bench/trust)")
    p.add_argument("--tune-estimators", default="ukf,errorekf,pf", help="estimators of table 3 (default %(default)s)")
    runs.add_arguments(p, "runs")


def case_paths(arg: str) -> list:
    """[(case, path)]: names of config/scenarios or YAML paths; '' every shipped scenario and config/bench/trust."""
    if not arg:
        shipped = sorted(glob.glob(os.path.join(config_path("scenarios"), "*.yaml")))
        paths = shipped + sorted(glob.glob(os.path.join(TRUST_CASES, "*.yaml")))
    else:
        paths = [a if a.endswith((".yaml", ".yml")) else config_path("scenarios", f"{a}.yaml")
                 for a in (x.strip() for x in arg.split(",")) if a]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise DataError(f"--scenarios: no such scenario {', '.join(missing)}")
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    own = os.path.realpath(TRUST_CASES) + os.sep
    return [(f"trust/{n}" if os.path.realpath(p).startswith(own) else n, p) for n, p in zip(names, paths)]


def _check(args) -> tuple[set, list, list]:
    tables = {t.strip() for t in args.tables.split(",") if t.strip()}
    if not tables or tables - {"1", "2", "3"}:
        raise DataError(f"--tables: choose from 1, 2, 3 (got {args.tables!r})")
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    bad = [f for f in faults if f not in FAULT_NAMES]
    if bad:
        raise DataError(f"--faults: unknown {', '.join(bad)} (choose from {', '.join(FAULT_NAMES)})")
    cases = [c.strip() for c in args.identify_cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in identify.CASES]
    if bad:
        raise DataError(f"--identify-cases: unknown {', '.join(bad)} (choose from {', '.join(identify.CASES)})")
    return tables, faults, cases


def _filter_task(shared, task):
    return run_motor_case(task) if len(task) == 4 else run_case(task)


def _smoother_task(shared, task):
    return smoother_calibration.run_case(task)


def _identify_task(shared, task):
    return identify.run_case(task)


def _filter_runs(args, cases, kinds) -> list:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    folder = os.path.join(args.out, "bags")
    os.makedirs(folder, exist_ok=True)
    tasks = [(c, p, m, k, r, args.duration, names, folder) for c, p in cases for m in MODELS for k in kinds
             if k != MOTORS for r in range(args.seeds)]
    tasks += [(c, r, names, folder) for c, _ in (motor_cases() if MOTORS in kinds else []) for r in range(args.seeds)]
    outs = runs.run_tasks(_filter_task, tasks, label="trust runs", **runs.options(args))
    label = lambda t: f"{t[0]} run {t[1]}" if len(t) == 4 else "{} {} {} run {}".format(t[0], *t[2:5])  # noqa: E731
    for line in runs.failures(outs, lambda i: label(tasks[i])):
        print(f"failed: {line}")
    return [row for o in outs if o.ok for row in o.value]


def _smoother(args, cases) -> tuple[list, str]:
    n = args.seeds if args.smoother_runs is None else args.smoother_runs
    tasks = [(c, p, r, args.duration) for c, p in cases for r in range(n)]
    outs = runs.run_tasks(_smoother_task, tasks, label="smoother runs",
                          **runs.options(args))
    rows = [o.value for o in outs if o.ok]
    summary = smoother_calibration.summarise(rows)
    return summary, table(smoother_calibration.HEADER, smoother_calibration.rows_of(summary))


def _identify(args, cases) -> tuple[dict, str]:
    n = args.seeds if args.identify_runs is None else args.identify_runs
    tasks = [(c, r, 0.2) for c in cases for r in range(n)]
    outs = runs.run_tasks(_identify_task, tasks, label="identification runs", **runs.options(args))
    summary = identify.summarise([o.value for o in outs if o.ok])
    return summary, identify.markdown_coverage(summary, n)


def _tune(args) -> str:
    paths = ([p.strip() for p in args.tune_scenarios.split(",") if p.strip()] if args.tune_scenarios
             else list(tune.SCENARIOS) + sorted(glob.glob(os.path.join(TRUST_CASES, "*.yaml"))))
    sub = argparse.Namespace(out=os.path.join(args.out, "tune"), scenarios=",".join(paths),
                             estimators=args.tune_estimators, duration=args.duration, holdout=0.3, seed=0,
                             **runs.options(args))
    os.makedirs(sub.out, exist_ok=True)
    tune.run(sub)
    with open(os.path.join(sub.out, "tune.md"), encoding="utf-8") as fh:
        return fh.read()


def run(args) -> int:
    tables, faults, id_cases = _check(args)
    cases = case_paths(args.scenarios)
    c0 = time.process_time()
    out, pages = {}, []
    kinds = ["nominal"] + (["far"] if args.far and "2" in tables else []) + (faults if "2" in tables else [])
    kinds += [MOTORS] if args.motors and "2" in tables else []
    if "1" in tables or "2" in tables:
        rows = _filter_runs(args, cases, kinds if "2" in tables else ["nominal"])
        out["runs"] = rows
    if "1" in tables:
        out["calibration"] = trust_tables.calibration(rows)
        md = trust_tables.table1(out["calibration"])
        pages.append(f"# 1. Filters' uncertainty ({args.seeds} runs x {args.duration:g} s per case and model)\n\n"
                     + trust_tables.__doc__.split("\n\n")[1] + "\n\n" + md)
        print(pages[-1])
        if (args.seeds if args.smoother_runs is None else args.smoother_runs) > 0:
            out["smoother"], md = _smoother(args, cases)
            pages.append("# 1b. The batch smoother's uncertainty (`mbde smooth`)\n\n" + md)
            print(pages[-1])
        if id_cases:
            out["identify"], md = _identify(args, id_cases)
            pages.append("# 1c. Identification's intervals (`mbde identify`)\n\n" + md)
            print(pages[-1])
    if "2" in tables:
        out["verdict"] = trust_tables.verdict(rows)
        pages.append(f"# 2. The trust verdict against truth (runs of: {', '.join(kinds)})\n\n"
                     + trust_tables.__doc__.split("\n\n")[2] + "\n\n" + trust_tables.table2(out["verdict"]))
        print(pages[-1])
    if "3" in tables:
        pages.append("# 3. `mbde tune`'s held-out decision against truth\n\n" + _tune(args))
        print(pages[-1])
    with open(os.path.join(args.out, "trust.md"), "w", encoding="utf-8") as fh:
        fh.write("\n\n".join(pages) + "\n")
    with open(os.path.join(args.out, "trust.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1, default=lambda x: None)
    print(f"\nCPU of this process {time.process_time() - c0:.0f} s (the runs' own CPU: trust.json)")
    return 0
