"""The particle filter's acquisition rate: over seeded readings of a scenario, how often and
how fast the filter finds the state from its uniform prior, and how well it tracks after.

Per scenario the true motion is simulated once (:class:`mbde_bench.common.TruthRecord`, at
most ``duration`` s); per seed every sensor's readings get their own seeded noise at the
sensor's own period (``mbde simulate --seed``'s construction: one stream per sensor) and
the estimator runs through its :class:`EstimatorStage` with its defaults (``options``
over them), as ``mbde replay`` drives it, its rng :func:`estimator_rng` (seed, name). A
reference UKF, started at the true state, runs on the same readings.

Scored with :mod:`mbde_core.estimators.assess.acquisition` (the rule ``mbde replay``
reports): ``acquired_after`` [s] (every coordinate's error within 5 sigma of the
estimate's own covariance, 0.5 deg floor, 10 deg cap, and P(true branch) > 0.99, to the
end of the run, from a step at which the estimate's own 2 sigma is within the cap),
``branch_identified_after`` [s] (P(true branch) > 0.99 to the end), the tracking RMSE of z
from acquisition on, the longest locked offset (NEES > 10 dof on a near-constant error
for >= 1 s). A seed is **acquired** when both times are at most ``within`` (1 s) and no
lock remains. ``ratio``: the estimator's RMSE of z after ``within`` over the reference
UKF's on the same steps; with a particle filter that publishes a Gaussian follower also
``ratio_cloud``, the cloud's own estimate (``cloud_estimate()``) on the same steps.

Motor-driven scenarios (``mbde bench motors``' files): effort sensors read the truth's input
forces (the measured torque reaches the filter through the stage as in replay); ``variant``
``unknown`` drops them, ``released`` drops the motors too (:func:`variant_scenario`). Where
the readings cannot tell the motion from a mirror image and the unknown forces explain it
(:mod:`mbde_bench.pf_mirror`), a seed not acquired on the truth is scored on the mirrored
motion too (``on_mirror``; the summary's ``acquired`` says "+k on the unobservable mirror").
"""
from __future__ import annotations

import copy
import math
import os
import time
import zlib

import numpy as np

from mbde_bench.common import TruthRecord
from mbde_bench.motors import released_document
from mbde_bench.pf_mirror import mirrored_truth, scenario_mirror
from mbde_core.estimators import make_estimator
from mbde_core.estimators.assess.acquisition import AcquisitionMetrics
from mbde_core.estimators.assess.metrics import RunMetrics, coordinate_errors, record_arrays, sigma_z, truth_at
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import configure
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.registry import estimator_rng
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario
from mbde_core.types import Measurement

WITHIN = 1.0  # [s] acquired (state and branch) within this time of the first reading
VARIANTS = ("measured", "unknown", "released")  # of a motor-driven scenario (variant_scenario)


def readings(truth: TruthRecord, seed: int) -> list:
    """Every sensor's readings at its own period with its own seeded noise, in time order;
    the measured input forces (effort sensors: a motor's torque) from the truth's inputs."""
    out = []
    for s in truth.scenario.sensors:
        out += truth.measurements([s], s.period, seed=seed)
    for s in getattr(truth.scenario.estimator_sensors(), "inputs", ()):
        out += effort_readings(truth, s, seed)
    out.sort(key=lambda m: m.stamp)
    return out


def effort_readings(truth: TruthRecord, s, seed: int) -> list:
    """The readings of the effort sensor ``s`` every period with seeded noise (its own stream,
    as :meth:`TruthRecord.measurements`'): the truth's input force on its coordinate."""
    n = int(np.floor(truth.t[-1] / s.period + 1e-9)) + 1
    times = s.period * np.arange(n)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(s.name.encode()),)))
    sampler = s.noise.sampler(rng)
    vals = s.reading(truth.effort[truth.index_at(times)])
    out = []
    for t, v in zip(times, vals):
        noisy = sampler.apply(float(t), v)
        if noisy is not None:
            out.append(Measurement(float(t), s.name, noisy))
    return out


def _true_labels(est, truth, t) -> np.ndarray | None:
    """The truth's assembly-branch label at each stamp by the filter's own atlas (None: no branches)."""
    if not hasattr(est, "atlas"):
        return None
    idx = np.clip(np.searchsorted(truth.t, t - 1e-9), 0, len(truth.t) - 1)
    labels = est._labels_of_codes(est.atlas.codes_of(truth.q[idx]))
    return np.where(labels >= 0, labels, int(truth.scenario.initial_state.branch))


