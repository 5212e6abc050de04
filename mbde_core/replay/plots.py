"""PNG plots of a replay: truth vs estimate with the 95 % band, error, NEES (matplotlib, Agg)."""
from __future__ import annotations

import os

import numpy as np

from mbde_core.estimators.assess.metrics import coordinate_errors, nees, record_arrays, truth_at
from mbde_core.estimators.chi2 import chi2_ppf

# every time axis of the replay's figures: the estimates start at the first reading
TIME_LABEL = "t [s] since the first reading"


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
    t = np.asarray(t) - (t[0] if len(t) else 0.0)  # bag stamps are epoch seconds: time since the first reading
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
        axes[-1, c].set_xlabel(TIME_LABEL)
    _margins(fig, rows, mech.dof)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _metric(doc: dict, name: str, *keys):
    m = doc["estimators"][name].get("metrics") or {}
    for k in keys:
        m = m.get(k) if isinstance(m, dict) else None
    return m


def plot_summary(path: str, doc: dict) -> str:
    """The run at a glance, per estimator (one or many): RMSE of z over the run and after
    convergence, mean NEES and NIS/dof against the acceptance band [0.3, 3] (x 2g for the
    NEES; log axes), the real-time factor against 1, and what the stage did (fused and
    rejected readings, the time to converge, the suitability verdict)."""
    plt = _plt()
    units = (doc.get("units") or {}).get("z") or []
    unit = units[0] if units and all(u == units[0] for u in units) else ""
    names = list(doc["estimators"])
    x = np.arange(len(names))
    fig, axes = plt.subplots(2, 2, figsize=(max(9.0, 2.2 + 1.1 * len(names) * 2), 6.4))

    def rms(v):
        return float(np.sqrt(np.mean(np.square(v)))) if v else np.nan

    ax = axes[0, 0]
    whole = [rms(_metric(doc, n, "rmse", "z")) for n in names]
    settled = [rms(((_metric(doc, n, "convergence", "tracking") or {}).get("rmse") or {}).get("z")) for n in names]
    if not all(np.isnan(whole)):
        ax.bar(x - 0.2, whole, 0.4, color="C3", label="whole run")
        ax.bar(x + 0.2, settled, 0.4, color="C1", label="tracking (after acquisition)")
        ax.set_ylim(bottom=0.0)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no reference (ground truth or --reference smoother)", ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
    ax.set_ylabel(f"RMSE z{f' [{unit}]' if unit else ''}")
    ax.set_title("accuracy", fontsize=10)
    for ax, key, dof_key, title in ((axes[0, 1], "nees", "dof", "consistency: mean NEES / dof"),
                                     (axes[1, 0], "nis", "mean_dof", "consistency: mean NIS / dof")):
        vals = []
        for n in names:
            mean, dof = _metric(doc, n, key, "mean"), _metric(doc, n, key, dof_key)
            vals.append(mean / dof if mean is not None and dof else np.nan)
        ax.axhspan(0.3, 3.0, color="C2", alpha=0.15, label="acceptance band [0.3, 3]")
        ax.axhline(1.0, color="C2", lw=0.8)
        if not all(np.isnan(vals)):
            ax.bar(x, np.clip(vals, 1e-3, None), 0.5, color="C2")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
    ax = axes[1, 1]
    rtf = [_metric(doc, n, "realtime_factor") or 0.0 for n in names]
    ax.bar(x, rtf, 0.5, color="C0")
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="real time")
    ax.set_ylim(bottom=0.0)
    ax.set_title("real-time factor (processing time / data time)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    for ax in axes.ravel():
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30 if len(names) > 3 else 0)
    for i, n in enumerate(names):  # what the stage did, under the real-time factor's bars
        c = _metric(doc, n, "counters") or {}
        conv = _metric(doc, n, "convergence", "acquired_after")
        level = _metric(doc, n, "suitability", "level")
        text = f"fused {c.get('fused', '-')}\nrejected {c.get('rejected_gate', '-')}"
        text += "" if conv is None else f"\nacquired {conv:.2f} s"
        text += "" if level is None else f"\n{level}"
        axes[1, 1].text(i, 0.02, text, ha="center", va="bottom", fontsize=7,
                        transform=axes[1, 1].get_xaxis_transform())
    fig.suptitle(f"{doc.get('mechanism', '')}: {len(names)} estimator{'s' if len(names) > 1 else ''}"
                 f"{', ground truth' if doc.get('ground_truth') else ''}", fontsize=11)
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
    ax.set_xlabel(TIME_LABEL)
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

