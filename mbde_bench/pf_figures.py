"""Figures of ``mbde bench pf``: paper 000 Figs. 7, 8 and 11, and the speed plot."""
from __future__ import annotations

import numpy as np

from mbde_bench.pf_runs import BRANCH_P, CONVERGED_DEG
from mbde_bench.pf_speed import SPEED_INTEGRATORS, TARGET


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_tracking(path, res):
    plt = _plt()
    s = res["series"]
    fig, ax = plt.subplots(3, 1, figsize=(8, 8.5))
    ax[0].fill_between(s["t"], s["lo"], s["hi"], color="0.75", lw=0, label="95 % interval")
    ax[0].plot(s["t"], s["truth"], "k-", lw=1.4, label="ground truth")
    ax[0].plot(s["t"], s["mean"], "r-", lw=0.9, label="PF mean")
    ax[0].set_ylabel("crank angle [deg]")
    ax[0].set_title("(a) paper 000 Fig. 7: crank angle, uniform prior (pf_sim, Table 1)")
    ax[0].legend(loc="upper right", fontsize=8)
    for a, tmax in ((ax[1], s["t"][-1]), (ax[2], 1.0)):
        sel = s["t"] <= tmax
        a.fill_between(s["t"][sel], s["err_lo"][sel], s["err_hi"][sel], color="0.75", lw=0, label="95 % interval")
        a.plot(s["t"][sel], s["err"][sel], "r-", lw=0.8, label="error")
        a.axhline(0, color="k", lw=0.5)
        for y in (-CONVERGED_DEG, CONVERGED_DEG):
            a.axhline(y, color="b", lw=0.5, ls="--")
        if np.isfinite(res["convergence_s"]) and res["convergence_s"] <= tmax:
            a.axvline(res["convergence_s"], color="b", lw=0.8, ls=":", label=f"converged {res['convergence_s']:.3f} s")
        a.set_ylabel("error [deg]")
        a.legend(loc="upper right", fontsize=8)
    ax[1].set_ylim(-10, 10)
    ax[1].set_title("(b) error and its 95 % interval (zoom +/- 10 deg)")
    ax[2].set_title("(c) the first second")
    ax[2].set_xlabel("t [s]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_branches(path, runs):
    plt = _plt()
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for b in (0, 1):
        res = runs.get(b)
        if res is None:
            continue
        s = res["series"]
        a = ax[0, b]
        a.fill_between(s["t"], s["lo"], s["hi"], color="0.75", lw=0, label="95 % interval")
        a.plot(s["t"], s["truth"], "k-", lw=1.3, label="ground truth")
        a.plot(s["t"], s["mean"], "r-", lw=0.8, label="PF mean")
        a.set_title(f"({'ab'[b]}) rig, true branch {b}: crank angle")
        a.set_ylabel("crank angle [deg]")
        a.legend(loc="upper right", fontsize=8)
        a = ax[1, b]
        sel = s["t"] <= 0.5
        for k in range(s["P"].shape[1]):
            a.plot(s["t"][sel], s["P"][sel, k], "-", lw=1.3, label=f"P(B = {k})")
        if np.isfinite(res["branch_s"]):
            a.axvline(res["branch_s"], color="k", ls=":", lw=0.8, label=f"P(true) > {BRANCH_P} at {res['branch_s'] * 1e3:.0f} ms")
        a.set_ylim(-0.02, 1.02)
        a.set_xlabel("t [s]")
        a.set_title(f"({'cd'[b]}) branch probabilities (eq. 20), true branch {b}")
        a.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_sweep(path, summary, sigmas, errors, release):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for e in errors:
        cs = [c for c in summary if c["error_pct"] == float(e)]
        x = [c["sigma_a_ms2"] for c in cs]
        y = [c["rmse_mean_deg"] if c["rmse_mean_deg"] is not None else np.nan for c in cs]
        ax.plot(x, y, "o-", label=f"{e:g} % crank error")
    ax.set_xscale("log")
    ax.set_xticks(list(sigmas))
    ax.set_xticklabels([f"{s:g}" for s in sigmas])
    ax.minorticks_off()
    ys = [c["rmse_mean_deg"] for c in summary if c["rmse_mean_deg"]]
    if ys and min(ys) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("sigma_a [m/s^2]  (x 8 = rad/s^2 on the crank angle)")
    ax.set_ylabel("mean RMSE of the crank angle [deg]")
    ax.set_title(f"paper 000 Fig. 8: model error x acceleration noise (release {release:g} deg)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_speed(path, rows):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for integ in SPEED_INTEGRATORS:
        for nt in sorted({r["threads"] for r in rows if r["integrator"] == integ}):
            rs = [r for r in rows if r["integrator"] == integ and r["threads"] == nt]
            ax.plot([r["particles"] for r in rs], [r["particle_steps_per_s"] for r in rs], "o-",
                    label=f"{integ}, {nt} thread(s), per CPU-second")
            ax.plot([r["particles"] for r in rs], [r["particle_steps_per_wall_s"] for r in rs], "x:",
                    label=f"{integ}, {nt} thread(s), per wall second")
    ax.axhline(TARGET, color="k", ls="--", lw=0.8, label="target 1e7 (1e5, wall)")
    ax.axhline(2e4, color="0.5", ls=":", lw=0.8, label="2014 C++ (~2e4)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("particles")
    ax.set_ylabel("particle-steps / s")
    ax.set_title("PF speed on fourbar_pf (predict + update + estimate)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
