"""The smoother's solve with its noise levels estimated from the data, and its verdict.

:func:`solve_with_noise` alternates Levenberg-Marquardt solves (warm-started) with
variance-component updates (:mod:`.calibration`): the eom rows of each independent
coordinate set sigma_a, the input random walk of each input state its per-step sigma_w,
and the channels that read accelerations or gravity (accelerometers: a model error shows
in them directly) their sigma (never below the declared one), until every variance
factor is 1 within ``noise_tolerance`` (or ``noise_passes`` solves). sigma_a has a floor,
FLOOR times the rule's (the normal equations' conditioning); the integration scheme's own
error, estimated from the model's accelerations along the solution
(:func:`discretization`), goes into the integrator factors' sigmas
(:class:`~.factors.Integrator`), so a model without disturbances is not made stiffer than
its discretization.

Readings whose residuals are correlated in time (quantised encoders on a slow motion, an
accelerometer's share of a smooth model error) carry less information than as many
independent ones: with a correlation time tau > TAU_MIN readings
(:func:`correlation_time`) their variance is taken tau times (an effective sample size)
and the plant noise estimated again.

With unknown inputs as states, the inputs can explain the readings of every step;
residuals still correlated after the fit (:func:`integrated_time`) are a misfit they
cannot absorb, and the covariance of a white fit does not cover the bias it leaves. Measured on paper 004's slider-crank, whose true torque is a
digital controller's, held for 1 ms and read at its jumps: the smoother's error is a
constant 0.004 rad at NEES/dim 25 with accelerometer residuals correlated over 20
readings, proportional to the hold (0.0005 rad, NEES/dim 0.7 and white residuals when the
controller updates every 0.125 ms). A correlation time tau above INPUT_TAU readings is warned
about (issue 42's speed-step bag, consistent at NEES/dim ~1, leaves 5.8; this one 20-29) and
the reported covariance is multiplied by tau: the misfit's share of every estimate is an
average over the correlated residuals, whose variance is tau times the white one (the
effective sample size, :func:`integrated_time`; a heteroskedasticity- and
autocorrelation-consistent scale in one number).

The other readings keep their declared sigmas: their variance factors and the normalised
cost of the whole problem (before the correlation step) make the goodness of fit
(:func:`~.calibration.fit_verdict`): the status is ``converged`` only for a converged
solve whose fit is good, else ``poor fit`` (or ``not converged``), with one warning line
per reason. A plant noise far above the rule's (PLAUSIBLE times) is warned about too: the
model does not explain the motion (an unknown motor, a wrong branch).
"""
from __future__ import annotations

import numpy as np

from mbde_core.trajectory.calibration import SigmaSearch, fit_verdict, leverages, normalised_cost, variance_factors
from mbde_core.trajectory.solver import LMOptions, levenberg_marquardt, scipy_trf

FLOOR = 3e-4  # of the rule's sigma_a: the acceleration sigma's floor (the banded Cholesky's conditioning)
PLAUSIBLE = 30.0  # estimated sigma_a above this many times the rule's: warned
LIMIT_SLACK, LIMIT_SHARE = 0.2, 0.01  # inputs beyond 1.2 x their limit at more than 1 % of the steps: warned
TAU_MIN = 1.5  # readings with a longer correlation time (in readings) get their variance times it
DESCEND = 10.0  # largest change of a sigma per noise pass before the root is bracketed
TAU_CUT = 0.05  # correlation_time sums the autocorrelations down to this
INPUT_TAU = 10.0  # with unknown inputs, residuals correlated over more readings than this: warned (module doc)


def discretization(f) -> np.ndarray:
    """(2, g): the scheme's error along the solution as accelerations held over a step, for
    the integrator's position rows and velocity rows (:class:`~.factors.Integrator`), from
    the model's accelerations f (N, g) without the inputs (f, a function of the smoothed z
    and zd, is as smooth as the motion; the estimated zdd and inputs carry the noise, and
    a looser integrator would let them roughen further): velocity rows
    RMS(second difference of f) / 12 (the linear-acceleration scheme's dt^3 z^(4) / 12);
    position rows RMS(first difference of f) / 6, the dt^3 z^(3) / 12 by which a
    trajectory of a second-order scheme (the trapezoidal rule of ALI3-P: a simulator's
    truth) differs from this third-order one."""
    if f.shape[0] < 3:
        return np.zeros((2, f.shape[1]))
    return np.vstack([np.sqrt(np.mean(np.diff(f, 1, axis=0) ** 2, axis=0)) / 6.0,
                      np.sqrt(np.mean(np.diff(f, 2, axis=0) ** 2, axis=0)) / 12.0])


