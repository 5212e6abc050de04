"""Options of the batch smoother: the ``smoother:`` section of an estimator config file.

    smoother:
      step: auto                      # grid step [s]; auto: the filters' rule (the fastest sensor's
                                      # period split into steps of <= 5 ms): the filters' stamps
      plant_noise: {acceleration_psd: auto}  # q_a [unit^2/s^3] to start from (auto: the default-tuning
                                      # rule's), eom sigma_a = sqrt(q_a / step); then estimated (noise)
      noise: estimate                 # estimate (sigma_a and the input walk from the residuals,
                                      # mbde_core/trajectory/calibration.py) | fixed (as configured)
      noise_passes: 8                 # solves of the noise estimation at most
      noise_tolerance: 0.1            # stop when every estimated sigma moves less than this fraction
      inputs: auto                    # unknown generalized forces as states: auto (one per force-limited
                                      # coordinate of the rule: a scenario's motor, rule.force_limits) |
                                      # none | [coordinate, {coordinate, limit, psd}]; measured torques
                                      # (effort sensors) always are inputs, with their readings
      rule: {model_error: 0.1, force_limits: {}}   # the default-tuning rule's inputs
      initial_sigma: {z: auto, zd: auto}     # prior of [z_0, zd_0] around the initial guess
      sensor_sigma: {}                # sensor name -> sigma assumed (default: noise model)
      integrator: linear_acceleration # linear_acceleration | trapezoidal | euler (factor phi_i)
      integrator_relaxation: 0.1      # phi_i sigmas relative to one step of sigma_a (hypot the scheme's error)
      initial_guess: errorekf         # forward filter giving the initial guess (its own
                                      # section of the file, or its defaults)
      max_iterations: 50
      tolerance: 1.0e-4               # stop: step^T A step <= tolerance (posterior units)
      solver: lm                      # lm (banded Levenberg-Marquardt) | trf (scipy)
      covariance: true                # marginal covariances of [z, zd]
      window: 0.0                     # [s] > 0: overlapping windows of this length (long runs,
                                      # bounded memory; mbde_core/trajectory/windowed.py)
      overlap: 2.0                    # [s] margin solved on each side of a window, then dropped

:func:`resolve_smoother` replaces every ``auto`` by the default-tuning rule
(:mod:`mbde_core.estimators.options.rule`) for the model, its sensors and a scenario's
motor (the same numbers the filters get).
"""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.estimators.options.rule import SIGMA_Z, SIGMA_ZD, auto_psd, auto_step, force_limits, rule_scales
from mbde_core.estimators.configure import validate
from mbde_core.estimators.options.schema import merge_options
from mbde_core.estimators.registry import names as estimator_names
from mbde_core.trajectory.factors import SCHEMES

AUTO = "auto"
DEFAULTS = {
    "step": AUTO,
    "plant_noise": {"acceleration_psd": AUTO},
    "noise": "estimate",
    "noise_passes": 8,
    "noise_tolerance": 0.1,
    "inputs": AUTO,
    "rule": {"model_error": 0.1, "force_limits": {}},
    "initial_sigma": {"z": AUTO, "zd": AUTO},
    "sensor_sigma": {},
    "integrator": "linear_acceleration",
    "integrator_relaxation": 0.1,
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


def _positive_or_auto(value) -> bool:
    if value == AUTO:
        return True
    vals = value if isinstance(value, list) else [value]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vals) and len(vals) > 0


