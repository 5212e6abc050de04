"""Figures of ``mbde bench adekf``: paper 004 Figs. 3-9, exact vs learned map, the MSC torque check."""
from __future__ import annotations

import os

import numpy as np


def _wrap(a):
    """Angles wrapped into [-pi, pi)."""
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figures(sl, msc, out) -> list[str]:
    plt = _plt()
    paths = []
    tr = sl["truth"]
    c, sc = sl["coord"], sl["slider_col"]
    T = tr["t"][-1]
    zooms = [(0.0, 0.15)] + [(s - 0.03, s + 0.15) for s in (10 / 3, 20 / 3) if s < T]
    for label, _ in sl["cases"]:
        run = sl["runs"][f"{label}, exact map"]
        t = run["t"]
        idx = np.clip(np.searchsorted(tr["t"], t - 1e-9), 0, len(tr["t"]) - 1)
        rows = [("crank angle [rad] (mod 2 pi)", np.mod(tr["q"][idx, c], 2 * np.pi), np.mod(run["z"][:, 0], 2 * np.pi)),
                ("angle error [rad]", np.zeros(len(t)), _wrap(run["z"][:, 0] - tr["q"][idx, c])),
                ("crank speed [rad/s]", tr["qd"][idx, c], run["zd"][:, 0]),
                ("slider acceleration [m/s^2]", tr["qdd"][idx, sc], run["qdd"][:, sc]),
                ("motor torque [N m]", tr["effort"][idx, c], run["a"][:, 0])]
        fig, axes = plt.subplots(len(rows), 1 + len(zooms), figsize=(4 + 3.2 * len(zooms), 11), squeeze=False)
        for r, (name, truth, est) in enumerate(rows):
            for col, win in enumerate([None] + zooms):
                ax = axes[r, col]
                m = slice(None) if win is None else (t >= win[0]) & (t <= win[1])
                if r == 0 and win is None:  # the full run: too many turns to see, show the turn count
                    truth, est = tr["q"][idx, c] / (2 * np.pi), run["z"][:, 0] / (2 * np.pi)
                    ax.set_ylabel("crank turns", fontsize=8)
                style = "-" if r != 0 else "."
                ax.plot(t[m], truth[m], "k" + style, lw=1.0, ms=1.5, label="truth")
                ax.plot(t[m], est[m], "C3" + style, lw=0.8, ms=1.0, label="ADE-KF")
                if col == 0 and r != 0:
                    ax.set_ylabel(name, fontsize=8)
                elif col == 1 and r == 0:
                    ax.set_ylabel(name, fontsize=8)
                if r == 0:
                    ax.set_title("full run" if win is None else f"{win[0]:.2f}-{win[1]:.2f} s", fontsize=9)
                ax.tick_params(labelsize=7)
        axes[0, 0].legend(fontsize=7, loc="upper right")
        for ax in axes[-1]:
            ax.set_xlabel("t [s]", fontsize=8)
        fig.suptitle(f"slider-crank, {label}, exact map: only the slider accelerometer is fused", fontsize=10)
        fig.tight_layout()
        p = os.path.join(out, f"slider_crank_{label.split()[0]}_{label.split('=')[1]}.png")
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)
    # Fig. 9: augmented state with the 95 % band for the r_a values
    fig, axes = plt.subplots(len(sl["cases"]), 1, figsize=(11, 2.6 * len(sl["cases"])), sharex=True, squeeze=False)
    for ax, (label, _) in zip(axes[:, 0], sl["cases"]):
        run = sl["runs"][f"{label}, exact map"]
        t, a, s = run["t"], run["a"][:, 0], run["a_sd"][:, 0]
        idx = np.clip(np.searchsorted(tr["t"], t - 1e-9), 0, len(tr["t"]) - 1)
        ax.plot(t, tr["effort"][idx, c], "k-", lw=0.6, label="true motor torque")
        ax.plot(t, a, "C3-", lw=0.6, label="augmented state a")
        ax.fill_between(t, a - 1.96 * s, a + 1.96 * s, color="C3", alpha=0.25, lw=0, label="95 % band")
        ax.set_ylabel("a [N m]")
        ax.set_ylim(-4, 6)
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("t [s]")
    fig.tight_layout()
    p = os.path.join(out, "augmented_state.png")
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)
    # exact vs learned
    label = sl["cases"][-1][0]
    fig, axes = plt.subplots(2, 1, figsize=(11, 5), sharex=True)
    for src, col in (("exact", "C0"), ("learned", "C3")):
        run = sl["runs"][f"{label}, {src} map"]
        t = run["t"]
        idx = np.clip(np.searchsorted(tr["t"], t - 1e-9), 0, len(tr["t"]) - 1)
        axes[0].plot(t, run["a"][:, 0] - tr["effort"][idx, c], col, lw=0.6, label=f"{src} map")
        axes[1].plot(t, _wrap(run["z"][:, 0] - tr["q"][idx, c]), col, lw=0.6, label=f"{src} map")
    axes[0].set_ylabel("torque error [N m]")
    axes[0].set_ylim(-3, 3)
    axes[1].set_ylabel("angle error [rad]")
    axes[1].set_xlabel("t [s]")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"exact vs learned minimal-coordinate map ({label})", fontsize=9)
    fig.tight_layout()
    p = os.path.join(out, "exact_vs_learned.png")
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)
    if msc is not None:
        fig, axes = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
        t = msc["t"]
        axes[0].plot(t, msc["ref"], "k-", lw=1.4, label="MSC Adams (negated)")
        axes[0].plot(t, msc["id"], "C2--", lw=1.0, label="engine inverse dynamics")
        for src, col in (("exact", "C0"), ("learned", "C3")):
            axes[0].plot(t, msc["runs"][src][1], col, lw=0.8, label=f"ADE-KF, {src} map")
            axes[1].plot(t, msc["runs"][src][1] - msc["ref"], col, lw=0.8, label=f"ADE-KF, {src} map")
        axes[1].plot(t, msc["id"] - msc["ref"], "C2--", lw=0.8, label="inverse dynamics")
        axes[0].set_ylabel("crank torque [N m]")
        axes[1].set_ylabel("estimate - MSC [N m]")
        axes[1].set_ylim(-0.5, 0.5)
        axes[1].set_xlabel("t [s]")
        axes[0].legend(fontsize=8)
        axes[1].legend(fontsize=8)
        axes[0].set_title("four-bar, prescribed crank angle: torque from noise-free coupler accelerations", fontsize=9)
        fig.tight_layout()
        p = os.path.join(out, "msc_fourbar.png")
        fig.savefig(p, dpi=100)
        plt.close(fig)
        paths.append(p)
    return paths