def correlation_time(r) -> np.ndarray:
    """(d,) integrated autocorrelation time of residual series r (K, d) in readings,
    tau = 1 + 2 sum_k rho_k over the lags up to the first with rho_k < TAU_CUT (at most K/4):
    K readings whose errors are correlated carry the information of K / tau independent
    ones (an effective sample size)."""
    r = np.asarray(r, dtype=float)
    K, d = r.shape
    out = np.ones(d)
    if K < 8:
        return out
    acf = _acf(r, K // 4)
    for c in range(d):
        rho = acf[1:, c]
        stop = np.flatnonzero(rho < TAU_CUT)
        k = int(stop[0]) if stop.size else rho.size
        out[c] = max(1.0 + 2.0 * float(np.sum(rho[:k])), 1.0)
    return out


def integrated_time(r) -> np.ndarray:
    """(d,) integrated autocorrelation time of series r (K, d) by Geyer's initial monotone
    sequence (Geyer 1992, Practical Markov chain Monte Carlo, sec. 3.3): the sums of
    adjacent pairs Gamma_m = rho_2m + rho_2m+1 are summed while positive, each capped at
    the previous one, tau = -1 + 2 sum Gamma_m (at most K/4 lags). Pairs, not single lags:
    a fit that follows the readings closely leaves a negative lag-1 autocorrelation over a
    slowly varying misfit, which :func:`correlation_time` (stopped at the first small lag)
    misses; that one, tuned for weighting the readings, stays as it is."""
    r = np.asarray(r, dtype=float)
    K, d = r.shape
    out = np.ones(d)
    if K < 8:
        return out
    acf = _acf(r, 2 * (K // 8))
    for c in range(d):
        pairs = acf[0::2, c] + acf[1::2, c]
        stop = np.flatnonzero(pairs <= 0)
        pairs = np.minimum.accumulate(pairs[: int(stop[0]) if stop.size else pairs.size])
        out[c] = max(-1.0 + 2.0 * float(np.sum(pairs)), 1.0)
    return out


def _acf(r, lags: int) -> np.ndarray:
    """(lags, d) autocorrelations of the columns of r (K, d) by FFT."""
    K = r.shape[0]
    x = r - r.mean(axis=0)
    var = np.einsum("kd,kd->d", x, x) / K
    n = 1 << int(np.ceil(np.log2(2 * K)))
    spec = np.fft.rfft(x, n=n, axis=0)
    return np.fft.irfft(spec * np.conj(spec), n=n, axis=0)[:lags] / K / np.maximum(var, 1e-300)


def _sensor_residuals(rows) -> dict:
    """{sensor name: (K, d) whitened residuals in time order} of the obs:* rows."""
    out = {}
    for rb in rows:
        if rb.name.startswith("obs:") and rb.r.size:
            order = np.argsort(rb.idx, kind="stable")
            out[rb.name[4:]] = rb.r[order]
    return out


class _Passes:
    """Levenberg-Marquardt solves of one problem, warm-started, with their totals."""

    def __init__(self, problem, res, opts):
        self.problem, self.res, self.opts = problem, res, opts
        self.passes, self.iterations, self.history = 1, res.iterations, list(res.history)

    def solve(self):
        self.res = levenberg_marquardt(self.problem, self.res.X, options=self.opts)
        self.passes += 1
        self.iterations += self.res.iterations
        self.history += self.res.history

    def factors(self):
        """(variance factors, marginals) at the current solution ({}, None if singular)."""
        try:
            marg, off = self.res.normal.marginals(off_diagonal=True)
        except np.linalg.LinAlgError:
            return {}, None
        return variance_factors(self.res.rows, leverages(self.res.rows, marg, off)), marg


def _estimate(run: _Passes, cfg, sigma_rule, estimated: dict, limit: int):
    """Variance-component passes (module doc) until converged or ``limit`` solves in all:
    (factors, marginals, 'converged' | 'pass limit' | 'not positive definite')."""
    pr = run.problem
    g, m = pr.g, pr.m
    names = list(estimated)
    k_s = sum(int(estimated[n].sum()) for n in names)
    search = SigmaSearch(g + m + k_s, float(cfg.get("noise_tolerance", 0.1)), DESCEND)
    scale = {n: np.asarray(pr.sensor_scale.get(n, np.ones(estimated[n].size)), float).copy() for n in names}
    good = None  # (noise levels, result, factors, marginals) of the last pass whose information was positive definite
    while True:
        factors, marg = run.factors()
        if marg is None:
            if good is None:
                return factors, marg, "not positive definite"
            # the noise levels went below what the normal equations resolve: keep the last good pass
            noise, run.res, factors, marg = good
            pr.set_noise(noise[0], noise[1], noise[2], noise[3])
            return factors, marg, "numerical floor"
        good = ((pr.sigma_a.copy(), pr.sigma_w.copy(), pr.discretization, dict(pr.sensor_scale)), run.res, factors, marg)
        f_eom = np.broadcast_to(factors.get("eom", (np.ones(g),))[0], (g,))
        f_walk = np.broadcast_to(factors["input_walk"][0], (m,)) if m and "input_walk" in factors else np.ones(m)
        f_s = [np.broadcast_to(factors.get("obs:" + n, (np.ones(estimated[n].size),))[0], estimated[n].shape)[estimated[n]]
               for n in names]
        s = np.log(np.concatenate([pr.sigma_a, pr.sigma_w] + [scale[n][estimated[n]] for n in names]))
        phi = np.log(np.maximum(np.concatenate([f_eom, f_walk] + f_s), 1e-300))
        f0 = pr.ev.f - (np.einsum("ngm,nm->ng", pr.ev.G[:, :, :m], run.res.X[:, 3 * g:]) if m else 0.0)
        disc = discretization(f0)
        floor = np.concatenate([FLOOR * np.asarray(sigma_rule, float),
                                1e-9 * np.maximum(np.asarray(pr.inputs.sigma0, float), 1e-9), np.ones(k_s)])
        nxt, done = search.update(s, phi, np.log(floor))
        old = pr.discretization
        if old is None or np.any(np.abs(np.log(np.maximum(disc, 1e-300) / np.maximum(old, 1e-300))) > np.log(2.0)):
            pr.set_noise(discretization=disc)  # the scheme's error moved: the integrator's sigmas with it
            done = False
        if done:
            return factors, marg, "converged"
        if run.passes >= limit:
            return factors, marg, "pass limit"
        pr.set_noise(np.exp(nxt[:g]), np.exp(nxt[g:g + m]))
        k = g + m
        for n in names:
            c = int(estimated[n].sum())
            scale[n][estimated[n]] = np.exp(nxt[k:k + c])
            k += c
        if names:
            pr.set_noise(sensor_scale={**pr.sensor_scale, **scale})
        run.solve()


def solve_with_noise(problem, X0, cfg: dict, sigma_rule, estimated=None) -> tuple:
    """(LMResult, info) of ``problem`` (a SmootherProblem) from X0; estimated: {sensor name:
    (d,) bool} the channels whose sigma is estimated too (those that read accelerations:
    a model error shows in them directly), never below the declared one. Then readings
    whose residuals are correlated in time (correlation time tau > TAU_MIN readings,
    :func:`correlation_time`: quantised encoders on a slow motion, an accelerometer's
    share of a model error) get their variance times tau and the plant noise is estimated
    again with them. info: status, fit, warnings, iterations and history over every pass,
    initial cost, marginals (N, b, b) of the final solution (or None)."""
    estimated = {k: np.asarray(v, bool) for k, v in (estimated or {}).items() if np.any(v)}
    opts = LMOptions(cfg["max_iterations"], cfg["tolerance"])
    if cfg["solver"] == "trf":
        res = scipy_trf(problem, X0, max_nfev=cfg["max_iterations"])
        estimate = False
    else:
        res = levenberg_marquardt(problem, X0, options=opts)
        estimate = cfg.get("noise", "estimate") == "estimate"
    run = _Passes(problem, res, opts)
    limit = int(cfg.get("noise_passes", 8))
    correlated: dict = {}
    if not estimate:
        factors, marg = run.factors()
        noise_status = "fixed"
    else:
        factors, marg, noise_status = _estimate(run, cfg, sigma_rule, estimated, limit)
    verdict = (factors, normalised_cost(run.res.rows, run.res.X.size), run.res.status)
    if estimate and marg is not None:
        tau = {n: correlation_time(r) for n, r in _sensor_residuals(run.res.rows).items()}
        inflate = {n: t for n, t in tau.items() if np.any(t > TAU_MIN)}
        if inflate:  # correlated readings: each carries 1 / tau of an independent one; the plant noise follows
            scale = {n: np.asarray(problem.sensor_scale.get(n, np.ones(t.size)), float) * np.sqrt(np.maximum(t, 1.0))
                     for n, t in inflate.items()}
            problem.set_noise(sensor_scale={**problem.sensor_scale, **scale})
            run.solve()
            correlated = {n: [float(v) for v in t] for n, t in inflate.items()}
            rest = {n: v for n, v in estimated.items() if n not in inflate}
            factors, marg, _ = _estimate(run, cfg, sigma_rule, rest, run.passes + limit)
    res = run.res
    factors_v, chi2, solver_status = verdict
    status, warnings = fit_verdict({k: v for k, v in factors_v.items() if k[4:] not in estimated}, chi2,
                                   solver_status in ("converged", "ftol") and np.isfinite(res.cost))
    unknown = np.array([j not in problem.inputs.sensors for j in range(problem.m)], bool)  # measured: known, not bounded
    if problem.m and unknown.any():
        over = (np.abs(res.X[:, 3 * problem.g:]) > (1.0 + LIMIT_SLACK) * problem.inputs.limit) & unknown
        if np.mean(np.any(over, axis=1)) > LIMIT_SHARE:
            warnings.append(f"the inputs ({', '.join(problem.inputs.names)}) exceed their limits "
                            f"({', '.join(f'{v:g}' for v in problem.inputs.limit)}) at {100 * np.mean(np.any(over, axis=1)):.1f} "
                            "% of the steps: the solution may be a mirror motion or another branch that the unknown "
                            "forces explain")
    tau_g = {n: float(np.max(integrated_time(r))) for n, r in _sensor_residuals(res.rows).items()}
    worst = max(tau_g, key=tau_g.get) if tau_g else None
    cov_scale = 1.0
    if worst and problem.m and unknown.any() and tau_g[worst] > INPUT_TAU:
        cov_scale = tau_g[worst]
        warnings.append(f"readings of {worst} leave residuals correlated over {tau_g[worst]:.3g} readings although "
                        f"the unknown inputs ({', '.join(problem.inputs.names)}) can follow every step: a misfit they "
                        "cannot absorb (an input held between updates?); the covariance is widened by that factor")
        if marg is not None:  # K correlated residuals inform as K / tau independent ones (module doc)
            marg = marg * cov_scale
    ratio = problem.sigma_a / np.maximum(np.asarray(sigma_rule, float), 1e-300)
    if estimate and np.any(ratio > PLAUSIBLE):
        warnings.append(f"estimated acceleration noise {', '.join(f'{v:.3g}' for v in problem.sigma_a)} is "
                        f"{float(np.max(ratio)):.0f} x the rule's: forces the model lacks (a motor? declare it as an "
                        "input or in rule.force_limits) or a wrong branch")
    if status == "converged" and warnings:  # an implausible solution is not called converged either
        status = "poor fit"
    fit = {"normalised_cost": chi2, "noise": noise_status, "noise_passes": run.passes,
           "acceleration_sigma": [float(v) for v in problem.sigma_a],
           "input_walk_sigma": [float(v) for v in problem.sigma_w],
           "sensor_sigma_scale": {k: [float(x) for x in v] for k, v in problem.sensor_scale.items()},
           "correlated_readings": correlated, "residual_correlation_time": tau_g, "covariance_scale": cov_scale,
           "factors": {k: [float(x) for x in np.atleast_1d(v[0])] for k, v in factors_v.items()}}
    return res, {"status": status, "warnings": warnings, "fit": fit, "iterations": run.iterations,
                 "history": run.history, "initial_cost": float(run.history[0]) if run.history else float("nan"),
                 "marginals": marg}
