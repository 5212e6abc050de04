"""Paper 002 experiments (variational integrators in filtering): ``mbde bench vi --out DIR``.

1. oscillator (examples 2.1 / 3.1, Fig. 2): the stochastic harmonic oscillator
   H = (q^2 + p^2)/2, sigma = gamma = 1, a cloud of ``--particles`` (1000) propagated for
   60 s at h = 0.0625 without measurements or resampling by RK1 (Euler-Maruyama), the
   symplectic Euler (eq. 5) and midpoint (eq. 6) schemes with the same Wiener increments,
   and the exact Gaussian transition: covariance eigenvalues, cloud area and mean energy
   over time (and the noise-free area).
2. kalman (example 6.1, Algorithm 6.1): the same oscillator, q read every h = 0.03125 s
   with variance R_d in {1e-4, 1e-2, 0.25, 1}: Algorithm 6.1 (symplectic Euler state and
   covariance), the Euler-discretised Riccati filter, and discrete Kalman filters with
   Euler and midpoint transitions; symplectic defect of the covariance map, smallest
   covariance eigenvalue, distance to the exact Kalman-Bucy covariance, RMSE, energy.
3. pendulum (the engine's proposal): the VI particle filter's stochastic step
   (:mod:`mbde_core.engine.variational`) on the pendulum YAML, 1000 particles, 10 s at
   h = 0.0625 without measurements: area of the cloud in (theta, p_theta) without noise
   (symplectic: constant) and the mean energy with noise, for midpoint, symplectic Euler,
   explicit Euler and RK4 (the PF's integrators).
4. crane (sec. 5, Figs. 5-7): :mod:`mbde_bench.vi_crane`.
5. ekf (Fig. 4 on the four-bar): viekf (VI step + structured linearisation) against
   errorEKF with explicit Euler (the paper's RK1 baseline), the midpoint step with the
   Euler transition, and RK4, at filter = measurement periods ``--ekf-periods`` on
   fourbar_encoder and fourbar_gyro (perfect model), ``--runs`` seeded runs each.
6. speed: the VI step (midpoint) against RK4 per particle-step at 1e2 .. 1e5 particles
   (integrator step alone; CPU time of this process).

Writes DIR/results.json, DIR/tables.md and PNG figures; prints the tables.
"""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from mbde_bench import vi_crane, vi_figures
from mbde_bench.common import TruthRecord, paper003_config
from mbde_bench.symplectic import oscillator as osc, riccati as ric
from mbde_core.config.paths import config_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.errors import DataError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.model.mechanism import load_mechanism
from mbde_core.scenario import load_scenario
from mbde_core.sensors.base import wrap_angle

HELP = "paper 002 variational-integrator filters: oscillator clouds, symplectic Kalman, crane PF, VI-EKF vs errorEKF, speed"
EXPERIMENTS = ("oscillator", "kalman", "pendulum", "crane", "ekf", "speed")
H_PF, H_KF = 0.0625, 0.03125
KALMAN_RD = (1e-4, 1e-2, 0.25, 1.0)
SPEED_N = (100, 1000, 10000, 100000)


def add_arguments(p):
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--only", default=",".join(EXPERIMENTS), help="comma-separated experiments (default: all)")
    p.add_argument("--runs", type=int, default=5, help="seeded runs per cell (crane, ekf; default %(default)s)")
    p.add_argument("--particles", type=int, default=1000, help="particles (oscillator, pendulum, crane; default %(default)s)")
    p.add_argument("--duration", type=float, default=20.0, help="crane run length [s] (default %(default)s)")
    p.add_argument("--ekf-periods", default="0.005,0.02,0.05,0.1,0.2", help="viekf/errorekf periods [s]")
    p.add_argument("--ekf-duration", type=float, default=5.0, help="four-bar run length [s] (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default %(default)s)")


# ------------------------------------------------------------------------------ 1. oscillator
def oscillator_experiment(particles: int, seed: int):
    rng = np.random.default_rng(seed)
    x0 = 0.1 * rng.standard_normal((particles, 2)) + [1.0, 0.0]
    every = int(round(10.0 / H_PF))
    t, noisy = osc.clouds(osc.SCHEMES, x0, H_PF, 60.0, 1.0, 1.0, rng, every=every)
    _, quiet = osc.clouds(osc.SCHEMES, x0, H_PF, 60.0, 0.0, 0.0, rng, every=every)
    rows = []
    for s in osc.SCHEMES:
        for k, tk in enumerate(t):
            rows.append({"scheme": s, "t": float(tk), "eig_min": float(noisy[s]["eig"][k][0]), "eig_max": float(noisy[s]["eig"][k][1]),
                         "area": float(noisy[s]["area"][k]), "energy": float(noisy[s]["energy"][k]),
                         "area_noise_free": float(quiet[s]["area"][k])})
    return rows


