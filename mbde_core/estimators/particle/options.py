"""Options of the particle filter (config/estimators/pf.yaml): defaults and validation.

Every option is documented in pf.yaml; ``null`` values are derived from the mechanism and
its sensors when the filter is built (:mod:`mbde_core.estimators.particle.scales`). Errors name
the file and the key path (:class:`mbde_core.errors.ConfigError`). :func:`check_run` checks
them against the run's model before it starts: the ranges' dimensions, the branch labels,
and the particle counts against a memory budget (:func:`memory_budget`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.options.inputs import validate_inputs
from mbde_core.estimators.options.common import FrozenMap, InitialSigma, Options, Rule, StageOptions, input_field
from mbde_core.estimators.particle.inputs import INPUT_JUMP_RATE
from mbde_core.estimators.particle.refine import REFINE_DEFAULTS, check_refine
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.estimators.particle.prior import prior_box
from mbde_core.estimators.particle.resampling import SCHEMES
from mbde_core.expr import ExpressionError, evaluate_value

PF_INTEGRATORS = ("rk4", "euler", "trapezoidal", "midpoint", "symplectic_euler")
INIT_MODES = ("uniform", "gaussian")
PROPOSALS = ("adapted", "prior")
LOG_UNDERFLOW = -745.0  # log of the smallest positive double (4.9e-324)



@dataclass(frozen=True)
class SigmaByType(Options):
    """sensor_sigma_by_type: the assumed standard deviation per sensor type [SI]; None: the
    sensor's noise model."""

    encoder: float | None = None
    gyroscope: float | None = None
    accelerometer: float | None = None
    slider_position: float | None = None
    imu: float | None = None


@dataclass(frozen=True)
class Uniform(Options):
    """The uniform (re)initialisation (eq. 22)."""

    z: tuple = ()                     # [lo, hi] or g pairs; (): angles [-pi, pi), others q0 +/- longest body
    zd: tuple = ()                    # [unit/s]; (): the energy bound of pf_scale
    zdd: tuple = ()                   # [unit/s^2]; (): f(z, zd) + N(0, sigma_a^2)
    branches: tuple = ()              # labels; (): every branch found
    velocity_proposal: bool = True    # zd drawn from the first velocity readings (gyroscopes)
    position_proposal: bool = True    # z drawn from the first position readings (encoders)
    particles: int | None = None      # particles of a uniform (re)initialisation; None: pf_scale; 0: ``particles``
    anneal: float | None = None       # [s] tempered likelihood after a uniform (re)initialisation; None: pf_scale


@dataclass(frozen=True)
class Resampling(Options):
    scheme: str = "systematic"
    ess_threshold: float = 0.5


@dataclass(frozen=True)
class Regularisation(Options):
    """Musso et al. 2001 kernel after resampling."""

    enabled: bool = True
    bandwidth: float = 0.5


@dataclass(frozen=True)
class Recovery(Options):
    enabled: bool = True
    log_likelihood_floor: float = LOG_UNDERFLOW
    ess_fraction: float = 0.05
    time: float = 0.5
    lock_nis: float = 3.0
    lock_time: float = 0.5
    inject: float = 0.1
    bias: float = 30.0
    bias_time: float = 1.0


