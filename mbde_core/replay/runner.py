"""Run estimators through their stage on the readings of a bag and evaluate them.

Every estimator gets the same readings in the bag's (arrival) order, its own stage
(fixed step, gate and re-acquisition from its config; reorder window, backward-jump and
gap limits of the live node, so that stamp anomalies are handled as live), the same initial guess (the scenario's estimator initial state, or the
mechanism's initial configuration) with the config's initial standard deviations, and a
random generator seeded from (seed, estimator name). Metrics need the bag's ground truth and are omitted without it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.estimators import estimator_rng, make_estimator
from mbde_core.estimators.assess.acquisition import AcquisitionMetrics
from mbde_core.estimators.assess.metrics import RunMetrics, coordinate_errors, record_arrays, sigma_z, truth_at
from mbde_core.estimators.assess.suitability import assess, precheck
from mbde_core.estimators.base import InitialState, initial_sigmas
from mbde_core.estimators.configure import as_spec, resolve
from mbde_core.estimators.options.frozen import Options, thaw
from mbde_core.estimators.options.rule import force_limits, resolve_config, scenario_context
from mbde_core.estimators.options.widening import widening
from mbde_core.estimators.registry import estimator_class, traits
from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
from mbde_core.estimators.stage.trust_truth import TrustSummary, trust_checks


@dataclass
class EstimatorRun:
    name: str
    config: dict  # the resolved options (plain values: metrics.json's "config")
    records: list
    counters: dict
    diagnostics: dict
    wall_time: float
    particles: list = field(default_factory=list)  # [(step index, ParticleCloud)]
    metrics: dict | None = None


def initial_state(inputs, options) -> InitialState:
    """The initial guess of the replay inputs with the initial sigmas of ``options``: an
    estimator's resolved options, or a mapping with ``initial_sigma`` (the smoother's)."""
    sig = options["initial_sigma"] if isinstance(options, dict) else options.initial_sigma
    sz, szd = initial_sigmas(sig, inputs.mechanism.dof)
    return InitialState(inputs.initial_z.copy(), inputs.initial_zd.copy(), sz, szd, inputs.initial_q.copy(),
                        inputs.initial_branch)


def resolved_options(source, spec, name: str | None = None):
    """The frozen options of a validated :class:`~mbde_core.estimators.configure.Spec` for
    the source's model and sensors (and its scenario's motor, if any), as the live node
    resolves them; frozen options are returned as they are, a mapping of the user's
    options of estimator ``name`` (given in code) is validated first."""
    if isinstance(spec, Options):
        return spec
    return resolve(as_spec(name, spec), source.mechanism, source.sensors,
                   scenario_context(getattr(source, "scenario", None)))


def rule_widening(mech, sensors, spec, name: str, options) -> dict:
    """The sensor channels the default noise rule widened for estimator ``name``
    (:func:`~mbde_core.estimators.options.widening.widening`): spec its validated options
    (before the rule: a Spec or a mapping), options the resolved ones; {} for options given frozen."""
    if isinstance(spec, Options):
        return {}
    spec = as_spec(name, spec)
    return widening(estimator_class(name), thaw(spec.values), options.as_dict().get("sensor_sigma") or {}, sensors, mech)


def suitability(source, name: str, options):
    """The suitability verdict (:mod:`mbde_core.estimators.assess.suitability`) of estimator ``name``
    with its resolved ``options`` and the source's sensors from its initial guess; raises
    UnsuitableError (exit status 2) for a meaningless pair, e.g. the ADE-KF without an
    accelerometer."""
    precheck(name, source.sensors)
    est = make_estimator(name, source.mechanism, source.sensors, options) if traits(name).pbh else None
    limits = force_limits(source.mechanism, options.as_dict(), scenario_context(getattr(source, "scenario", None)))
    return assess(name, source.mechanism, source.sensors, initial_state(source, options), float(options.step), est,
                  force_limits=limits, options=options)


class GuardedStage:
    """As the live node (mbde_core.live.estimator): an estimator failure is counted and the
    track restarts from the initial guess at the next reading; the run goes on."""

    def __init__(self, stage):
        self.stage = stage
        self.count, self.last, self.first_stamp = 0, None, None

    def call(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - any estimator failure
            self.count += 1
            self.last = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            if self.first_stamp is None and self.stage.time is not None:
                self.first_stamp = self.stage.time
            self.stage.restart()

    def counters(self) -> dict:
        out = {"estimator_errors": self.count}
        if self.count:
            out["last_estimator_error"] = self.last
            out["first_estimator_error_at"] = self.first_stamp
        return out


def run_estimator(inputs, name: str, options, seed: int = 0, progress=None, particle_budget: int = 2_000_000) -> EstimatorRun:
    """Run one estimator over the replay inputs (in memory); options: its resolved options,
    a validated Spec (resolved here, :func:`resolved_options`) or the user's options (a
    mapping, validated and resolved here); progress(k, total) is
    called while feeding. Long bags: :func:`mbde_core.replay.worker.run_streamed` (same
    stage, same feeding, bounded memory).

    seed: the run seed; the estimator's generator is ``estimator_rng(seed, name)``, the
    same for every position in a list of estimators and in the live node.
    particle_budget: floats of particle clouds kept for the plots (0: none, e.g. benches)."""
    options = resolved_options(inputs, options, name)
    est = make_estimator(name, inputs.mechanism, inputs.sensors, options, rng=estimator_rng(seed, name))
    init = initial_state(inputs, options)
    particles = []
    state = {"k": 0, "every": None}

    def on_step(rec):
        if particle_budget <= 0:
            return
        cloud = est.particles()
        if cloud is not None:
            if state["every"] is None:
                per = cloud.z.size * 2 + 2 * len(cloud.weight)
                total_steps = max(int(inputs.duration / options.step) + 1, 1)
                state["every"] = max(1, int(np.ceil(per * total_steps / particle_budget)))
            if state["k"] % state["every"] == 0:
                cloud.stamp = rec.estimate.stamp
                particles.append((state["k"], cloud))
        state["k"] += 1

    stage = EstimatorStage.for_estimator(est, lambda t: init, on_step=on_step, **STAGE_DEFAULTS)
    guard = GuardedStage(stage)

    unused = unused_inputs(est, inputs.sensors)  # known-input readings it does not take: not fed
    ms = [m for m in inputs.measurements if m.sensor not in unused] if unused else inputs.measurements
    total = len(ms)
    chunk = max(total // 200, 1)
    t0 = time.perf_counter()
    for i in range(0, total, chunk):
        for m in ms[i : i + chunk]:  # one reading at a time, as the live node feeds them
            guard.call(stage.feed, m)
        if progress is not None:
            progress(min(i + chunk, total), total)
    guard.call(stage.flush)
    wall = time.perf_counter() - t0
    counters = {**stage.counters.as_dict(), **guard.counters()}
    return EstimatorRun(name, options.as_dict(), stage.records, counters, est.diagnostics(), wall, particles)


def evaluate(inputs, run: EstimatorRun) -> dict:
    """Metrics of a run (with ground truth) or only costs and counters (without)."""
    mech = inputs.mechanism
    recs = run.records
    angular = np.isin(mech.independent, mech.rel_columns)
    acc = RunMetrics(angular, inputs.duration, truth=inputs.truth is not None)
    arrays = record_arrays(recs)
    if inputs.truth is not None and recs:
        tr = inputs.truth
        stamps = arrays["stamps"]
        tz = truth_at(stamps, tr.t, tr.z, angular)
        tzd, tzdd = truth_at(stamps, tr.t, tr.zd), truth_at(stamps, tr.t, tr.zdd)
        v = acc.add(arrays, tz, tzd, tzdd)
        out = acc.result()
        errs = {"z": coordinate_errors(arrays["z"], tz, angular), "zd": arrays["zd"] - tzd, "zdd": arrays["zdd"] - tzdd}
        out["convergence"] = _convergence(inputs, recs, stamps, arrays, errs, v, angular)
        trust = TrustSummary()
        trust.add(stamps, [r.trust for r in recs], *trust_checks(errs["z"], sigma_z(arrays["covs"], len(angular)), v))
        out["trust"] = trust.result()
        if tr.effort is not None:
            im = InputMetrics(mech)
            im.add(recs, stamps, truth_at(stamps, tr.t, tr.effort))
            if im.result():
                out["inputs"] = im.result()
    else:
        acc.truth = False
        acc.add(arrays)
        out = acc.result()
    out["counters"] = run.counters
    out["diagnostics"] = run.diagnostics
    out["wall_time_s"] = run.wall_time
    run.metrics = out
    return out


def _convergence(inputs, recs, stamps, arrays, errs, nees, angular) -> dict:
    """Acquisition time, tracking figures, branch identification and a locked offset
    (:mod:`~mbde_core.estimators.assess.acquisition`), as the streamed replay worker computes them."""
    conv = AcquisitionMetrics(angular, inputs.mechanism.length_scale)
    probs = [r.estimate.branch_probabilities for r in recs]
    bp = true_branch = None
    if all(p is not None and len(p) for p in probs) and len({len(p) for p in probs}) == 1:
        bp = np.array(probs, dtype=float)
        tr = inputs.truth
        true_branch = np.asarray(tr.branch, int)[np.clip(np.searchsorted(tr.t, stamps), 0, len(tr.t) - 1)]
    conv.add(stamps, errs, sigma_z(arrays["covs"], len(angular)), nees, bp, true_branch)
    return conv.result()


class InputMetrics:
    """RMSE of estimated generalized inputs against the true effort on the same coordinate
    (streaming: :meth:`add` steps in time order; overall and from 1 s after the first step)."""

    def __init__(self, mech):
        self.mech = mech
        self.acc: dict[str, dict] = {}
        self.t_first = None

    def add(self, recs, stamps, effort) -> None:
        """recs: StepRecords; stamps (K,); effort (K, n) true effort at the stamps (or None)."""
        if effort is None or not len(recs):
            return
        names = recs[-1].estimate.input_names
        if self.t_first is None:
            self.t_first = float(stamps[0])
        late = stamps >= self.t_first + 1.0
        for i, name in enumerate(names):
            if name not in self.mech.coordinate_names:
                continue
            truth = effort[:, self.mech.coordinate_names.index(name)]
            est = np.array([r.estimate.inputs[i] if r.estimate.inputs is not None and len(r.estimate.inputs) > i
                            else np.nan for r in recs])
            err = est - truth
            a = self.acc.setdefault(name, {"sq": 0.0, "n": 0, "sq_late": 0.0, "n_late": 0, "lo": np.inf, "hi": -np.inf})
            ok = np.isfinite(err)
            a["sq"] += float(np.sum(err[ok] ** 2))
            a["n"] += int(ok.sum())
            a["sq_late"] += float(np.sum(err[ok & late] ** 2))
            a["n_late"] += int((ok & late).sum())
            a["lo"] = min(a["lo"], float(np.min(truth)))
            a["hi"] = max(a["hi"], float(np.max(truth)))

    def result(self) -> dict:
        out = {}
        for name, a in self.acc.items():
            out[name] = {"rmse": float(np.sqrt(a["sq"] / a["n"])) if a["n"] else float("nan"),
                         "rmse_after_1s": float(np.sqrt(a["sq_late"] / a["n_late"])) if a["n_late"] else None,
                         "truth_range": (a["hi"] - a["lo"]) or 1.0}
        return out


def unused_inputs(est, sensors) -> dict:
    """{name: 0} of the known-input sensors (a measured motor torque) whose readings the
    estimator does not take (its traits' ``known_inputs`` is false): they are counted,
    not fed to its stage."""
    if est.traits.known_inputs:
        return {}
    return {name: 0 for name in getattr(sensors, "input_names", [])}
