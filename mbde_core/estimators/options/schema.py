"""Validation of estimator options on their YAML nodes, and the meaning of the common ones.

An estimator config file is a mapping ``<estimator name>: {options}``
(:mod:`mbde_core.estimators.configure` loads it); an estimator's options are merged over
its defaults (:func:`merge_options`: unknown keys, wrong types, numbers that are not
finite give one-line ConfigErrors naming file and key path) and the common ones checked
(:func:`check_common`); the estimator class checks its own (``validate_config``).
Common options (all Kalman observers):

- ``step``: filter step [s] (paper 003: 0.005);
- ``plant_noise``: ``acceleration_psd`` [(unit/s^2)^2 s] spectral density of the white
  acceleration noise on zdd (unmodelled forces/model errors; a number, or one per
  independent coordinate), ``velocity_psd`` [(unit/s)^2 s] on z'; discretised with Van Loan;
  ``adaptive`` (UKF, errorEKF; false by default): their scale learnt online from the
  innovations over ``adaptive_window`` [s] (:mod:`~mbde_core.estimators.kalman.adaptive_noise`);
- ``initial_sigma``: ``z`` [unit], ``zd`` [unit/s]: initial standard deviations;
- ``sensor_sigma``: sensor name -> standard deviation assumed by the filter, a number or
  one per channel (default: the sensor's noise model; acceleration-reading sensors
  widened by the rule);
- ``transition_jacobian``: ``simple`` (paper 003 eq. 13) or ``full``;
- ``rule``: inputs of the default-tuning rule, ``model_error`` (relative error of the
  known forces, default 0.1) and ``force_limits`` {coordinate: bound of unknown forces};
- ``inputs`` (UKF, DEKF, errorEKF, VI-EKF): unknown generalized forces as random-walk
  states, ``auto`` (default: the rule's, one per force-limited coordinate) or a list of
  {coordinate, psd, sigma0, initial} (:mod:`~mbde_core.estimators.kalman.input_states`, whose
  ``validate_inputs`` checks it; errors name ``<estimator>.inputs[k].<key>``).

``step``, ``acceleration_psd`` and ``initial_sigma`` default to ``auto``: the rule of
:mod:`~mbde_core.estimators.options.rule` computes them from the mechanism and its sensors
when the estimator is built (:func:`~mbde_core.estimators.options.rule.resolve_config`);
an explicit number overrides it.

Options of every estimator (the stage's outlier protection, :mod:`stage`):

- ``gate``: chi-square probability of the per-reading Mahalanobis gate (0 = off). Default
  ``GATE`` = 1 - 1e-6: a reading is rejected when its squared Mahalanobis distance
  y^T S^-1 y exceeds the chi2(d) quantile (23.9 for d = 1: 4.9 sigma; 27.6 for d = 2),
  which a consistent filter's clean readings do with probability 1e-6. robot_localization
  (the anchor) sets its ``<sensor>_rejection_threshold`` in standard deviations and
  rejects when y^T S^-1 y >= threshold^2, off by default; 0.999999 is its threshold
  4.9 for one channel. Measured false rejections on clean data: ``mbde bench faults``
  (README). The particle filters have the likelihood version of the same test
  (:mod:`~mbde_core.estimators.particle.gate`).
- ``gate_window`` [s]: the threshold is scaled by the filter's measured inconsistency, the
  median of the squared distances of the last ``gate_window`` seconds over the chi-square
  median, at least 1 (0 = the fixed threshold;
  :class:`~mbde_core.estimators.stage.guards.AdaptiveGate`);
- ``gate_persist``: a sensor whose readings exceeded the gate that many times in a row is
  believed, its readings fused ungated until one agrees again (0 = never, the default).
- ``reacquire``: the gate's re-acquisition rule: after ``rejections`` rejections of one
  sensor's readings, spanning at least ``time`` [s], in a run that starts with a
  rejection and in which rejections outnumber acceptances (``stage_guards``), the
  estimator widens its uncertainty (Kalman covariances x ``inflation``; the particle
  filter re-initialises), so that a real jump of the state is not rejected forever. A
  Kalman observer whose covariance then (or after a sensor gap) covers the circle is
  lost: it re-acquires with a bank of ``candidates`` copies started on a grid of states,
  the best fit to the readings over ``window`` [s] wins (:mod:`multistart`; 0 = off).
"""
from __future__ import annotations

import copy

from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.estimators.options.frozen import AUTO