@dataclass(frozen=True)
class Refine(Options):
    """The Gaussian follower of the converged cloud (:mod:`.refine`); ``resolved``: the
    follower's own options, resolved by the pipeline (None: no follower)."""

    estimator: str = REFINE_DEFAULTS["estimator"]
    options: FrozenMap = FrozenMap()
    branch_probability: float = REFINE_DEFAULTS["branch_probability"]
    sigma_z: float = REFINE_DEFAULTS["sigma_z"]
    agree: float = REFINE_DEFAULTS["agree"]
    disagree_time: float = REFINE_DEFAULTS["disagree_time"]
    resolved: Options | None = field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class ParticleOptions(StageOptions):
    """The particle filter's options (config/estimators/pf.yaml)."""

    particles: int | None = None              # N while tracking; None: 300 per degree of freedom (pf_scale)
    integrator: str = "rk4"                   # rk4 | euler | trapezoidal | midpoint | symplectic_euler
    acceleration_sigma: float | None = None   # sigma_a on zdd [unit/s^2]; None: from the mechanism (pf_scale)
    proposal: str = "adapted"                 # adapted: the noise drawn given the readings | prior (paper 000)
    sensor_sigma: FrozenMap = FrozenMap()     # sensor name -> assumed standard deviation [SI]
    sensor_sigma_by_type: SigmaByType = SigmaByType()
    init: str = "uniform"                     # uniform (eq. 22) | gaussian (around the given initial state)
    uniform: Uniform = Uniform()
    initial_sigma: InitialSigma = InitialSigma(0.05, 0.5)  # gaussian init [unit], [unit/s]
    resampling: Resampling = Resampling()
    regularisation: Regularisation = Regularisation()
    recovery: Recovery = Recovery()
    branch_check: bool = True                 # relabel particles whose q left their branch (counted)
    threads: int | None = None                # propagation threads; None: MBDE_PF_THREADS or the CPU count
    refine: Refine = Refine()
    inputs: tuple | str = input_field()       # auto: unknown torques as per-particle random walks within the motor limits (inputs.py)
    input_jump_rate: float = INPUT_JUMP_RATE  # [1/s] redraws of a particle's unknown inputs within their limits
    rule: Rule = Rule()                       # the rule's model_error and force_limits (the unknown motors' bounds)


DEFAULTS = ParticleOptions.defaults()


def ranges(value, g: int | None, file: str = "<options>", where: str = "uniform"):
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
    _count(cfg["particles"], file, f"{path}.particles", 1)
    _count(cfg["threads"], file, f"{path}.threads", 1)
    if cfg["integrator"] not in PF_INTEGRATORS:
        raise ConfigError(file, f"{path}.integrator", f"must be one of {', '.join(PF_INTEGRATORS)}")
    sa = cfg["acceleration_sigma"]
    if sa is not None and not sa >= 0:
        raise ConfigError(file, f"{path}.acceleration_sigma", f"must be >= 0 (or null: derived), got {sa}")
    if cfg["proposal"] not in PROPOSALS:
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
    reg = cfg["regularisation"]
    if not reg["bandwidth"] >= 0:
        raise ConfigError(file, f"{path}.regularisation.bandwidth", f"must be >= 0, got {reg['bandwidth']}")
    rec = cfg["recovery"]
    if not 0.0 <= rec["ess_fraction"] <= 1.0:
        raise ConfigError(file, f"{path}.recovery.ess_fraction", f"a fraction in [0, 1], got {rec['ess_fraction']}")
    if not rec["bias"] >= 0:
        raise ConfigError(file, f"{path}.recovery.bias", f"must be >= 0 (0: off), got {rec['bias']}")
    for key in ("time", "lock_time", "bias_time"):
        if not rec[key] >= 0:
            raise ConfigError(file, f"{path}.recovery.{key}", f"must be >= 0, got {rec[key]}")
    if not rec["log_likelihood_floor"] < 0:
        raise ConfigError(file, f"{path}.recovery.log_likelihood_floor", f"must be < 0, got {rec['log_likelihood_floor']}")
    if not rec["lock_nis"] >= 0:
        raise ConfigError(file, f"{path}.recovery.lock_nis", f"must be >= 0 (0: off), got {rec['lock_nis']}")
    if not 0.0 < rec["inject"] <= 1.0:
        raise ConfigError(file, f"{path}.recovery.inject", f"a fraction in (0, 1], got {rec['inject']}")
    uni = cfg["uniform"]
    for key in ("z", "zd", "zdd"):
        ranges(uni[key], g, file, f"{path}.uniform.{key}")
    _count(uni["particles"], file, f"{path}.uniform.particles", 0)
    if uni["anneal"] is not None and not uni["anneal"] >= 0:
        raise ConfigError(file, f"{path}.uniform.anneal", f"must be >= 0 [s], got {uni['anneal']}")
    check_refine(cfg, file, path)
    validate_inputs({"inputs": cfg["inputs"], "input_jump_nis": 0.0}, file, path)
    jr = cfg["input_jump_rate"]
    if isinstance(jr, bool) or not isinstance(jr, (int, float)) or not jr >= 0:
        raise ConfigError(file, f"{path}.input_jump_rate", f"must be >= 0 [1/s] (0: no jumps), got {jr!r}")
    br = uni["branches"]
    if not isinstance(br, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in br):
        raise ConfigError(file, f"{path}.uniform.branches", f"expected a list of branch labels (integers >= 0), got {br!r}")


