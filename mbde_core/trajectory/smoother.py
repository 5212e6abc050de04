"""The batch smoother of paper 003 sec. 3.4: the most likely trajectory given all readings.

:class:`BatchSmoother` maximises eq. 23 of paper 003 (factors in :mod:`.factors`) over
every state x_i = [z_i, zd_i, zdd_i] of the run with the assembly branch fixed:

1. readings are put on the grid of the filters (:mod:`.readings`; bad ones counted and
   skipped);
2. a forward filter (``initial_guess``, errorEKF by default) runs over the same readings
   through its :class:`~mbde_core.estimators.stage.EstimatorStage`: its estimates (z, zd,
   zdd and q, which carries the branch) are the initial guess, so the solver starts near
   the solution;
3. Levenberg-Marquardt on the banded normal equations (:mod:`.solver`) solves the sparse
   nonlinear least-squares problem (:mod:`.problem`); every position problem starts from
   the previous iterate's q, which keeps the branch;
4. the marginal covariances of [z_i, zd_i] are the diagonal blocks of the inverse of the
   Gauss-Newton information matrix at the solution, from its banded Cholesky factor
   (:mod:`.normal`), never a dense inverse.

The result is a :class:`SmoothedTrajectory` on the filters' stamps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.estimators.base import InitialState
from mbde_core.trajectory.config import smoother_defaults
from mbde_core.trajectory.model import MultibodyModel
from mbde_core.trajectory.problem import SmootherProblem
from mbde_core.trajectory.readings import Readings, bin_readings
from mbde_core.trajectory.solver import LMOptions, levenberg_marquardt, scipy_trf
from mbde_core.types import MechanismSnapshot, Measurement


@dataclass
class SmoothedTrajectory:
    """Smoothed states on the grid: t (N,), z, zd, zdd (N, g), q, qd, qdd (N, n), cov
    (N, 2g, 2g) marginal covariance of [z, zd] (or None), and ``info`` (cost, iterations,
    status, times [s], readings counters, cost per factor)."""

    t: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    cov: np.ndarray | None
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)

    def snapshot(self, i: int) -> MechanismSnapshot:
        return MechanismSnapshot(float(self.t[i]), self.q[i], self.qd[i], self.qdd[i], self.z[i], self.zd[i], self.zdd[i],
                                 None if self.cov is None else self.cov[i])

    def slice(self, lo: int, hi: int) -> "SmoothedTrajectory":
        cut = lambda a: None if a is None else a[lo:hi]  # noqa: E731
        return SmoothedTrajectory(self.t[lo:hi], self.z[lo:hi], self.zd[lo:hi], self.zdd[lo:hi], self.q[lo:hi],
                                  self.qd[lo:hi], self.qdd[lo:hi], cut(self.cov), dict(self.info))


class BatchSmoother:
    """mech: the smoother's model (Mechanism, with its model errors); sensors: SensorSet;
    config: validated ``smoother`` options (:mod:`.config`; default: defaults);
    guess_config: options of the initial-guess filter (default: its defaults)."""

    def __init__(self, mech, sensors, config: dict | None = None, guess_config: dict | None = None):
        from mbde_core.estimators.config_schema import defaults

        self.mech = mech
        self.sensors = sensors
        self.config = config or smoother_defaults()
        self.guess_config = guess_config or defaults(self.config["initial_guess"])
        self.model = MultibodyModel(mech, sensors)
        self.g = mech.dof

    @property
    def dt(self) -> float:
        return float(self.config["step"])

    def sigma_a(self) -> np.ndarray:
        """Per-step acceleration noise sigma_a = sqrt(q_a / dt) (g,) of the eom factor."""
        return np.full(self.g, np.sqrt(float(self.config["plant_noise"]["acceleration_psd"]) / self.dt))

    def readings(self, measurements) -> Readings:
        return bin_readings(measurements, self.sensors, self.dt, self.config.get("sensor_sigma"))

    # -- initial guess ---------------------------------------------------------------------------
    def initial_guess(self, readings: Readings, init: InitialState) -> tuple[np.ndarray, np.ndarray, dict]:
        """(X0 (N, 3g), q0 (N, n), info) from the forward filter on the readings' grid."""
        from mbde_core.estimators import make_estimator
        from mbde_core.estimators.stage import EstimatorStage

        g, N = self.g, readings.N
        name = self.config["initial_guess"]
        cfg = dict(self.guess_config, step=self.dt)
        est = make_estimator(name, self.mech, self.sensors, cfg, rng=np.random.default_rng(0))
        stage = EstimatorStage(est, self.dt, lambda t: init, max_gap=np.inf, backward_jump=np.inf)
        failures = 0
        for m in readings_measurements(readings):
            try:
                stage.feed(m)
            except Exception:  # noqa: BLE001 - a diverging filter restarts, as in replay
                failures += 1
                stage.restart()
        try:
            stage.flush()
        except Exception:  # noqa: BLE001
            failures += 1
        X0 = np.full((N, 3 * g), np.nan)
        q0 = np.full((N, self.mech.n), np.nan)
        for rec in stage.records:
            e = rec.estimate
            i = int(round((e.stamp - readings.t0) / self.dt))
            if 0 <= i < N and np.all(np.isfinite(e.q)) and np.all(np.isfinite(e.zd)):
                X0[i] = np.concatenate([e.z, e.zd, e.zdd])
                q0[i] = e.q
        have = np.all(np.isfinite(X0), axis=1)
        if not have.any():  # no usable estimate: the initial state, held
            X0[:] = np.concatenate([init.z, init.zd, np.zeros(g)])
            q0[:] = init.q_hint if init.q_hint is not None else self.mech.q0
        elif not have.all():  # fill gaps with the nearest earlier (or first) estimate
            k = np.maximum.accumulate(np.where(have, np.arange(N), -1))
            k[k < 0] = np.argmax(have)
            X0, q0 = X0[k], q0[k]
        ang = self.model.angular
        if ang.any():
            X0[:, :g][:, ang] = np.unwrap(X0[:, :g][:, ang], axis=0)
        return X0, q0, {"filter": name, "filter_failures": failures, "filled_steps": int(N - have.sum())}

    # -- solve -----------------------------------------------------------------------------------
    def smooth(self, measurements, init: InitialState) -> SmoothedTrajectory:
        """Smooth a whole run of Measurements (any order) from the initial guess ``init``."""
        t0 = time.perf_counter()
        readings = self.readings(measurements)
        if readings.N == 0:
            from mbde_core.errors import DataError

            raise DataError("no valid readings to smooth")
        X0, q0, ginfo = self.initial_guess(readings, init)
        t_guess = time.perf_counter() - t0
        P0 = np.concatenate([np.broadcast_to(init.sigma_z, (self.g,)), np.broadcast_to(init.sigma_zd, (self.g,))]) ** 2
        out = self.solve(readings, X0, q0, np.concatenate([init.z, init.zd]), np.diag(P0))
        out.info.update(ginfo)
        out.info["guess_time_s"] = t_guess
        out.info["wall_time_s"] = time.perf_counter() - t0
        return out

    def solve(self, readings: Readings, X0, q0, prior_mean, prior_cov) -> SmoothedTrajectory:
        """Solve from the initial guess X0 (N, 3g) with positions q0 (N, n) and the prior
        N(prior_mean, prior_cov) on [z_0, zd_0]."""
        cfg, g = self.config, self.g
        L = np.linalg.cholesky(np.asarray(prior_cov, dtype=float))
        problem = SmootherProblem(self.model, readings, self.sigma_a(), prior_mean, np.linalg.inv(L),
                                  cfg["integrator"], cfg["integrator_relaxation"], q0)
        t0 = time.perf_counter()
        if cfg["solver"] == "trf":
            res = scipy_trf(problem, X0, max_nfev=cfg["max_iterations"])
        else:
            res = levenberg_marquardt(problem, X0, options=LMOptions(cfg["max_iterations"], cfg["tolerance"]))
        t_solve = time.perf_counter() - t0
        if not np.isfinite(res.cost):
            raise FloatingPointError("the smoother's solution has a non-finite cost")
        t1 = time.perf_counter()
        cov = res.normal.marginals()[:, :2 * g, :2 * g] if cfg.get("covariance", True) else None
        t_cov = time.perf_counter() - t1
        ev = problem.ev
        X = res.X
        n_res = sum(rb.r.size for rb in res.rows)
        info = {
            "solver": cfg["solver"], "status": res.status, "iterations": res.iterations, "evaluations": res.evaluations,
            "initial_cost": res.initial_cost, "final_cost": res.cost, "history": res.history,
            "residuals": int(n_res), "variables": int(X.size),
            "cost_per_factor": problem.cost_breakdown(res.rows),
            "solve_time_s": t_solve, "covariance_time_s": t_cov, "steps": int(readings.N),
            "readings": readings.counters,
        }
        return SmoothedTrajectory(readings.times, X[:, :g].copy(), X[:, g:2 * g].copy(), X[:, 2 * g:].copy(),
                                  ev.q.copy(), ev.qd.copy(), ev.qdd.copy(), cov, info)


def readings_measurements(readings: Readings) -> list[Measurement]:
    """The readings as Measurements stamped at their grid times, in time order."""
    out = []
    for s in readings.sensors:
        t = readings.t0 + readings.dt * s.idx
        out += [Measurement(float(ti), s.name, v) for ti, v in zip(t, s.values)]
    out.sort(key=lambda m: m.stamp)
    return out
