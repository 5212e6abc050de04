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

from mbde_core.errors import DataError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import as_spec
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.trajectory.config import resolve_smoother, smoother_defaults
from mbde_core.trajectory.inputs import inverse_dynamics_guess, resolve_inputs
from mbde_core.trajectory.model import MultibodyModel
from mbde_core.trajectory.motion import growing_guess
from mbde_core.trajectory.noise import solve_with_noise
from mbde_core.trajectory.problem import SmootherProblem
from mbde_core.trajectory.readings import Readings, bin_readings
from mbde_core.trajectory.solver import LMOptions, levenberg_marquardt, scipy_trf
from mbde_core.types import MechanismSnapshot, Measurement


@dataclass
class SmoothedTrajectory:
    """Smoothed states on the grid: t (N,), z, zd, zdd (N, g), q, qd, qdd (N, n), cov
    (N, 2g, 2g) marginal covariance of [z, zd] (or None), the input states u (N, m) on the
    coordinates ``input_names`` with their covariance u_cov, and ``info`` (cost,
    iterations, status and goodness of fit, warnings, estimated noise, times [s],
    readings counters, cost per factor)."""

    t: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    cov: np.ndarray | None
    info: dict = field(default_factory=dict)
    u: np.ndarray | None = None  # (N, m) input states (generalized forces on input_names)
    u_cov: np.ndarray | None = None  # (N, m, m)
    input_names: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t)

    def snapshot(self, i: int) -> MechanismSnapshot:
        snap = MechanismSnapshot(float(self.t[i]), self.q[i], self.qd[i], self.qdd[i], self.z[i], self.zd[i],
                                 self.zdd[i], None if self.cov is None else self.cov[i])
        if self.u is not None:
            snap.input_names = list(self.input_names)
            snap.inputs = self.u[i]
            snap.input_cov = None if self.u_cov is None else self.u_cov[i]
        return snap

    def slice(self, lo: int, hi: int) -> "SmoothedTrajectory":
        cut = lambda a: None if a is None else a[lo:hi]  # noqa: E731
        return SmoothedTrajectory(self.t[lo:hi], self.z[lo:hi], self.zd[lo:hi], self.zdd[lo:hi], self.q[lo:hi],
                                  self.qd[lo:hi], self.qdd[lo:hi], cut(self.cov), dict(self.info), cut(self.u),
                                  cut(self.u_cov), list(self.input_names))


