"""``mbde bench vi`` part 4: the planar crane of paper 002 sec. 5 (Figs. 5-7).

Model: config/mechanisms/crane.yaml, the cart position x_r(t) and the rope length r(t)
prescribed by time-dependent driving constraints (kinematic inputs), the payload's swing
the one degree of freedom. Truth: RK4 at 1/600 s from a 0.25 rad initial swing, with a
white random acceleration of the swing of density ``GAMMA`` (the unmodelled
disturbances of a real rig: without them the filter's model would be exact). Readings:
the payload's (x, y) with sigma ``SIGMA_M`` (paper 002: a Kinect) at 30 Hz and 6 Hz.

Filters, each stepped at the reading rate (h = 1/30 s and 1/6 s, as the paper's
integration, measurement and estimation rate), ``--particles`` particles, resampling at
every update with the low-variance (systematic) sampler, Gaussian start around the truth:

- ``vipf``: the stochastic midpoint VI proposal, velocity noise gamma = GAMMA;
- ``pf rk4`` and ``pf euler`` ("RK1"): the PF of paper 000 with the acceleration noise
  sigma_a = GAMMA / sqrt(h) (the same velocity spread per step as the VI's).

Reported per (rate, filter), over ``--runs`` seeded runs: RMSE of the payload position,
the mean and the minimum number of unique particles after resampling (paper 002 Fig. 7:
the 6 Hz RK1 filter falls to 2), the share of updates with fewer than 1 % unique
particles, and lost runs (payload RMSE > 0.1 m).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_bench.vi_figures import _plt
from mbde_core.config.paths import config_path
from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.base import NoiseModel
from mbde_core.sensors.point_position import PointPosition
from mbde_core.sensors.sensor_set import SensorSet
from mbde_core.types import Measurement

GAMMA = 0.5        # [rad/s/sqrt(s)] swing acceleration noise of the truth (and the filters' model)
SIGMA_M = 0.01     # [m] reading noise of the payload position
RATES = (30.0, 6.0)
FILTERS = {"vipf midpoint": ("vipf", {"integrator": "midpoint"}), "pf rk4": ("pf", {"integrator": "rk4"}),
           "pf euler": ("pf", {"integrator": "euler"})}
SWING0 = -math.pi / 2 + 0.25
TRUTH_H = 1.0 / 600.0  # both reading periods (1/30, 1/6 s) are multiples of it


def crane_truth(mech, duration: float, seed: int):
    """(t (K,), q (K, n), qd (K, n)) every TRUTH_H, RK4 with the swing disturbance."""
    rng = np.random.default_rng(seed)
    q = kinematics.solve_position(mech, [SWING0], mech.q0, t=0.0)[0]
    st = MBState(q, kinematics.velocity(mech, q, [0.0], t=0.0))
    rk4 = get_integrator("rk4")
    steps = int(round(duration / TRUTH_H))
    qs, qds = [st.q], [st.qd]
    for k in range(steps):
        w = GAMMA / math.sqrt(TRUTH_H) * rng.standard_normal(1)
        st = rk4.step(mech, k * TRUTH_H, MBState(st.q, st.qd), TRUTH_H, extra_zdd=w)
        qs.append(st.q)
        qds.append(st.qd)
    return TRUTH_H * np.arange(steps + 1), np.array(qs), np.array(qds)


def run_filter(mech, truth, rate: float, name: str, over: dict, particles: int, seed: int):
    """One filter run: per update (t, payload error [m], unique particles after resampling, ESS)."""
    t_true, q_true, qd_true = truth
    h = 1.0 / rate
    cam = PointPosition(mech, "payload", point=1, rate=rate, noise=NoiseModel.white(SIGMA_M, 2), frame_id="camera", topic="/camera")
    cfg = defaults(name)
    cfg.update(over, particles=particles, init="gaussian", step=h, sensor_sigma={"payload": SIGMA_M})
    cfg["resampling"] = {"scheme": "systematic", "ess_threshold": 1.0}
    cfg["recovery"] = dict(cfg["recovery"], enabled=False)
    if name == "vipf":  # paper 002's filter: the VI's blind noise is the whole proposal
        cfg["noise"] = {"position": 0.0, "velocity": GAMMA}
        cfg["proposal"] = "prior"
        cfg["regularisation"] = dict(cfg["regularisation"], enabled=False)
    else:  # paper 000's proposal (blind acceleration noise, no regularisation): the RK4/RK1 PFs paper 002 compares
        cfg["acceleration_sigma"] = GAMMA / math.sqrt(h)
        cfg["proposal"] = "prior"
        cfg["regularisation"] = dict(cfg["regularisation"], enabled=False)
    rng = np.random.default_rng(seed)
    est = make_estimator(name, mech, SensorSet([cam]), cfg, rng=np.random.default_rng(seed + 1))
    iz = mech.independent[0]
    init = InitialState(np.array([q_true[0, iz] + 0.05 * rng.standard_normal()]), np.array([qd_true[0, iz] + 0.2 * rng.standard_normal()]),
                        np.array([0.05]), np.array([0.2]), q_true[0], 0)
    est.reset(0.0, init)
    every = int(round(h / TRUTH_H))
    rows = []
    for k in range(1, (len(t_true) - 1) // every + 1):
        est.predict(h)
        j = k * every
        P_true = mech.points(q_true[j])[1]
        est.update([Measurement(t_true[j], "payload", P_true + SIGMA_M * rng.standard_normal(2))])
        snap = est.estimate()
        err = float(np.hypot(*(mech.points(snap.q)[1] - P_true)))
        d = est.diagnostics()
        rows.append((t_true[j], err, d["unique_after_last_resampling"], d["ess_before_resampling"]))
    return np.array(rows)


def crane_experiment(particles: int, runs: int, duration: float, seed: int):
    mech = load_mechanism(config_path("mechanisms", "crane.yaml"))
    rows, series = [], {}
    for run in range(runs):
        truth = crane_truth(mech, duration, seed + run)
        for rate in RATES:
            for label, (name, over) in FILTERS.items():
                r = run_filter(mech, truth, rate, name, over, particles, 1000 * (seed + run) + int(rate))
                rmse = float(np.sqrt(np.mean(r[:, 1] ** 2)))
                rows.append({"rate": rate, "filter": label, "run": run, "rmse_m": rmse, "unique_mean": float(np.mean(r[:, 2])),
                             "unique_min": int(np.min(r[:, 2])), "deprived_share": float(np.mean(r[:, 2] < 0.01 * particles)),
                             "lost": bool(rmse > 0.1)})
                if run == 0:
                    series[(rate, label)] = r
    return {"rows": rows, "series": series, "particles": particles}


def crane_table(rows) -> str:
    out = ["", f"Planar crane (paper 002 sec. 5): payload (x, y) read with sigma {SIGMA_M} m, filter step = reading period, "
           "resampling at every update; mean over runs (unique = distinct particles after resampling)",
           f"{'rate [Hz]':>9} {'filter':<15}{'RMSE [mm]':>10}{'unique mean':>13}{'unique min':>12}{'< 1 % unique':>14}{'lost runs':>11}"]
    for rate in RATES:
        for label in FILTERS:
            sel = [r for r in rows if r["rate"] == rate and r["filter"] == label]
            out.append(f"{rate:>9g} {label:<15}{1e3 * np.mean([r['rmse_m'] for r in sel]):>10.2f}"
                       f"{np.mean([r['unique_mean'] for r in sel]):>13.1f}{min(r['unique_min'] for r in sel):>12}"
                       f"{100 * np.mean([r['deprived_share'] for r in sel]):>13.1f}%{sum(r['lost'] for r in sel):>11}")
    return "\n".join(out)


def figure(path, res):
    """Fig. 7 analogue (unique particles vs time) and the payload error vs time, first run."""
    plt = _plt()
    fig, ax = plt.subplots(2, len(RATES), figsize=(12, 7), squeeze=False)
    for c, rate in enumerate(RATES):
        for label in FILTERS:
            r = res["series"].get((rate, label))
            if r is None:
                continue
            ax[0, c].plot(r[:, 0], r[:, 2], label=label, lw=1)
            ax[1, c].semilogy(r[:, 0], 1e3 * r[:, 1], label=label, lw=1)
        ax[0, c].set(title=f"{rate:g} Hz: unique particles after resampling", ylabel="unique particles", yscale="log")
        ax[1, c].set(xlabel="t [s]", ylabel="payload error [mm]")
        ax[0, c].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
