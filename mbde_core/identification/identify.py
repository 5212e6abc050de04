"""Joint state and parameter identification from one or more recordings (paper 001).

:func:`identify` finds the parameters p shared by R recordings and the states of every
recording that maximise the likelihood of all readings, paper 001 eq. 3.15 with the
factors of the batch smoother (paper 003 eq. 23, :mod:`mbde_core.trajectory`): the
impulse residuals of paper 001 (eqs. 3.7-3.8: the impulse needed to go from one state to
the next) become here the eom residual of the independent accelerations, zdd_i -
f(z_i, zd_i; p), with the integrator factor between steps.

1. Initial guess: paper 001 sec. 4.4's forward-backward low-pass filter of the readings
   when encoders read every independent coordinate (:mod:`.initial`), else the
   smoother's forward filter (errorEKF by default) with the starting parameters, which
   works for any sensor set.
2. Identifiability at the initial guess (:mod:`.identifiability`): parameters in a null
   direction of the reduced Jacobian are reported and held, not estimated.
3. Levenberg-Marquardt on the banded normal equations with dense parameter columns
   (:mod:`mbde_core.trajectory.solver`, the smoother's solver; paper 001 Algorithm 1),
   box bounds by projection. The initial damping is 1e-12 diag(J^T J): the integrator
   rows make the diagonal huge, and a larger damping only slows the first steps.
4. Noise re-estimation (paper 001 eqs. 3.26-3.28, :mod:`.noise`): the acceleration-noise
   sigma of the eom rows and each sensor channel's sigma are rescaled by their variance
   factors (with redundancy numbers) and the problem is solved again, until every
   factor is within ``noise_tolerance`` of 1 or ``noise_passes`` passes. The step in
   log sigma is a secant step on log(factor) (Foerstner's step sigma^2 *= factor when
   the secant is not usable), clamped to a factor 30 per pass. With an exact model (no
   disturbances) the acceleration sigma would fall without end; it stops at the
   integration scheme's own error (:func:`discretization_sigma`).
5. Covariance of the parameters: the inverse Schur complement (eqs. 3.31-3.32); the
   identifiability is checked again at the solution.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.identification.identifiability import analyse
from mbde_core.identification.noise import variance_factors
from mbde_core.identification.problem import JointProblem
from mbde_core.identification.projection import project
from mbde_core.trajectory.factors import Integrator
from mbde_core.trajectory.problem import SmootherProblem
from mbde_core.trajectory.solver import LMOptions, levenberg_marquardt

DEFAULTS = {
    "step": "auto",  # grid step [s]; auto: the fastest sensor's period (every reading on the grid)
    "initial_guess": "auto",  # auto | lowpass | filter (see _problems)
    "max_iterations": 50,  # LM iterations per pass
    "tolerance": 1e-6,  # LM stop: step^T A step (posterior units), final pass
    "pass_tolerance": 1e-2,  # ... passes before the noise has converged
    "mu0": 1e-12,  # initial LM damping relative to diag(J^T J)
    "noise_passes": 8,  # re-estimation passes (0: keep the configured noise)
    "noise_tolerance": 0.05,  # stop when every sigma changes by less than this fraction
    "rank_tolerance": 1e-9,  # null direction: eigenvalue <= tol * largest (relative units)
    "min_sigma_a": 1e-9,
    "descend": 10.0,  # floor of the re-estimated acceleration sigma [unit/s^2]
}


@dataclass
class Recording:
    """One recording (bag): name, measurements (Measurement list), the initial state of
    its forward filter (:class:`mbde_core.estimators.base.InitialState`) and its sensors."""

    name: str
    measurements: list
    init: object
    sensors: object  # SensorSet on the base mechanism


@dataclass
class IdentificationResult:
    """Estimates and diagnostics (see :func:`identify`). Arrays over all P parameters of
    ``pm`` (start p0, estimate p, std; NaN std and the start value where not identified)."""

    pm: object
    p0: np.ndarray
    p: np.ndarray
    std: np.ndarray
    cov: np.ndarray
    identifiable: np.ndarray
    at_bound: np.ndarray
    identifiability: object
    history: list  # cost after each accepted LM step, all passes
    iterations: int  # accepted LM steps, all passes
    first_pass_iterations: int
    passes: int
    status: str
    noise_status: str  # 'converged' | 'pass limit' | 'numerical floor' | 'not re-estimated'
    sigma_a: np.ndarray
    sensor_sigma: dict
    factors: dict
    whiteness: dict
    trajectories: list  # per recording: dict(t, z, zd, zdd, q)
    residuals: list  # per recording: {sensor: (t (K,), normalised residual (K, d))}
    cost_per_factor: dict
    timings: dict = field(default_factory=dict)

    @property
    def correlation(self) -> np.ndarray:
        s = np.sqrt(np.clip(np.diag(self.cov), 0, None))
        with np.errstate(invalid="ignore", divide="ignore"):
            c = self.cov / np.outer(s, s)
        return np.where(np.outer(s, s) > 0, c, np.nan)


def _problems(pm, recordings, smoother_cfg, guess_cfg, initial: str = "auto"):
    """(SmootherProblem per recording, X0 stacked, initial-guess info) with the starting
    model; initial: 'lowpass' (paper 001 sec. 4.4, :mod:`.initial`), 'filter' (the
    smoother's forward filter) or 'auto' (lowpass when encoders read every z)."""
    from mbde_core.identification.initial import encoder_channels, lowpass_guess
    from mbde_core.trajectory.model import MultibodyModel
    from mbde_core.trajectory.smoother import BatchSmoother

    mech = pm.mechanism(pm.p0)
    probs, X0s, infos = [], [], []
    for rec in recordings:
        sm = BatchSmoother(mech, rec.sensors, smoother_cfg, guess_cfg)
        readings = sm.readings(rec.measurements)
        if readings.N < 2:
            from mbde_core.errors import DataError

            raise DataError(f"{rec.name}: fewer than two steps of valid readings")
        q_hint = rec.init.q_hint if rec.init.q_hint is not None else mech.q0
        channels = encoder_channels(mech, rec.sensors, q_hint) if initial in ("auto", "lowpass") else None
        if channels is not None:
            X0, q0 = lowpass_guess(readings, mech, channels, q_hint)
            info = {"initial_guess": "lowpass 10 Hz (filtfilt) of " + ", ".join(c[0] for c in channels.values())}
        elif initial == "lowpass":
            from mbde_core.errors import DataError

            raise DataError(f"{rec.name}: initial guess 'lowpass' needs an encoder on every independent coordinate")
        else:
            X0, q0, info = sm.initial_guess(readings, rec.init)
        g = mech.dof
        sz = np.broadcast_to(rec.init.sigma_z, (g,))
        szd = np.broadcast_to(rec.init.sigma_zd, (g,))
        mean = np.concatenate([rec.init.z, rec.init.zd])
        sqrt_info = np.diag(1.0 / np.concatenate([sz, szd]))
        probs.append(SmootherProblem(MultibodyModel(mech, rec.sensors), readings, sm.sigma_a(), mean, sqrt_info,
                                     smoother_cfg["integrator"], smoother_cfg["integrator_relaxation"], q0))
        X0s.append(X0)
        infos.append(info)
    return probs, np.vstack(X0s), infos


def _rescale(problems, scheme, relaxation, sigma_a, sensor_factor):
    """Set every recording's sigma_a (g,) (integrator sigmas follow) and rescale sensor
    whitening by 1/sqrt(factor) per channel."""
    for pr in problems:
        pr.sigma_a = np.array(sigma_a, dtype=float)
        pr.integrator = Integrator(pr.g, pr.readings.dt, scheme, pr.sigma_a, relaxation)
        for s in pr.readings.sensors:
            f = sensor_factor.get(s.name)
            if f is not None:
                s.whiten = np.diag(1.0 / np.sqrt(f)) @ s.whiten


def _check(jp, X, u, labels, tol):
    rows = jp.evaluate(X, u)
    return analyse(project(rows, jp.N, jp.b, jp.P).information(), labels, tol)


def identify(pm, recordings, smoother_cfg: dict | None = None, guess_cfg: dict | None = None,
             options: dict | None = None, progress=None, sensor_factory=None) -> IdentificationResult:
    """Identify the parameters of ``pm`` (ParameterizedMechanism) from recordings (list of
    :class:`Recording`); sensor_factory: mech -> SensorSet for geometric parameters
    (see :class:`JointProblem`)."""
    from mbde_core.trajectory.config import smoother_defaults

    opt = dict(DEFAULTS, **(options or {}))
    cfg = dict(smoother_cfg or smoother_defaults())
    if opt["step"] == "auto":
        cfg["step"] = min(s.period for rec in recordings for s in rec.sensors)
    else:
        cfg["step"] = float(opt["step"])
    say = progress or (lambda msg: None)
    t_start = time.perf_counter()
    problems, X, finfo = _problems(pm, recordings, cfg, guess_cfg, opt["initial_guess"])
    t_guess = time.perf_counter() - t_start
    jp = JointProblem(pm, problems, sensor_factory=sensor_factory)
    labels = pm.names
    ident0 = _check(jp, X, jp.unknowns(pm.p0), labels, opt["rank_tolerance"])
    active = ident0.identifiable.copy()
    if not active.all():
        say("not identifiable: " + ", ".join(n for n, a in zip(labels, active) if not a))
    jp = JointProblem(pm, problems, active, sensor_factory)
    u = jp.unknowns(pm.p0)
    lm = LMOptions(max_iterations=opt["max_iterations"], tolerance=opt["pass_tolerance"], mu0=opt["mu0"])
    final = False
    history, iterations, passes = [], 0, 0
    sigma_a = problems[0].sigma_a.copy()
    noise_status = "not re-estimated"
    search = SigmaSearch(len(sigma_a), opt["noise_tolerance"], opt["descend"])
    first_iterations = None
    status = ""
    factors = {}
    proj = None
    last = None  # (sigma_a, X, u, res, proj, factors) of the last good pass
    while True:
        passes += 1
        res = levenberg_marquardt(jp, X, u, lm)
        try:
            proj = project(res.rows, jp.N, jp.b, jp.P) if np.isfinite(res.cost) else None
        except np.linalg.LinAlgError:
            proj = None
        if proj is None and last is not None:
            # the normal equations lost positive definiteness (sigma_a so small that the
            # integrator rows outweigh the readings beyond double precision): keep the
            # previous pass, whose sigma_a is the smallest usable one
            sigma_a, X, u, res, proj, factors = last
            _rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, {})
            noise_status = "numerical floor"
            say(f"pass {passes}: not positive definite at this acceleration sigma; kept the previous pass")
            break
        X, u = res.X, res.p
        history += res.history[1:] if history else res.history
        iterations += res.iterations
        first_iterations = res.iterations if first_iterations is None else first_iterations
        status = res.status
        say(f"pass {passes}: {res.iterations} iterations, cost {res.cost:.6g} ({res.status}); "
            f"acceleration sigma {', '.join(f'{v:.3g}' for v in sigma_a)}, "
            f"floor {', '.join(f'{v:.3g}' for v in discretization_sigma(jp, X))}")
        if proj is None:
            break
        factors = variance_factors(proj, res.rows)
        last = (sigma_a.copy(), X, u, res, proj, factors)
        if final:
            break
        sensor_f = {name[4:]: np.asarray(v[0], dtype=float) for name, v in factors.items() if name.startswith("obs:")}
        sensors_done = all(np.all(np.abs(np.sqrt(f) - 1.0) < opt["noise_tolerance"]) for f in sensor_f.values())
        floor = np.maximum(discretization_sigma(jp, X), opt["min_sigma_a"])
        s_next, eom_done = search.update(np.log(sigma_a), np.log(np.maximum(factors["eom"][0], 1e-300)), np.log(floor))
        noise_status = "converged" if eom_done and sensors_done else "pass limit"
        if (eom_done and sensors_done) or passes > opt["noise_passes"]:
            final = True  # polish at the final tolerance (usually 1-2 steps)
            lm = LMOptions(max_iterations=opt["max_iterations"], tolerance=opt["tolerance"], mu0=opt["mu0"])
            continue
        sigma_a = np.exp(s_next)
        _rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, sensor_f)
    t_solve = time.perf_counter() - t_start - t_guess
    p = jp.params(u)
    cov = np.full((pm.P, pm.P), np.nan)
    std = np.full(pm.P, np.nan)
    final_ok = active.copy()
    ident = None
    if jp.P and np.isfinite(res.cost):
        ident = analyse(proj.information(), [n for n, a in zip(labels, active) if a], opt["rank_tolerance"])
        final_ok[np.flatnonzero(active)] = ident.identifiable
        C = proj.covariance(rcond=np.sqrt(opt["rank_tolerance"])) * np.outer(jp.scale[active], jp.scale[active])
        cov[np.ix_(active, active)] = C
        std[active] = np.sqrt(np.clip(np.diag(C), 0, None))
    std[~final_ok] = np.nan
    p_out = np.where(final_ok, p, pm.p0)
    at_bound = final_ok & ((np.isclose(p, pm.lower, rtol=1e-9, atol=0)) | np.isclose(p, pm.upper, rtol=1e-9, atol=0))
    trajs, resid, white = _outputs(jp, X, res.rows, recordings)
    from mbde_core.trajectory.problem import SmootherProblem as _SP

    return IdentificationResult(
        pm=pm, p0=pm.p0.copy(), p=p_out, std=std, cov=cov, identifiable=final_ok, at_bound=at_bound,
        identifiability=ident0 if ident is None or ident0.rank < pm.P else ident, history=[float(c) for c in history],
        iterations=iterations, first_pass_iterations=int(first_iterations or 0), passes=passes, status=status,
        noise_status=noise_status,
        sigma_a=np.asarray(sigma_a), sensor_sigma=_sensor_sigmas(problems, recordings),
        factors={k: [float(x) for x in np.atleast_1d(v[0])] for k, v in factors.items()},
        whiteness=white, trajectories=trajs, residuals=resid, cost_per_factor=_SP.cost_breakdown(res.rows),
        timings={"initial_guess_s": t_guess, "solve_s": t_solve, "total_s": time.perf_counter() - t_start,
                 "filters": finfo},
    )


