"""Options of the particle filter (config/estimators/pf.yaml): defaults and validation.

Every option is documented in pf.yaml; ``null`` values are derived from the mechanism and
its sensors when the filter is built (:mod:`mbde_core.estimators.particle.scales`). Errors name
the file and the key path (:class:`mbde_core.errors.ConfigError`).
"""
from __future__ import annotations

import math

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.particle.refine import REFINE_DEFAULTS, check_refine
from mbde_core.estimators.particle.resampling import SCHEMES
from mbde_core.expr import ExpressionError, evaluate_value

PF_INTEGRATORS = ("rk4", "euler", "trapezoidal", "midpoint", "symplectic_euler")
INIT_MODES = ("uniform", "gaussian")
PROPOSALS = ("adapted", "prior")
LOG_UNDERFLOW = -745.0  # log of the smallest positive double (4.9e-324)

DEFAULTS = {
    "particles": None,                # N while tracking; null: 300 per degree of freedom (pf_scale)
    "integrator": "rk4",              # rk4 | euler | trapezoidal | midpoint | symplectic_euler
    "acceleration_sigma": None,       # sigma_a on zdd [unit/s^2]; null: from the mechanism (pf_scale)
    "proposal": "adapted",            # adapted: the noise drawn given the readings | prior (paper 000)
    "sensor_sigma": {},               # sensor name -> assumed standard deviation [SI]
    "sensor_sigma_by_type": {         # per sensor type; null: the sensor's noise model
        "encoder": None,
        "gyroscope": None,
        "accelerometer": None,
        "slider_position": None,
        "imu": None,
    },
    "gate": 0.999999,                 # likelihood gate (chi-square probability, 0 = off), as the Kalman observers': see pf_gate
    "init": "uniform",                # uniform (eq. 22) | gaussian (around the given initial state)
    "uniform": {
        "z": [],                      # [lo, hi] or g pairs; []: angles [-pi, pi), others q0 +/- longest body
        "zd": [],                     # [unit/s]; []: the energy bound of pf_scale
        "zdd": [],                    # [unit/s^2]; []: f(z, zd) + N(0, sigma_a^2)
        "branches": [],               # labels; []: every branch found
        "velocity_proposal": True,    # zd drawn from the first velocity readings (gyroscopes)
        "position_proposal": True,    # z drawn from the first position readings (encoders)
        "particles": None,            # particles of a uniform (re)initialisation; null: pf_scale; 0: ``particles``
        "anneal": None,               # [s] tempered likelihood after a uniform (re)initialisation; null: pf_scale
    },
    "initial_sigma": {"z": 0.05, "zd": 0.5},  # gaussian init: standard deviations [unit], [unit/s]
    "resampling": {"scheme": "systematic", "ess_threshold": 0.5},
    "regularisation": {"enabled": True, "bandwidth": 0.5},  # Musso et al. 2001 kernel after resampling
    "recovery": {"enabled": True, "log_likelihood_floor": LOG_UNDERFLOW, "ess_fraction": 0.05, "time": 0.5,
                 "lock_nis": 3.0, "lock_time": 0.5, "inject": 0.1},
    "branch_check": True,             # relabel particles whose q left their branch (counted)
    "threads": None,                  # propagation threads; null: MBDE_PF_THREADS or the CPU count (pf_parallel)
    "refine": dict(REFINE_DEFAULTS),  # a Gaussian observer follows the converged cloud (pf_refine)
}