def run_filter(truth: TruthRecord, name: str, seed: int, options=None, at_truth: bool = False, offset=None) -> dict:
    """One run of estimator ``name`` on the readings of ``seed``: {t, err (K, g), records,
    estimator, cloud_err (or None), cpu [s]}. at_truth: the initial guess is the true
    state (plus ``offset`` (g,) on z, if given)."""
    sc = truth.scenario
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    cfg = configure(name, dict(options or {}), mech, sensors, scenario_context(sc))
    g = mech.dof
    sig = getattr(cfg, "initial_sigma", None)
    sz, szd = (sig.z, sig.zd) if sig is not None else (0.05, 0.5)
    if at_truth:
        z0 = truth.z[0] + (0.0 if offset is None else np.asarray(offset, float))
        start = InitialState(z0, truth.zd[0].copy(), np.full(g, sz), np.full(g, szd),
                             truth.q[0].copy() if offset is None else None, sc.initial_state.branch)
    else:
        init = sc.estimator_initial_state()
        start = InitialState(init.z, init.zd, np.full(g, sz), np.full(g, szd), init.q, init.branch)
    est = make_estimator(name, mech, sensors, cfg, rng=estimator_rng(seed, name))
    records, cloud = [], []
    own = getattr(getattr(est, "follower", None), "est", None) is not None

    def on_step(rec):
        records.append(rec)
        if own:
            cloud.append(est.cloud_estimate().z)

    stage = EstimatorStage.for_estimator(est, lambda t: start, on_step=on_step, keep=False)
    meas = readings(truth, seed)
    c0 = time.process_time()
    stage.feed(meas)
    stage.advance_to(truth.t[-1] + 1e-9)
    stage.flush()
    cpu = time.process_time() - c0
    arrays = record_arrays(records)
    t = arrays["stamps"]
    ang = np.isin(mech.independent, mech.rel_columns)
    tz = truth_at(t, truth.t, truth.z, ang)
    return {"t": t, "arrays": arrays, "angular": ang, "estimator": est, "cpu": cpu, "records": records,
            "err": coordinate_errors(arrays["z"], tz, ang),
            "cloud_err": coordinate_errors(np.array(cloud), tz, ang) if own else None}


def score(truth: TruthRecord, run: dict) -> dict:
    """The acquisition metrics of one run (:class:`AcquisitionMetrics`, as replay's) against
    ``truth`` (or its mirror, :func:`mbde_bench.pf_mirror.mirrored_truth`)."""
    t, a, ang, est = run["t"], run["arrays"], run["angular"], run["estimator"]
    tz = truth_at(t, truth.t, truth.z, ang)
    tzd = truth_at(t, truth.t, truth.zd)
    tzdd = truth_at(t, truth.t, truth.zdd)
    nees = RunMetrics(ang, truth.t[-1]).add(a, tz, tzd, tzdd)
    errs = {"z": coordinate_errors(a["z"], tz, ang), "zd": a["zd"] - tzd, "zdd": a["zdd"] - tzdd}
    probs = [r.estimate.branch_probabilities for r in run["records"]]
    bp = None
    if probs and all(p is not None and len(p) for p in probs) and len({len(p) for p in probs}) == 1:
        bp = np.array(probs, dtype=float)
    acq = AcquisitionMetrics(ang, est.mech.length_scale)
    acq.add(t, errs, sigma_z(a["covs"], len(ang)), nees, bp, None if bp is None else _true_labels(est, truth, t))
    return acq.result()


def _late_rmse(t, err, after: float) -> float:
    late = t - t[0] > after
    return float(np.sqrt(np.mean(err[late] ** 2))) if late.any() else float("nan")


def _acquired(res: dict, within: float) -> bool:
    t_acq, t_br, lock = res["acquired_after"], res.get("branch_identified_after", 0.0), res["locked_offset"]
    return bool(t_acq is not None and t_acq <= within and t_br is not None and t_br <= within
                and (lock is None or lock["from"] + lock["duration"] < within))


def seed_row(truth: TruthRecord, seed: int, name: str = "pf", options=None, within: float = WITHIN,
             reference: str | None = "ukf", mirror=None) -> dict:
    """One seed's row (see the module docstring); ``mirror``: the mirrored truth of a
    scenario whose readings cannot tell it from the truth (:mod:`mbde_bench.pf_mirror`): a
    seed not acquired on the truth is scored on it too (``on_mirror``)."""
    run = run_filter(truth, name, seed, options)
    res = score(truth, run)
    est = run["estimator"]
    t_acq, t_br = res["acquired_after"], res.get("branch_identified_after", 0.0)
    lock = res["locked_offset"]
    row = {"seed": seed, "acquired_after": t_acq, "branch_after": t_br, "acquired": _acquired(res, within),
           "tracking_rmse_z": None if "tracking" not in res else float(np.sqrt(np.mean(np.square(res["tracking"]["rmse"]["z"])))),
           "tracking_nees": None if "tracking" not in res or "nees" not in res["tracking"] else res["tracking"]["nees"]["mean"],
           "locked_offset": lock, "rmse_late": _late_rmse(run["t"], run["err"], within), "cpu_s": run["cpu"],
           "duration": float(truth.t[-1])}
    if run["cloud_err"] is not None:
        row["rmse_late_cloud"] = _late_rmse(run["t"], run["cloud_err"], within)
    if mirror is not None and not row["acquired"]:
        mres = score(mirror, run)
        row["on_mirror"] = _acquired(mres, within)
        if row["on_mirror"]:
            row["acquired_after_mirror"] = mres["acquired_after"]
            tz = truth_at(run["t"], mirror.t, mirror.z, run["angular"])
            row["rmse_late_mirror"] = _late_rmse(run["t"], coordinate_errors(run["arrays"]["z"], tz, run["angular"]), within)
    d = est.diagnostics() if hasattr(est, "diagnostics") else {}
    for k in ("recoveries", "locks"):
        if k in d:
            row[k] = int(d[k])
    if "refine" in d:
        row["follower"] = {k: d["refine"][k] for k in ("seeds", "drops", "redraws") if k in d["refine"]}
    if reference:
        ref = run_filter(truth, reference, seed, at_truth=True)
        row["rmse_late_ref"] = r = _late_rmse(ref["t"], ref["err"], within)
        row["ratio"] = row["rmse_late"] / r if r > 0 else math.inf
        if "rmse_late_cloud" in row:
            row["ratio_cloud"] = row["rmse_late_cloud"] / r if r > 0 else math.inf
    return row


