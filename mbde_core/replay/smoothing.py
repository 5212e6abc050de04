"""The batch smoother on a bag, streamed: ``mbde smooth`` and ``mbde replay --reference smoother``.

Both read the bag chunk by chunk (:class:`~mbde_core.replay.source.Stream`, as replay)
and feed its readings to the smoother as they come (:class:`SmoothedStream`): with a
window (``smoother.window`` > 0, ``--window``) :func:`~mbde_core.trajectory.windowed.iter_windows`
solves each window as soon as its readings are complete and yields its kept steps;
without, the whole run is one problem (in memory). Every part goes on at once, so
memory is bounded by the window, not by the bag:

- ``mbde smooth`` (:func:`smooth_bag`): the steps become StepRecords that replay's
  :class:`~mbde_core.replay.evaluation.StreamEvaluator` evaluates against the ground
  truth read along (replay's metrics: RMSE, NEES, convergence), serialises into a part
  file (merged into the estimates bag at the end) and thins for the plots;
- ``mbde replay --reference smoother`` (:func:`smoother_reference`): the steps are
  appended to a reference file (:mod:`mbde_core.replay.reference`) that every
  estimator's task reads back around its stamps; the smoother's own RMSE and NEES
  against the bag's ground truth (if any) come from the same evaluator.
"""
from __future__ import annotations

import os
import time

import numpy as np

from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.stage.core import StepRecord
from mbde_core.estimators.stage.trust import fit_verdict
from mbde_core.replay.evaluation import RunOutput, StreamEvaluator
from mbde_core.replay.outputs import summary_table, write_estimates_bag, write_metrics, write_report
from mbde_core.replay.plots import plot_run, plot_summary
from mbde_core.replay.reference import ReferenceWriter
from mbde_core.replay.runner import initial_state
from mbde_core.replay.source import CHUNK, Stream
from mbde_core.replay.worker import EstimatorResult, ReplayTask, part_path
from mbde_core.scenario.description import write_description
from mbde_core.simulator.progress import ProgressBar
from mbde_core.trajectory.config import resolve_smoother
from mbde_core.trajectory.smoother import BatchSmoother
from mbde_core.trajectory.windowed import WindowTotals, iter_windows

NAME = "smoother"
SPAN_MARGIN = 1.0  # s: readings stamped further outside the bag's recording span are skipped (out_of_range)


class SmoothedStream:
    """The smoothed parts (SmoothedTrajectory, in time order) of a replay source's
    readings; the bag's ground-truth samples go to ``on_truth`` as they are read (None:
    not read). Afterwards ``info`` is the run's solver info (summed over the windows:
    :class:`~mbde_core.trajectory.windowed.WindowTotals`) and ``stream`` has the readings
    counts and skipped messages. chunk: messages read at a time (default: replay's)."""

    def __init__(self, source, cfg: dict, guess_cfg: dict, on_truth=None, progress: bool = False,
                 chunk: int | None = None):
        self.source, self.cfg, self.guess_cfg = source, cfg, guess_cfg
        self.on_truth, self.progress = on_truth, progress
        self.stream = Stream(source, chunk or CHUNK, truth=on_truth is not None)
        self.info: dict = {}
        self.out_of_range = 0
        self.resolved = cfg

    def _readings(self):
        """The readings in arrival order, without those stamped more than SPAN_MARGIN
        outside the bag's recording span (a corrupt stamp far in the future or past
        would stretch the smoother's grid to it; the filters' stage counts them as
        ``future`` the same way): counted in ``out_of_range``."""
        lo, hi = self.source.start - SPAN_MARGIN, self.source.end + SPAN_MARGIN
        for chunk in self.stream:
            if self.on_truth is not None:
                self.on_truth(chunk.truth)
            for m in chunk.readings:
                if lo <= m.stamp <= hi or m.stamp != m.stamp:  # NaN stamps: counted as non-finite downstream
                    yield m
                else:
                    self.out_of_range += 1

    def __iter__(self):
        src = self.source
        smoother = BatchSmoother(src.mechanism, src.sensors, self.cfg, self.guess_cfg,
                                 scenario_context(getattr(src, "scenario", None)))
        cfg = self.resolved = smoother.config  # auto options resolved by the rule
        init = initial_state(src, cfg)
        if cfg.get("window", 0.0) <= 0:
            traj = smoother.smooth(self._readings(), init)
            self.info = traj.info
            yield traj
            return

        bar = ProgressBar("smoother ") if self.progress else None
        totals = WindowTotals()
        total = int(round(src.duration / smoother.dt)) + 1
        for part in iter_windows(smoother, self._readings(), init, progress=bar, total_hint=total):
            totals.add(part.info)
            yield part
        if bar is not None:
            bar.close()
        self.info = totals.info()


