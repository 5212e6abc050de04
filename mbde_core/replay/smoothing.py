"""The batch smoother on replay inputs: ``mbde smooth`` and ``mbde replay --reference smoother``.

The smoothed trajectory is wrapped as an :class:`~mbde_core.replay.runner.EstimatorRun`
named ``smoother`` (its records are made on demand from the trajectory's arrays), so the
replay's metrics, estimates bag, plots and report apply to it unchanged. As a reference
for bags without ground truth it becomes the inputs' ``truth`` (with its covariances).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from mbde_core.estimators.base import InitialState
from mbde_core.estimators.stage import StepRecord
from mbde_core.replay.inputs import TruthSeries
from mbde_core.replay.runner import EstimatorRun, evaluate

NAME = "smoother"


def smooth_inputs(inputs, cfg: dict, guess_cfg: dict, progress: bool = False):
    """SmoothedTrajectory of the replay inputs' readings."""
    from mbde_core.trajectory.smoother import BatchSmoother

    g = inputs.mechanism.dof
    sig = cfg["initial_sigma"]
    init = InitialState(inputs.initial_z.copy(), inputs.initial_zd.copy(), np.full(g, float(sig["z"])),
                        np.full(g, float(sig["zd"])), inputs.initial_q.copy(), inputs.initial_branch)
    smoother = BatchSmoother(inputs.mechanism, inputs.sensors, cfg, guess_cfg)
    return smoother.smooth(inputs.measurements, init)


class TrajectoryRecords(Sequence):
    """StepRecords of a SmoothedTrajectory, made on access (cost: wall time per step)."""

    def __init__(self, traj, cost: float):
        self.traj, self.cost = traj, cost

    def __len__(self) -> int:
        return len(self.traj)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return StepRecord(self.traj.snapshot(i), None, self.cost)


def smoother_run(inputs, traj, cfg: dict) -> EstimatorRun:
    """The trajectory as a replay run (metrics evaluated against the inputs' truth)."""
    info = traj.info
    wall = float(info.get("wall_time_s", 0.0))
    c = info.get("readings", {})
    counters = {"received": c.get("received", 0), "fused": c.get("used", 0), "non_finite": c.get("non_finite", 0),
                "unknown_sensor": c.get("unknown_sensor", 0), "per_sensor_fused": c.get("per_sensor", {}),
                "steps": len(traj)}
    diagnostics = {k: v for k, v in info.items() if k not in ("readings", "history")}
    run = EstimatorRun(NAME, cfg, TrajectoryRecords(traj, wall / max(len(traj), 1)), counters, diagnostics, wall)
    evaluate(inputs, run)
    run.metrics["solver"] = {k: info.get(k) for k in ("status", "iterations", "evaluations", "initial_cost", "final_cost",
                                                      "residuals", "variables", "wall_time_s", "guess_time_s",
                                                      "solve_time_s", "covariance_time_s", "windows", "seam")}
    run.metrics["solver"]["cost_history"] = info.get("history")
    return run


def write_outputs(out_dir: str, inputs, traj, cfg: dict, storage: str = "sqlite3", plots: bool = True) -> dict:
    """metrics.json, estimates/ (bag), report.md and plots of ``mbde smooth``."""
    from mbde_core.replay.outputs import summary_table, write_estimates_bag, write_metrics, write_report

    run = smoother_run(inputs, traj, cfg)
    doc = write_metrics(os.path.join(out_dir, "metrics.json"), inputs, [run])
    description = None
    if inputs.scenario is not None:
        from mbde_core.scenario.description import write_description

        description = write_description(inputs.scenario)
    write_estimates_bag(os.path.join(out_dir, "estimates"), inputs, [run], storage, description)
    paths = []
    if plots:
        from mbde_core.replay.plots import write_plots

        paths = write_plots(out_dir, inputs, [run], doc)
        paths.append(plot_cost(os.path.join(out_dir, "smoother_cost.png"), traj.info))
    write_report(os.path.join(out_dir, "report.md"), doc, paths, "mbde smooth report")
    print(summary_table(doc))
    print(f"wrote {out_dir}: metrics.json, estimates/ ({storage}), report.md" + (f", {len(paths)} plots" if paths else ""))
    return doc


def plot_cost(path: str, info: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = info.get("history") or []
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.semilogy(range(len(hist)), hist, "o-")
    ax.set_xlabel("accepted Levenberg-Marquardt step")
    ax.set_ylabel("cost 1/2 |r|^2")
    ax.set_title(f"smoother: {info.get('status')}, {info.get('iterations')} iterations")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def reference_truth(traj) -> TruthSeries:
    """The smoothed trajectory as the reference of ``mbde replay --reference smoother``."""
    k = len(traj)
    return TruthSeries(traj.t, traj.q, traj.qd, traj.qdd, traj.z, traj.zd, traj.zdd, np.full(k, -1), [], np.zeros((k, 0)))
