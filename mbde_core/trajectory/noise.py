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
TAU_CUT = 0.05  # the correlation time sums the autocorrelations down to this
TAU_MIN = 1.5  # readings with a longer correlation time (in readings) get their variance times it
DESCEND = 10.0  # largest change of a sigma per noise pass before the root is bracketed


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
    x = r - r.mean(axis=0)
    var = np.einsum("kd,kd->d", x, x) / K
    n = 1 << int(np.ceil(np.log2(2 * K)))
    spec = np.fft.rfft(x, n=n, axis=0)
    acf = np.fft.irfft(spec * np.conj(spec), n=n, axis=0)[: K // 4] / K / np.maximum(var, 1e-300)
    for c in range(d):
        rho = acf[1:, c]
        stop = np.flatnonzero(rho < TAU_CUT)
        k = int(stop[0]) if stop.size else rho.size
        out[c] = max(1.0 + 2.0 * float(np.sum(rho[:k])), 1.0)
    return out


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
           "correlated_readings": correlated,
           "factors": {k: [float(x) for x in np.atleast_1d(v[0])] for k, v in factors_v.items()}}
    return res, {"status": status, "warnings": warnings, "fit": fit, "iterations": run.iterations,
                 "history": run.history, "initial_cost": float(run.history[0]) if run.history else float("nan"),
                 "marginals": marg}
