"""Fit an observer's plant-noise density (and sensor sigmas) by maximum innovation likelihood.

Prediction-error method (Ljung 1999 ch. 7): theta maximises the innovation
log-likelihood of :mod:`~mbde_core.tuning.likelihood`, each evaluation one filter run
over the readings. The parameters are log10 factors on the starting values (the
config's, by default the default-tuning rule's, :mod:`~mbde_core.estimators.options.rule`):

- f_q on the plant noise (``acceleration_psd`` and ``velocity_psd`` scaled together, all
  coordinates by the same factor: the rule fixes their ratios);
- with ``sensors_sigma``: one f_s per sensor on its sigma (all its channels).

Search (scipy.optimize, bounded, in log space): the likelihood of a local observer is not
unimodal in f_q (with too much plant noise a gyroscope-only filter can follow a wrong
motion that explains the readings, see README), so a coarse grid of ``GRID`` points over
``BOUNDS`` decades first, then Brent's bounded method (``minimize_scalar``) within one
grid cell of the best point (to ``XATOL`` decades); the sensor factors then join in a
bounded Powell search (``minimize``) started there. Each run is deterministic (seeded), so
the objective is a smooth-enough function of theta for both.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.tuning.likelihood import InnovationFit, innovation_fit

BOUNDS = (-3.0, 3.0)   # decades of f_q around the starting value
GRID = 9               # grid points over BOUNDS
XATOL = 0.05           # decades
SENSOR_BOUNDS = 1.5    # decades of f_s
BIG = 1e30             # objective of a failed run


@dataclass
class TuneResult:
    """One estimator's fit: start and tuned (resolved, frozen) options, their fits, the factors
    (log10 f_q, log10 f_s per sensor), evaluations, process time [s]."""

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


def tune(source, readings, name: str, cfg, sensors_sigma: bool = False, seed: int = 0,
         log=None) -> TuneResult:
    """Fit estimator ``name`` (resolved, frozen options ``cfg``) to ``readings`` (module doc)."""
    from scipy.optimize import minimize, minimize_scalar

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    sensors = list(source.sensors)
    sigmas = sensor_sigmas(cfg, sensors)
    names = [s.name for s in sensors]
    history = []
    cache = {}

    def evaluate(log_q, log_s=None) -> InnovationFit:
        key = (round(float(log_q), 10),) + tuple(round(float(v), 10) for v in (log_s or {}).values())
        if key not in cache:
            fit = innovation_fit(source, readings, name, scaled(cfg, log_q, log_s, sigmas), seed)
            cache[key] = fit
            history.append((key, fit.per_reading))
            if log is not None:
                log(f"  {name}: log10 factors {', '.join(f'{v:+.2f}' for v in key)}: log-likelihood "
                    f"{fit.per_reading:.4f} per reading, NIS/dof {fit.nis_per_channel:.3g}")
        return cache[key]

    def cost(fit: InnovationFit) -> float:
        return -fit.per_reading if math.isfinite(fit.per_reading) else BIG

    before = evaluate(0.0)
    grid = np.linspace(BOUNDS[0], BOUNDS[1], GRID)
    costs = [cost(evaluate(x)) for x in grid]
    k = int(np.argmin(costs))
    cell = (grid[1] - grid[0])
    lo, hi = max(BOUNDS[0], grid[k] - cell), min(BOUNDS[1], grid[k] + cell)
    res = minimize_scalar(lambda x: cost(evaluate(x)), bounds=(lo, hi), method="bounded",
                          options={"xatol": XATOL, "maxiter": 20})
    best_q = float(res.x) if res.fun <= costs[k] else float(grid[k])
    best_s = None
    if sensors_sigma:
        x0 = np.concatenate([[best_q], np.zeros(len(names))])
        bounds = [(best_q - 1.0, best_q + 1.0)] + [(-SENSOR_BOUNDS, SENSOR_BOUNDS)] * len(names)
        r = minimize(lambda x: cost(evaluate(x[0], dict(zip(names, x[1:])))), x0, method="Powell",
                     bounds=bounds, options={"xtol": XATOL, "ftol": 1e-6, "maxfev": 40 * len(x0)})
        if r.fun < cost(evaluate(best_q)):
            best_q, best_s = float(r.x[0]), dict(zip(names, (float(v) for v in r.x[1:])))
    tuned = scaled(cfg, best_q, best_s, sigmas)
    after = evaluate(best_q, best_s)
    factors = {"plant_noise": best_q, **({f"sensor_sigma.{n}": v for n, v in best_s.items()} if best_s else {})}
    return TuneResult(name, cfg, tuned, before, after, factors, len(cache), time.process_time() - t_cpu,
                      time.perf_counter() - t_wall, history)