class BatchSmoother:
    """mech: the smoother's model (Mechanism, with its model errors); sensors: SensorSet
    (known-input sensors in ``sensors.inputs``); config: validated ``smoother`` options
    (:mod:`.config`; default: defaults), ``auto`` resolved here by the rule with
    ``context`` (a scenario's motor, :func:`~mbde_core.estimators.options.rule.scenario_context`);
    guess_config: validated options (a :class:`~mbde_core.estimators.configure.Spec`, or
    the user's options as a mapping) of the initial-guess filter (default: its defaults; an
    ``auto`` plant noise becomes the smoother's own, the model the smoother fits)."""

    def __init__(self, mech, sensors, config: dict | None = None, guess_config: dict | None = None, context=None):
        self.mech = mech
        self.sensors = sensors
        self.context = context
        self.config = resolve_smoother(config or smoother_defaults(), mech, sensors, context)
        self.guess_config = as_spec(self.config["initial_guess"], guess_config)
        self.model = MultibodyModel(mech, sensors)
        self.g = mech.dof
        self.inputs = resolve_inputs(self.config["inputs"], mech, sensors, self.config, self.dt, context)
        self.noise = None  # (sigma_a, sigma_w, sensor scales) estimated by the last solve (the next window starts there)

    @property
    def dt(self) -> float:
        return float(self.config["step"])

    def sigma_a(self) -> np.ndarray:
        """Per-step acceleration noise sigma_a = sqrt(q_a / dt) (g,) of the eom factor (the
        configured or the rule's q_a: the noise estimation's start)."""
        q = np.broadcast_to(np.asarray(self.config["plant_noise"]["acceleration_psd"], dtype=float), (self.g,))
        return np.sqrt(q / self.dt)

    def estimated_channels(self) -> dict:
        """{sensor name: (d,) bool}: the channels whose sigma the noise estimation sets too,
        those that read accelerations or gravity (a model error shows in them directly),
        unless the options' ``sensor_sigma`` names the sensor."""
        listed = self.config.get("sensor_sigma") or {}
        q0 = np.asarray(self.mech.q0, dtype=float)
        zero = np.zeros_like(q0)
        out = {}
        for s in self.sensors:
            if not getattr(s, "uses_qdd", False) or s.name in listed:
                continue
            Hqdd = np.atleast_2d(s.jacobians(q0, zero, zero)[2])
            rest = np.atleast_1d(s.h(q0, zero, zero))
            out[s.name] = np.any(np.abs(Hqdd) > 0, axis=1) | (np.abs(rest) > 1e-9)
        return out

    def readings(self, measurements) -> Readings:
        return bin_readings(measurements, self.sensors, self.dt, self.config.get("sensor_sigma"))

    # -- initial guess ---------------------------------------------------------------------------
    def initial_guess(self, readings: Readings, init: InitialState, filter_name: str | None = None):
        """(X0 (N, b), q0 (N, n), info) from the forward filter (``initial_guess``, or
        ``filter_name``) on the readings' grid (the inputs by inverse dynamics,
        :meth:`with_inputs`)."""
        fwd = ForwardGuess(self, readings, init, name=filter_name)
        X0, q0 = fwd.take(0, readings.N)
        return self.with_inputs(readings, X0, q0), q0, fwd.info()

    def with_inputs(self, readings: Readings, X, q) -> np.ndarray:
        """X (N, 3g) with the input states appended (N, 3g + m): the inputs that explain the
        guess's accelerations (least squares of zdd - f = G u, clipped to the limits), the
        measured ones' readings where they have one."""
        ch = self.inputs
        if not ch.m or X.shape[1] > 3 * self.g:
            return X

        g = self.g
        zero = np.zeros((X.shape[0], ch.m))
        ev = self.model.evaluate(readings.times, np.hstack([X, zero]), q, ch.matrix(self.mech.n), zero)
        u = inverse_dynamics_guess(ev.G, ev.f, X[:, 2 * g:3 * g], ch.limit)
        for rows in readings.inputs:
            j = ch.channel_of(rows.name)
            if j is None or not rows.idx.size:
                continue
            gain = next(s.gain for s in ch.sensors[j] if s.name == rows.name)
            steps = np.arange(X.shape[0])
            u[:, j] = np.interp(steps, rows.idx, gain * rows.values[:, 0])
        return np.hstack([X, np.where(np.isfinite(u), u, 0.0)])

    # -- solve -----------------------------------------------------------------------------------
    def smooth(self, measurements, init: InitialState) -> SmoothedTrajectory:
        """Smooth a whole run of Measurements (any order) from the initial guess ``init``.

        The forward filter's estimates are the initial guess. A solution that is not
        plainly good (:func:`suspicious`: not converged, a poor fit, a plant noise far
        above the rule's or inputs beyond their limits; :func:`noisy`: an acceleration
        noise above NOISY times the rule's -- the signs of a guess that led to another
        local minimum, e.g. a mirror motion that an unknown motor explains) is solved
        again from the next filter of ALTERNATE_GUESSES, then (without unknown inputs,
        which the model cannot continue) over a growing horizon from the initial state
        (:func:`~.motion.growing_guess`); the first good solution, else the best by
        :func:`rank`, is kept (``guesses_tried`` in the info)."""
        t0 = time.perf_counter()
        readings = self.readings(measurements)
        if readings.N == 0:
            raise DataError("no valid readings to smooth")
        first = self.config["initial_guess"]
        names = [first] + [n for n in ALTERNATE_GUESSES if n != first]
        if all(j in self.inputs.sensors for j in range(self.inputs.m)):  # no unknown input: the model can continue
            names.append(GROWING)
        best, tried, t_guess = None, [], 0.0
        self.noise = start_noise = None  # a run estimates its own noise levels
        rule = self.sigma_a()
        for k, name in enumerate(names):
            if k and best is not None and not suspicious(best) and not noisy(best, rule):
                break
            self.noise = start_noise
            t1 = time.perf_counter()
            try:
                if name == GROWING:  # the last resort: no filter, the model from the initial state
                    X0, q0 = growing_guess(self, readings, init)
                    ginfo = {"filter": GROWING, "filter_failures": 0, "filled_steps": 0}
                else:
                    X0, q0, ginfo = self.initial_guess(readings, init, name)
                t_guess += time.perf_counter() - t1
                out = self.solve(readings, X0, q0, *self.prior(init))
            except (np.linalg.LinAlgError, FloatingPointError) as exc:
                tried.append({"filter": name, "failed": f"{type(exc).__name__}: {exc}"})
                continue
            out.info.update(ginfo)
            tried.append({"filter": name, "status": out.info["status"], "final_cost": out.info["final_cost"],
                          "acceleration_sigma": out.info["fit"]["acceleration_sigma"], "warnings": out.info["warnings"]})
            if best is None or rank(out) < rank(best):
                best = out
        if best is None:
            raise FloatingPointError("the smoother found no solution: " + "; ".join(t["failed"] for t in tried))
        best.info["guesses_tried"] = tried
        best.info["guess_time_s"] = t_guess
        best.info["wall_time_s"] = time.perf_counter() - t0
        return best

    def prior(self, init: InitialState) -> tuple[np.ndarray, np.ndarray]:
        """(mean (2g,), sqrt information (2g, 2g)) of [z_0, zd_0] from an InitialState."""
        sig = np.concatenate([np.broadcast_to(init.sigma_z, (self.g,)), np.broadcast_to(init.sigma_zd, (self.g,))])
        return np.concatenate([init.z, init.zd]), np.diag(1.0 / sig)

    def solve(self, readings: Readings, X0, q0, prior_mean, prior_sqrt_info, with_result: bool = False,
              first_eom: bool = True):
        """Solve from the initial guess X0 (N, b) with positions q0 (N, n) and the prior
        of mean prior_mean (k,) and square-root information prior_sqrt_info (k, k) on the
        first k entries of x_0 (:func:`~mbde_core.trajectory.factors.prior_rows`), the
        plant noise estimated from the residuals unless ``noise: fixed``
        (:func:`~.noise.solve_with_noise`). ``first_eom`` False: no eom factor (nor input
        prior) at step 0 (a window whose prior holds them). Returns the
        SmoothedTrajectory (and the solver's LMResult if ``with_result``)."""
        cfg, g, m = self.config, self.g, self.inputs.m
        X0 = self.with_inputs(readings, X0, q0)
        start = self.noise if self.noise is not None else (self.sigma_a(), self.inputs.sigma_w, {})
        problem = SmootherProblem(self.model, readings, start[0], prior_mean, prior_sqrt_info, cfg["integrator"],
                                  cfg["integrator_relaxation"], q0, first_eom, self.inputs, X0[0, 3 * g:])
        problem.set_noise(sigma_w=start[1], sensor_scale=start[2])
        t0 = time.perf_counter()
        res, noise = solve_with_noise(problem, X0, cfg, self.sigma_a(), self.estimated_channels())
        t_solve = time.perf_counter() - t0
        if not np.isfinite(res.cost):
            raise FloatingPointError("the smoother's solution has a non-finite cost")
        self.noise = (problem.sigma_a.copy(), problem.sigma_w.copy(), dict(problem.sensor_scale))
        t1 = time.perf_counter()
        cov = ucov = None
        if cfg.get("covariance", True):
            marg = noise.pop("marginals", None)
            marg = res.normal.marginals() if marg is None else marg
            cov = marg[:, :2 * g, :2 * g]
            ucov = marg[:, 3 * g:, 3 * g:] if m else None
        noise.pop("marginals", None)
        t_cov = time.perf_counter() - t1
        ev = problem.ev
        X = res.X
        n_res = sum(rb.r.size for rb in res.rows)
        info = {
            "solver": cfg["solver"], "status": noise["status"], "solver_status": res.status,
            "iterations": noise["iterations"], "evaluations": res.evaluations,
            "initial_cost": noise["initial_cost"], "final_cost": res.cost, "history": noise["history"],
            "residuals": int(n_res), "variables": int(X.size),
            "cost_per_factor": problem.cost_breakdown(res.rows),
            "solve_time_s": t_solve, "covariance_time_s": t_cov, "steps": int(readings.N),
            "readings": readings.counters, "fit": noise["fit"], "warnings": noise["warnings"],
            "inputs": list(self.inputs.names),
        }
        traj = SmoothedTrajectory(readings.times, X[:, :g].copy(), X[:, g:2 * g].copy(), X[:, 2 * g:3 * g].copy(),
                                  ev.q.copy(), ev.qd.copy(), ev.qdd.copy(), cov, info,
                                  X[:, 3 * g:].copy() if m else None, ucov, list(self.inputs.names))
        return (traj, res) if with_result else traj


