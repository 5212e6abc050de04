"""Fit an estimator's plant noise (and a Kalman observer's sensor sigmas) by maximum likelihood
of the readings, and keep it only if it predicts held-out readings better than the start.

Prediction-error method (Ljung 1999 ch. 7): theta maximises the log-likelihood of
:mod:`~mbde_core.tuning.likelihood` (a Kalman observer's innovations, a particle filter's
marginal likelihood), each evaluation one filter run over the *fit* readings. The
parameters are log10 factors on the starting values (the config's, by default the
default-tuning rule's, :mod:`~mbde_core.estimators.options.rule`):

- f_q on the plant noise: a Kalman observer's ``acceleration_psd`` and ``velocity_psd``
  scaled together (all coordinates by the same factor: the rule fixes their ratios); a
  particle filter's variance ``acceleration_sigma^2`` (its own step's, as the filter adds
  N(0, sigma_a^2) to zdd over each step);
- with ``sensors_sigma`` (Kalman observers): one f_s per sensor on its sigma.

Search (scipy.optimize, bounded, in log space): the likelihood of a local observer is not
unimodal in f_q (with too much plant noise a gyroscope-only filter can follow a wrong
motion that explains the readings), so a coarse grid first (``GRID`` points over
``BOUNDS`` decades; a particle filter: ``PF_GRID`` over ``PF_BOUNDS``, its Monte Carlo
score is not smooth enough for a local method). When the best grid point is at an end the
grid is widened by its own span on that side (up to ``WIDEN`` times), and the result says
so when the optimum still is at the end (``edge``: the readings favour a factor beyond
any tried, e.g. no plant noise at all for an exact model). Kalman observers: then Brent's
bounded method (``minimize_scalar``) within one grid cell of the best point (to ``XATOL``
decades); the sensor factors join in a bounded Powell search (``minimize``) started there.
Each run is deterministic (seeded).

Hold-out (:func:`tune`): the fit uses the readings up to ``split``; the start and the fitted
options then both run over all the readings and are scored on those after ``split`` only
(one-step predictions of readings the fit never saw). The fitted options are kept only if
their held-out score is higher; otherwise the start is (``decision``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.estimators import make_estimator
from mbde_core.estimators.registry import traits
from mbde_core.tuning.likelihood import InnovationFit, innovation_fit

BOUNDS = (-3.0, 3.0)   # decades of f_q around the starting value
GRID = 9               # grid points over BOUNDS
PF_BOUNDS = (-2.0, 2.0)  # decades of a particle filter's sigma_a^2
PF_GRID = 9
WIDEN = 1              # times the grid may grow by its own span on the side of its best end
XATOL = 0.05           # decades
SENSOR_BOUNDS = 1.5    # decades of f_s
BIG = 1e30             # objective of a failed run


@dataclass
class TuneResult:
    """One estimator's fit: start and tuned (resolved, frozen) options, the fit-part scores
    (``before``: the start, ``after``: the optimum), the held-out scores (``held_start``,
    ``held_tuned``), ``decision`` ("tuned" or "start": what ``chosen`` holds), the factors
    (log10 f_q, log10 f_s per sensor), ``edge`` (None, "lower" or "upper": the optimum at
    that end of the widened grid), ``searched`` (log10 range of the grid), ``step`` [s]
    (the estimator's resolved step), evaluations, process time [s]."""

    name: str
    start: object
    tuned: object
    before: InnovationFit
    after: InnovationFit
    log_factors: dict = field(default_factory=dict)
    evaluations: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    history: list = field(default_factory=list)  # [(theta, loglik per reading)]
    held_start: InnovationFit | None = None
    held_tuned: InnovationFit | None = None
    decision: str = "tuned"
    edge: str | None = None
    searched: tuple = BOUNDS
    widened: int = 0
    step: float = float("nan")
    start_sigma_a: float | None = None   # a particle filter's starting acceleration_sigma

    @property
    def chosen(self):
        return self.tuned if self.decision == "tuned" else self.start


def sensor_sigmas(options, sensors) -> dict:
    """{sensor: sigma per channel (d,)} the observer assumes: the option, else the noise model."""
    out = {}
    for s in sensors:
        v = options.sensor_sigma.get(s.name)
        out[s.name] = np.sqrt(np.asarray(s.noise.variance(), float) * np.ones(s.dim)) if v is None \
            else np.asarray(v, float) * np.ones(s.dim)
    return out


def scaled(options, log_q: float, log_s: dict | None = None, sigmas: dict | None = None):
    """The (frozen) options with the plant noise x 10^log_q and each sensor's sigma x 10^log_s[name]."""
    f = 10.0 ** log_q
    pn = options.plant_noise
    changes = {"plant_noise": pn.replace(**{
        key: [float(x) * f for x in v] if isinstance(v, tuple) else float(v) * f
        for key, v in (("acceleration_psd", pn.acceleration_psd), ("velocity_psd", pn.velocity_psd))})}
    if log_s:
        ss = dict(options.sensor_sigma)
        for name, ls in log_s.items():
            ss[name] = [float(x) * 10.0 ** ls for x in sigmas[name]]
        changes["sensor_sigma"] = ss
    return options.replace(**changes)


def pf_sigma(source, name: str, options) -> float:
    """A particle filter's acceleration_sigma: the option, else the one it derives from its model."""
    sa = options.acceleration_sigma
    if sa is not None:
        return float(sa)
    return float(make_estimator(name, source.mechanism, source.sensors, options).sigma_a)


def grid_search(cost, bounds: tuple, points: int, widen: int = WIDEN):
    """Best of a grid over ``bounds`` (log10), grown by its span on the side of a best end up to
    ``widen`` times. Returns (best x, its cost, cell width, searched bounds, times widened,
    edge: None / "lower" / "upper")."""
    lo, hi = bounds
    xs = list(np.linspace(lo, hi, points))
    cell = xs[1] - xs[0]
    costs = {x: cost(x) for x in xs}
    grown = 0
    while True:
        best = min(costs, key=costs.get)
        lo, hi = min(costs), max(costs)
        side = "lower" if best == lo else "upper" if best == hi else None
        if side is None or grown >= widen:
            return best, costs[best], cell, (lo, hi), grown, side
        sign, end = (-1.0, lo) if side == "lower" else (1.0, hi)
        new = [end + sign * k * cell for k in range(1, points)]
        costs.update({x: cost(x) for x in new})
        grown += 1


def _cost(fit: InnovationFit) -> float:
    return -fit.per_reading if math.isfinite(fit.per_reading) else BIG


def tune(source, readings, name: str, cfg, sensors_sigma: bool = False, seed: int = 0,
         log=None, split: float | None = None) -> TuneResult:
    """Fit estimator ``name`` (resolved, frozen options ``cfg``) to the ``readings`` up to stamp
    ``split`` and judge it on those after it (module doc); ``split`` None: fit on all, no hold-out."""
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    particle = traits(name).noise_rule == "particle"
    fit_readings = readings if split is None else [m for m in readings if m.stamp <= split]
    sensors = list(source.sensors)
    sigmas = sensor_sigmas(cfg, sensors)
    names = [s.name for s in sensors]
    sigma_a = pf_sigma(source, name, cfg) if particle else None
    history = []
    cache = {}

    def options(log_q, log_s=None):
        if particle:
            return cfg.replace(acceleration_sigma=sigma_a * 10.0 ** (0.5 * log_q))
        return scaled(cfg, log_q, log_s, sigmas)

    def evaluate(log_q, log_s=None) -> InnovationFit:
        key = (round(float(log_q), 10),) + tuple(round(float(v), 10) for v in (log_s or {}).values())
        if key not in cache:
            fit = innovation_fit(source, fit_readings, name, options(log_q, log_s), seed)
            cache[key] = fit
            history.append((key, fit.per_reading))
            if log is not None:
                log(f"  {name}: log10 factors {', '.join(f'{v:+.2f}' for v in key)}: log-likelihood "
                    f"{fit.per_reading:.4f} per reading, NIS/dof {fit.nis_per_channel:.3g}")
        return cache[key]

    before = evaluate(0.0)
    bounds, points = (PF_BOUNDS, PF_GRID) if particle else (BOUNDS, GRID)
    best_q, best_cost, cell, searched, grown, edge = grid_search(lambda x: _cost(evaluate(x)), bounds, points)
    best_s = None
    if not particle:
        from scipy.optimize import minimize, minimize_scalar

        lo, hi = max(searched[0], best_q - cell), min(searched[1], best_q + cell)
        res = minimize_scalar(lambda x: _cost(evaluate(x)), bounds=(lo, hi), method="bounded",
                              options={"xatol": XATOL, "maxiter": 20})
        best_q = float(res.x) if res.fun <= best_cost else float(best_q)
        if sensors_sigma:
            x0 = np.concatenate([[best_q], np.zeros(len(names))])
            bnds = [(best_q - 1.0, best_q + 1.0)] + [(-SENSOR_BOUNDS, SENSOR_BOUNDS)] * len(names)
            r = minimize(lambda x: _cost(evaluate(x[0], dict(zip(names, x[1:])))), x0, method="Powell",
                         bounds=bnds, options={"xtol": XATOL, "ftol": 1e-6, "maxfev": 40 * len(x0)})
            if r.fun < _cost(evaluate(best_q)):
                best_q, best_s = float(r.x[0]), dict(zip(names, (float(v) for v in r.x[1:])))
    tuned = options(best_q, best_s)
    after = evaluate(best_q, best_s)
    factors = {"plant_noise": float(best_q), **({f"sensor_sigma.{n}": v for n, v in best_s.items()} if best_s else {})}
    result = TuneResult(name, cfg, tuned, before, after, factors, 0, 0.0, 0.0, history, edge=edge, searched=searched,
                        widened=grown, step=float(cfg.step), start_sigma_a=sigma_a)
    same = best_q == 0.0 and not best_s  # the optimum is the start itself
    if split is not None:
        result.held_start = innovation_fit(source, readings, name, cfg, seed, score_from=split)
        result.held_tuned = result.held_start if same else innovation_fit(source, readings, name, tuned, seed,
                                                                           score_from=split)
        result.decision = "tuned" if result.held_tuned.per_reading > result.held_start.per_reading else "start"
    elif same:
        result.decision = "start"
    result.evaluations = len(cache) + (0 if split is None else 1 if same else 2)
    result.cpu_s, result.wall_s = time.process_time() - t_cpu, time.perf_counter() - t_wall
    return result
