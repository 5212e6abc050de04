"""The batch smoother of paper 003 sec. 3.4: the most likely trajectory given all readings.

:class:`BatchSmoother` maximises eq. 23 of paper 003 (factors in :mod:`.factors`) over
every state x_i = [z_i, zd_i, zdd_i] of the run with the assembly branch fixed:

1. readings are put on the grid of the filters (:mod:`.readings`; bad ones counted and
   skipped);
2. a forward filter (``initial_guess``, errorEKF by default) runs over the same readings
   through its :class:`~mbde_core.estimators.stage.core.EstimatorStage`: its estimates (z, zd,
   zdd and q, which carries the branch) are the initial guess, so the solver starts near
   the solution;
3. Levenberg-Marquardt on the banded normal equations (:mod:`.solver`) solves the sparse
   nonlinear least-squares problem (:mod:`.problem`); every position problem starts from
   the previous iterate's q, which keeps the branch. In-house rather than
   scipy.optimize.least_squares('trf'), on measurement: 4-8 iterations where 'trf' with
   LSMR steps stalls far from the optimum after 100-200 evaluations, 40-900x slower (the
   numbers are in :mod:`.solver`); ``solver: trf`` keeps scipy's for comparison;
4. the marginal covariances of [z_i, zd_i] are the diagonal blocks of the inverse of the
   Gauss-Newton information matrix at the solution, from its banded Cholesky factor
   (:mod:`.normal`), never a dense inverse.

The result is a :class:`SmoothedTrajectory` on the filters' stamps.
"""
from __future__ import annotations

