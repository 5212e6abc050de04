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
2b. Growing horizon: with parameters 20 % off, a forward filter's trajectory drifts
   (gyroscopes observe positions only through the dynamics), and the joint problem over
   a long recording can settle in a wrong basin (e.g. weaker gravity and more damping).
   So the first stage solves only the first 0.5 s of every recording (anchored by the
   initial-state prior, before the drift), and each further stage twice as much, until
   all of it, starting from the previous stage's parameters and trajectory, continued by
   simulation with those parameters (``horizons``). Not needed (one stage) when the
   initial guess comes from the readings (the low-pass guess from encoders). In the
   stages before the last a weak prior (50 % relative sigma, ``stage_prior``) around the
   stage's starting parameters keeps those that a short window cannot determine from
   drifting away, and at most 2 noise passes (step 4) give the next stage its start; the
   last stage has no prior (the estimate is the maximum likelihood of paper 001 eq.
   3.15) and the full noise search. Each stage starts from the previous stage's
   acceleration sigma.
3. Levenberg-Marquardt on the banded normal equations with dense parameter columns
   (:mod:`mbde_core.trajectory.solver`, the smoother's solver; paper 001 Algorithm 1),
   box bounds by projection. The initial damping is 1e-12 diag(J^T J): the integrator
   rows make the diagonal huge, and a larger damping only slows the first steps.
4. Noise re-estimation (paper 001 eqs. 3.26-3.28, :mod:`.noise`): the first pass uses an
   acceleration-noise sigma of 30 % of the initial guess's accelerations (the parameters
   are typically ~20 % off; a first pass whose normal equations are not positive
   definite is retried with a 10 times larger sigma); after each pass the variance
   factors of the eom rows and of every sensor channel (with redundancy numbers) give the next sigmas (descent, then
   regula falsi in log sigma: :class:`.noise.SigmaSearch`; Foerstner's step for the
   sensors) and the problem is solved again from the previous solution, until every
   sigma moves by less than ``noise_tolerance``; a last pass polishes at the final
   tolerance. With an exact model (no disturbances) the acceleration sigma would fall
   without end; it stops at the integration scheme's own error
   (:func:`.noise.discretization_sigma`) or where the banded Cholesky stops factoring.
