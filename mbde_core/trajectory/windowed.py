"""Long runs in overlapping windows: bounded memory, marginalised past, stated seam error.

The grid (N steps) is cut into windows of W steps (``window`` seconds), the last one
taking the rest when that is shorter than 1.5 W (so that a stream of readings can tell
its last window without knowing N in advance); window k keeps steps [a, b) and solves
steps [lo, hi) = [a - O, b + O) (``overlap`` seconds O on each side, clipped to the
run). The margins are solved but dropped, so every kept state has O steps of readings
on both sides (except at the run's ends).

The past before lo is not re-solved but marginalised (the sliding-window smoothers of
visual-inertial odometry): the previous window's rows that involve only steps <= lo
(readings of steps < lo, eom factors up to lo: without the eom of lo the past would say
nothing about zdd_lo, and through the integrator nothing about zd_lo; integrator factors
up to lo; its own prior) form a
block-tridiagonal normal system; one Gauss-Newton step of it from the previous solution
gives the past-only estimate of x_lo, and its banded Cholesky factor's last block U_lo
the information U_lo^T U_lo of x_lo = [z, zd, zdd] given that past (the last diagonal
block of the inverse of a banded matrix needs no recursion: Sigma_lo = U_lo^-1 U_lo^-T).
That Gaussian is window k's prior on x_lo (window k has no eom factor at lo: it is in
the prior). For a linear-Gaussian model this makes
window k equal to the batch smoother of all readings before hi: the only difference
from the whole-run smoother is the readings after hi, whose effect decays over the O
steps of the right margin. ``mbde bench smoother`` measures the seam error (windowed
minus whole-run, in units of the whole-run posterior sigma); the tests bound it.

Initial guess of a window: the previous window's solution where it has one, then the
forward filter restarted at its last step from that solution (with its marginal
covariance), so that a filter that lost track in a long run does not carry its error
into later windows (a wrong guess could otherwise lead the solver to another local
minimum: a gyroscope alone leaves mirror configurations nearly indistinguishable).

A window whose equations-of-motion cost per step exceeds RETRY_FACTOR times the median
of the earlier windows' (a trajectory that needs accelerations the model does not
predict: the signature of such a wrong minimum) is solved a second time over a growing
horizon (:func:`grown`): from the previous window's kept states (its margin may already
have taken the wrong turn), GROW_S seconds at a time are guessed
by the model's own motion (RK4, no readings) and solved before the next are guessed (the
growing horizon of identification); the solution of lower cost is kept (``retried`` /
``replaced`` in the info).

Memory: one window's problem (O(W + 2 O) steps), the forward filter's estimates of
the current window and, when the readings come as a stream (a bag read chunk by chunk),
the readings of the next 1.5 W steps (:class:`~.readings.ReadingsStream`); the kept
states are yielded window by window.
"""
from __future__ import annotations

import time

import numpy as np

from mbde_core.errors import DataError
from mbde_core.estimators.base import InitialState
from mbde_core.trajectory.motion import extend
from mbde_core.trajectory.normal import NormalEquations
from mbde_core.trajectory.readings import LAG, ReadingsStream
from mbde_core.trajectory.smoother import BatchSmoother, ForwardGuess, SmoothedTrajectory


def _marginal_prior(rows, L: int, X: np.ndarray):
    """(mean (b,), sqrt information (b, b)) of x_L given the rows involving steps <= L."""
    past = []
    for rb in rows:  # rows at steps < L, the integrator factors up to (L-1, L), the eom of L
        m = rb.idx <= L if rb.name == "eom" else rb.idx < L
        if not m.any():
            continue
        past.append(type(rb)(rb.name, rb.idx[m], rb.r[m], rb.Ji[m], None if rb.Jn is None else rb.Jn[m],
                             None if rb.Jp is None else rb.Jp[m], rb.linear))
    b = X.shape[1]
    ne = NormalEquations(past, L + 1, b).factor(0.0)
    dX, _ = ne.step()
    U = ne.last_block_factor()
    return X[L] + dX[L], U


def _eom_cost(info) -> float:
    return float(info["cost_per_factor"].get("eom", {}).get("cost", 0.0))


RETRY_FACTOR = 4.0  # a window's eom cost per step above this many times the running median: retry
GROW_S = 1.0  # seconds added per solve of the retry's growing horizon


