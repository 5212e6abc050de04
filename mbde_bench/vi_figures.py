"""Figures of ``mbde bench vi`` (paper 002 Figs. 2, 4 and 8 analogues)."""
from __future__ import annotations

import numpy as np

from mbde_bench.symplectic import oscillator as osc, riccati as ric


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COLORS = {"exact": "k", "euler": "tab:blue", "symplectic_euler": "tab:green", "midpoint": "tab:red"}


def oscillator(path, particles: int, seed: int):
    """Fig. 2: covariance eigenvalues of the oscillator clouds over 60 s, and the
    noise-free clouds after 60 s."""
    plt = _plt()
    rng = np.random.default_rng(seed)
    x0 = 0.1 * rng.standard_normal((particles, 2)) + [1.0, 0.0]
    t, res = osc.clouds(osc.SCHEMES, x0, 0.0625, 60.0, 1.0, 1.0, rng, every=4)
    fig, ax = plt.subplots(1, 3, figsize=(14, 4.2))
    for s in osc.SCHEMES:
        e = res[s]["eig"]
        ax[0].semilogy(t, e[:, 1], color=COLORS[s], label=s)
        ax[0].semilogy(t, e[:, 0], color=COLORS[s], ls="--")
        ax[1].plot(t, res[s]["energy"], color=COLORS[s], label=s)
    ax[0].set(xlabel="t [s]", ylabel="covariance eigenvalues", title="(a) Fig. 2: cloud covariance, sigma = gamma = 1")
    ax[1].set(xlabel="t [s]", ylabel="mean energy", title="(b) mean energy of the cloud (exact ~ t)")
    ax[0].legend(fontsize=8)
    clouds = {s: osc.Cloud(osc.circle(200, 0.5), s, 0.0625, 0.0, 0.0) for s in ("euler", "midpoint")}
    for _ in range(960):
        for c in clouds.values():
            c.step(np.zeros((200, 2)))
    c0 = osc.circle(200, 0.5)
    ax[2].plot(c0[:, 0], c0[:, 1], "k.", ms=2, label="t = 0")
    for s, c in clouds.items():
        ax[2].plot(c.x[:, 0], c.x[:, 1], ".", ms=2, color=COLORS[s], label=f"{s}, t = 60 s")
    ax[2].set(aspect="equal", xlabel="q", ylabel="p", title="(c) noise-free flow of a circle")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kalman(path, seed: int):
    """Fig. 8 analogue: covariance eigenvalues of the filters over time (R_d = 0.25 and 0.01)."""
    import warnings

    plt = _plt()
    h = 0.03125
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for a, Rd in zip(ax, (0.25, 0.01)):
        m = ric.LinearModel(osc.A, [[1.0, 0.0]], np.eye(2), np.eye(2), Rd * h, h)
        P0 = 0.1 * np.eye(2)
        Pex = P0.copy()
        Th = ric.exact_map(m.S, h)
        Psi = ric.symplectic_euler_map(m.S, h)
        P, Pe, ex, sy, eu = P0.copy(), P0.copy(), [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(int(20 / h)):
                Pex = ric.fractional_update(Th, Pex)
                P = ric.fractional_update(Psi, P)
                Pe = ric.euler_riccati_step(m.A, m.C, m.GQG, m.Rinv, h, Pe)
                ex.append(np.linalg.eigvalsh(Pex))
                sy.append(np.linalg.eigvalsh(P))
                eu.append(np.linalg.eigvalsh(0.5 * (Pe + Pe.T)) if np.all(np.isfinite(Pe)) else [np.nan, np.nan])
        t = h * np.arange(1, len(ex) + 1)
        for vals, col, lab in ((ex, "k", "Kalman-Bucy (exact)"), (sy, "tab:red", "Algorithm 6.1 (symplectic)"),
                               (eu, "tab:blue", "Euler Riccati")):
            v = np.abs(np.array(vals, dtype=float))
            a.semilogy(t, v[:, 0], color=col, ls="--")
            a.semilogy(t, v[:, 1], color=col, label=lab)
        a.set(xlabel="t [s]", ylabel="|eigenvalues of P|", title=f"oscillator, q read every {h} s, R_d = {Rd}")
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ekf(path, rows):
    """Fig. 4 analogue: RMSE vs filter period per variant, one panel per case."""
    plt = _plt()
    cases = sorted({r["case"] for r in rows})
    fig, ax = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 4), squeeze=False)
    for a, case in zip(ax[0], cases):
        for lab in dict.fromkeys(r["variant"] for r in rows):
            sel = sorted((r for r in rows if r["case"] == case and r["variant"] == lab), key=lambda r: r["period"])
            a.errorbar([r["period"] for r in sel], [r["rmse_deg"] for r in sel], [r["rmse_std"] for r in sel],
                       marker="o", capsize=3, label=lab)
        a.set(xscale="log", yscale="log", xlabel="filter = measurement period [s]", ylabel="crank angle RMSE [deg]", title=case)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