5. Covariance of the parameters: (T^T T)^-1 of the state-projected parameter Jacobian
   (eqs. 3.30-3.32, :mod:`.projection`), and its sandwich with the residuals'
   correlation (Newey-West, :mod:`.robust`); the larger is reported (``std``; the
   model's in ``std_model``); the identifiability is checked again there, and residuals
   that are not white or weakly identified parameters are warned about (``warnings``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.errors import DataError
from mbde_core.identification.identifiability import analyse
from mbde_core.identification.initial import encoder_channels, lowpass_guess
from mbde_core.identification.inputs import known_inputs
from mbde_core.identification.noise import SigmaSearch, discretization_sigma, rescale, sensor_sigmas, variance_factors
from mbde_core.identification.outputs import per_recording
from mbde_core.identification.problem import JointProblem, column_scales
from mbde_core.identification.projection import project
from mbde_core.identification.robust import hac_covariance, warnings_of
from mbde_core.trajectory.config import smoother_defaults
from mbde_core.trajectory.model import MultibodyModel
from mbde_core.trajectory.motion import extend
from mbde_core.trajectory.problem import SmootherProblem
from mbde_core.trajectory.smoother import BatchSmoother
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
    "min_sigma_a": 1e-9,  # floor of the re-estimated acceleration sigma [unit/s^2]
    "descend": 10.0,  # the noise search descends by this factor per pass until bracketed
    "horizons": "auto",  # stages: auto (see _horizons) or a list of seconds before the whole recordings
    "first_horizon": 0.5,  # [s] first stage of the auto horizons
    "stage_prior": 0.5,  # relative sigma of the prior on the parameters in the stages before the last
    "initial_sigma_a": "auto",  # auto: 0.3 RMS(zdd) of the initial guess; "config": the smoother's plant noise
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
    history: list  # cost at the start and after each accepted LM step, all passes
    pass_starts: list  # index into history where each pass starts (the weights change there)
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
    stages: list = field(default_factory=list)  # per horizon: iterations, passes, estimate, sigma
    timings: dict = field(default_factory=dict)
    std_model: np.ndarray | None = None  # (P,) the model covariance's (paper 001 eq. 3.31); std is the robust one
    warnings: list = field(default_factory=list)  # residuals not white, weakly identified parameters (module robust)
    hac_lags: list = field(default_factory=list)  # batch-means block length [steps] per recording

    @property
    def correlation(self) -> np.ndarray:
        s = np.sqrt(np.clip(np.diag(self.cov), 0, None))
        with np.errstate(invalid="ignore", divide="ignore"):
            c = self.cov / np.outer(s, s)
        return np.where(np.outer(s, s) > 0, c, np.nan)


def _problems(pm, p, recordings, smoother_cfg, guess_cfg, initial: str = "auto", horizon: float | None = None,
              previous=None):
    """(SmootherProblem per recording, X0 stacked, initial-guess info) with the model at
    parameters p, on the readings up to ``horizon`` s after each recording's first (None:
    all); initial: 'lowpass' (paper 001 sec. 4.4, :mod:`.initial`), 'filter' (the
    smoother's forward filter) or 'auto' (lowpass when encoders read every z).
    previous: per recording (X, q) of the previous stage, continued by simulation
    (:func:`mbde_core.trajectory.motion.extend`) instead of a filter run."""
    mech = pm.mechanism(p)
    probs, X0s, infos = [], [], []
    for r, rec in enumerate(recordings):
        sm = BatchSmoother(mech, rec.sensors, smoother_cfg, guess_cfg)
        meas = rec.measurements
        if horizon is not None and meas:
            t0 = min(m.stamp for m in meas)
            meas = [m for m in meas if m.stamp <= t0 + horizon + 1e-9]
        readings = sm.readings(meas)
        if readings.N < 2:
            raise DataError(f"{rec.name}: fewer than two steps of valid readings")
        q_hint = rec.init.q_hint if rec.init.q_hint is not None else mech.q0
        channels = encoder_channels(mech, rec.sensors, q_hint) if initial in ("auto", "lowpass") else None
        if channels is not None:
            X0, q0 = lowpass_guess(readings, mech, channels, q_hint)
            info = {"initial_guess": "lowpass 10 Hz (filtfilt) of " + ", ".join(c[0] for c in channels.values())}
        elif initial == "lowpass":
            raise DataError(f"{rec.name}: initial guess 'lowpass' needs an encoder on every independent coordinate")
        elif previous is not None:
            X0, q0 = extend(mech, previous[r][0], previous[r][1], readings.N, readings.dt)
            info = {"initial_guess": f"previous stage ({previous[r][0].shape[0]} steps) continued by simulation"}
        else:
            X0, q0, info = sm.initial_guess(readings, rec.init)
        g = mech.dof
        X0 = X0[:, :3 * g]  # known inputs enter without states here (mbde_core.identification.inputs)
        sz = np.broadcast_to(rec.init.sigma_z, (g,))
        szd = np.broadcast_to(rec.init.sigma_zd, (g,))
        mean = np.concatenate([rec.init.z, rec.init.zd])
        sqrt_info = np.diag(1.0 / np.concatenate([sz, szd]))
        known = known_inputs(readings, rec.sensors, mech.n)
        prob = SmootherProblem(MultibodyModel(mech, rec.sensors), readings, sm.sigma_a(), mean, sqrt_info,
                               smoother_cfg["integrator"], smoother_cfg["integrator_relaxation"], q0,
                               direct=None if known is None else (known.E, known.forces()))
        prob.known = known  # the recorded control signals (mbde_core.identification.inputs)
        probs.append(prob)
        X0s.append(X0)
        infos.append(info)
    return probs, np.vstack(X0s), infos


def _check(jp, X, p, labels, tol):
    rows = jp.evaluate(X, jp.unknowns(p))
    return analyse(project(rows, jp.N, jp.b, jp.P).information(), labels, tol)


def identify(pm, recordings, smoother_cfg: dict | None = None, guess_cfg: dict | None = None,
             options: dict | None = None, progress=None, sensor_factory=None) -> IdentificationResult:
    """Identify the parameters of ``pm`` (ParameterizedMechanism) from recordings (list of
    :class:`Recording`); sensor_factory: mech -> SensorSet for geometric parameters
    (see :class:`JointProblem`)."""
    opt = dict(DEFAULTS, **(options or {}))
    cfg = dict(smoother_cfg or smoother_defaults())
    cfg["step"] = min(s.period for rec in recordings for s in rec.sensors) if opt["step"] == "auto" else float(opt["step"])
    say = progress or (lambda msg: None)
    t_start = time.perf_counter()
    problems, X, finfo = _problems(pm, pm.p0, recordings, cfg, guess_cfg, opt["initial_guess"])
    t_guess = time.perf_counter() - t_start
    labels = pm.names
    scale = column_scales(pm, problems, X, sensor_factory)
    ident0 = _check(JointProblem(pm, problems, sensor_factory=sensor_factory, scale=scale), X, pm.p0, labels,
                    opt["rank_tolerance"])
    active = ident0.identifiable.copy()
    if not active.all():
        say("not identifiable: " + ", ".join(n for n, a in zip(labels, active) if not a))
    p, sigma = pm.p0.copy(), None
    data_driven = all(str(f.get("initial_guess", "")).startswith("lowpass") for f in finfo)
    horizons = _horizons(opt["horizons"], recordings, opt["first_horizon"], data_driven)
    log = {"history": [], "pass_starts": [], "iterations": 0, "passes": 0, "stages": []}
    previous = None
    for k, horizon in enumerate(horizons):
        if k > 0 or horizon is not None:  # up to the horizon, from the previous stage's trajectory if any
            problems, X, finfo = _problems(pm, p, recordings, cfg, guess_cfg, opt["initial_guess"], horizon, previous)
        last_stage = k == len(horizons) - 1  # earlier stages only need a start for the next: 2 noise passes
        prior = None
        if not last_stage and opt["stage_prior"] > 0:  # a short window may not determine every parameter
            prior = (p[active] / scale[active], np.full(int(active.sum()), float(opt["stage_prior"])))
        jp = JointProblem(pm, problems, active, sensor_factory, scale, prior)
        stage = _solve_stage(jp, problems, X, jp.unknowns(p), sigma, cfg,
                             opt if last_stage else dict(opt, noise_passes=min(2, opt["noise_passes"])), say, log)
        p, sigma = jp.params(stage["u"]), stage["sigma_a"]
        previous = [(Xr, pr.ev.q) for pr, Xr in zip(problems, jp.split(stage["X"]))]
        log["stages"].append({"horizon_s": horizon, "iterations": stage["iterations"], "passes": stage["passes"],
                              "estimate": [float(v) for v in p], "acceleration_sigma": [float(v) for v in sigma]})
        if horizon is not None:
            say(f"horizon {horizon:g} s: " + ", ".join(f"{n} = {v:.6g}" for n, v, a in zip(labels, p, active) if a))
    res, proj, X = stage["res"], stage["proj"], stage["X"]
    t_solve = time.perf_counter() - t_start - t_guess
    cov = np.full((pm.P, pm.P), np.nan)
    std = np.full(pm.P, np.nan)
    final_ok = active.copy()
    ident = None
    std_model = np.full(pm.P, np.nan)
    lags = []
    if jp.P and proj is not None:
        ident = analyse(proj.information(), [n for n, a in zip(labels, active) if a], opt["rank_tolerance"])
        final_ok[np.flatnonzero(active)] = ident.identifiable
        bread = proj.covariance(rcond=np.sqrt(opt["rank_tolerance"]))
        sc2 = np.outer(jp.scale[active], jp.scale[active])
        C = bread * sc2
        H, lags = hac_covariance(proj, res.rows, jp.offsets, bread)
        H = H * sc2  # the sandwich, widened where it is narrower than the model's (module robust)
        d = np.sqrt(np.maximum(1.0, np.diag(C) / np.maximum(np.diag(H), 1e-300)))
        cov[np.ix_(active, active)] = H * np.outer(d, d)
        std_model[active] = np.sqrt(np.clip(np.diag(C), 0, None))
        std[active] = np.sqrt(np.clip(np.diag(cov[np.ix_(active, active)]), 0, None))
    std[~final_ok] = np.nan
    std_model[~final_ok] = np.nan
    p_out = np.where(final_ok, p, pm.p0)
    at_bound = final_ok & ((np.isclose(p, pm.lower, rtol=1e-9, atol=0)) | np.isclose(p, pm.upper, rtol=1e-9, atol=0))

    trajs, resid, white = per_recording(jp, X, res.rows, recordings)
    warnings = warnings_of(labels, p_out, std, std_model, cov, white)
    return IdentificationResult(
        pm=pm, p0=pm.p0.copy(), p=p_out, std=std, cov=cov, identifiable=final_ok, at_bound=at_bound,
        identifiability=ident0 if ident is None or ident0.rank < pm.P else ident,
        history=[float(c) for c in log["history"]], pass_starts=log["pass_starts"], iterations=log["iterations"],
        first_pass_iterations=stage["first_iterations"], passes=log["passes"], status=res.status,
        noise_status=stage["noise_status"], sigma_a=np.asarray(sigma), sensor_sigma=sensor_sigmas(problems),
        factors={k: [float(x) for x in np.atleast_1d(v[0])] for k, v in stage["factors"].items()},
        whiteness=white, trajectories=trajs, residuals=resid, cost_per_factor=SmootherProblem.cost_breakdown(res.rows),
        stages=log["stages"],
        timings={"initial_guess_s": t_guess, "solve_s": t_solve, "total_s": time.perf_counter() - t_start,
                 "filters": finfo},
        std_model=std_model, warnings=warnings, hac_lags=lags,
    )


def _horizons(spec, recordings, first: float, data_driven: bool) -> list:
    """Stage horizons [s] (None = all of every recording). 'auto': ``first`` seconds,
    doubled until the longest recording is covered, when the initial guess comes from a
    filter run with the starting parameters (which drifts); a single stage when it comes
    from the readings themselves (``data_driven``: the low-pass guess from encoders) or
    the recordings are short. Or a list of seconds."""
    if spec != "auto":
        return [float(h) for h in spec] + [None]
    longest = max(max((m.stamp for m in rec.measurements), default=0.0) - min((m.stamp for m in rec.measurements), default=0.0)
                  for rec in recordings)
    out, h = [], float(first)
    while not data_driven and h < 0.9 * longest:
        out.append(h)
        h *= 2.0
    return out + [None]


def _solve_stage(jp, problems, X, u, sigma_start, cfg, opt, say, log) -> dict:
    """Levenberg-Marquardt passes with the noise search (steps 3-4 of the module docstring)."""
    if sigma_start is not None:
        sigma_a = np.asarray(sigma_start, dtype=float)
    elif opt["initial_sigma_a"] == "auto":  # 30 % of the initial guess's accelerations (parameters ~20 % off)
        rms = np.sqrt(np.mean(X[:, 2 * jp.g:] ** 2, axis=0))
        sigma_a = np.maximum(0.3 * rms, np.maximum(discretization_sigma(jp, X), opt["min_sigma_a"]))
    elif opt["initial_sigma_a"] == "config":
        sigma_a = problems[0].sigma_a.copy()
    else:
        sigma_a = np.full(jp.g, float(opt["initial_sigma_a"]))
    rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, {})
    lm = LMOptions(max_iterations=opt["max_iterations"], tolerance=opt["pass_tolerance"], mu0=opt["mu0"])
    search = SigmaSearch(len(sigma_a), opt["noise_tolerance"], opt["descend"])
    out = {"iterations": 0, "passes": 0, "first_iterations": None, "noise_status": "not re-estimated", "factors": {}}
    final, last = False, None  # last: (sigma_a, X, u, res, proj, factors) of the last good pass
    while True:
        out["passes"] += 1
        res = levenberg_marquardt(jp, X, u, lm)
        try:
            proj = project(res.rows, jp.N, jp.b, jp.P) if np.isfinite(res.cost) else None
        except np.linalg.LinAlgError:
            proj = None
        if proj is None and last is None and out["passes"] < 4:  # no good pass yet: retry 10 times looser
            sigma_a = sigma_a * 10.0
            rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, {})
            say(f"pass {out['passes']}: failed (cost {res.cost:.3g}); retrying with the acceleration sigma x 10")
            continue
        if proj is None and last is not None:
            # the normal equations lost positive definiteness (sigma_a so small that the
            # integrator rows outweigh the readings beyond double precision): keep the
            # previous pass, whose sigma_a is the smallest usable one
            sigma_a, X, u, res, proj, out["factors"] = last
            rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, {})
            out["noise_status"] = "numerical floor"
            say(f"pass {out['passes']}: not positive definite at this acceleration sigma; kept the previous pass")
            break
        X, u = res.X, res.p
        log["pass_starts"].append(len(log["history"]))
        log["history"] += res.history
        log["iterations"] += res.iterations
        log["passes"] += 1
        out["iterations"] += res.iterations
        out["first_iterations"] = res.iterations if out["first_iterations"] is None else out["first_iterations"]
        say(f"pass {out['passes']}: {res.iterations} iterations, cost {res.cost:.6g} ({res.status}); "
            f"acceleration sigma {', '.join(f'{v:.3g}' for v in sigma_a)}")
        if proj is None:
            break
        factors = out["factors"] = variance_factors(proj, res.rows)
        last = (sigma_a.copy(), X, u, res, proj, factors)
        if final:
            break
        sensor_f = {name[4:]: np.asarray(v[0], dtype=float) for name, v in factors.items() if name.startswith("obs:")}
        sensors_done = all(np.all(np.abs(np.sqrt(f) - 1.0) < opt["noise_tolerance"]) for f in sensor_f.values())
        floor = np.maximum(discretization_sigma(jp, X), opt["min_sigma_a"])
        s_next, eom_done = search.update(np.log(sigma_a), np.log(np.maximum(factors["eom"][0], 1e-300)), np.log(floor))
        out["noise_status"] = "converged" if eom_done and sensors_done else "pass limit"
        if (eom_done and sensors_done) or out["passes"] > opt["noise_passes"]:
            final = True  # polish at the final tolerance (usually 1-2 steps)
            lm = LMOptions(max_iterations=opt["max_iterations"], tolerance=opt["tolerance"], mu0=opt["mu0"])
            continue
        sigma_a = np.exp(s_next)
        rescale(problems, cfg["integrator"], cfg["integrator_relaxation"], sigma_a, sensor_f)
    out.update(res=res, proj=proj, X=X, u=u, sigma_a=sigma_a, first_iterations=int(out["first_iterations"] or 0))
    return out