def grown(smoother: BatchSmoother, readings, X, q, prior_mean, prior_sqrt):
    """(trajectory, result) of ``readings`` (a window) solved over a growing horizon from
    its known first steps X (M, 3g), q (M, n), M >= 1: each solve's new GROW_S seconds are
    the model's motion from the last solution (:func:`.motion.extend`)."""
    ang, g = smoother.model.angular, smoother.g
    chunk = max(int(round(GROW_S / smoother.dt)), 1)
    t0 = float(readings.times[0])
    while True:
        n = min(len(X) + chunk, readings.N)
        X1, q1 = extend(smoother.mech, X[:, :3 * g], q, n, smoother.dt, t0)  # inputs: by inverse dynamics (solve)
        if ang.any():
            X1[:, :g][:, ang] = np.unwrap(X1[:, :g][:, ang], axis=0)
        traj, res = smoother.solve(readings.window(0, n), X1, q1, prior_mean, prior_sqrt, with_result=True,
                                   first_eom=False)
        if n == readings.N:
            return traj, res
        X, q = res.X, traj.q


def iter_windows(smoother: BatchSmoother, measurements, init, window: float | None = None, overlap: float | None = None,
                 progress=None, total_hint: int | None = None):
    """Yield the kept part of every window (SmoothedTrajectory, in time order).

    measurements: a list or tuple (every reading at hand: any order) or any other
    iterable, read as a stream in arrival order (:class:`~.readings.ReadingsStream`:
    only the readings from the current window's left margin to max(1.5 W, W + O) steps
    past its start, plus ``LAG`` seconds, are held; a generator of a bag's chunks keeps
    the whole run bounded). Both give the same windows and results when the stream's
    stamps go back by less than ``LAG``. Cuts: windows of W steps from the start; the
    last one takes the rest if that is less than 1.5 W (so every window has W / 2 to
    1.5 W steps, unless the run is shorter), which a stream decides once it has read 1.5 W
    steps past the window's start. progress(b, total): steps done and the total
    (``total_hint`` until the stream's end tells it)."""
    cfg = smoother.config
    dt = smoother.dt
    window = float(cfg["window"] if window is None else window)
    overlap = float(cfg["overlap"] if overlap is None else overlap)
    lag = np.inf if isinstance(measurements, (list, tuple)) else LAG
    src = ReadingsStream(measurements, smoother.sensors, dt, cfg.get("sensor_sigma"), lag)
    W = max(int(round(window / dt)), 2)
    O = min(max(int(round(overlap / dt)), 0), W - 1)
    src.fill(max(W + W // 2, W + O))
    if src.t0 is None:
        raise DataError("no valid readings to smooth")
    g = smoother.g
    ang = smoother.model.angular
    smoother.noise = None  # the run's noise levels: estimated in the first window, carried on from there
    prior_mean, prior_sqrt = smoother.prior(init)
    prev = None  # (lo, X, q, cov) of the previous window's solution
    history: list[float] = []  # eom cost per step of the windows so far
    retried = replaced = 0
    m = 0
    a, k = 0, 0
    while True:
        t_start = time.perf_counter()
        src.fill(a + max(W + W // 2, W + O))
        N = src.N  # None: more than 1.5 W and the right margin are still to come
        b = N if N is not None and 2 * (N - a) < 3 * W else a + W
        lo, hi = max(a - O, 0), b + O if N is None else min(b + O, N)
        end = np.inf if N is None else N
        rd = src.take(lo, hi)
        X0 = np.empty((hi - lo, 3 * g + smoother.inputs.m))
        q0 = np.empty((hi - lo, smoother.mech.n))
        if prev is None:
            fwd = ForwardGuess(smoother, rd, init, end)
            Xf, q0[:] = fwd.take(lo, hi)
            X0[:] = smoother.with_inputs(rd, Xf, q0)
            guesses = dict(fwd.info())
        else:  # the previous solution where it exists, then the forward filter restarted from its end
            plo, PX, Pq, Pcov = prev
            m = plo + len(PX) - lo
            X0[:m], q0[:m] = PX[lo - plo:], Pq[lo - plo:]
            if m < hi - lo:
                s0 = lo + m - 1
                x = PX[s0 - plo]
                sig = np.sqrt(np.einsum("ii->i", Pcov[s0 - plo])) if Pcov is not None else np.full(2 * g, np.nan)
                sig = np.where(np.isfinite(sig) & (sig > 0), sig, np.concatenate([init.sigma_z, init.sigma_zd]))
                fwd = ForwardGuess(smoother, rd.window(s0 - lo, hi - lo), InitialState(
                    x[:g], x[g:2 * g], sig[:g], sig[g:], Pq[s0 - plo], init.branch), end)
                Xf, qf = fwd.take(s0, hi)
                X0[m:, :3 * g], q0[m:] = Xf[1:], qf[1:]
                X0[m:, 3 * g:] = X0[m - 1, 3 * g:]  # the inputs held from the previous solution
                for key in ("filter_failures", "filled_steps"):
                    guesses[key] += fwd.info()[key]
        if ang.any():
            X0[:, :g][:, ang] = np.unwrap(X0[:, :g][:, ang], axis=0)
        traj, res = smoother.solve(rd, X0, q0, prior_mean, prior_sqrt, with_result=True, first_eom=k == 0)
        per_step = _eom_cost(traj.info) / (hi - lo)
        if prev is not None and history and per_step > RETRY_FACTOR * float(np.median(history)) and 0 < m < hi - lo:
            # an outlier: the forward filter may have lost track and led the solver to another
            # local minimum; grow the horizon from the previous window's kept states instead
            # (its right margin saw fewer readings and may already have taken the wrong turn)
            known = max(a - lo, 1)
            alt, res_alt = grown(smoother, rd, X0[:known], q0[:known], prior_mean, prior_sqrt)
            retried += 1
            if res_alt.cost < res.cost:
                traj, res = alt, res_alt
                per_step = _eom_cost(traj.info) / (hi - lo)
                replaced += 1
        history.append(per_step)
        kept = traj.slice(a - lo, b - lo)
        kept.info.update(window=k, solved=(lo, hi), kept=(a, b), wall_time_s=time.perf_counter() - t_start,
                         retried=retried, replaced=replaced)
        last = b == N
        if not last:  # the next window's prior: this window's past up to its start
            L = max(b - O, 0) - lo
            prior_mean, prior_sqrt = _marginal_prior(res.rows, L, res.X)
            prev = (lo, res.X, traj.q, traj.cov)
            src.drop_before(max(b - O, 0))
        del rd, res, traj
        if progress is not None:
            progress(b, N if N is not None else max(total_hint or 0, b + 1))
        if last:
            kept.info["guess"] = guesses
            yield kept
            return
        yield kept
        a, k = b, k + 1


class WindowTotals:
    """The info of a windowed run, summed over its windows' parts (:meth:`add` each, in
    order; :meth:`info` at the end): solver, windows, status, iterations, costs, sizes,
    times, readings counters, ``history`` (final cost per window), retries."""

    SUMS = ("iterations", "evaluations", "initial_cost", "final_cost", "residuals", "variables", "solve_time_s",
            "covariance_time_s")

    def __init__(self):
        self.t0 = time.perf_counter()
        self.windows = 0
        self.sums = dict.fromkeys(self.SUMS, 0)
        self.statuses: list[str] = []
        self.history: list[float] = []
        self.max_iterations = 0
        self.last: dict = {}
        self.warnings: list[str] = []
        self.fit: dict | None = None  # the window whose normalised cost is farthest from 1

    def add(self, info: dict) -> None:
        self.windows += 1
        for k in self.SUMS:
            self.sums[k] += info[k]
        if info["status"] not in self.statuses:
            self.statuses.append(info["status"])
        self.history.append(info["final_cost"])
        self.max_iterations = max(self.max_iterations, int(info["iterations"]))
        self.last = info
        self.warnings += [f"window {info.get('window', self.windows - 1)}: {w}" for w in info.get("warnings") or []]
        fit = info.get("fit")
        if fit and (self.fit is None or abs(np.log(fit["normalised_cost"])) > abs(np.log(self.fit["normalised_cost"]))):
            self.fit = fit

    def info(self) -> dict:
        last, s = self.last, self.sums
        out = {
            "solver": last["solver"], "windows": self.windows,
            "status": "converged" if self.statuses == ["converged"] else ", ".join(sorted(self.statuses)),
            "iterations": int(s["iterations"]), "evaluations": int(s["evaluations"]),
            "initial_cost": float(s["initial_cost"]), "final_cost": float(s["final_cost"]),
            "residuals": int(s["residuals"]), "variables": int(s["variables"]),
            "solve_time_s": float(s["solve_time_s"]), "covariance_time_s": float(s["covariance_time_s"]),
            "readings": last["readings"], "history": list(self.history), "max_window_iterations": self.max_iterations,
            "windows_retried": int(last["retried"]), "windows_replaced": int(last["replaced"]),
            "fit": self.fit, "warnings": list(self.warnings), "inputs": last.get("inputs", []),
        }
        out.update(last.get("guess", {}))
        out["wall_time_s"] = time.perf_counter() - self.t0
        return out


def smooth_windowed(smoother: BatchSmoother, measurements, init, window=None, overlap=None, progress=None) -> SmoothedTrajectory:
    """The whole run from :func:`iter_windows`, concatenated; ``info`` sums the windows'
    (:class:`WindowTotals`)."""
    totals = WindowTotals()
    parts = []
    for part in iter_windows(smoother, measurements, init, window, overlap, progress):
        parts.append(part)
        totals.add(part.info)
    cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
    cov = None if parts[0].cov is None else cat("cov")
    return SmoothedTrajectory(cat("t"), cat("z"), cat("zd"), cat("zdd"), cat("q"), cat("qd"), cat("qdd"), cov,
                              totals.info())