def ranges(value, g: int | None, file: str, where: str):
    """Parse a range option: [] (default: None), [lo, hi] (every coordinate) or one
    [lo, hi] pair per independent coordinate. Returns (lo (g,), hi (g,)) or None; with
    g None (DOF unknown) only the form is checked and g is taken from the value."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return None

    def num(x, path):
        try:
            v = float(evaluate_value(x, None))
        except (ExpressionError, TypeError, ValueError) as exc:
            raise ConfigError(file, path, f"expected a number, got {x!r} ({exc})") from None
        if not math.isfinite(v):
            raise ConfigError(file, path, f"must be finite, got {v}")
        return v

    form = f"expected [lo, hi] or a list of {g if g is not None else 'g'} [lo, hi] pairs, got {value!r}"
    if not isinstance(value, (list, tuple)):
        raise ConfigError(file, where, form)
    if len(value) == 2 and not any(isinstance(v, (list, tuple)) for v in value):
        pairs, single = [value] * (g or 1), True
    elif all(isinstance(v, (list, tuple)) and len(v) == 2 for v in value) and (g is None or len(value) == g):
        pairs, single = list(value), False
    else:
        raise ConfigError(file, where, form)
    lo, hi = [], []
    for k, (a, b) in enumerate(pairs):
        path = where if single else f"{where}[{k}]"
        a, b = num(a, path), num(b, path)
        if not b >= a:
            raise ConfigError(file, path, f"needs lo <= hi, got [{a:g}, {b:g}]")
        lo.append(a)
        hi.append(b)
    return np.array(lo), np.array(hi)


def _count(value, file, where, minimum):
    if value is None:
        return
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value == int(value) and value >= minimum):
        raise ConfigError(file, where, f"must be an integer >= {minimum} (or null: derived), got {value!r}")


def check_config(cfg: dict, file: str = "<config>", path: str = "pf", g: int | None = None) -> None:
    """Validate PF options (ConfigError naming file and key path). g: DOF if known."""
    _count(cfg.get("particles"), file, f"{path}.particles", 1)
    _count(cfg.get("threads"), file, f"{path}.threads", 1)
    if cfg["integrator"] not in PF_INTEGRATORS:
        raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(PF_INTEGRATORS)}")
    sa = cfg["acceleration_sigma"]
    if sa is not None and not sa >= 0:
        raise ConfigError(file, f"{path}.acceleration_sigma", f"must be >= 0 (or null: derived), got {sa}")
    if cfg.get("proposal", "adapted") not in PROPOSALS:
        raise ConfigError(file, f"{path}.proposal", f"must be one of {', '.join(PROPOSALS)}")
    if cfg["init"] not in INIT_MODES:
        raise ConfigError(file, f"{path}.init", f"must be one of {', '.join(INIT_MODES)}")
    for key, value in cfg["sensor_sigma_by_type"].items():
        if value is not None and not value > 0:
            raise ConfigError(file, f"{path}.sensor_sigma_by_type.{key}", f"must be > 0 (or null), got {value}")
    res = cfg["resampling"]
    if res["scheme"] not in SCHEMES:
        raise ConfigError(file, f"{path}.resampling.scheme", f"must be one of {', '.join(SCHEMES)}")
    if not 0.0 <= res["ess_threshold"] <= 1.0:
        raise ConfigError(file, f"{path}.resampling.ess_threshold", f"a fraction of the particle count in [0, 1], got {res['ess_threshold']}")
    reg = cfg.get("regularisation", DEFAULTS["regularisation"])
    if not reg["bandwidth"] >= 0:
        raise ConfigError(file, f"{path}.regularisation.bandwidth", f"must be >= 0, got {reg['bandwidth']}")
    rec = cfg["recovery"]
    if not 0.0 <= rec["ess_fraction"] <= 1.0:
        raise ConfigError(file, f"{path}.recovery.ess_fraction", f"a fraction in [0, 1], got {rec['ess_fraction']}")
    for key in ("time", "lock_time"):
        if not rec.get(key, 0.0) >= 0:
            raise ConfigError(file, f"{path}.recovery.{key}", f"must be >= 0, got {rec[key]}")
    if not rec["log_likelihood_floor"] < 0:
        raise ConfigError(file, f"{path}.recovery.log_likelihood_floor", f"must be < 0, got {rec['log_likelihood_floor']}")
    if not rec.get("lock_nis", 0.0) >= 0:
        raise ConfigError(file, f"{path}.recovery.lock_nis", f"must be >= 0 (0: off), got {rec['lock_nis']}")
    if not 0.0 < rec.get("inject", 0.5) <= 1.0:
        raise ConfigError(file, f"{path}.recovery.inject", f"a fraction in (0, 1], got {rec['inject']}")
    uni = cfg["uniform"]
    for key in ("z", "zd", "zdd"):
        ranges(uni[key], g, file, f"{path}.uniform.{key}")
    _count(uni.get("particles"), file, f"{path}.uniform.particles", 0)
    if uni.get("anneal") is not None and not uni["anneal"] >= 0:
        raise ConfigError(file, f"{path}.uniform.anneal", f"must be >= 0 [s], got {uni['anneal']}")
    check_refine(cfg, file, path)
    br = uni["branches"]
    if not isinstance(br, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in br):
        raise ConfigError(file, f"{path}.uniform.branches", f"expected a list of branch labels (integers >= 0), got {br!r}")
