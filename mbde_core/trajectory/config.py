"""Options of the batch smoother: the ``smoother:`` section of an estimator config file.

    smoother:
      step: 0.005                     # grid step [s] (the filters' step: same stamps)
      plant_noise: {acceleration_psd: 1.0}   # q_a [unit^2/s^3]; eom sigma_a = sqrt(q_a / step)
      initial_sigma: {z: 0.05, zd: 0.5}      # prior of [z_0, zd_0] around the initial guess
      sensor_sigma: {}                # sensor name -> sigma assumed (default: noise model)
      integrator: linear_acceleration # linear_acceleration | trapezoidal | euler (factor phi_i)
      integrator_relaxation: 1.0e-3   # phi_i sigmas relative to one step of sigma_a
      initial_guess: errorekf         # forward filter giving the initial guess (its own
                                      # section of the file, or its defaults)
      max_iterations: 50
      tolerance: 1.0e-4               # stop: step^T A step <= tolerance (posterior units)
      solver: lm                      # lm (banded Levenberg-Marquardt) | trf (scipy)
      covariance: true                # marginal covariances of [z, zd]
      window: 0.0                     # [s] > 0: overlapping windows of this length (long runs,
                                      # bounded memory; mbde_core/trajectory/windowed.py)
      overlap: 2.0                    # [s] margin solved on each side of a window, then dropped
"""
from __future__ import annotations

import copy

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError

DEFAULTS = {
    "step": 0.005,
    "plant_noise": {"acceleration_psd": 1.0},
    "initial_sigma": {"z": 0.05, "zd": 0.5},
    "sensor_sigma": {},
    "integrator": "linear_acceleration",
    "integrator_relaxation": 1.0e-3,
    "initial_guess": "errorekf",
    "max_iterations": 50,
    "tolerance": 1.0e-4,
    "solver": "lm",
    "covariance": True,
    "window": 0.0,
    "overlap": 2.0,
}


def smoother_defaults() -> dict:
    return copy.deepcopy(DEFAULTS)


def validate_smoother(options, file: str = "<config>", path: str = "smoother") -> dict:
    """Defaults merged with ``options`` and checked (ConfigError naming file and key)."""
    from mbde_core.estimators.options.schema import merge_options
    from mbde_core.estimators.registry import names as estimator_names
    from mbde_core.trajectory.factors import SCHEMES

    cfg = merge_options(Node(options or {}, file, path), DEFAULTS)

    def bad(key, msg):
        raise ConfigError(file, f"{path}.{key}", msg)

    for key in ("step", "integrator_relaxation", "tolerance"):
        if not cfg[key] > 0:
            bad(key, f"must be > 0, got {cfg[key]}")
    for group in ("plant_noise", "initial_sigma"):
        for key, value in cfg[group].items():
            if value is None or not value > 0:
                bad(f"{group}.{key}", f"must be > 0, got {value}")
    if cfg["integrator"] not in SCHEMES:
        bad("integrator", f"must be one of {', '.join(SCHEMES)}")
    if cfg["initial_guess"] not in estimator_names():
        bad("initial_guess", f"must be one of {', '.join(estimator_names())}")
    if cfg["solver"] not in ("lm", "trf"):
        bad("solver", "must be lm or trf")
    if not (isinstance(cfg["max_iterations"], (int, float)) and cfg["max_iterations"] >= 1):
        bad("max_iterations", f"must be >= 1, got {cfg['max_iterations']}")
    cfg["max_iterations"] = int(cfg["max_iterations"])
    for key in ("window", "overlap"):
        if cfg[key] < 0:
            bad(key, f"must be >= 0, got {cfg[key]}")
    if 0 < cfg["window"] < 2 * cfg["step"]:
        bad("window", f"must be 0 (whole run) or at least two steps, got {cfg['window']}")
    return cfg


def load_smoother_config(path) -> tuple[dict, object]:
    """(smoother options, the validated options (a Spec) of its initial-guess filter) from
    an estimator config file (None: defaults)."""
    from mbde_core.estimators.configure import validate

    if path is None:
        cfg = smoother_defaults()
        return cfg, validate(cfg["initial_guess"], None, "<defaults>")
    root = read_yaml(path)
    root.mapping()
    cfg = validate_smoother(root.get("smoother").value if root.has("smoother") else {}, root.file, "smoother")
    name = cfg["initial_guess"]
    guess = validate(name, root.get(name).value if root.has(name) else None, root.file, name)
    return cfg, guess