def merge_options(node: Node, base: dict) -> dict:
    """Options of ``node`` merged over the defaults ``base`` (types and keys checked)."""
    return _merge(node, base)


def _merge(node: Node, base: dict) -> dict:
    out = copy.deepcopy(base)
    node.mapping(optional=tuple(base))
    for key, child in node.items():
        ref = base[key]
        if key == "inputs":  # unknown inputs: a list of mappings, or auto (the rule's, input_states.py)
            out[key] = AUTO if child.value == AUTO else [c.value for c in child.sequence()]
        elif ref == AUTO:  # auto (the rule), a number or one number per coordinate
            out[key] = _auto_or_numbers(child)
        elif key == "options" and ref == {}:  # another estimator's options (pf refine: validated by its schema)
            child.mapping()
            out[key] = child.value
        elif isinstance(ref, dict):
            if ref:
                out[key] = _merge(child, ref)
            else:  # free-form mapping (e.g. sensor_sigma: name -> sigma, or one per channel)
                out[key] = {k: _numbers(c, positive=True) for k, c in child.items()}
        elif isinstance(ref, bool):
            out[key] = child.boolean()
        elif isinstance(ref, (int, float)) or ref is None:
            out[key] = child.number() if child.value is not None else None
        elif isinstance(ref, str):
            out[key] = child.string()
        elif isinstance(ref, list):
            out[key] = [c.value for c in child.sequence()]
        else:  # pragma: no cover
            out[key] = child.value
    return out


def _numbers(node: Node, positive: bool = False):
    """A number, or a non-empty list of numbers (one per coordinate or channel)."""
    if isinstance(node.value, list):
        return [c.number(positive=positive) for c in node.sequence(min_len=1)]
    return node.number(positive=positive)


def _auto_or_numbers(node: Node):
    if node.value == AUTO:
        return AUTO
    return _numbers(node)  # a number (or expression), or a list; `auto` is handled above


def _nonnegative(value) -> bool:
    if value == AUTO:
        return True
    vals = value if isinstance(value, list) else [value]
    return all(v is not None and v >= 0 for v in vals)


def check_common(cfg: dict, file: str, where: str) -> None:
    """The common options of merged options ``cfg`` (those it has): step, plant noise,
    initial sigmas, the rule's inputs, the gate and its re-acquisition, the transition
    Jacobian (ConfigError naming ``file`` and ``<where>.<key>``)."""
    if isinstance(cfg["step"], list) or not (cfg["step"] == AUTO or cfg["step"] > 0):
        raise ConfigError(file, f"{where}.step", f"must be > 0 or {AUTO!r}, got {cfg['step']}")
    for group in ("plant_noise", "initial_sigma"):
        for key, value in (cfg.get(group) or {}).items():
            if not _nonnegative(value):
                raise ConfigError(file, f"{where}.{group}.{key}", f"must be >= 0, got {value}")
    if not (cfg.get("plant_noise") or {}).get("adaptive_window", 1.0) > 0:
        raise ConfigError(file, f"{where}.plant_noise.adaptive_window", "must be > 0 [s]")
    rule = cfg.get("rule")
    if rule is not None and not 0 <= rule["model_error"] < 10:
        raise ConfigError(file, f"{where}.rule.model_error", f"a relative error in [0, 10), got {rule['model_error']}")
    if not 0.0 <= cfg["gate"] < 1:
        raise ConfigError(file, f"{where}.gate", "a chi-square probability in [0, 1)")
    if not cfg["gate_window"] >= 0:
        raise ConfigError(file, f"{where}.gate_window", f"must be >= 0 [s], got {cfg['gate_window']}")
    if not cfg["gate_persist"] >= 0:
        raise ConfigError(file, f"{where}.gate_persist", f"must be >= 0 (readings), got {cfg['gate_persist']}")
    rq = cfg["reacquire"]
    for key, low in (("rejections", 1), ("time", 0), ("inflation", 1), ("candidates", 0), ("window", 0)):
        if not (rq[key] is not None and rq[key] >= low):
            raise ConfigError(file, f"{where}.reacquire.{key}", f"must be >= {low}, got {rq[key]}")
    if "transition_jacobian" in cfg and cfg["transition_jacobian"] not in ("simple", "full"):
        raise ConfigError(file, f"{where}.transition_jacobian", "must be 'simple' or 'full'")
    if "measurement_order" in cfg and cfg["measurement_order"] not in (1, 2):
        raise ConfigError(file, f"{where}.measurement_order", f"must be 1 or 2, got {cfg['measurement_order']!r}")
