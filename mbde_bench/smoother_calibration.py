"""Is the batch smoother's uncertainty calibrated? (``mbde bench smoother``, table 7)

Cases: every shipped scenario (config/scenarios) and the linkages of
config/bench/calibration that no paper uses (an open 2-DOF chain with an IMU on each
link, a Watt six-bar with one gyroscope, a 3 m steel four-bar with a crank encoder, the
issue-42 slider-crank with a speed controller the smoother does not know). Each case
runs ``runs`` times for ``duration`` s: run r has the seed s0 + r (new sensor noise) and
its first independent coordinate started U(-0.1, 0.1) off the scenario's (a new motion);
the truth is simulated once per run (mbde simulate's integration, in memory) and smoothed
twice, with the scenario's own estimator model (as shipped: paper 003's scenarios have a
1 m/s^2 gravity error) and with an added 5 % mass error (+5 % on the even bodies, -5 % on
the odd ones: a common scale of every mass would not change a gravity-driven linkage).

Per run: the mean over the grid of the NEES e^T P^-1 e of [z, zd] (e = smoothed minus
true, P the smoother's marginal covariance) and the fraction of the 95 % intervals
(+-1.96 sigma of every component) that contain the truth. The table gives their means
over the runs: NEES / dim (target [0.5, 2]) and coverage (target 90-98 %), the RMSE of z,
how many runs the smoother called converged (and how many it warned about) and the CPU
time per smoothing.
"""
from __future__ import annotations

import copy
import glob
import os
import time

import numpy as np

from mbde_bench import smoother_motor
from mbde_bench.results import table
from mbde_core import runs as R
from mbde_core.config.paths import config_path
from mbde_core.estimators.assess.metrics import truth_at
from mbde_core.estimators.base import InitialState, initial_sigmas
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario
from mbde_core.simulator import run as simulate
from mbde_core.trajectory.smoother import BatchSmoother
from mbde_core.types import Measurement

SHIPPED = ("adekf_slider_crank", "fivebar_encoder", "fivebar_gyro", "fourbar_encoder", "fourbar_gyro", "fourbar_imu",
           "pendulum_release", "pf_rig_branch0", "pf_rig_branch1", "pf_sim")
VARIANTS = ("as shipped", "+5 % mass error")


def case_paths(names=None) -> list:
    """[(case name, scenario path)]: the shipped scenarios, then config/bench/calibration."""
    out = [(n, config_path("scenarios", f"{n}.yaml")) for n in SHIPPED]
    for path in sorted(glob.glob(os.path.join(config_path("bench", "calibration"), "*.yaml"))):
        out.append((os.path.splitext(os.path.basename(path))[0], path))
    return [c for c in out if names is None or c[0] in names]


def with_mass_error(sc, percent: float = 5.0):
    """The scenario with +-percent mass errors of its bodies added to its model errors."""
    doc = copy.deepcopy(sc.raw)
    errors = dict(doc.get("model_errors") or {})
    bodies = dict(errors.get("bodies") or {})
    for k, b in enumerate(sc.spec.bodies):
        entry = dict(bodies.get(b.name) or {})
        entry["mass"] = float(entry.get("mass", 0.0)) + (percent if k % 2 == 0 else -percent)
        bodies[b.name] = entry
    errors["bodies"] = bodies
    doc["model_errors"] = errors
    return Scenario(doc, file=sc.file, base_dir=sc.base_dir)


def _moved(sc, rng, offset: float = 0.1):
    """The scenario with its first independent coordinate started U(-offset, offset) off."""
    doc = copy.deepcopy(sc.raw)
    init = dict(doc.get("initial_state") or {})
    key = "release_from" if "release_from" in init else "position"
    pos = dict(init.get(key) or {})
    mech = sc.truth_mechanism()
    name = mech.independent_names[0]
    pos[name] = float(sc.initial_state.z[0]) + float(rng.uniform(-offset, offset))
    init[key] = pos
    doc["initial_state"] = init
    return Scenario(doc, file=sc.file, base_dir=sc.base_dir)


def run_case(task) -> dict:
    """One run of one case: simulate, then smooth with each variant's model."""
    name, path, r, duration = task
    base = load_scenario(path)
    sc = base.with_overrides(seed=base.seed + 1000 + r, duration=min(duration, base.duration))
    sc = _moved(sc, np.random.default_rng(7000 + r))
    t0 = time.process_time()
    res = simulate(sc)
    sim_cpu = time.process_time() - t0
    reference = {s.name for s in sc.reference_sensors.ordered}
    meas = [Measurement(float(t), n, v) for n, (ts, vs) in res.measurements.items() if n not in reference
            for t, v in zip(ts, vs)]
    out = {"case": name, "run": r, "simulate_cpu_s": sim_cpu, "variants": {}}
    for variant in VARIANTS:
        est = sc if variant == VARIANTS[0] else with_mass_error(sc)
        mech, sensors = est.estimator_mechanism(), est.estimator_sensors()
        row = {}
        try:
            c0 = time.process_time()
            sm = BatchSmoother(mech, sensors, None, None, scenario_context(est))
            ini = est.estimator_initial_state()
            sz, szd = initial_sigmas(sm.config["initial_sigma"], mech.dof)
            tr = sm.smooth(meas, InitialState(ini.z, ini.zd, sz, szd, ini.q, ini.branch))
            row["cpu_s"] = time.process_time() - c0
            ang = np.isin(mech.independent, mech.rel_columns)
            ez = tr.z - truth_at(tr.t, res.t, res.z, ang)
            ez[:, ang] = (ez[:, ang] + np.pi) % (2 * np.pi) - np.pi
            e = np.hstack([ez, tr.zd - truth_at(tr.t, res.t, res.zd)])
            nees = np.einsum("ki,kij,kj->k", e, np.linalg.inv(tr.cov), e)
            sig = np.sqrt(np.einsum("kii->ki", tr.cov))
            row.update(nees=float(np.mean(nees)), dim=int(e.shape[1]), coverage=float(np.mean(np.abs(e) <= 1.96 * sig)),
                       rmse_z=float(np.sqrt(np.mean(ez**2))), status=tr.info["status"], warnings=tr.info["warnings"],
                       normalised_cost=tr.info["fit"]["normalised_cost"], failed=False)
        except Exception as exc:  # noqa: BLE001 - a failed run is counted, never stops the bench
            row = {"failed": True, "error": f"{type(exc).__name__}: {exc}"[:300]}
        out["variants"][variant] = row
    return out