class SigmaSearch:
    """Root of phi(s) = log(variance factor of the eom rows) in s = log sigma_a, per
    independent coordinate (g,).

    Each evaluation is one solve, so the search must be economical and must not stop at
    a spurious fixed point: from a loose start (a filter's plant noise, phi < 0) sigma_a
    descends by ``descend`` per pass (or by Foerstner's step phi / 2 if larger) until
    phi > 0, continuation that also keeps each solve near the previous one; then the
    bracketed root is refined by regula falsi with the Illinois modification. A factor
    above 1 without a bracket takes Foerstner's step up. Converged when |phi| / 2 <
    log(1 + tol) (sigma within tol); at the discretization floor with phi < 0 the search
    stops there.
    """

    def __init__(self, g: int, tol: float, descend: float):
        self.tol = np.log1p(tol)
        self.jump = np.log(descend)
        self.lo = np.full((g, 2), np.nan)  # (s, phi) with phi > 0 (sigma too small)
        self.hi = np.full((g, 2), np.nan)  # (s, phi) with phi < 0 (sigma too large)
        self.side = np.zeros(g)  # side kept last (Illinois)

    def update(self, s, phi, s_floor):
        """(next s (g,), converged) from the current s, phi and the floor log sigma."""
        s, phi = np.asarray(s, float), np.asarray(phi, float)
        done = np.abs(phi) / 2 < self.tol
        at_floor = (phi < 0) & (s <= s_floor + 1e-9)
        nxt = s.copy()
        for k in range(s.size):
            if done[k] or at_floor[k]:
                continue
            if phi[k] > 0:
                self._keep(k, self.lo, s[k], phi[k], +1)
            else:
                self._keep(k, self.hi, s[k], phi[k], -1)
            (sl, pl), (sh, ph) = self.lo[k], self.hi[k]
            if np.isfinite(sl) and np.isfinite(sh):
                nxt[k] = sl - pl * (sh - sl) / (ph - pl)
            elif phi[k] < 0:
                nxt[k] = s[k] + min(phi[k] / 2, -self.jump)
            else:
                nxt[k] = s[k] + min(phi[k] / 2, self.jump)
        return np.maximum(nxt, s_floor), bool(np.all(done | at_floor))

    def _keep(self, k, store, s, phi, side):
        if self.side[k] == side:  # the other end was kept twice: Illinois halves its phi
            other = self.hi if side > 0 else self.lo
            other[k, 1] *= 0.5
        self.side[k] = side
        store[k] = (s, phi)