# Memory of a particle set: measured growth of the peak RSS of a replay process with
# 1e5 particles (uniform start and first updates; fourbar n = 5: 191 MB, fivebar n = 8:
# 268 MB, sixbar n = 11: 433 MB) is 38-49 floats per coordinate of q per particle; the
# estimate below is 50 n + 64 floats (8 bytes) per particle.
FLOATS_PER_COORDINATE = 50
FLOATS_PER_PARTICLE = 64
MEMORY_FRACTION = 0.5   # of the memory available when the run starts


def particle_bytes(n: int, N: int) -> float:
    """Estimated peak memory [bytes] of a particle filter with N particles of n coordinates."""
    return 8.0 * N * (FLOATS_PER_COORDINATE * n + FLOATS_PER_PARTICLE)


def memory_budget() -> float | None:
    """MEMORY_FRACTION of the memory available now [bytes] (Linux: MemAvailable of
    /proc/meminfo; elsewhere the free physical pages), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return MEMORY_FRACTION * 1024.0 * float(line.split()[1])
    except OSError:
        pass
    try:
        return MEMORY_FRACTION * float(os.sysconf("SC_AVPHYS_PAGES")) * float(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def particle_counts(cfg: dict, mech, sensors, per_dof: int, branches: int) -> tuple[int, int]:
    """(N_track, N_init): particles while tracking (``particles``, or per_dof per degree of
    freedom) and of a uniform (re)initialisation (``uniform.particles``, or the rule of
    :func:`~mbde_core.estimators.particle.scales.initial_particles` for ``branches``
    branches; at least N_track)."""

    g = mech.dof
    n_track = cfg["particles"]
    N_track = int(pf_scale.tracking_particles(g, per_dof) if n_track is None else n_track)
    n_init = cfg["uniform"]["particles"]
    if n_init is None:
        n_init = pf_scale.initial_particles(g, branches, list(sensors))
    return N_track, max(int(n_init), N_track)


def check_run(cfg: dict, mech, sensors, file: str, path: str, per_dof: int) -> None:
    """The options against the run's model, before it starts: the ranges have one pair per
    independent coordinate, the branch labels exist, and the particle sets fit in
    :func:`memory_budget` (:func:`particle_bytes` of the larger of the tracking and the
    uniform start's counts)."""

    g = mech.dof
    uni = cfg["uniform"]
    zr = ranges(uni["z"], g, file, f"{path}.uniform.z")
    for key in ("zd", "zdd"):
        ranges(uni[key], g, file, f"{path}.uniform.{key}")
    atlas = prior_box(mech, zr)[3]
    found = atlas.labels.tolist()
    unknown = sorted(set(uni["branches"]) - set(found))
    if unknown:
        raise ConfigError(file, f"{path}.uniform.branches",
                          f"branch label(s) {unknown} do not exist for {mech.name} (found {found})")
    N_track, N_init = particle_counts(cfg, mech, sensors, per_dof, len(uni["branches"] or found))
    budget = memory_budget()
    N = max(N_track, N_init)
    if budget is not None and particle_bytes(mech.n, N) > budget:
        key = "particles" if cfg["particles"] is not None and N_track >= N_init else "uniform.particles"
        most = int(budget / particle_bytes(mech.n, 1))
        raise ConfigError(file, f"{path}.{key}",
                          f"{N} particles of {mech.name} need about {particle_bytes(mech.n, N) / 1e9:.3g} GB, more than "
                          f"{MEMORY_FRACTION:.0%} of the memory available ({budget / MEMORY_FRACTION / 1e9:.3g} GB): "
                          f"at most {most} here")