def resolved(source, cfg: dict) -> dict:
    """The smoother options with ``auto`` resolved by the rule for the source's model,
    sensors and scenario motor (what :class:`~mbde_core.trajectory.smoother.BatchSmoother`
    resolves; idempotent)."""
    return resolve_smoother(cfg, source.mechanism, source.sensors, scenario_context(getattr(source, "scenario", None)))


def _records(part, cost: float):
    """The steps of a solved part (the whole run or a window) with the verdict of its goodness of fit."""
    verdict = fit_verdict(part.info)
    return (StepRecord(part.snapshot(i), None, cost, verdict) for i in range(len(part)))


def smooth_bag(source, cfg: dict, guess_cfg: dict, out_dir: str, storage: str = "mcap", plots: bool = True,
               chunk: int | None = None) -> dict:
    """``mbde smooth``: smooth a replay source streamed (see module doc) and write
    metrics.json, estimates/ (bag), report.md and the plots into out_dir; returns the
    metrics document (the caller says where the outputs went once they are in place)."""
    t_wall = time.perf_counter()
    cfg = resolved(source, cfg)
    task = ReplayTask(source.bag, NAME, cfg, part=part_path(out_dir, NAME))
    out = RunOutput(task, source.mechanism, max(int(source.duration / cfg["step"]) + 1, 1))  # no source: no /tf
    ev = StreamEvaluator(source, out, bound_truth=False)
    sm = SmoothedStream(source, cfg, guess_cfg, ev.add_truth if source.has_truth else None, True, chunk)
    for part in sm:
        for rec in _records(part, part.info["wall_time_s"] / max(len(part), 1)):
            ev.append(rec)
        ev.drain(partial=True)
    ev.drain(final=True)
    out.close()
    info = sm.info
    print(f"smoother: {info['status']} after {info['iterations']} iterations, cost {info['initial_cost']:.6g} -> "
          f"{info['final_cost']:.6g} ({info['residuals']} residuals, {info['variables']} unknowns), "
          f"{info['wall_time_s']:.2f} s wall")
    print(fit_line(info))
    for w in info.get("warnings") or []:
        print(f"warning: smoother: {w}")
    metrics = ev.result(sm.stream.effort_ok)
    c = info.get("readings", {})
    counters = {"received": c.get("received", 0), "fused": c.get("used", 0), "non_finite": c.get("non_finite", 0),
                "unknown_sensor": c.get("unknown_sensor", 0), "late": c.get("late", 0),
                "out_of_range": sm.out_of_range,
                "per_sensor_fused": c.get("per_sensor", {}), "steps": metrics["steps"]}
    diagnostics = {k: v for k, v in info.items() if k not in ("readings", "history")}
    metrics.update(counters=counters, diagnostics=diagnostics, wall_time_s=float(info.get("wall_time_s", 0.0)))
    metrics["solver"] = {k: info.get(k) for k in ("status", "iterations", "evaluations", "initial_cost", "final_cost",
                                                  "residuals", "variables", "wall_time_s", "guess_time_s",
                                                  "solve_time_s", "covariance_time_s", "windows", "seam", "fit",
                                                  "warnings", "inputs")}
    metrics["solver"]["cost_history"] = info.get("history")
    res = EstimatorResult(source.bag, NAME, cfg, metrics, counters, diagnostics, time.perf_counter() - t_wall,
                          dict(sm.stream.counts), dict(sm.stream.skipped), task.part, out.topics, out.series())
    doc = write_metrics(os.path.join(out_dir, "metrics.json"), source, [res])
    description = None
    if source.scenario is not None:
        description = write_description(source.scenario)
    write_estimates_bag(os.path.join(out_dir, "estimates"), source, [res], storage, description)
    os.remove(task.part)
    paths = []
    if plots:
        paths = [plot_summary(os.path.join(out_dir, "summary.png"), doc)]
        if len(res.series.get("t", ())):
            paths.append(plot_run(os.path.join(out_dir, f"{NAME}.png"), source, res))
        paths.append(plot_cost(os.path.join(out_dir, "smoother_cost.png"), info))
    write_report(os.path.join(out_dir, "report.md"), doc, paths, "mbde smooth report")
    print(summary_table(doc))
    return doc