import heapq
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
    guess_config: validated options (a :class:`~mbde_core.estimators.configure.Spec`, or
    the user's options as a mapping) of the initial-guess filter (default: its defaults; an
    ``auto`` plant noise becomes the smoother's own, the model the smoother fits)."""

    def __init__(self, mech, sensors, config: dict | None = None, guess_config=None):
        from mbde_core.estimators.configure import as_spec

        self.mech = mech
        self.sensors = sensors
        self.config = config or smoother_defaults()
        self.guess_config = as_spec(self.config["initial_guess"], guess_config)
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
        fwd = ForwardGuess(self, readings, init)
        X0, q0 = fwd.take(0, readings.N)
        return X0, q0, fwd.info()

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
        out = self.solve(readings, X0, q0, *self.prior(init))
        out.info.update(ginfo)
        out.info["guess_time_s"] = t_guess
        out.info["wall_time_s"] = time.perf_counter() - t0
        return out

    def prior(self, init: InitialState) -> tuple[np.ndarray, np.ndarray]:
        """(mean (2g,), sqrt information (2g, 2g)) of [z_0, zd_0] from an InitialState."""
        sig = np.concatenate([np.broadcast_to(init.sigma_z, (self.g,)), np.broadcast_to(init.sigma_zd, (self.g,))])
        return np.concatenate([init.z, init.zd]), np.diag(1.0 / sig)

    def solve(self, readings: Readings, X0, q0, prior_mean, prior_sqrt_info, with_result: bool = False,
              first_eom: bool = True):
        """Solve from the initial guess X0 (N, 3g) with positions q0 (N, n) and the prior
        of mean prior_mean (m,) and square-root information prior_sqrt_info (m, m) on the
        first m entries of x_0 (:func:`~mbde_core.trajectory.factors.prior_rows`).
        ``first_eom`` False: no eom factor at step 0 (a window whose prior holds it).
        Returns the SmoothedTrajectory (and the solver's LMResult if ``with_result``)."""
        cfg, g = self.config, self.g
        problem = SmootherProblem(self.model, readings, self.sigma_a(), prior_mean, prior_sqrt_info,
                                  cfg["integrator"], cfg["integrator_relaxation"], q0, first_eom)
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
        traj = SmoothedTrajectory(readings.times, X[:, :g].copy(), X[:, g:2 * g].copy(), X[:, 2 * g:].copy(),
                                  ev.q.copy(), ev.qd.copy(), ev.qdd.copy(), cov, info)
        return (traj, res) if with_result else traj


class ForwardGuess:
    """The forward filter (``initial_guess``) run over ``readings`` (a Readings or a window
    of a longer grid: started at its first step from ``init``), its estimates collected on
    the grid range by range (:meth:`take`, global step indices), so that long runs keep
    only the current window's estimates. ``end``: the global end of the grid (the filter
    is flushed when a take reaches it; default: the end of ``readings``; ``math.inf``: not
    known yet). A filter failure restarts its track (counted), as in replay; steps
    without a usable estimate take the nearest earlier one (or the first)."""

    def __init__(self, smoother: BatchSmoother, readings: Readings, init: InitialState, end: float | None = None):
        from mbde_core.estimators import make_estimator
        from mbde_core.estimators.stage.core import EstimatorStage

        self.sm, self.readings, self.init = smoother, readings, init
        name = smoother.config["initial_guess"]
        spec = smoother.guess_config
        pn = dict(spec.get("plant_noise") or {})  # (a particle filter has none)
        changes = {"step": smoother.dt}
        if pn.get("acceleration_psd") == "auto":  # the default rule: the smoother's own plant noise instead
            pn["acceleration_psd"] = smoother.config["plant_noise"]["acceleration_psd"]
            changes["plant_noise"] = pn
        est = make_estimator(name, smoother.mech, smoother.sensors, spec.replace(**changes), rng=np.random.default_rng(0))
        self.stage = EstimatorStage(est, smoother.dt, lambda t: init, max_gap=np.inf, backward_jump=np.inf)
        self.total = readings.first + readings.N if end is None else end  # global end of the grid
        self.stream = iter(readings_measurements(readings))
        self.next = next(self.stream, None)
        self.failures = 0
        self.filled = 0
        self.last = None  # (x, q) of the last usable estimate

    def _guarded(self, fn, *args):
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a diverging filter restarts, as in replay
            self.failures += 1
            self.stage.restart()

    def take(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(X (hi - lo, 3g), q (hi - lo, n)) of steps lo..hi-1 (increasing, no gaps between calls)."""
        rd, g, dt = self.readings, self.sm.g, self.sm.dt
        while self.next is not None and self.next.stamp < rd.t0 + (hi - 0.5) * dt:
            self._guarded(self.stage.feed, self.next)
            self.next = next(self.stream, None)
        self._guarded(self.stage.advance_to, rd.t0 + hi * dt)
        if hi >= self.total:
            self._guarded(self.stage.flush)
        n = hi - lo
        X = np.full((n, 3 * g), np.nan)
        q = np.full((n, self.sm.mech.n), np.nan)
        for rec in self.stage.records:
            e = rec.estimate
            i = int(round((e.stamp - rd.t0) / dt)) - lo
            if 0 <= i < n and np.all(np.isfinite(e.q)) and np.all(np.isfinite(e.zd)) and np.all(np.isfinite(e.zdd)):
                X[i] = np.concatenate([e.z, e.zd, e.zdd])
                q[i] = e.q
        self.stage.records.clear()
        have = np.all(np.isfinite(X), axis=1)
        if not have.all():
            self.filled += int(n - have.sum())
            if self.last is None:  # nothing earlier: the first estimate, or the initial state
                k = int(np.argmax(have)) if have.any() else None
                init = self.init
                self.last = (X[k], q[k]) if k is not None else (
                    np.concatenate([init.z, init.zd, np.zeros(g)]), init.q_hint if init.q_hint is not None else self.sm.mech.q0)
            for i in range(n):
                if have[i]:
                    self.last = (X[i], q[i])
                else:
                    X[i], q[i] = self.last
        self.last = (X[-1].copy(), q[-1].copy())
        ang = self.sm.model.angular
        if ang.any():
            X[:, :g][:, ang] = np.unwrap(X[:, :g][:, ang], axis=0)
        return X, q

    def info(self) -> dict:
        return {"filter": self.sm.config["initial_guess"], "filter_failures": self.failures, "filled_steps": self.filled}


def readings_measurements(readings: Readings):
    """The readings as Measurements stamped at their grid times, in time order (made
    one by one: a long run's readings stay compact arrays)."""
    def one(s):
        t = readings.t0 + readings.dt * (readings.first + s.idx)
        return (Measurement(float(ti), s.name, v) for ti, v in zip(t, s.values))

    return heapq.merge(*(one(s) for s in readings.sensors), key=lambda m: m.stamp)