def oscillator_table(rows) -> str:
    out = ["", "Oscillator clouds (paper 002 example 3.1 / Fig. 2): 1000 particles, sigma = gamma = 1, h = 0.0625, "
           "no measurements, same dW; covariance eigenvalues, 1-sigma area, mean energy (exact: eig ~ t, E ~ t)",
           f"{'scheme':<17}{'t [s]':>6}{'eig min':>10}{'eig max':>10}{'area':>10}{'energy':>10}{'area (no noise)':>17}"]
    for r in rows:
        out.append(f"{r['scheme']:<17}{r['t']:>6.0f}{r['eig_min']:>10.3g}{r['eig_max']:>10.3g}{r['area']:>10.4g}"
                   f"{r['energy']:>10.4g}{r['area_noise_free']:>17.4g}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ 2. kalman
def kalman_experiment(seed: int, T: float = 60.0):
    import warnings

    import scipy.linalg

    rows = []
    K = int(round(T / H_KF))
    for Rd in KALMAN_RD:
        m = ric.LinearModel(osc.A, [[1.0, 0.0]], np.eye(2), np.eye(2), Rd * H_KF, H_KF)
        rng = np.random.default_rng(seed)
        Th = scipy.linalg.expm(osc.A * H_KF)
        L = np.linalg.cholesky(osc.exact_noise_cov(H_KF, 1.0, 1.0))
        x, xs, zs = np.array([1.0, 0.0]), [], []
        for _ in range(K):
            x = Th @ x + L @ rng.standard_normal(2)
            xs.append(x)
            zs.append(x[0] + math.sqrt(Rd) * rng.standard_normal())
        xs = np.array(xs)
        P0 = 0.1 * np.eye(2)
        exact = None if Rd < 1e-3 else ric.exact_map(m.S, H_KF)  # expm overflows for tiny R
        filters = [(ric.SymplecticKalman(m, xs[0], P0), ric.symplectic_defect(ric.symplectic_euler_map(m.S, H_KF))),
                   (ric.EulerRiccatiKalman(m, xs[0], P0), ric.symplectic_defect(np.eye(4) + H_KF * m.S)),
                   (ric.DiscreteKalman(m, xs[0], P0, "euler"), None), (ric.DiscreteKalman(m, xs[0], P0, "midpoint"), None)]
        for f, defect in filters:
            est, mins, dist = [], [], []
            Pex = P0.copy()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the Euler Riccati iteration may overflow
                for z in zs:
                    xe, P = f.step(z)
                    est.append(xe.copy())
                    mins.append(np.linalg.eigvalsh(0.5 * (P + P.T)).min() if np.all(np.isfinite(P)) else -np.inf)
                    if exact is not None:
                        Pex = ric.fractional_update(exact, Pex)
                        dist.append(float(np.max(np.abs(P - Pex))) if np.all(np.isfinite(P)) else np.inf)
                est = np.array(est)
                err = np.sqrt(np.mean((est - xs) ** 2, axis=0)) if np.all(np.isfinite(est)) else np.array([np.inf, np.inf])
                energy = 0.5 * np.sum(est**2, axis=1) - 0.5 * np.sum(xs**2, axis=1)
                Pend = f.P if np.all(np.isfinite(f.P)) else np.full((2, 2), np.nan)
            rows.append({"Rd": Rd, "filter": f.name, "defect": defect, "min_eig": float(np.min(mins)),
                         "final_eig": np.linalg.eigvalsh(0.5 * (Pend + Pend.T)).tolist() if np.all(np.isfinite(Pend)) else [None, None],
                         "dist_exact": float(max(dist)) if dist else None, "rmse_q": float(err[0]), "rmse_p": float(err[1]),
                         "energy_err": float(np.sqrt(np.mean(energy**2))) if np.all(np.isfinite(energy)) else float("inf")})
    return rows


def kalman_table(rows) -> str:
    out = ["", "Symplectic covariance propagation (paper 002 example 6.1, Algorithm 6.1): oscillator, q read every "
           "h = 0.03125 s with variance R_d, 60 s; defect = max|Psi^T J Psi - J| of the covariance map; "
           "dist = max |P - P_Kalman-Bucy| (exact Riccati flow; - where expm overflows)",
           f"{'R_d':>7} {'filter':<19}{'defect':>9}{'min eig P':>11}{'final eig P':>20}{'dist':>9}{'RMSE q':>8}{'RMSE p':>8}{'RMS dE':>8}"]
    for r in rows:
        fe = "diverged" if r["final_eig"][0] is None else f"{r['final_eig'][0]:.3g}, {r['final_eig'][1]:.3g}"
        d = "-" if r["defect"] is None else f"{r['defect']:.1e}"
        dist = "-" if r["dist_exact"] is None else f"{r['dist_exact']:.2g}"
        out.append(f"{r['Rd']:>7g} {r['filter']:<19}{d:>9}{r['min_eig']:>11.3g}{fe:>20}{dist:>9}{r['rmse_q']:>8.3g}"
                   f"{r['rmse_p']:>8.3g}{r['energy_err']:>8.3g}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ 3. pendulum
def pendulum_experiment(particles: int, seed: int, T: float = 10.0):
    """The engine's integrators on the pendulum (no measurements, no resampling).

    Noise-free: ``particles`` states on a circle of radius 0.05 in (theta, p_theta / I)
    around theta = -0.6 rad (0.97 rad from the bottom); the phase-space area enclosed by
    the propagated curve (shoelace formula) relative to its start: 1 for a symplectic map.
    (The covariance ellipse of a cloud is no invariant of a nonlinear flow: the cloud
    shears along the orbits.) With noise: the same start as a Gaussian cloud, velocity
    noise gamma = 0.5 (the VI's dW2, the PF's acceleration noise with the same spread per
    step): mean energy change against RK4 at h/16 with the same increments.
    """
    mech = load_mechanism(config_path("mechanisms", "pendulum.yaml"))
    I0 = float(mech.spec.bodies[0].I0)
    a = np.linspace(0.0, 2.0 * np.pi, particles, endpoint=False)
    steps = int(round(T / H_PF))
    rows = []
    for noise in (0.0, 0.5):
        rng = np.random.default_rng(seed)
        if noise:
            z0, zd0 = -0.6 + 0.05 * rng.standard_normal((particles, 1)), 0.05 * rng.standard_normal((particles, 1))
        else:
            z0, zd0 = (-0.6 + 0.05 * np.cos(a))[:, None], (0.05 * np.sin(a))[:, None]
        q0 = kinematics.solve_position(mech, z0, np.tile(mech.q0, (particles, 1)))[0]
        qd0 = kinematics.velocity(mech, q0, zd0)
        dW = math.sqrt(H_PF) * np.random.default_rng(seed + 1).standard_normal((steps, particles, 1))
        E0 = float(np.mean(mech.energy(q0, qd0)))
        final = {}
        for name, sub in (("midpoint", 1), ("symplectic_euler", 1), ("euler", 1), ("rk4", 1), ("rk4 h/16", 16)):
            integ = get_integrator(name.split()[0])
            st = MBState(q0, qd0)
            h = H_PF / sub
            for k in range(steps):
                for _ in range(sub):
                    if name in ("midpoint", "symplectic_euler"):
                        st = integ.step_noisy(mech, 0.0, st, h, None, noise * dW[k] if noise else None)
                    else:  # the PF's acceleration noise: the same velocity increment per step
                        st = integ.step(mech, 0.0, st, h, extra_zdd=noise * dW[k] / H_PF if noise else None)
            final[name] = st
            th = st.q[:, mech.independent[0]]
            w = st.qd[:, mech.independent[0]]
            area = 0.5 * abs(np.dot(th, np.roll(w, -1)) - np.dot(w, np.roll(th, -1))) * I0
            rows.append({"integrator": name, "noise": noise, "area_ratio": float(area / (np.pi * 0.05 * 0.05 * I0)) if not noise else None,
                         "energy_change": float(np.mean(mech.energy(st.q, st.qd))) - E0,
                         "failed": int(np.count_nonzero(~np.asarray(st.ok)))})
    return rows


def pendulum_table(rows) -> str:
    out = ["", "Engine integrators on the pendulum (the VI PF's proposal vs the PF's): h = 0.0625 s, 10 s, no measurements; "
           "noise 0: phase-space area enclosed by a curve of particles relative to its start (symplectic: 1); "
           "mean energy change [J] (noise 0.5: diffusion adds energy; RK4 at h/16 is the reference)",
           f"{'integrator':<18}{'noise gamma':>12}{'area ratio':>12}{'dE mean [J]':>13}{'failed':>8}"]
    for r in rows:
        area = "-" if r["area_ratio"] is None else f"{r['area_ratio']:.6g}"
        out.append(f"{r['integrator']:<18}{r['noise']:>12g}{area:>12}{r['energy_change']:>13.4g}{r['failed']:>8}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ 5. ekf
EKF_CASES = ("fourbar_encoder", "fourbar_gyro")
EKF_VARIANTS = {  # label -> (estimator, options)
    "errorekf euler": ("errorekf", {"integrator": "euler"}),
    "errorekf midpoint": ("errorekf", {"integrator": "midpoint"}),
    "errorekf rk4": ("errorekf", {"integrator": "rk4"}),
    "viekf": ("viekf", {}),
}


def ekf_experiment(periods, runs: int, duration: float, seed: int):
    """RMSE of z per (case, period, variant), mean over runs (filter = measurement period)."""
    rows = []
    for case in EKF_CASES:
        sc = load_scenario(config_path("scenarios", f"{case}.yaml")).with_overrides(gravity_error=0.0)
        truth = TruthRecord(sc, duration)
        mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
        init = sc.estimator_initial_state()
        start = InitialState(init.z, init.zd, np.full(mech.dof, 0.05), np.full(mech.dof, 0.5), init.q, init.branch)
        for dt in periods:
            for label, (name, over) in EKF_VARIANTS.items():
                errs, costs, fails = [], [], 0
                for run in range(runs):
                    cfg = paper003_config(name)  # errorekf: forward Euler unless `over` says otherwise
                    cfg.update(over, step=dt)
                    est = make_estimator(name, mech, sensors, cfg)
                    recs = []
                    stage = EstimatorStage(est, dt, lambda t: start, keep=False, on_step=recs.append)
                    c0 = time.process_time()
                    stage.feed(truth.measurements(sc.sensors, dt, seed=1000 * (seed + run + 1)))
                    stage.flush()
                    costs.append((time.process_time() - c0) / max(len(recs), 1))
                    t = np.array([r.estimate.stamp for r in recs])
                    z = np.array([r.estimate.z for r in recs])
                    zt = truth.at(np.round(t / 1e-3) * 1e-3)[0]
                    e = float(np.degrees(np.sqrt(np.mean(wrap_angle(z - zt) ** 2))))
                    errs.append(e)
                    fails += int(e > 10.0)
                rows.append({"case": case, "period": dt, "variant": label, "rmse_deg": float(np.mean(errs)),
                             "rmse_std": float(np.std(errs)), "lost_runs": fails, "us_per_step": 1e6 * float(np.mean(costs))})
    return rows


def ekf_table(rows) -> str:
    out = ["", "VI-EKF vs errorEKF (paper 002 Fig. 4 on the four-bar, perfect model, filter period = measurement "
           "period): crank-angle RMSE [deg], mean (std) over runs; lost = runs with RMSE > 10 deg"]
    for case in EKF_CASES:
        sel = [r for r in rows if r["case"] == case]
        labels = list(EKF_VARIANTS)
        out.append(f"{case}:")
        out.append(f"{'period [s]':>11}" + "".join(f"{lab:>22}" for lab in labels))
        for dt in sorted({r["period"] for r in sel}):
            cells = []
            for lab in labels:
                r = next(x for x in sel if x["period"] == dt and x["variant"] == lab)
                lost = f" lost {r['lost_runs']}" if r["lost_runs"] else ""
                cells.append(f"{r['rmse_deg']:.3g} ({r['rmse_std']:.2g}){lost}".rjust(22))
            out.append(f"{dt:>11g}" + "".join(cells))
        cost = {lab: np.mean([r["us_per_step"] for r in sel if r["variant"] == lab]) for lab in labels}
        out.append(f"{'us/step':>11}" + "".join(f"{cost[lab]:>22.0f}" for lab in labels))
    return "\n".join(out)


# ------------------------------------------------------------------------------ 6. speed
def speed_experiment(counts):
    mech = load_mechanism(config_path("mechanisms", "fourbar_pf.yaml"))
    rows = []
    for N in counts:
        rng = np.random.default_rng(0)
        z = mech.q0[mech.independent] + 0.1 * rng.standard_normal((N, 1))
        q = kinematics.solve_position(mech, z, np.tile(mech.q0, (N, 1)))[0]
        qd = kinematics.velocity(mech, q, 5.0 * rng.standard_normal((N, 1)))
        qdd = dynamics.evaluate(mech, 0.0, q, qd).qdd
        row = {"particles": N}
        for name in ("rk4", "midpoint", "symplectic_euler"):
            integ = get_integrator(name)
            st = MBState(q, qd, qdd)
            v = rng.standard_normal((N, 1))
            times = []
            while len(times) < 7 or (sum(times) < 0.3 and len(times) < 200):
                c = time.process_time()
                if name == "rk4":
                    st = integ.step(mech, 0.0, st, 0.005, extra_zdd=v)
                else:
                    st = integ.step_noisy(mech, 0.0, st, 0.005, 0.001 * v, 0.05 * v)
                times.append(time.process_time() - c)
            row[name] = float(np.median(times[2:]))
        rows.append(row)
    return rows


def speed_table(rows, load) -> str:
    out = ["", f"Integrator step per particle (fourbar_pf, h = 5 ms, with noise), median CPU time; load average {load}",
           f"{'N':>8}{'rk4 [ms]':>10}{'midpoint [ms]':>15}{'sympl. Euler [ms]':>19}{'midpoint / rk4':>16}{'particle-steps/s (midpoint)':>29}"]
    for r in rows:
        out.append(f"{r['particles']:>8}{1e3 * r['rk4']:>10.3f}{1e3 * r['midpoint']:>15.3f}{1e3 * r['symplectic_euler']:>19.3f}"
                   f"{r['midpoint'] / r['rk4']:>16.2f}{r['particles'] / r['midpoint']:>29.3g}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ driver
def run(args) -> int:
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = set(only) - set(EXPERIMENTS)
    if bad or not only:
        raise DataError(f"--only: unknown {', '.join(sorted(bad)) or '(empty)'} (choose from {', '.join(EXPERIMENTS)})")
    if args.runs < 1 or args.particles < 2:
        raise DataError("--runs must be >= 1 and --particles >= 2")
    try:
        periods = [float(p) for p in args.ekf_periods.split(",") if p.strip()]
    except ValueError as exc:
        raise DataError(f"--ekf-periods: {exc}") from None
    os.makedirs(args.out, exist_ok=True)
    doc, text = {}, []
    t0 = time.perf_counter()

    def report(key, rows, table, figure=None):
        doc[key] = rows
        text.append(table)
        print(table, flush=True)
        if figure is not None:
            figure(os.path.join(args.out, f"{key}.png"), rows)

    if "oscillator" in only:
        rows = oscillator_experiment(args.particles, args.seed)
        report("oscillator", rows, oscillator_table(rows))
        vi_figures.oscillator(os.path.join(args.out, "oscillator.png"), args.particles, args.seed)
    if "kalman" in only:
        rows = kalman_experiment(args.seed)
        report("kalman", rows, kalman_table(rows))
        vi_figures.kalman(os.path.join(args.out, "kalman.png"), args.seed)
    if "pendulum" in only:
        rows = pendulum_experiment(args.particles, args.seed)
        report("pendulum", rows, pendulum_table(rows))
    if "crane" in only:
        res = vi_crane.crane_experiment(args.particles, args.runs, args.duration, args.seed)
        report("crane", res["rows"], vi_crane.crane_table(res["rows"]))
        vi_crane.figure(os.path.join(args.out, "crane.png"), res)
    if "ekf" in only:
        rows = ekf_experiment(periods, args.runs, args.ekf_duration, args.seed)
        report("ekf", rows, ekf_table(rows), vi_figures.ekf)
    if "speed" in only:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        rows = speed_experiment(SPEED_N)
        report("speed", rows, speed_table(rows, load))
        doc["speed_load_average"] = load
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1, default=float)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(text) + "\n")
    print(f"\nmbde bench vi: {', '.join(only)} in {time.perf_counter() - t0:.0f} s")
    return 0