def discretization_sigma(jp, X) -> np.ndarray:
    """Floor (g,) of the re-estimated acceleration sigma: the Newmark linear-acceleration
    scheme's truncation error as an acceleration, dt^2 z^(4) / 12 ~ (second difference of
    zdd) / 12, RMS over the recordings. Below it the eom residuals measure the scheme's
    error, not disturbances (paper 001 sec. 4.9, shadow parameters)."""
    g = jp.g
    d2 = [np.diff(Xr[:, 2 * g:], 2, axis=0) for Xr in jp.split(X) if Xr.shape[0] > 2]
    if not d2:
        return np.zeros(g)
    return np.sqrt(np.mean(np.concatenate(d2) ** 2, axis=0)) / 12.0


def _sensor_sigmas(problems, recordings) -> dict:
    """Re-estimated sensor sigmas {name: (d,)} from the final whitening (diagonal part)."""
    out = {}
    for s in problems[0].readings.sensors:
        C = np.linalg.inv(s.whiten.T @ s.whiten)
        out[s.name] = [float(v) for v in np.sqrt(np.diag(C))]
    return out


def _outputs(jp, X, rows, recordings):
    """Per recording: trajectory, normalised residuals per sensor, their whiteness."""
    from mbde_core.estimators.metrics import whiteness

    g = jp.g
    trajs, resid, white = [], [], {}
    for k, (pr, Xr, off) in enumerate(zip(jp.recs, jp.split(X), jp.offsets[:-1])):
        ev = pr.ev
        trajs.append({"t": pr.t.copy(), "z": Xr[:, :g].copy(), "zd": Xr[:, g:2 * g].copy(), "zdd": Xr[:, 2 * g:].copy(),
                      "q": None if ev is None else ev.q.copy()})
        lo, hi = off, off + pr.N
        per = {}
        for rb in rows:
            if not rb.name.startswith("obs:"):
                continue
            sel = (rb.idx >= lo) & (rb.idx < hi)
            if not np.any(sel):
                continue
            name = rb.name[4:]
            per[name] = (pr.t[rb.idx[sel] - lo], rb.r[sel].copy())
        resid.append(per)
        white[recordings[k].name] = {name: whiteness(list(r)) for name, (_, r) in per.items()}
    return trajs, resid, white
