"""One estimator over one bag, streamed: the task that ``mbde replay`` runs per (bag,
estimator) on local processes or a Dask cluster (:mod:`mbde_core.runs`).

The bag is read chunk by chunk (:class:`mbde_core.replay.source.Stream`); readings go
one at a time into the estimator's stage, exactly as :func:`mbde_core.replay.runner.run_estimator`
(and the live node) feed them; the emitted estimates wait only until the ground truth
has passed their stamps, then a batch at a time they are evaluated
(:class:`~mbde_core.estimators.assess.metrics.RunMetrics`), serialised
(:class:`~mbde_core.replay.encode.EstimateEncoder`) into the estimator's part file and
thinned for the plots (at most ``SERIES_POINTS`` steps). Memory therefore stays bounded
whatever the length of the bag. The estimator's random generator depends on (seed,
name) only, so a run gives the same result in any process.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from mbde_core.replay.evaluation import BATCH, SERIES_POINTS, RunOutput, StreamEvaluator  # noqa: F401
from mbde_core.estimators import make_estimator
from mbde_core.estimators.registry import estimator_rng
from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
from mbde_core.replay.plots import plot_branches, plot_run
from mbde_core.replay.runner import GuardedStage, initial_state, resolved_options, unused_inputs
from mbde_core.replay.source import Stream, open_source


@dataclass
class ReplayTask:
    """One (bag, estimator) run: config, the estimator's options resolved for this bag
    (frozen, :mod:`mbde_core.estimators.configure`). part/plot: output paths (None: not written)."""

    bag: str
    name: str
    config: object
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
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    mech, options = source.mechanism, resolved_options(source, task.config, task.name)
    est = make_estimator(task.name, mech, source.sensors, options, rng=estimator_rng(task.seed, task.name))
    init = initial_state(source, options)
    total_steps = max(int(source.duration / options.step) + 1, 1)
    est.expect_steps(total_steps)  # the PF, the errorEKF: numba only where the run is long enough to pay
    out = RunOutput(task, mech, total_steps, source)
    ev = StreamEvaluator(source, out, BATCH)

    def on_step(rec):
        ev.append(rec)
        out.particles(est, rec)

    stage_options = dict(STAGE_DEFAULTS)  # as the live node: the bag's readings arrive as they did live
    if task.reorder_window is not None:
        stage_options["reorder_window"] = float(task.reorder_window)
    stage = EstimatorStage.for_estimator(est, lambda t: init, on_step=on_step, keep=False, **stage_options)
    guard = GuardedStage(stage)
    stream = Stream(source, truth=ev.ref is None)  # a smoother reference replaces the ground truth
    clock = {"filter": 0.0, "output": 0.0}
    unused = unused_inputs(est, source.sensors)
    for chunk in stream:
        ev.add_truth(chunk.truth)
        t0 = time.perf_counter()
        for m in chunk.readings:  # one reading at a time, as the live node feeds them
            if m.sensor in unused:
                unused[m.sensor] += 1
                continue
            guard.call(stage.feed, m)
        clock["filter"] += time.perf_counter() - t0
        ev.drain()
    guard.call(stage.flush)
    ev.drain(final=True)
    out.close()
    clock["output"] = ev.time
    result = ev.result(stream.effort_ok)
    counters = {**stage.counters.as_dict(), **guard.counters()}
    if any(unused.values()):
        counters["known_input_readings_not_used"] = dict(unused)
    result["counters"] = counters
    result["diagnostics"] = est.diagnostics()
    wall = time.perf_counter() - t_wall
    result["wall_time_s"] = wall
    res = EstimatorResult(source.bag, task.name, options.as_dict(), result, counters, result["diagnostics"], wall, dict(stream.counts),
                          dict(stream.skipped), task.part, out.topics, out.series(), None, clock)
    if task.plot:
        t0 = time.perf_counter()
        res.plot = plot_run(task.plot, source, res)

        branches = plot_branches(os.path.splitext(task.plot)[0] + "_branches.png", source, res)
        if branches:
            res.extra_plots.append(branches)
        clock["plot"] = time.perf_counter() - t0
    clock["cpu"] = time.process_time() - t_cpu
    return res


def part_path(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, f".{name}.part")