def _task(shared, task):
    return run_case(task)


def summarise(rows) -> list:
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        for variant in VARIANTS:
            rs = [r["variants"][variant] for r in rows if r["case"] == case]
            ok = [v for v in rs if not v["failed"]]
            if not ok:
                out.append({"case": case, "variant": variant, "runs": len(rs), "failed": len(rs)})
                continue
            dim = ok[0]["dim"]
            out.append({"case": case, "variant": variant, "runs": len(rs), "failed": len(rs) - len(ok), "dim": dim,
                        "nees_per_dim": float(np.mean([v["nees"] for v in ok]) / dim),
                        "median_nees_per_dim": float(np.median([v["nees"] for v in ok]) / dim),
                        "coverage": float(np.mean([v["coverage"] for v in ok])),
                        "rmse_z": float(np.mean([v["rmse_z"] for v in ok])),
                        "converged": sum(v["status"] == "converged" for v in ok),
                        "warned": sum(bool(v["warnings"]) for v in ok),
                        "cpu_s": float(np.median([v["cpu_s"] for v in ok]))})
    return out


def verdict(s) -> str:
    if "nees_per_dim" not in s:
        return "FAILED"
    good = 0.5 <= s["nees_per_dim"] <= 2.0 and 0.90 <= s["coverage"] <= 0.98
    return "ok" if good and not s["failed"] else "no"


def rows_of(summary) -> list:
    out = []
    for s in summary:
        if "nees_per_dim" not in s:
            out.append([s["case"], s["variant"], s["runs"], s["failed"], "-", "-", "-", "-", "-", "-", "FAILED"])
            continue
        out.append([s["case"], s["variant"], s["runs"], s["failed"], f"{s['nees_per_dim']:.2f}",
                    f"{s['median_nees_per_dim']:.2f}", f"{100 * s['coverage']:.1f}", f"{s['rmse_z']:.2e}",
                    f"{s['converged']} / {s['warned']}", f"{s['cpu_s']:.2f}", verdict(s)])
    return out


HEADER = ["case", "model", "runs", "failed", "NEES/dim mean", "NEES/dim median", "95 % coverage [%]", "RMSE z",
          "converged / warned", "CPU s", "in targets"]


def calibration(runs: int, duration: float, jobs, names=None) -> tuple[list, list]:
    """(per-run rows, summary) of ``runs`` runs of every case."""
    tasks = [(n, p, r, duration) for n, p in case_paths(names) for r in range(runs)]
    outcomes = R.run_tasks(_task, tasks, label="smoother calibration", jobs=jobs)
    rows = [o.value for o in outcomes if o.ok]
    for line in R.failures(outcomes, lambda i: "{} run {}".format(*tasks[i][::2][:2])):
        print(f"failed: {line}")
    return rows, summarise(rows)


def tables_7_8(args, tables: set, out: dict) -> None:
    """Tables 7 (calibration) and 8 (the speed-step slider-crank) of ``mbde bench
    smoother``: printed, stored in ``out`` and written to the results page."""
    import os

    pages = []
    if "7" in tables and args.calibration_runs > 0:
        names = [c.strip() for c in args.calibration_cases.split(",")] if args.calibration_cases else None
        print(f"\n7. calibration: {args.calibration_runs} runs x {args.calibration_length:g} s per case")
        rows, summary = calibration(args.calibration_runs, args.calibration_length, args.jobs, names)
        md = table(HEADER, rows_of(summary))
        print(md)
        out["calibration"] = {"summary": summary, "runs": rows}
        pages.append(f"## Calibration of the smoother's uncertainty ({args.calibration_runs} runs x "
                     f"{args.calibration_length:g} s per case)\n\n" + __doc__.split("\n\n", 1)[1] + "\n" + md)
    if "8" in tables and args.motor_seeds > 0:
        print(f"\n8. issue 42's speed-step slider-crank, {args.motor_seeds} seeds: smoother vs filters")
        rows, md = smoother_motor.motor_table(args.motor_seeds, args.jobs, os.path.join(args.out or ".", "motor_bags"))
        print(md)
        out["motor"] = rows
        pages.append("## The speed-step slider-crank of issue 42: smoother vs filters\n\n"
                     + smoother_motor.__doc__.split("\n\n", 1)[1] + md)
    if pages and args.out:  # the tables of the --results page (mbde_bench.results.bench_page)
        with open(os.path.join(args.out, "smoother.md"), "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(pages) + "\n")