ALTERNATE_GUESSES = ("errorekf", "dekf")  # the forward filters a suspicious solution is retried from
GROWING = "growing horizon"  # then a growing horizon from the initial state (trajectory/motion.py)


NOISY = 3.0  # a solution whose acceleration noise exceeds this many times the rule's is retried too


def suspicious(traj) -> int:
    """0 for a plainly good solution; else 1 (a warning), 2 (not converged or a poor fit)."""
    if traj.info.get("status") != "converged":
        return 2
    return 1 if traj.info.get("warnings") else 0


def noisy(traj, rule) -> bool:
    """The estimated acceleration noise exceeds NOISY times the rule's: the dynamics explain
    the motion badly (a guess that led to another local minimum needs more of it)."""
    sa = np.asarray((traj.info.get("fit") or {}).get("acceleration_sigma") or [0.0])
    return bool(np.any(sa > NOISY * np.asarray(rule)))


def rank(traj) -> tuple:
    """Order of candidate solutions: the least suspicious, then the least acceleration noise
    (the one the model explains best)."""
    sa = np.asarray((traj.info.get("fit") or {}).get("acceleration_sigma") or [1.0])
    return suspicious(traj), float(np.sum(np.log(np.maximum(sa, 1e-300))))


class ForwardGuess:
    """The forward filter (``initial_guess``) run over ``readings`` (a Readings or a window
    of a longer grid: started at its first step from ``init``), its estimates collected on
    the grid range by range (:meth:`take`, global step indices), so that long runs keep
    only the current window's estimates. ``end``: the global end of the grid (the filter
    is flushed when a take reaches it; default: the end of ``readings``; ``math.inf``: not
    known yet). A filter failure restarts its track (counted), as in replay; steps
    without a usable estimate take the nearest earlier one (or the first)."""

    def __init__(self, smoother: BatchSmoother, readings: Readings, init: InitialState, end: float | None = None,
                 name: str | None = None):
        self.sm, self.readings, self.init = smoother, readings, init
        self.name = name = name or smoother.config["initial_guess"]
        spec = smoother.guess_config if name == smoother.config["initial_guess"] else as_spec(name, None)
        pn = dict(spec.get("plant_noise") or {})  # (a particle filter has none)
        changes = {"step": smoother.dt}
        if pn.get("acceleration_psd") == "auto":  # the default rule: the smoother's own plant noise instead
            pn["acceleration_psd"] = smoother.config["plant_noise"]["acceleration_psd"]
            changes["plant_noise"] = pn
        est = make_estimator(name, smoother.mech, smoother.sensors, spec.replace(**changes), rng=np.random.default_rng(0),
                             context=smoother.context)
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
        return {"filter": self.name, "filter_failures": self.failures, "filled_steps": self.filled}


def readings_measurements(readings: Readings):
    """The readings as Measurements stamped at their grid times, in time order (made
    one by one: a long run's readings stay compact arrays)."""
    def one(s):
        t = readings.t0 + readings.dt * (readings.first + s.idx)
        return (Measurement(float(ti), s.name, v) for ti, v in zip(t, s.values))

    return heapq.merge(*(one(s) for s in readings.sensors), key=lambda m: m.stamp)