def fit_line(info: dict) -> str:
    """One line: the goodness of fit and the estimated plant noise of a smoother run."""
    fit = info.get("fit") or {}
    sa = ", ".join(f"{v:.3g}" for v in fit.get("acceleration_sigma", []))
    sw = ", ".join(f"{v:.3g}" for v in fit.get("input_walk_sigma", []))
    names = ", ".join(info.get("inputs") or [])
    return (f"smoother fit: normalised cost {fit.get('normalised_cost', float('nan')):.3g} (1 expected), plant noise "
            f"{fit.get('noise', '?')}: acceleration sigma {sa}" + (f"; inputs {names}: walk sigma {sw} per step" if names else ""))


def plot_cost(path: str, info: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = info.get("history") or []
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.semilogy(range(len(hist)), hist, "o-" if len(hist) <= 200 else "-")
    windowed = bool(info.get("windows"))
    ax.set_xlabel("window" if windowed else "accepted Levenberg-Marquardt step")
    ax.set_ylabel("final cost 1/2 |r|^2" if windowed else "cost 1/2 |r|^2")
    ax.set_title(f"smoother: {info.get('status')}, {info.get('iterations')} iterations")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def reference_path(out_dir: str) -> str:
    """The reference file of ``mbde replay --reference smoother`` (removed when the bag's outputs are written)."""
    return os.path.join(out_dir, f".{NAME}.reference")


def smoother_reference(source, cfg: dict, guess_cfg: dict, path: str):
    """Smooth a replay source's readings (streamed from the bag; in windows if
    cfg['window'] > 0) into the reference file ``path`` for ``mbde replay --reference
    smoother``.

    Returns the :class:`~mbde_core.replay.reference.ReferenceTrajectory` and the
    ``reference`` entry of metrics.json: what it is, its convergence, its mean standard
    deviations and, if the bag has ground truth, its own RMSE and NEES against it."""
    mech = source.mechanism
    g = mech.dof
    angular = np.isin(mech.independent, mech.rel_columns)
    ev = StreamEvaluator(source, bound_truth=False) if source.has_truth else None  # the smoother against the truth
    writer = ReferenceWriter(path, g)
    sig_sum, n_sig = np.zeros(2 * g), 0
    sm = SmoothedStream(source, cfg, guess_cfg, None if ev is None else ev.add_truth, progress=True)
    for part in sm:
        writer.add(part.t, part.z, part.zd, part.zdd, part.cov)
        if part.cov is not None:
            sig_sum += np.sqrt(np.einsum("kii->ki", part.cov)).sum(axis=0)
            n_sig += len(part)
        if ev is not None:
            for rec in _records(part, 0.0):
                ev.append(rec)
            ev.drain(partial=True)
    reference = writer.close(angular)
    info = sm.info
    sig = sig_sum / n_sig if n_sig else np.full(2 * g, np.nan)
    ref = {"kind": "smoother", "status": info["status"], "iterations": info["iterations"],
           "fit": info.get("fit"), "warnings": info.get("warnings", []),
           "final_cost": info["final_cost"], "wall_time_s": info["wall_time_s"], "windows": info.get("windows"),
           "mean_sigma_z": sig[:g].tolist(), "mean_sigma_zd": sig[g:].tolist(),
           "out_of_range_readings": sm.out_of_range}
    if ev is not None:
        ev.drain(final=True)
        m = ev.result()
        ref["rmse_vs_ground_truth"] = m.get("rmse")
        ref["nees_vs_ground_truth"] = (m.get("nees") or {}).get("mean")
    return reference, ref
