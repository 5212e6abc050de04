"""Real time with margin: the CPU every estimator needs per second of readings, on one core.

Per shipped scenario (config/scenarios/*.yaml) the scenario is simulated for ``--duration``
s into a bag (``mbde simulate``'s writer), and every estimator runs on it with its defaults
as ``mbde replay`` resolves them (input states, multi-start bank, gates, step) in its
:class:`~mbde_core.estimators.stage.core.EstimatorStage`, fed one reading at a time as the
live node feeds them. Before the measured run the estimator runs once on the first
``--warmup`` s (discarded: just-in-time compilation, caches), then the whole bag is
measured with the process CPU time (``time.process_time``: what this process used, all its
threads, whatever else runs on the machine). Reported per (scenario, estimator):

- CPU per filter step [us], the filter step and the shortest sensor period [ms] (a step
  that is a multiple of the period: the Kalman observers' multi-rate step, the sensor's
  readings of a step fused as one, :mod:`mbde_core.estimators.stage.multirate`; a step
  that divides it: the dynamics need the shorter step);
- **ratio to real time** = CPU / simulated duration of the bag (1.0: just real time);
  pass when <= 25 % (issue 43: room for the rest of a live system on one core).

The particle filter's **thread scaling**: the same PF run (``--threads-scenario``) with
one and with two propagation threads (``MBDE_PF_THREADS``): wall and process CPU time of
each, the speed-up wall(1) / wall(2), with the load average beside it (another process on
the second core takes the speed-up away). The PF's **acquisition rate** over
``--acquisition-seeds`` seeds per scenario: :func:`mbde_bench.pf_acquisition.acquisition_rate`
(acquired within 1 s, no lock left).

At the top: the CPU model (/proc/cpuinfo), the cores, the BLAS threads and the load average
(the results page header repeats them with the date and commit). Speeds are reported,
never asserted (tests check the table, not the numbers).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import time

from mbde_bench import pf_acquisition
from mbde_bench.results import cpu_model, load_average
from mbde_core.config.paths import config_path
from mbde_core.errors import MbdeError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import load
from mbde_core.estimators.registry import estimator_rng
from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
from mbde_core.replay.runner import initial_state, resolved_options, suitability, unused_inputs
from mbde_core.replay.source import Stream, open_source
from mbde_core.scenario import load_scenario
from mbde_core.simulator.bag import write_simulation_bag

HELP = "CPU per step and ratio to real time of every estimator on every shipped scenario; PF thread scaling, acquisition"
ESTIMATORS = ("ukf", "errorekf", "viekf", "dekf", "cekf", "diekfpm", "adekf", "pf")
TARGET = 0.25  # ratio to real time on one core (issue 43)


def add_arguments(p):
    p.add_argument("--out", help="directory for realtime.json and realtime.md (optional)")
    p.add_argument("--scenarios", default="", help="comma-separated shipped scenarios (default: all of config/scenarios)")
    p.add_argument("--estimators", default=",".join(ESTIMATORS), help="estimators (default %(default)s)")
    p.add_argument("--duration", type=float, default=3.0, help="simulated seconds per scenario (default %(default)s)")
    p.add_argument("--warmup", type=float, default=0.2,
                   help="seconds of readings run once before the measured run, discarded (default %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="the estimators' seed (default %(default)s)")
    p.add_argument("--threads-scenario", default="fourbar_gyro",
                   help="scenario of the PF thread-scaling runs (default %(default)s; 'none' skips them)")
    p.add_argument("--threads-duration", type=float, default=2.0, help="seconds of it (default %(default)s)")
    p.add_argument("--acquisition-seeds", type=int, default=20, help="PF seeds per scenario (default %(default)s; 0 skips)")
    p.add_argument("--acquisition-duration", type=float, default=2.0,
                   help="seconds per acquisition run (default %(default)s)")
    p.add_argument("--acquisition-scenarios", default="",
                   help="scenarios of the acquisition rate (default: those of the table)")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def scenario_files(names) -> list[str]:
    """Paths of the named shipped scenarios (all of config/scenarios when empty)."""
    if not names:
        return sorted(glob.glob(os.path.join(config_path("scenarios"), "*.yaml")))
    out = []
    for n in names:
        path = config_path("scenarios", n + ".yaml")
        if not os.path.isfile(path):
            raise MbdeError(f"no shipped scenario {n!r} (config/scenarios/{n}.yaml)")
        out.append(path)
    return out


def simulate(path: str, duration: float, folder: str):
    """The scenario at ``path`` simulated for at most ``duration`` s into folder/<name>,
    opened as ``mbde replay`` opens a bag, with its readings in time order."""
    sc = load_scenario(path)
    sc = sc.with_overrides(duration=min(float(duration), sc.duration))
    bag = os.path.join(folder, sc.name)
    if os.path.isdir(bag):
        shutil.rmtree(bag)
    write_simulation_bag(sc, bag)
    source = open_source(bag, None, None)
    readings = [m for chunk in Stream(source, truth=False) for m in chunk.readings]
    return source, readings


def _run(source, readings, name, options, seed, until=None) -> tuple[int, float, float]:
    """(steps, process CPU [s], wall [s]) of one run of estimator ``name`` through its stage
    on the readings (those before ``until`` s after the first, if given)."""
    est = make_estimator(name, source.mechanism, source.sensors, options, rng=estimator_rng(seed, name))
    est.expect_steps(max(int(source.duration / options.step) + 1, 1))
    init = initial_state(source, options)
    steps = [0]

    def count(_rec):
        steps[0] += 1

    stage = EstimatorStage.for_estimator(est, lambda t: init, on_step=count, keep=False, **dict(STAGE_DEFAULTS))
    unused = unused_inputs(est, source.sensors)
    fed = [m for m in readings if m.sensor not in unused]
    if until is not None and fed:
        fed = [m for m in fed if m.stamp - fed[0].stamp < until]
    c0, w0 = time.process_time(), time.perf_counter()
    for m in fed:
        stage.feed(m)
    stage.flush()
    return steps[0], time.process_time() - c0, time.perf_counter() - w0


def measure(source, readings, name: str, spec, seed: int, warmup: float) -> dict:
    """One row: the estimator's resolved step, the shortest sensor period it reads, CPU per
    step and the ratio to real time of the measured run (module doc); ``skipped`` with the
    reason where replay refuses the pair (e.g. the ADE-KF without an accelerometer)."""
    try:
        options = resolved_options(source, spec, name)
        suitability(source, name, options)
    except MbdeError as exc:
        return {"estimator": name, "skipped": str(exc).splitlines()[0].split(":")[0][:120]}
    if warmup > 0:
        _run(source, readings, name, options, seed, until=warmup)
    steps, cpu, wall = _run(source, readings, name, options, seed)
    periods = [1.0 / s.rate for s in source.sensors.ordered if getattr(s, "rate", 0) > 0]
    ratio = cpu / source.duration if source.duration > 0 else float("nan")
    return {"estimator": name, "step_ms": float(options.step) * 1e3, "sensor_period_ms": min(periods) * 1e3 if periods else None,
            "steps": steps, "cpu_s": cpu, "wall_s": wall, "cpu_per_step_us": cpu / max(steps, 1) * 1e6,
            "duration_s": source.duration, "ratio": ratio, "pass": bool(ratio <= TARGET)}


def thread_scaling(scenario: str, source, readings, spec, seed: int, warmup: float) -> dict:
    """The PF's run with 1 and 2 propagation threads: wall, CPU, load average, speed-up."""
    options = resolved_options(source, spec, "pf")
    before = os.environ.get("MBDE_PF_THREADS")
    out = {"scenario": scenario, "duration_s": source.duration, "runs": {}}
    try:
        for nt in (1, 2):
            os.environ["MBDE_PF_THREADS"] = str(nt)
            if warmup > 0:
                _run(source, readings, "pf", options, seed, until=warmup)
            steps, cpu, wall = _run(source, readings, "pf", options, seed)
            out["runs"][nt] = {"wall_s": wall, "cpu_s": cpu, "steps": steps, "load_average": load_average()}
    finally:
        if before is None:
            os.environ.pop("MBDE_PF_THREADS", None)
        else:
            os.environ["MBDE_PF_THREADS"] = before
    r = out["runs"]
    out["speedup"] = r[1]["wall_s"] / r[2]["wall_s"] if r[2]["wall_s"] > 0 else float("nan")
    return out


