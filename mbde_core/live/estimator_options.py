"""Options of the ``estimator`` node's core and its estimator configuration file.

:class:`EstimatorOptions` are the node parameters that shape
:class:`~mbde_core.live.estimator.LiveEstimator` (:mod:`mbde_core.live.params`);
:func:`load_config` reads and validates the estimator's options file as ``mbde replay
--config`` does (:mod:`mbde_core.estimators.configure`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from mbde_core.config.paths import config_dirs, resolve
from mbde_core.errors import ConfigError
from mbde_core.estimators.configure import load


@dataclass
class EstimatorOptions:
    """Node parameters that shape the core (see :mod:`mbde_core.live.params`)."""

    name: str
    config: object  # the estimator's validated Spec, or its resolved options
    seed: int = 0
    frame_id: str = ""
    publish_rate: float = 50.0
    marker_rate: float = 10.0
    particles_rate: float = 10.0
    top_k: int = 30
    reorder_window: float = 0.02
    max_prediction: float = 0.5
    backward_jump: float = 1.0
    max_gap: float = 10.0
    publish_tf: bool = True
    tf_prefix: str = ""  # already resolved ('~' -> '<node name>/' is the node's business)

    @classmethod
    def from_params(cls, p: dict, config: dict, tf_prefix: str | None = None) -> "EstimatorOptions":
        return cls(p["estimator"], config, p["seed"], p["frame_id"], p["publish_rate"], p["marker_rate"],
                   p["particles_rate"], p["particles_top_k"], p["reorder_window"], p["max_prediction"],
                   p["backward_jump"], p["max_gap"], p.get("publish_tf", True),
                   p.get("tf_prefix", "") if tf_prefix is None else tf_prefix)


def default_config_file(name: str) -> str | None:
    """The shipped options of estimator ``name``: ``estimators/<name>.yaml`` if the package
    has one, else ``estimators/default.yaml`` (None if neither exists)."""
    for rel in (f"estimators/{name}.yaml", "estimators/default.yaml"):
        for base in config_dirs():
            path = os.path.join(base, rel)
            if os.path.isfile(path):
                return path
    return None


def load_config(name: str, config_file: str = ""):
    """The validated options (a Spec) of estimator ``name`` from a config file ('' = the
    shipped one, :func:`default_config_file`; options it does not set keep the estimator's
    defaults); the estimator core resolves them for its model."""
    path = resolve(config_file, "estimator config file") if config_file else default_config_file(name)
    try:
        return load(path, [name])[name]
    except ModuleNotFoundError as exc:
        raise ConfigError(path or "<parameters>", "estimator",
                          f"estimator {name!r} is not available in this installation ({exc})") from None