def validate_smoother(options, file: str = "<config>", path: str = "smoother") -> dict:
    """Defaults merged with ``options`` and checked (ConfigError naming file and key)."""
    cfg = merge_options(Node(options or {}, file, path), DEFAULTS)

    def bad(key, msg):
        raise ConfigError(file, f"{path}.{key}", msg)

    if not _positive_or_auto(cfg["step"]) or isinstance(cfg["step"], list):
        bad("step", f"must be > 0 or auto, got {cfg['step']}")
    for key in ("integrator_relaxation", "tolerance", "noise_tolerance"):
        if not cfg[key] > 0:
            bad(key, f"must be > 0, got {cfg[key]}")
    for group in ("plant_noise", "initial_sigma"):
        for key, value in cfg[group].items():
            if value is None or not _positive_or_auto(value):
                bad(f"{group}.{key}", f"must be > 0 (or auto), got {value}")
    if cfg["noise"] not in ("estimate", "fixed"):
        bad("noise", "must be estimate or fixed")
    if cfg["integrator"] not in SCHEMES:
        bad("integrator", f"must be one of {', '.join(SCHEMES)}")
    if cfg["initial_guess"] not in estimator_names():
        bad("initial_guess", f"must be one of {', '.join(estimator_names())}")
    if cfg["solver"] not in ("lm", "trf"):
        bad("solver", "must be lm or trf")
    for key, lo in (("max_iterations", 1), ("noise_passes", 1)):
        if isinstance(cfg[key], bool) or not (isinstance(cfg[key], (int, float)) and cfg[key] >= lo):
            bad(key, f"must be >= {lo}, got {cfg[key]}")
        cfg[key] = int(cfg[key])
    if not (cfg["inputs"] in (AUTO, "none") or isinstance(cfg["inputs"], list)):
        bad("inputs", f"auto, none or a list of coordinates, got {cfg['inputs']!r}")
    for key in ("window", "overlap"):
        if cfg[key] < 0:
            bad(key, f"must be >= 0, got {cfg[key]}")
    if cfg["step"] != AUTO and 0 < cfg["window"] < 2 * cfg["step"]:
        bad("window", f"must be 0 (whole run) or at least two steps, got {cfg['window']}")
    return cfg


class _SmootherRule:
    """The smoother as the default-tuning rule sees an estimator class: second-order local
    errors of its trapezoid / Newmark scheme (orders (2, 2)), not the ADE-KF's family."""

    traits = SimpleNamespace(noise_rule="smoother")

    @staticmethod
    def transition_orders(cfg) -> tuple[int, int]:
        return 2, 2


def resolve_smoother(cfg: dict, mech, sensors, context=None) -> dict:
    """A copy of validated options with ``auto`` replaced by the default-tuning rule for
    the model, its sensors and the rule context (a scenario's motor); idempotent."""
    out = copy.deepcopy(cfg)
    sc = None

    def scales():
        nonlocal sc
        if sc is None:
            sc = rule_scales(mech, out, context)
        return sc

    if out["step"] == AUTO:
        out["step"] = float(auto_step(scales(), list(sensors) + list(getattr(sensors, "inputs", []))))
    if out["window"] and 0 < out["window"] < 2 * out["step"]:
        raise ConfigError("<smoother config>", "smoother.window", f"must be at least two steps ({2 * out['step']:g} s)")
    pn = out["plant_noise"]
    if pn.get("acceleration_psd") == AUTO:
        covered = None
        if out["inputs"] == AUTO:
            covered = force_limits(mech, out, context) > 0
        q, _ = auto_psd(_SmootherRule, out, scales(), float(out["step"]), covered)
        pn["acceleration_psd"] = [float(v) for v in np.atleast_1d(q)]
    sig = out["initial_sigma"]

    if sig.get("z") == AUTO:
        sig["z"] = [float(v) for v in SIGMA_Z * scales().ell]
    if sig.get("zd") == AUTO:
        sig["zd"] = [float(v) for v in SIGMA_ZD * scales().v]
    return out


def load_smoother_config(path) -> tuple[dict, object]:
    """(smoother options, the validated options (a Spec) of its initial-guess filter) from
    an estimator config file (None: defaults)."""
    if path is None:
        cfg = smoother_defaults()
        return cfg, validate(cfg["initial_guess"], None, "<defaults>")
    root = read_yaml(path)
    root.mapping()
    cfg = validate_smoother(root.get("smoother").value if root.has("smoother") else {}, root.file, "smoother")
    name = cfg["initial_guess"]
    guess = validate(name, root.get(name).value if root.has(name) else None, root.file, name)
    return cfg, guess