def variant_scenario(scenario_yaml: str, variant: str | None = None) -> Scenario:
    """The scenario at ``scenario_yaml``, or one of ``mbde bench motors``' variants of it:
    ``unknown`` (its effort sensors dropped: the motor acts, its torque is not read) or
    ``released`` (:func:`mbde_bench.motors.released_document`: no motor, no effort sensor)."""
    sc = load_scenario(scenario_yaml)
    if not variant or variant == "measured":
        return sc
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    doc = copy.deepcopy(sc.raw)
    if variant == "released":
        doc = released_document(doc)
    else:
        doc["sensors"] = [s for s in doc.get("sensors") or [] if s.get("type") != "effort"]
    doc["name"] = f"{sc.name}:{variant}"
    return Scenario(doc, file=sc.file, base_dir=sc.base_dir)


def acquisition_rate(scenario_yaml: str, seeds, duration: float, name: str = "pf", options=None,
                     within: float = WITHIN, reference: str | None = "ukf", threads: int = 1,
                     variant: str | None = None) -> list[dict]:
    """Rows (one per seed, :func:`seed_row`) of estimator ``name`` on the scenario at
    ``scenario_yaml`` (its ``variant``: :func:`variant_scenario`) simulated for at most
    ``duration`` s; ``options`` over the defaults. The PF propagates in ``threads`` threads
    (results do not depend on it)."""
    os.environ["MBDE_PF_THREADS"] = str(int(threads))
    sc = variant_scenario(scenario_yaml, variant)
    truth = TruthRecord(sc, min(float(duration), sc.duration) if duration else sc.duration)
    km = scenario_mirror(sc)
    mirror = None if km is None else mirrored_truth(truth, km)
    rows = []
    for seed in seeds:
        try:
            row = seed_row(truth, int(seed), name, options, within, reference, mirror)
        except Exception as exc:  # a failing run is a row, not the end of the table
            row = {"seed": int(seed), "acquired": False, "error": f"{type(exc).__name__}: {exc}"[:200]}
        row["scenario"] = sc.name
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """{acquired: 'k/n', median/max acquisition time, median tracking RMSE, median/max
    ratio, locks} of one scenario's rows."""
    def med(key, f=np.median):
        v = [r[key] for r in rows if r.get(key) is not None and np.isfinite(r[key])]
        return float(f(v)) if v else None
    k = sum(bool(r.get("on_mirror")) for r in rows)
    mirror = f" (+{k} on the unobservable mirror)" if any("on_mirror" in r for r in rows) else ""
    return {"acquired": f"{sum(r['acquired'] for r in rows)}/{len(rows)}{mirror}", "on_mirror": k,
            "t_acq_median": med("acquired_after"), "t_acq_max": med("acquired_after", np.max),
            "tracking_rmse_median": med("tracking_rmse_z"), "ratio_median": med("ratio"),
            "ratio_max": med("ratio", np.max), "ratio_cloud_max": med("ratio_cloud", np.max),
            "locked": sum(r.get("locked_offset") is not None for r in rows), "cpu_s_median": med("cpu_s")}


def main(argv=None) -> int:
    """``python -m mbde_bench.pf_acquisition SCENARIO.yaml... [--seeds N] [--duration S]
    [--options JSON]``: one line per seed and a summary per scenario."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m mbde_bench.pf_acquisition", description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="+")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--options", default="", help="PF options over the defaults, as JSON")
    p.add_argument("--variant", default="", choices=("",) + VARIANTS,
                   help="of a motor-driven scenario: its torque measured (as the file), unknown, or released")
    p.add_argument("--first-seed", type=int, default=1)
    a = p.parse_args(argv)
    opts = json.loads(a.options) if a.options else None
    for path in a.scenarios:
        rows = acquisition_rate(path, range(a.first_seed, a.first_seed + a.seeds), a.duration, options=opts,
                                variant=a.variant or None)
        for r in rows:
            print(json.dumps(r, default=str), flush=True)
        print("SUMMARY", rows[0]["scenario"], json.dumps(summary(rows)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
