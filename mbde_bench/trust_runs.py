"""One run of ``mbde bench trust``: simulate a seeded bag, replay it with each estimator.

A task is (case, scenario path, model, kind, run, duration, estimators, out folder):

- model ``exact``: the scenario's own estimator model (paper 003's scenarios carry their
  gravity error); ``mass``: with a 5 % mass error added
  (:func:`mbde_bench.smoother_calibration.with_mass_error`: +5 % on the even bodies, -5 %
  on the odd ones);
- kind ``nominal``: the scenario's initial guess; ``far``: the estimators' initial guess
  of the first (angular) independent coordinate U(0.4, 1.5) rad off, random sign
  (``model_errors.initial_position``, assembled on the true branch); any fault name of
  :mod:`mbde_core.faults.kinds` (a value fault on the first sensor: its readings only).

The run's seed is the scenario's seed + 1000 + run (new sensor noise, same motion). Each
estimator replays the bag as ``mbde replay`` does (:func:`mbde_core.replay.runner.run_estimator`
with its default options, estimator seed ``run``; ``ukf+adaptive``, ``errorekf+adaptive``: with
``plant_noise.adaptive``) and is scored by replay's own
evaluation (:func:`mbde_core.replay.runner.evaluate`): the mean NEES of [z, zd] with its
95 % band from the series' effective sample size, the coverage of the 95 % intervals, the
verdict's share of time per level and its check against truth (OK steps within 3 sigma,
steps off by more than 10 sigma for at least 1 s called LOST).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time

import numpy as np

from mbde_bench.smoother_calibration import with_mass_error
from mbde_core.estimators.assess.suitability import UnsuitableError, precheck
from mbde_core.estimators.configure import defaults
from mbde_core.faults.kinds import inject
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import evaluate, run_estimator
from mbde_core.scenario import load_scenario
from mbde_core.simulator.bag import write_simulation_bag

MODELS = ("exact", "mass")
FAR = (0.4, 1.5)  # rad: the far-off start's offset range


def scenario_for(path: str, model: str, kind: str, run: int, duration: float):
    """The seeded scenario of one run (see the module doc); None for a far-off start of a
    scenario whose first independent coordinate is not an angle."""
    base = load_scenario(path)
    settings = []
    if kind == "far":
        mech = base.estimator_mechanism()
        if mech.independent[0] not in mech.rel_columns:
            return None
        rng = np.random.default_rng(9100 + run)
        off = float(rng.uniform(*FAR)) * (1.0 if rng.random() < 0.5 else -1.0)
        settings.append(f"model_errors.initial_position.{mech.independent_names[0]}={off!r}")
    sc = base.with_overrides(seed=base.seed + 1000 + run, duration=min(duration, base.duration), settings=settings)
    return with_mass_error(sc) if model == "mass" else sc


def run_case(task) -> list:
    """Rows (one per estimator) of one run; an estimator that fails is a row with its error."""
    case, path, model, kind, run, duration, names, folder = task
    sc = scenario_for(path, model, kind, run, duration)
    if sc is None:
        return []
    bag = os.path.join(folder, f"{case.replace(os.sep, '_')}-{model}-{kind}-{run}")
    if os.path.isdir(bag):
        shutil.rmtree(bag)
    write_simulation_bag(sc, bag)
    try:
        inputs = load_inputs(bag)
    finally:
        shutil.rmtree(bag, ignore_errors=True)  # the bag is this run's own: only its readings are kept
    if kind not in ("nominal", "far"):
        target = next(iter(inputs.sensors)).name
        sigma = {s.name: np.sqrt(np.diag(s.covariance())) for s in inputs.sensors}
        inputs = dataclasses.replace(inputs, measurements=inject(kind, inputs.measurements, target, sigma, run).measurements)
    rows = []
    for name in names:
        row = {"case": case, "model": model, "kind": kind, "run": run, "estimator": name}
        base = name.partition("+")[0]
        options = variant_options(name, base)
        try:
            precheck(base, inputs.sensors)
        except UnsuitableError as exc:
            rows.append({**row, "status": "n/a", "note": str(exc).split(":")[0]})
            continue
        rows.append(scored_run(row, inputs, base, options, seed=run))
    return rows


def variant_options(name: str, base: str, over: dict | None = None) -> dict:
    """The options of table 2's estimator ``name`` (``BASE`` or ``BASE+adaptive``:
    plant_noise.adaptive on): estimator ``base``'s defaults with ``over`` over them."""
    options = {**defaults(base), **(over or {})}
    if name.partition("+")[2] == "adaptive":
        options["plant_noise"]["adaptive"] = True
    return options


def scored_run(row: dict, inputs, name: str, options: dict, seed: int) -> dict:
    """``row`` with the scores of one run of estimator ``name`` (its ``options``) on the
    replay ``inputs`` against their truth, its status and process CPU [s]: a failed run is
    counted (status "error" with its note), never stops the bench."""
    c0 = time.process_time()
    try:
        r = run_estimator(inputs, name, options, seed=seed, particle_budget=0)
        row.update(score(evaluate(inputs, r)), status="ok")
    except Exception as exc:  # noqa: BLE001 - a failed run is counted, never stops the bench
        row.update(status="error", note=f"{type(exc).__name__}: {exc}"[:300])
    row["cpu_s"] = time.process_time() - c0
    return row


def score(metrics: dict) -> dict:
    """The figures of replay's metrics the tables use (None where missing)."""
    nees = metrics.get("nees") or {}
    nis = metrics.get("nis") or {}
    trust = metrics.get("trust") or {}
    vs = trust.get("vs_truth") or {}
    lo, hi = (nees.get("band_95") or [None, None])[:2]
    mean = nees.get("mean")
    flag = None
    if mean is not None and lo is not None and hi is not None:
        flag = "!" if mean > hi else "u" if mean < lo else ""
    return {"nees": mean, "dof": nees.get("dof"), "nis": nis.get("mean"), "nis_dof": nis.get("mean_dof"),
            "band": [lo, hi], "flag": flag, "coverage": nees.get("coverage_95"),
            "fraction": trust.get("fraction"), "ok_steps": vs.get("ok_steps", 0), "ok_within": vs.get("ok_within", 0),
            "off_steps": vs.get("off_10_sigma_steps", 0), "off_lost": vs.get("off_lost", 0),
            "lost_delay_max": vs.get("lost_delay_max")}
