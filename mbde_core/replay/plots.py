"""PNG plots of a replay: truth vs estimate with the 95 % band, error, NEES (matplotlib, Agg)."""
from __future__ import annotations

import os

import numpy as np

from mbde_core.estimators.assess.metrics import coordinate_errors, nees, record_arrays, truth_at
from mbde_core.estimators.chi2 import chi2_ppf


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _margins(fig, rows: int, cols: int, left: float = 0.9, right: float = 0.15, top: float = 0.36,
             bottom: float = 0.59, hgap: float = 0.2, wgap: float = 0.95) -> None:
    """Fixed margins and gaps in inches (about what ``tight_layout`` finds for these figures,
    a little wider on the left for long tick labels), without the extra full draw it
    costs (~45 % of rendering one figure)."""
    W, H = fig.get_size_inches()
    aw = (W - left - right - (cols - 1) * wgap) / cols
    ah = (H - top - bottom - (rows - 1) * hgap) / rows
    fig.subplots_adjust(left=left / W, right=1.0 - right / W, bottom=bottom / H, top=1.0 - top / H,
                        wspace=wgap / aw, hspace=hgap / ah)


def _reference_label(source) -> str:
    return "smoother (reference)" if getattr(source, "reference", None) is not None else "truth"


def plot_run(path: str, source, run, series: dict | None = None) -> str:
    """One figure per estimator: z (truth, estimate, 95 % band), error with band, NEES.

    run.series (thinned by the replay worker): t (K,), z (K, g), sig (K, g) standard
    deviations of z, ez (K, g) errors (angles wrapped) and nees (K,) when there is truth.
    """
    plt = _plt()
    mech = source.mechanism
    ser = run.series if series is None else series
    t, z, sig = ser["t"], ser["z"], ser["sig"]
    angular = np.isin(mech.independent, mech.rel_columns)
    has_truth = "ez" in ser
    rows = 3 if has_truth else 1
    fig, axes = plt.subplots(rows, mech.dof, figsize=(6.5 * mech.dof, 2.6 * rows + 0.6), squeeze=False, sharex=True)
    for c in range(mech.dof):
        name = mech.independent_names[c]
        unit = "rad" if angular[c] else "m"
        ax = axes[0, c]
        zc = np.unwrap(z[:, c]) if angular[c] else z[:, c]
        if has_truth:
            ax.plot(t, zc - ser["ez"][:, c], "k-", lw=1.2, label=_reference_label(source))  # on the estimate's branch
        ax.plot(t, zc, "C3-", lw=1.0, label=f"{run.name} estimate")
        ax.fill_between(t, zc - 1.96 * sig[:, c], zc + 1.96 * sig[:, c], color="C3", alpha=0.2, lw=0, label="95 % band")
        ax.set_ylabel(f"{name} [{unit}]")
        ax.legend(loc="upper right", fontsize=8)
        ax.set_title(f"{run.name}: {name}")
        if has_truth:
            ax = axes[1, c]
            ax.plot(t, ser["ez"][:, c], "C0-", lw=0.8, label="error")
            ax.fill_between(t, -1.96 * sig[:, c], 1.96 * sig[:, c], color="C0", alpha=0.2, lw=0, label="95 % band")
            ax.axhline(0, color="k", lw=0.5)
            ax.set_ylabel(f"error [{unit}]")
            ax.legend(loc="upper right", fontsize=8)
    if has_truth and "nees" in ser:
        lo, hi = chi2_ppf([0.025, 0.975], 2 * mech.dof)
        for c in range(mech.dof):
            ax = axes[2, c]
            ax.semilogy(t, np.clip(ser["nees"], 1e-6, None), "C2-", lw=0.7, label="NEES")
            ax.axhspan(lo, hi, color="C2", alpha=0.15, label=f"95 % chi2({2 * mech.dof}) band")
            ax.set_ylabel("NEES")
            ax.legend(loc="upper right", fontsize=8)
    for c in range(mech.dof):
        axes[-1, c].set_xlabel("t [s]")
    _margins(fig, rows, mech.dof)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_summary(path: str, doc: dict) -> str:
    """Bar charts of RMSE(z) and mean step time per estimator, linear axes from zero (a
    truncated log axis makes small differences look large)."""
    plt = _plt()
    units = (doc.get("units") or {}).get("z") or []
    unit = units[0] if units and all(u == units[0] for u in units) else ""
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


def plot_branches(path: str, source, run) -> str | None:
    """Assembly-branch probabilities over time (run.series 'bp', thinned by the replay
    worker), the true branch drawn thicker; None if the estimator reports none."""
    ser = run.series
    if not has_branch_probabilities(ser):
        return None
    bp, t = ser["bp"], ser["t"]
    plt = _plt()
    t = np.asarray(t) - t[0]
    truth = getattr(source, "initial_branch", None)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for b in range(bp.shape[1]):
        true = b == truth
        ax.plot(t, bp[:, b], lw=2.0 if true else 1.2, label=f"branch {b}" + (" (truth at the start)" if true else ""))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("t [s] since the first estimate")
    ax.set_ylabel("probability")
    ax.set_title(f"{run.name}: assembly-branch probabilities")
    ax.legend(loc="center right", fontsize=8)
    _margins(fig, 1, 1)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def has_branch_probabilities(series: dict) -> bool:
    """Whether a run's series has branch probabilities at every kept step (a figure of them)."""
    bp, t = series.get("bp"), series.get("t")
    return bp is not None and t is not None and len(bp) == len(t) and len(t) > 0


def series_of_records(inputs, run) -> dict:
    """The plot series (see :func:`plot_run`) of an in-memory run against inputs.truth."""
    mech = inputs.mechanism
    a = record_arrays(run.records)
    g = mech.dof
    have_cov = all(c is not None for c in a["covs"])
    out = {"t": a["stamps"], "z": a["z"],
           "sig": np.sqrt(np.clip(np.array([np.diag(c)[:g] for c in a["covs"]]), 0, None)) if have_cov
           else np.full((len(a["stamps"]), g), np.nan)}
    if inputs.truth is not None and len(a["stamps"]):
        angular = np.isin(mech.independent, mech.rel_columns)
        tr = inputs.truth
        out["ez"] = coordinate_errors(a["z"], truth_at(a["stamps"], tr.t, tr.z, angular), angular)
        if have_cov:
            ezd = a["zd"] - truth_at(a["stamps"], tr.t, tr.zd)
            out["nees"] = nees(np.hstack([out["ez"], ezd]), np.array(a["covs"]))
    return out


def write_plots(out_dir: str, inputs, runs, doc) -> list[str]:
    """summary.png and one figure per in-memory run (records; e.g. the batch smoother's)."""
    paths = [plot_summary(os.path.join(out_dir, "summary.png"), doc)]
    for r in runs:
        if len(r.records):
            paths.append(plot_run(os.path.join(out_dir, f"{r.name}.png"), inputs, r, series_of_records(inputs, r)))
    return paths

