"""One estimator over one bag, streamed: the task that ``mbde replay`` runs per (bag,
estimator) on local processes or a Dask cluster (:mod:`mbde_core.runs`).

The bag is read chunk by chunk (:class:`mbde_core.replay.source.Stream`); readings go
one at a time into the estimator's stage, exactly as :func:`mbde_core.replay.runner.run_estimator`
(and the live node) feed them; the emitted estimates wait only until the ground truth
has passed their stamps, then a batch at a time they are evaluated
(:class:`~mbde_core.estimators.metrics.RunMetrics`), serialised
(:class:`~mbde_core.replay.encode.EstimateEncoder`) into the estimator's part file and
thinned for the plots (at most ``SERIES_POINTS`` steps). Memory therefore stays bounded
whatever the length of the bag. The estimator's random generator depends on (seed,
name) only, so a run gives the same result in any process.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.estimators.metrics import RunMetrics, coordinate_errors, record_arrays, reference_nees
from mbde_core.replay.encode import EstimateEncoder, PartWriter
from mbde_core.replay.source import Stream, TruthWindow, open_source

BATCH = 2048  # estimates evaluated and serialised together
SERIES_POINTS = 20_000  # steps kept for the plots


@dataclass
class ReplayTask:
    """One (bag, estimator) run. part/plot: output paths (None: not written)."""

    bag: str
    name: str
    config: dict
    seed: int = 0
    part: str | None = None
    plot: str | None = None
    mechanism_file: str | None = None
    sensors_file: str | None = None
    particle_budget: int = 2_000_000
    reorder_window: float | None = None  # s; None: the live node's default (STAGE_DEFAULTS)


@dataclass
class EstimatorResult:
    bag: str
    name: str
    config: dict
    metrics: dict
    counters: dict
    diagnostics: dict
    wall_time: float
    counts: dict
    skipped: dict
    part: str | None = None  # part file of the estimates (see mbde_core.replay.encode)
    topics: list = field(default_factory=list)  # [(topic, type)] of the part file
    series: dict = field(default_factory=dict)
    plot: str | None = None
    timings: dict = field(default_factory=dict)
    extra_plots: list = field(default_factory=list)  # e.g. the branch-probability plot


def replay_task(shared, task: ReplayTask) -> EstimatorResult:
    """mbde_core.runs task: shared is {bag: ReplaySource} (or None: opened here)."""
    source = (shared or {}).get(task.bag) or open_source(task.bag, task.mechanism_file, task.sensors_file)
    return run_streamed(source, task)


def run_streamed(source, task: ReplayTask) -> EstimatorResult:
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.registry import estimator_rng
    from mbde_core.estimators.stage import STAGE_DEFAULTS, EstimatorStage
    from mbde_core.replay.convergence import ConvergenceMetrics
    from mbde_core.replay.runner import GuardedStage, InputMetrics, initial_state, resolved_config

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    mech, cfg = source.mechanism, resolved_config(source, task.name, task.config)
    est = make_estimator(task.name, mech, source.sensors, cfg, rng=estimator_rng(task.seed, task.name))
    init = initial_state(source, cfg)
    total_steps = max(int(source.duration / cfg["step"]) + 1, 1)
    out = _Output(task, mech, total_steps, source)
    pending: list = []  # emitted estimates not yet evaluated and written

    def on_step(rec):
        pending.append(rec)
        out.particles(est, rec)

    options = dict(STAGE_DEFAULTS)  # as the live node: the bag's readings arrive as they did live
    if task.reorder_window is not None:
        options["reorder_window"] = float(task.reorder_window)
    stage = EstimatorStage.from_config(est, cfg, lambda t: init, on_step=on_step, keep=False, **options)
    guard = GuardedStage(stage)
    angular = np.isin(mech.independent, mech.rel_columns)
    ref = getattr(source, "reference", None)  # mbde replay --reference smoother: replaces the ground truth
    metrics = RunMetrics(angular, source.duration, truth=source.has_truth or ref is not None)
    conv = ConvergenceMetrics(angular, mech.length_scale)
    inputs = InputMetrics(mech)
    stream = Stream(source)
    truth = TruthWindow(angular)
    clock = {"filter": 0.0, "output": 0.0}

    def drain(final: bool) -> None:
        """Evaluate and write full batches whose stamps the truth has passed (all if final)."""
        t0 = time.perf_counter()
        while pending:
            k = min(len(pending), BATCH)
            if not final and (k < BATCH or (source.has_truth and pending[k - 1].estimate.stamp > truth.last)):
                break
            batch, pending[:k] = pending[:k], []
            arrays = record_arrays(batch)
            if ref is not None:
                tr = ref.at(arrays["stamps"])
                metrics.add(arrays, tr["z"], tr["zd"], tr["zdd"], tr["cov"])
                out.add(batch, arrays, tr, angular)
                continue
            tr = truth.at(arrays["stamps"]) if source.has_truth else None
            if tr is not None:
                metrics.add(arrays, tr["z"], tr["zd"], tr["zdd"])
                bp = _branch_probabilities(batch)
                conv.add(arrays["stamps"], coordinate_errors(arrays["z"], tr["z"], angular), bp,
                         None if bp is None else _truth_branch(truth, arrays["stamps"]))
                inputs.add(batch, arrays["stamps"], tr["effort"])
                truth.drop_before(arrays["stamps"][-1])
            else:
                metrics.add(arrays)
            out.add(batch, arrays, tr, angular)
        clock["output"] += time.perf_counter() - t0

    for chunk in stream:
        truth.extend(chunk.truth)
        t0 = time.perf_counter()
        for m in chunk.readings:  # one reading at a time, as the live node feeds them
            guard.call(stage.feed, m)
        clock["filter"] += time.perf_counter() - t0
        drain(False)
        if not pending and len(truth.t) > 100_000:  # no estimates for a long stretch: bound the window
            truth.drop_before(truth.last - 10.0)
    guard.call(stage.flush)
    drain(True)
    out.close()
    result = metrics.result()
    if source.has_truth and ref is None:
        result["convergence"] = conv.result()
    if source.has_truth and stream.effort_ok and ref is None:
        im = inputs.result()
        if im:
            result["inputs"] = im
    counters = {**stage.counters.as_dict(), **guard.counters()}
    result["counters"] = counters
    result["diagnostics"] = est.diagnostics()
    wall = time.perf_counter() - t_wall
    result["wall_time_s"] = wall
    res = EstimatorResult(source.bag, task.name, cfg, result, counters, result["diagnostics"], wall, dict(stream.counts),
                          dict(stream.skipped), task.part, out.topics, out.series(), None, clock)
    if task.plot:
        from mbde_core.replay.plots import plot_run

        t0 = time.perf_counter()
        res.plot = plot_run(task.plot, source, res)
        from mbde_core.replay.plots import plot_branches

        branches = plot_branches(os.path.splitext(task.plot)[0] + "_branches.png", source, res)
        if branches:
            res.extra_plots.append(branches)
        clock["plot"] = time.perf_counter() - t0
    clock["cpu"] = time.process_time() - t_cpu
    return res


def _truth_branch(truth, stamps) -> np.ndarray:
    """The true assembly-branch label at each stamp (the sample at or after it)."""
    t = np.asarray(truth.t)
    labels = np.array([row.get("branch", -1) for row in truth.rows], dtype=int)
    return labels[np.clip(np.searchsorted(t, stamps), 0, len(t) - 1)]


def _branch_probabilities(batch):
    """(K, B) branch probabilities of a batch of records, None if they have none (or vary)."""
    probs = [r.estimate.branch_probabilities for r in batch]
    if not all(p is not None and len(p) for p in probs) or len({len(p) for p in probs}) != 1:
        return None
    return np.array(probs, dtype=float)


class _Output:
    """Part file writer, particle thinning and the thinned series of one run."""

    def __init__(self, task, mech, total_steps: int, source=None):
        self.mech = mech
        self.part = PartWriter(task.part) if task.part else None
        self.encoder = EstimateEncoder(mech) if task.part else None
        ns = f"/mbde/{task.name}"
        from mbde_core.rosio.convert import JOINT_STATE, MECHANISM_STATE, PARTICLE_SET

        self.topics = [(ns + "/state", MECHANISM_STATE), (ns + "/joint_states", JOINT_STATE)]
        self.view = None
        if self.part is not None and source is not None:
            from mbde_core.replay.viewables import EstimateView

            self.view = EstimateView(task.name, mech, source, self.encoder)
            self.topics += self.view.topics
        self.particle_topic = (ns + "/particles", PARTICLE_SET)
        self.budget, self.total_steps = task.particle_budget, total_steps
        self.every = None
        self.cloud_encoder = None
        self.k = 0
        self.clouds: list = []  # (t_ns, bytes) waiting for the estimates of their step
        self.stride = max(1, math.ceil(total_steps / SERIES_POINTS))
        self.kept: dict[str, list] = {"t": [], "z": [], "sig": [], "ez": [], "nees": [], "bp": []}
        self.seen = 0

    def particles(self, est, rec) -> None:
        cloud = est.particles()
        if cloud is not None:
            if self.every is None:
                per = cloud.z.size * 2 + 2 * len(cloud.weight)
                self.every = max(1, int(np.ceil(per * self.total_steps / self.budget)))
            if self.k % self.every == 0 and self.part is not None:
                from mbde_core.replay.encode import ParticleSetEncoder
                from mbde_core.rosio.stamps import sec_to_ns

                cloud.stamp = rec.estimate.stamp
                if self.cloud_encoder is None:
                    self.cloud_encoder = ParticleSetEncoder(self.encoder.factory, self.mech.independent_names, "world")
                if self.particle_topic not in self.topics:
                    self.topics.append(self.particle_topic)
                self.clouds.append((sec_to_ns(cloud.stamp), self.cloud_encoder.encode(cloud)))
        self.k += 1

    def add(self, batch, arrays, truth, angular) -> None:
        if self.part is not None:
            ns, states, joints = self.encoder.encode([r.estimate for r in batch])
            pt = self.topics.index(self.particle_topic) if self.clouds else None
            c = 0
            views = self.view.encode(batch) if self.view is not None else [()] * len(ns)
            for t, s, j, extra in zip(ns, states, joints, views):
                self.part.write(t, 0, 0, s)
                self.part.write(t, 0, 1, j)
                for topic, data in extra:  # /tf, markers (viewables.py)
                    self.part.write(t, 0, topic, data)
                while c < len(self.clouds) and self.clouds[c][0] <= t:
                    self.part.write(self.clouds[c][0], 1, pt, self.clouds[c][1])
                    c += 1
            del self.clouds[:c]
        sel = np.arange((-self.seen) % self.stride, len(batch), self.stride)
        self.seen += len(batch)
        if not len(sel):
            return
        g = self.mech.dof
        z = arrays["z"][sel]
        covs = [arrays["covs"][i] for i in sel]
        have_cov = all(c is not None for c in covs)
        sig = np.sqrt(np.clip(np.array([np.diag(c)[:g] for c in covs]), 0, None)) if have_cov else np.full((len(sel), g), np.nan)
        self.kept["t"].append(arrays["stamps"][sel])
        bp = _branch_probabilities([batch[i] for i in sel])
        if bp is not None:
            self.kept["bp"].append(bp)
        self.kept["z"].append(z)
        self.kept["sig"].append(sig)
        if truth is not None:
            ez = coordinate_errors(z, truth["z"][sel], angular)
            self.kept["ez"].append(ez)
            if have_cov:
                ex = np.hstack([ez, arrays["zd"][sel] - truth["zd"][sel]])
                ref_cov = truth.get("cov")
                self.kept["nees"].append(reference_nees(ex, covs, None if ref_cov is None else ref_cov[sel]))

    def close(self) -> None:
        if self.part is not None:
            pt = self.topics.index(self.particle_topic) if self.clouds else None
            for t, data in self.clouds:
                self.part.write(t, 1, pt, data)
            self.part.close()

    def series(self) -> dict:
        out = {k: np.concatenate(v) for k, v in self.kept.items() if v}
        out["stride"] = self.stride
        return out


def part_path(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, f".{name}.part")