def acquisition(paths, seeds: int, duration: float, log=print) -> dict | None:
    """{scenario: {acquired: 'k/n', ...}} of the PF over ``seeds`` seeds per scenario
    (:func:`mbde_bench.pf_acquisition.acquisition_rate`)."""
    out = {}
    for path in paths:
        rows = pf_acquisition.acquisition_rate(path, range(1, seeds + 1), duration, "pf", reference=None)
        name = os.path.splitext(os.path.basename(path))[0]
        out[name] = pf_acquisition.summary(rows)
        log(f"  acquisition {name}: {out[name]['acquired']}")
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def tables(doc: dict) -> str:
    """The report (Markdown): machine line, the per-estimator table, thread scaling, acquisition."""
    m = doc["machine"]
    lines = [f"CPU {m['cpu']}, {m['cores']} cores, BLAS threads {m['blas_threads']}, load average {m['load_start']} "
             f"at the start, {m['load_end']} at the end; {doc['duration_s']:g} s per scenario, "
             f"warm-up {doc['warmup_s']:g} s; process CPU time, other processes may have been running", "",
             "| scenario | estimator | step [ms] | sensor period [ms] | CPU per step [us] | ratio to real time | <= 25 % |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['scenario']} | {r['estimator']} | - | - | - | - | n/a: {r['skipped']} |")
            continue
        lines.append(f"| {r['scenario']} | {r['estimator']} | {r['step_ms']:.3g} | {_fmt(r['sensor_period_ms'], '.3g')} | "
                     f"{r['cpu_per_step_us']:.0f} | {r['ratio']:.3f} | {'pass' if r['pass'] else 'FAIL'} |")
    measured = [r for r in doc["rows"] if "skipped" not in r]
    fails = [r for r in measured if not r["pass"]]
    lines += ["", f"{len(measured) - len(fails)} of {len(measured)} (scenario, estimator) pairs at <= 25 % of real time"
              + (": over it " + ", ".join(f"{r['scenario']}/{r['estimator']} {r['ratio']:.2f}" for r in fails) if fails else "")]
    ts = doc.get("threads")
    if ts:
        lines += ["", f"PF thread scaling ({ts['scenario']}, {ts['duration_s']:g} s, default particle count)", "",
                  "| threads | wall [s] | process CPU [s] | load average after |", "|---|---|---|---|"]
        for nt, r in sorted(ts["runs"].items()):
            lines.append(f"| {nt} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['load_average']} |")
        lines += ["", f"speed-up wall(1) / wall(2): {ts['speedup']:.2f}x (target >= 1.7x on an idle 2-core machine)"]
    acq = doc.get("acquisition")
    if acq:
        lines += ["", f"PF acquisition over {doc['acquisition_seeds']} seeds ({doc['acquisition_duration_s']:g} s each; "
                  "acquired: state and branch within 1 s, no lock left)", "",
                  "| scenario | acquired | median time [s] | max time [s] |", "|---|---|---|---|"]
        for name, s in acq.items():
            lines.append(f"| {name} | {s['acquired']} | {_fmt(s.get('t_acq_median'), '.2f')} | {_fmt(s.get('t_acq_max'), '.2f')} |")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    names = _names(args.estimators)
    paths = scenario_files(_names(args.scenarios))
    specs = load(None, sorted(set(names) | {"pf"}))
    doc = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "load_start": load_average(),
                       "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")},
           "duration_s": args.duration, "warmup_s": args.warmup, "rows": []}
    print(f"CPU {doc['machine']['cpu']}, {doc['machine']['cores']} cores, load average {doc['machine']['load_start']}")
    folder = tempfile.mkdtemp(prefix="mbde_realtime_")  # the simulated bags, removed at the end
    try:
        for path in paths:
            source, readings = simulate(path, args.duration, folder)
            scenario = os.path.splitext(os.path.basename(path))[0]
            for name in names:
                row = {"scenario": scenario, **measure(source, readings, name, specs[name], args.seed, args.warmup)}
                doc["rows"].append(row)
                print(f"  {scenario:<20} {name:<9} " + (f"n/a: {row['skipped']}" if "skipped" in row else
                      f"{row['cpu_per_step_us']:8.0f} us/step ({row['step_ms']:.3g} ms)  ratio {row['ratio']:.3f}"), flush=True)
        if args.threads_scenario != "none":
            source, readings = simulate(scenario_files([args.threads_scenario])[0], args.threads_duration, folder)
            doc["threads"] = thread_scaling(args.threads_scenario, source, readings, specs["pf"], args.seed, args.warmup)
        if args.acquisition_seeds:
            acq_paths = scenario_files(_names(args.acquisition_scenarios)) if args.acquisition_scenarios else paths
            doc["acquisition"] = acquisition(acq_paths, args.acquisition_seeds, args.acquisition_duration)
            doc["acquisition_seeds"], doc["acquisition_duration_s"] = args.acquisition_seeds, args.acquisition_duration
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    doc["machine"]["load_end"] = load_average()
    text = tables(doc)
    print("\n" + text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "realtime.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, default=str)
        with open(os.path.join(args.out, "realtime.md"), "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0
