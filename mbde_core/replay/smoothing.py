"""The batch smoother on replay inputs: ``mbde smooth`` and ``mbde replay --reference smoother``.

``mbde smooth`` (short bags, in memory): the smoothed trajectory is wrapped as an
:class:`~mbde_core.replay.runner.EstimatorRun` named ``smoother`` (its records are made on
demand from the trajectory's arrays), so the replay's metrics, estimates bag, plots and
report apply to it unchanged. ``mbde replay --reference smoother``: the bag's readings
are streamed into the smoother and the result, a :class:`ReferenceTrajectory` with its
covariances, replaces the ground truth of every estimator's metrics.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from mbde_core.estimators.stage import StepRecord
from mbde_core.replay.runner import EstimatorRun, evaluate

NAME = "smoother"


def smooth_inputs(inputs, cfg: dict, guess_cfg: dict, progress: bool = False):
    """SmoothedTrajectory of the replay inputs' readings (in windows if cfg['window'] > 0)."""
    from mbde_core.replay.runner import initial_state

    return _smooth(inputs.mechanism, inputs.sensors, initial_state(inputs, cfg), inputs.measurements, cfg, guess_cfg,
                   progress)


def _smooth(mech, sensors, init, measurements, cfg, guess_cfg, progress: bool):
    from mbde_core.trajectory.smoother import BatchSmoother

    smoother = BatchSmoother(mech, sensors, cfg, guess_cfg)
    if cfg.get("window", 0.0) > 0:
        from mbde_core.simulator.progress import ProgressBar
        from mbde_core.trajectory.windowed import smooth_windowed

        bar = ProgressBar("smoother ") if progress else None
        out = smooth_windowed(smoother, measurements, init, progress=bar)
        if bar is not None:
            bar.close()
        return out
    return smoother.smooth(measurements, init)


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
    windowed = bool(info.get("windows"))
    ax.set_xlabel("window" if windowed else "accepted Levenberg-Marquardt step")
    ax.set_ylabel("final cost 1/2 |r|^2" if windowed else "cost 1/2 |r|^2")
    ax.set_title(f"smoother: {info.get('status')}, {info.get('iterations')} iterations")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


class ReferenceTrajectory:
    """The smoothed trajectory as a replay's reference: t (K,), z, zd, zdd (K, g), cov
    (K, 2g, 2g) or None; :meth:`at` gives them at estimate stamps (linear interpolation,
    exact on the smoother's grid, which is the filters' when the steps agree)."""

    def __init__(self, traj, angular):
        self.t, self.z, self.zd, self.zdd, self.cov = traj.t, traj.z, traj.zd, traj.zdd, traj.cov
        self.angular = np.asarray(angular, bool)

    def at(self, stamps) -> dict:
        from mbde_core.estimators.metrics import truth_at

        out = {"z": truth_at(stamps, self.t, self.z, self.angular), "zd": truth_at(stamps, self.t, self.zd),
               "zdd": truth_at(stamps, self.t, self.zdd), "effort": None, "cov": None}
        if self.cov is not None:
            k = self.cov.shape[1]
            out["cov"] = truth_at(stamps, self.t, self.cov.reshape(len(self.t), k * k)).reshape(len(stamps), k, k)
        return out


def smoother_reference(source, cfg: dict, guess_cfg: dict) -> tuple[ReferenceTrajectory, dict]:
    """Smooth a replay source's readings (streamed from the bag; in windows if
    cfg['window'] > 0) for ``mbde replay --reference smoother``.

    Returns the reference and the ``reference`` entry of metrics.json: what it is, its
    convergence, its mean standard deviations and, if the bag has ground truth, its own
    RMSE and NEES against it."""
    from mbde_core.estimators.metrics import evaluate_run, truth_at
    from mbde_core.replay.runner import initial_state
    from mbde_core.replay.source import Stream

    mech = source.mechanism
    g = mech.dof
    angular = np.isin(mech.independent, mech.rel_columns)
    truth = {"t": [], "z": [], "zd": [], "zdd": []}

    def readings():
        for chunk in Stream(source):
            for t, row in chunk.truth:
                truth["t"].append(t)
                for k in ("z", "zd", "zdd"):
                    truth[k].append(row[k])
            yield from chunk.readings

    traj = _smooth(mech, source.sensors, initial_state(source, cfg), readings(), cfg, guess_cfg, progress=True)
    info = traj.info
    sig = np.sqrt(np.einsum("kii->ki", traj.cov)) if traj.cov is not None else np.full((1, 2 * g), np.nan)
    ref = {"kind": "smoother", "status": info["status"], "iterations": info["iterations"],
           "final_cost": info["final_cost"], "wall_time_s": info["wall_time_s"], "windows": info.get("windows"),
           "mean_sigma_z": sig[:, :g].mean(axis=0).tolist(), "mean_sigma_zd": sig[:, g:].mean(axis=0).tolist()}
    if truth["t"]:
        t = np.array(truth["t"])
        tz, tzd, tzdd = (truth_at(traj.t, t, np.array(truth[k]), angular if k == "z" else None) for k in ("z", "zd", "zdd"))
        m = evaluate_run(TrajectoryRecords(traj, 0.0), tz, tzd, tzdd, angular)
        ref["rmse_vs_ground_truth"] = m.get("rmse")
        ref["nees_vs_ground_truth"] = (m.get("nees") or {}).get("mean")
    return ReferenceTrajectory(traj, angular), ref
