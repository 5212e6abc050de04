"""Options of every estimator, with defaults, units and validation (config/estimators/*.yaml).

An estimator config file is a mapping ``<estimator name>: {options}``; unknown keys,
wrong types and out-of-range values give one-line ConfigErrors naming file and key path.
Common options (all Kalman observers):

- ``step``: filter step [s] (default 0.005, paper 003);
- ``plant_noise``: ``acceleration_psd`` [(unit/s^2)^2 s] spectral density of the white
  acceleration noise on zdd (unmodelled forces/model errors), ``velocity_psd``
  [(unit/s)^2 s] on z'; discretised with Van Loan;
- ``initial_sigma``: ``z`` [unit], ``zd`` [unit/s]: initial standard deviations;
- ``sensor_sigma``: sensor name -> standard deviation assumed by the filter (default:
  the sensor's noise model);
- ``gate``: chi-square probability of the Mahalanobis gate per reading (0 = off,
  e.g. 0.9999); ``transition_jacobian``: ``simple`` (paper 003 eq. 13) or ``full``.
"""
from __future__ import annotations

import copy

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError

COMMON = {
    "step": 0.005,
    "plant_noise": {"acceleration_psd": 1.0, "velocity_psd": 0.0},
    "initial_sigma": {"z": 0.05, "zd": 0.5},
    "sensor_sigma": {},
    "gate": 0.0,
    "transition_jacobian": "simple",
}

# Sections of the same file validated by the offline tools that own them (not observers):
# ``smoother`` by mbde_core.trajectory.config, ``identification`` by mbde_core.identification.config.
OFFLINE_SECTIONS = ("smoother", "identification")


def defaults(name: str) -> dict:
    """Complete default options of an estimator: COMMON (if the class uses them) + the
    class attribute ``DEFAULTS`` of its estimator class."""
    from mbde_core.estimators.registry import estimator_class

    cls = estimator_class(name)
    out = copy.deepcopy(COMMON) if getattr(cls, "USES_COMMON", True) else {"step": COMMON["step"]}
    out.update(copy.deepcopy(getattr(cls, "DEFAULTS", {})))
    return out


def merge_options(node: Node, base: dict) -> dict:
    """Options of ``node`` merged over the defaults ``base`` (types and keys checked)."""
    return _merge(node, base)


def _merge(node: Node, base: dict) -> dict:
    out = copy.deepcopy(base)
    node.mapping(optional=tuple(base))
    for key, child in node.items():
        ref = base[key]
        if isinstance(ref, dict):
            if ref:
                out[key] = _merge(child, ref)
            else:  # free-form mapping (e.g. sensor_sigma: name -> sigma)
                out[key] = {k: c.number(positive=True) for k, c in child.items()}
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


def validate(name: str, options: dict, file: str = "<config>", path: str = "") -> dict:
    """Merge user options over defaults and validate them."""
    from mbde_core.estimators.registry import estimator_class

    cfg = _merge(Node(options or {}, file, path or name), defaults(name))
    where = path or name
    if not cfg["step"] > 0:
        raise ConfigError(file, f"{where}.step", f"must be > 0, got {cfg['step']}")
    for group in ("plant_noise", "initial_sigma"):
        for key, value in (cfg.get(group) or {}).items():
            if value is None or value < 0:
                raise ConfigError(file, f"{where}.{group}.{key}", f"must be >= 0, got {value}")
    if not 0.0 <= cfg.get("gate", 0.0) < 1:
        raise ConfigError(file, f"{path or name}.gate", "a chi-square probability in [0, 1)")
    if cfg.get("transition_jacobian", "simple") not in ("simple", "full"):
        raise ConfigError(file, f"{path or name}.transition_jacobian", "must be 'simple' or 'full'")
    check = getattr(estimator_class(name), "validate_config", None)
    if check is not None:
        check(cfg, file, path or name)
    return cfg


def load_estimator_configs(path, names) -> dict[str, dict]:
    """Validated options for each requested estimator from a config file (others: defaults)."""
    out = {n: defaults(n) for n in names}
    if path is None:
        return out
    root = read_yaml(path)
    root.mapping()
    from mbde_core.estimators.registry import ESTIMATOR_NAMES

    for key, child in root.items():
        if key in OFFLINE_SECTIONS:
            continue
        if key not in ESTIMATOR_NAMES:
            raise child.error(f"unknown estimator (choose from {', '.join(ESTIMATOR_NAMES + OFFLINE_SECTIONS)})")
        if key in names:
            out[key] = validate(key, child.value, root.file, key)
    return out
