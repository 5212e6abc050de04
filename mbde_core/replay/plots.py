"""PNG plots of a replay: truth vs estimate with the 95 % band, error, NEES (matplotlib, Agg)."""
from __future__ import annotations

import os

import numpy as np
import scipy.stats

from mbde_core.estimators.metrics import coordinate_errors, nees, truth_at


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(path: str, inputs, run) -> str:
    """One figure per estimator: z (truth, estimate, 95 % band), error with band, NEES."""
    plt = _plt()
    mech = inputs.mechanism
    recs = run.records
    t = np.array([r.estimate.stamp for r in recs])
    z = np.array([r.estimate.z for r in recs])
    sig = np.array([np.sqrt(np.clip(np.diag(r.estimate.cov)[: mech.dof], 0, None)) if r.estimate.cov is not None
                    else np.full(mech.dof, np.nan) for r in recs])
    angular = np.isin(mech.independent, mech.rel_columns)
    has_truth = inputs.truth is not None
    rows = 3 if has_truth else 1
    fig, axes = plt.subplots(rows, mech.dof, figsize=(6.5 * mech.dof, 2.6 * rows + 0.6), squeeze=False, sharex=True)
    tz = truth_at(t, inputs.truth.t, inputs.truth.z, angular) if has_truth else None
    for c in range(mech.dof):
        name = mech.independent_names[c]
        unit = "rad" if angular[c] else "m"
        ax = axes[0, c]
        zc = np.unwrap(z[:, c]) if angular[c] else z[:, c]
        if has_truth:
            tc = zc - coordinate_errors(z[:, [c]], tz[:, [c]], angular[[c]])[:, 0]  # truth on the estimate's branch of the angle
            ax.plot(t, tc, "k-", lw=1.2, label="truth")
        ax.plot(t, zc, "C3-", lw=1.0, label=f"{run.name} estimate")
        ax.fill_between(t, zc - 1.96 * sig[:, c], zc + 1.96 * sig[:, c], color="C3", alpha=0.2, lw=0, label="95 % band")
        ax.set_ylabel(f"{name} [{unit}]")
        ax.legend(loc="upper right", fontsize=8)
        ax.set_title(f"{run.name}: {name}")
        if has_truth:
            e = coordinate_errors(z[:, [c]], tz[:, [c]], angular[[c]])[:, 0]
            ax = axes[1, c]
            ax.plot(t, e, "C0-", lw=0.8, label="error")
            ax.fill_between(t, -1.96 * sig[:, c], 1.96 * sig[:, c], color="C0", alpha=0.2, lw=0, label="95 % band")
            ax.axhline(0, color="k", lw=0.5)
            ax.set_ylabel(f"error [{unit}]")
            ax.legend(loc="upper right", fontsize=8)
    if has_truth:
        covs = [r.estimate.cov for r in recs]
        if all(cv is not None for cv in covs):
            tzd = truth_at(t, inputs.truth.t, inputs.truth.zd)
            ex = np.hstack([coordinate_errors(z, tz, angular), np.array([r.estimate.zd for r in recs]) - tzd])
            v = nees(ex, np.array(covs))
            lo, hi = scipy.stats.chi2.ppf([0.025, 0.975], 2 * mech.dof)
            for c in range(mech.dof):
                ax = axes[2, c]
                ax.semilogy(t, np.clip(v, 1e-6, None), "C2-", lw=0.7, label="NEES")
                ax.axhspan(lo, hi, color="C2", alpha=0.15, label=f"95 % chi2({2 * mech.dof}) band")
                ax.set_ylabel("NEES")
                ax.legend(loc="upper right", fontsize=8)
    for c in range(mech.dof):
        axes[-1, c].set_xlabel("t [s]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_summary(path: str, doc: dict, unit: str = "") -> str:
    """Bar charts of RMSE(z) and mean step time per estimator, linear axes from zero (a
    truncated log axis makes small differences look large)."""
    plt = _plt()
    names = list(doc["estimators"])
    rmse = [((doc["estimators"][n]["metrics"] or {}).get("rmse") or {}).get("z") for n in names]
    cost = [((doc["estimators"][n]["metrics"] or {}).get("step_time_us") or {}).get("mean") for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    if any(r is not None for r in rmse):
        vals = [np.sqrt(np.mean(np.square(r))) if r else np.nan for r in rmse]
        axes[0].bar(names, vals, color="C3")
        axes[0].set_ylabel(f"RMSE z{f' [{unit}]' if unit else ''} (rms over coordinates)")
    axes[1].bar(names, [c or 0 for c in cost], color="C0")
    axes[1].set_ylabel("mean step time [us]")
    for ax in axes:
        ax.set_ylim(bottom=0.0)
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_branches(path: str, inputs, run) -> str | None:
    """Branch probabilities of an estimator over time (and the true branch), or None if it
    reports none (Kalman filters follow one branch)."""
    recs = [r for r in run.records if r.estimate.branch_probabilities is not None
            and len(r.estimate.branch_probabilities)]
    if not recs:
        return None
    plt = _plt()
    t0 = run.records[0].estimate.stamp
    t = np.array([r.estimate.stamp for r in recs]) - t0
    width = max(len(r.estimate.branch_probabilities) for r in recs)
    p = np.zeros((len(recs), width))
    for k, r in enumerate(recs):
        bp = np.asarray(r.estimate.branch_probabilities, float)
        p[k, : len(bp)] = bp
    true = None
    if inputs.truth is not None and len(inputs.truth.branch):
        true = int(np.bincount(np.clip(np.asarray(inputs.truth.branch, int), 0, None)).argmax())
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for b in range(width):
        ax.plot(t, p[:, b], lw=2.0 if b == true else 1.2, label=f"branch {b}" + (" (truth)" if b == true else ""))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("t [s] since the first estimate")
    ax.set_ylabel("probability")
    ax.set_title(f"{run.name}: assembly-branch probabilities")
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(out_dir: str, inputs, runs, doc) -> list[str]:
    mech = inputs.mechanism
    angular = np.isin(mech.independent, mech.rel_columns)
    unit = "rad" if angular.all() else "m" if not angular.any() else ""
    paths = [plot_summary(os.path.join(out_dir, "summary.png"), doc, unit)]
    for r in runs:
        if r.records:
            paths.append(plot_run(os.path.join(out_dir, f"{r.name}.png"), inputs, r))
            branches = plot_branches(os.path.join(out_dir, f"{r.name}_branches.png"), inputs, r)
            if branches:
                paths.append(branches)
    return paths
