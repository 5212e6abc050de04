"""Options of ``mbde identify``: the ``identification:`` section of an estimator config file.

    identification:
      step: auto                  # grid step [s]; auto = the fastest sensor's period
      initial_guess: auto         # lowpass (paper 001 sec. 4.4, encoders on every z) | filter | auto
      horizons: auto              # stages: first_horizon, doubled until the recordings are covered
                                  # (a filter's guess only); or a list of horizons [s]
      first_horizon: 0.5          # [s]
      stage_prior: 0.5            # relative sigma of a prior on the parameters before the last stage (0: none)
      initial_sigma_a: auto       # acceleration-noise sigma of the first pass: auto (0.3 RMS of the
                                  # initial guess's zdd), config (the smoother's plant noise) or a number
      descend: 10                 # the noise search divides sigma by this per pass until bracketed
      max_iterations: 50          # Levenberg-Marquardt iterations per pass
      tolerance: 1.0e-6           # stop: step^T A step <= tolerance (posterior units), last pass
      pass_tolerance: 1.0e-2      # ... earlier passes
      mu0: 1.0e-12                # initial damping relative to diag(J^T J)
      noise_passes: 8             # noise re-estimation passes (0: keep the first pass's sigmas)
      noise_tolerance: 0.05       # stop when every re-estimated sigma moves less than this
      rank_tolerance: 1.0e-9      # null direction of the parameters (relative eigenvalue)
      integrator_relaxation: 1.0e-2  # replaces the smoother's (see below)

The trajectory part (initial-guess filter, plant and sensor noise to start
from, integrator scheme, prior) is the file's ``smoother:`` section
(:mod:`mbde_core.trajectory.config`). Only the integrator relaxation differs: the noise
re-estimation drives sigma_a down to the true disturbance level (often 10-100 times
below a filter's tuning), and the integrator rows, whose sigmas are relaxation * sigma_a,
would then outweigh the readings by ~1e13 at 1 kHz (a banded Cholesky at the edge of
double precision); 1e-2 keeps them a hard constraint to 1 % of the process noise.
"""
from __future__ import annotations

import copy

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.identification.identify import DEFAULTS as SOLVER_DEFAULTS
from mbde_core.trajectory.config import load_smoother_config

DEFAULTS = dict(SOLVER_DEFAULTS, integrator_relaxation=1.0e-2)
DEFAULTS.pop("min_sigma_a")


def identification_defaults() -> dict:
    return copy.deepcopy(DEFAULTS)


def validate_identification(options, file: str = "<config>", path: str = "identification") -> dict:
    """Defaults merged with ``options`` and checked (ConfigError naming file and key)."""
    node = Node(options or {}, file, path)
    node.mapping(optional=tuple(DEFAULTS))
    cfg = identification_defaults()
    words = {"step": ("auto",), "initial_guess": ("auto", "lowpass", "filter"), "initial_sigma_a": ("auto", "config")}
    for key in DEFAULTS:
        if not node.has(key):
            continue
        child = node.get(key)
        if key == "horizons":
            cfg[key] = "auto" if child.value == "auto" else child.vector(None, positive=True)
        elif key in words and isinstance(child.value, str):
            cfg[key] = child.string(words[key])
        elif key == "initial_guess":
            cfg[key] = child.string(words[key])
        elif key == "stage_prior":
            cfg[key] = child.number(nonnegative=True)
        elif key in ("max_iterations", "noise_passes"):
            cfg[key] = int(child.number(integer=True, minimum=1 if key == "max_iterations" else 0))
        elif key == "descend":
            cfg[key] = child.number(minimum=1.0)
        else:
            cfg[key] = child.number(positive=True)
    if cfg["rank_tolerance"] >= 1:
        raise ConfigError(file, f"{path}.rank_tolerance", f"must be < 1, got {cfg['rank_tolerance']:g}")
    return cfg


def load_identification_config(path) -> tuple[dict, dict, dict]:
    """(smoother options, initial-guess filter options, identification options) of an
    estimator config file (None: defaults)."""
    smoother, guess = load_smoother_config(path)
    ident = identification_defaults()
    if path is not None:
        root = read_yaml(path)
        if root.has("identification"):
            ident = validate_identification(root.get("identification").value, root.file)
    smoother = dict(smoother, integrator_relaxation=ident.pop("integrator_relaxation"))
    return smoother, guess, ident
