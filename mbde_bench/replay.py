"""Replay at scale: the wall-time breakdown of ``mbde replay`` and streaming long bags.

breakdown: a 10 s four-bar bag at 200 Hz with a gyroscope and an accelerometer
  (config/scenarios/fourbar_imu.yaml) replayed through pf, ukf, errorekf and adekf in a
  fresh process, as a user runs it, with the mechanism's numba RK4 already compiled on the
  machine (the bench compiles it first, as a long replay, a large particle set or
  MBDE_PF_BACKEND=numba would have; the PF then loads it from the disk cache: without it the PF
  steps on numpy, ~1 ms more per step); the table splits the wall time into start-up
  (interpreter + imports), loading the bag's description, the estimators (run as
  parallel tasks: each one's own wall time is listed), writing the estimates bag,
  metrics, report and waiting for the plots (rendered by one forked process as the
  estimators finish, :mod:`mbde_core.replay.plot_worker`). Target: total <= 5 s. ``--repeat`` runs it several times (median, min).
streaming: ``--scenario`` (default fourbar_gyro: paper 003's four-bar with a gyroscope at
  200 Hz) stretched to each of ``--durations`` (default 60, 600, 3600 s; ground truth at
  200 Hz): ``mbde simulate`` and ``mbde replay --estimators errorekf`` each in a fresh process, with wall time and peak resident memory (the
  largest process, getrusage); the errorEKF's compiled functions are put in numba's disk
  cache first (:func:`warm_errorekf`), so every row runs the same code path. Targets at 3600 s: simulate <= 300 s, replay <= 120 s,
  peak RSS <= 500 MB for both and within 20 % of the 60 s bag's.

Writes DIR/replay_bench.json and prints the tables. Timings depend on the machine's
load: the table header shows the load average when the bench started.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from mbde_core.config.paths import config_path
from mbde_core.engine import numba_kernels
from mbde_core.errors import DataError
from mbde_core.replay.source import open_source

HELP = "replay at scale: wall-time breakdown of a 10 s replay, long bags streamed (time and peak memory)"
SCENARIO = "fourbar_imu"
ESTIMATORS = "pf,ukf,errorekf,adekf"
_LAUNCH = ("import resource, subprocess, sys, time; t = time.time(); rc = subprocess.call(sys.argv[1:]); "
           "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
           "print('BENCH', rc, time.time() - t, u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr)")


def add_arguments(p):
    p.add_argument("--out", required=True, help="working directory (bags, replays, replay_bench.json)")
    p.add_argument("--only", default="breakdown,streaming", help="parts to run (default %(default)s)")
    p.add_argument("--estimators", default=ESTIMATORS, help="breakdown estimators (default %(default)s)")
    p.add_argument("--breakdown-scenario", default=SCENARIO, help="breakdown scenario (default %(default)s)")
    p.add_argument("--repeat", type=int, default=3, help="breakdown repetitions (default %(default)s)")
    p.add_argument("--durations", default="60,600,3600", help="streaming bag lengths [s] (default %(default)s)")
    p.add_argument("--scenario", default="fourbar_gyro", help="streaming scenario in config/scenarios (default %(default)s)")
    p.add_argument("--stream-estimator", default="errorekf", help="estimator of the streaming replays (default %(default)s)")
    p.add_argument("--storage", choices=("sqlite3", "mcap"), default="sqlite3", help="bag storage (default %(default)s)")


def _mbde(*args) -> list[str]:
    return [sys.executable, "-m", "mbde_core.cli", *map(str, args)]


def measured(cmd) -> dict:
    """Run cmd in a fresh launcher process: wall time [s] and peak RSS [MB] of the largest process."""
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, *cmd], capture_output=True, text=True)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("BENCH ")][-1].split()
    rc, wall, rss_kb, cpu = int(line[1]), float(line[2]), int(line[3]), float(line[4])
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({rc}): {proc.stderr.strip()[-800:]}")
    return {"wall_s": wall, "peak_rss_mb": rss_kb / 1024.0, "cpu_s": cpu, "stdout": proc.stdout}


def simulate(out_bag: str, duration: float, storage: str, scenario: str = SCENARIO) -> dict:
    return measured(_mbde("simulate", config_path("scenarios", scenario + ".yaml"), "--out", out_bag, "--force", "--storage",
                          storage, "--set", f"duration={duration:g}", "--set", "ground_truth_rate=200"))


def warm_numba(bag: str) -> float | None:
    """Compile (or load) the numba RK4 of the bag's mechanism once, outside the timed runs
    (the replays then load it from the disk cache: :func:`mbde_core.engine.numba_kernels.backend`).
    Seconds taken, None without numba."""
    t0 = time.time()
    mech = open_source(bag).mechanism
    if not numba_kernels.supported(mech) or numba_kernels.load(mech) is None:
        return None
    q = mech.q0[None]  # one step of one particle: numba compiles rk4_range at its first call, if not cached
    numba_kernels.rk4_step(mech, 0.0, q, 0.0 * q, None, 1e-3)
    return time.time() - t0


def breakdown(args, log) -> dict:
    bag = os.path.join(args.out, "bag10")
    sim = simulate(bag, 10, args.storage, args.breakdown_scenario)  # truth at 200 Hz, as the sensors
    log(f"simulated {bag} (10 s) in {sim['wall_s']:.1f} s")
    warm = warm_numba(bag) if "pf" in args.estimators.split(",") else None
    if warm is not None:
        log(f"numba cache of the mechanism warm ({warm:.1f} s: {'compiled' if warm > 2 else 'already on disk'})")
    reps = []
    for k in range(max(1, args.repeat)):
        out, tfile = os.path.join(args.out, "replay10"), os.path.join(args.out, "timings.json")
        t0 = time.time()
        res = measured(_mbde("replay", bag, "--estimators", args.estimators, "--out", out, "--force",
                             "--timings", tfile, "--storage", args.storage))
        total = time.time() - t0
        with open(tfile, encoding="utf-8") as fh:
            tm = json.load(fh)
        ph = tm["bags"][0]["phases"]
        rep = {"total": total, "startup": tm["run_start_unix"] - t0, "load": ph["load"], "estimators": ph["tasks"],
               "write": ph["write"], "metrics": ph["metrics"], "report": ph["report"], "plots_wait": ph["plots_wait"],
               "exit": t0 + total - tm["run_end_unix"], "per_estimator": tm["bags"][0]["estimators"],
               "peak_rss_mb": res["peak_rss_mb"], "cpu": res["cpu_s"]}
        reps.append(rep)
        log(f"replay {k + 1}/{args.repeat}: {total:.2f} s")
    return {"repetitions": reps, "bag_seconds": 10.0, "estimators": args.estimators, "scenario": args.breakdown_scenario}


def breakdown_table(doc) -> str:
    reps = doc["repetitions"]
    best = min(reps, key=lambda r: r["total"])
    med = statistics.median(r["total"] for r in reps)
    rows = [("start-up (interpreter, imports)", "startup"), ("load (bag metadata, description, model)", "load"),
            ("estimators (parallel tasks)", "estimators"), ("write estimates bag (merge)", "write"),
            ("metrics.json", "metrics"), ("report.md", "report"), ("plots (wait for summary.png)", "plots_wait"),
            ("exit", "exit")]
    lines = [f"\nReplay of a {doc['bag_seconds']:g} s {doc['scenario']} bag (200 Hz) through "
             f"{doc['estimators']}: wall time [s] of the fastest of {len(reps)} run(s)",
             f"{'phase':<44}{'wall [s]':>10}"]
    lines += [f"{label:<44}{best[key]:>10.2f}" for label, key in rows]
    lines.append(f"{'total (median of runs)':<44}{best['total']:>10.2f}  ({med:.2f})   target <= 5 s: "
                 f"{'met' if best['total'] <= 5 else 'NOT met'}")
    lines.append(f"\nper estimator (in its worker) [s]: {'wall':>7}{'filter':>8}{'output':>8}{'CPU':>7}")
    for name, e in best["per_estimator"].items():
        lines.append(f"  {name:<32}{e['wall']:>7.2f}{e.get('filter', 0):>8.2f}{e.get('output', 0):>8.2f}"
                     f"{e.get('cpu', 0):>7.2f}")
    cpus = os.cpu_count() or 1
    lines.append(f"CPU time of all processes: {best['cpu']:.2f} s, i.e. >= {best['cpu'] / cpus:.2f} s of wall time on "
                 f"{cpus} idle cores; peak RSS of the largest process: {best['peak_rss_mb']:.0f} MB")
    return "\n".join(lines)


def warm_errorekf(bag: str, out: str, storage: str) -> float:
    """Compile the errorEKF's numba functions for the bag's mechanism into numba's disk
    cache (one replay with ``MBDE_EKF_BACKEND=numba``), outside the timed runs: every timed
    replay of >= ``errorekf_numba.LOAD_STEPS`` steps then loads the same compiled path, so
    the rows differ by the bag's length only (on a fresh machine the 60 s row otherwise
    stays in Python, ~100 MB less than the compiled path's LLVM, and the long rows compile
    in a background thread). Seconds taken."""
    t0 = time.time()
    env = {**os.environ, "MBDE_EKF_BACKEND": "numba"}
    subprocess.run(_mbde("replay", bag, "--estimators", "errorekf", "--out", out, "--force", "--no-plots",
                         "--storage", storage), env=env, capture_output=True, check=True)
    return time.time() - t0


def streaming(args, log) -> dict:
    rows = []
    for k, d in enumerate(float(x) for x in args.durations.split(",") if x.strip()):
        bag = os.path.join(args.out, f"bag{d:g}")
        sim = simulate(bag, d, args.storage, args.scenario)
        log(f"simulated {d:g} s in {sim['wall_s']:.1f} s, peak {sim['peak_rss_mb']:.0f} MB")
        if k == 0 and args.stream_estimator == "errorekf":
            warm = warm_errorekf(bag, os.path.join(args.out, "warm"), args.storage)
            log(f"errorEKF's numba functions in the disk cache ({warm:.1f} s)")
        rep = measured(_mbde("replay", bag, "--estimators", args.stream_estimator, "--out",
                             os.path.join(args.out, f"replay{d:g}"), "--force", "--no-plots", "--storage", args.storage))
        log(f"replayed {d:g} s in {rep['wall_s']:.1f} s, peak {rep['peak_rss_mb']:.0f} MB")
        rows.append({"duration_s": d, "simulate_s": sim["wall_s"], "simulate_rss_mb": sim["peak_rss_mb"],
                     "simulate_cpu_s": sim["cpu_s"], "replay_s": rep["wall_s"], "replay_rss_mb": rep["peak_rss_mb"],
                     "replay_cpu_s": rep["cpu_s"]})
    return {"estimator": args.stream_estimator, "scenario": args.scenario, "rows": rows}


def streaming_table(doc) -> str:
    rows = doc["rows"]
    lines = [f"\nLong bags ({doc['scenario']}, truth at 200 Hz): mbde simulate, mbde replay --estimators {doc['estimator']}",
             f"{'bag [s]':>8}{'simulate [s]':>14}{'CPU [s]':>9}{'RSS [MB]':>10}{'x real time':>13}{'replay [s]':>12}"
             f"{'CPU [s]':>9}{'RSS [MB]':>10}{'x real time':>13}"]
    for r in rows:
        d = r["duration_s"]
        lines.append(f"{d:>8g}{r['simulate_s']:>14.1f}{r.get('simulate_cpu_s', 0):>9.1f}{r['simulate_rss_mb']:>10.0f}"
                     f"{d / r['simulate_s']:>13.1f}{r['replay_s']:>12.1f}{r.get('replay_cpu_s', 0):>9.1f}"
                     f"{r['replay_rss_mb']:>10.0f}{d / r['replay_s']:>13.1f}")
    if rows:
        first, last = rows[0], rows[-1]
        for what, key, limit in (("simulate", "simulate", 300.0), ("replay", "replay", 120.0)):
            grow = last[f"{key}_rss_mb"] / first[f"{key}_rss_mb"] - 1
            lines.append(f"{what}: {last['duration_s']:g} s bag in {last[f'{key}_s']:.0f} s (target <= {limit:.0f} s "
                         f"at 3600 s: {'met' if last[f'{key}_s'] <= limit * last['duration_s'] / 3600 else 'NOT met'}); "
                         f"peak RSS {last[f'{key}_rss_mb']:.0f} MB, {100 * grow:+.0f} % vs the {first['duration_s']:g} s bag "
                         f"(target <= 500 MB and <= +20 %: "
                         f"{'met' if last[f'{key}_rss_mb'] <= 500 and grow <= 0.2 else 'NOT met'})")
    return "\n".join(lines)


def run(args) -> int:
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if not only or only - {"breakdown", "streaming"}:
        raise DataError("--only: choose from breakdown, streaming")
    os.makedirs(args.out, exist_ok=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    doc = {"load_average_1min_at_start": load, "cpus": os.cpu_count()}

    def log(msg):
        print(msg, flush=True)

    log(f"load average {load:.2f} on {os.cpu_count()} CPUs")
    text = []
    if "breakdown" in only:
        doc["breakdown"] = breakdown(args, log)
        text.append(breakdown_table(doc["breakdown"]))
    if "streaming" in only:
        doc["streaming"] = streaming(args, log)
        text.append(streaming_table(doc["streaming"]))
    with open(os.path.join(args.out, "replay_bench.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print("\n".join(text))
    return 0
