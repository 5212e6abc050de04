"""The estimator interface shared by every observer (FilterPy-like vocabulary).

An estimator works on a fixed step: ``predict(dt)`` advances its state from ``t`` to
``t + dt`` with the multibody model; ``update(measurements, gates)`` fuses the readings
taken at the current time; ``estimate()`` returns a :class:`MechanismSnapshot` with z, zd,
zdd, the full q, qd, qdd, the covariance of [z, zd], branch probabilities where
meaningful, and estimated inputs. The :class:`mbde_core.estimators.stage.core.EstimatorStage`
drives this interface both in ``mbde replay`` and in the live ROS node.

:class:`EstimatorInterface` is that interface, explicit: every object the stage drives --
an estimator (:class:`Estimator` and its subclasses) or a stand-in for one (the multi-start
bank, :class:`~mbde_core.estimators.stage.multistart.MultiStart`) -- implements all of its
abstract methods (an abc: a class that misses one cannot be instantiated; test_interface
checks every class and their signatures). Its attributes: ``mech`` (the model), ``sensors``
(the SensorSet it may receive), ``t`` (its time [s]).
"""
from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.estimators.noise import kinematic_plant_noise
from mbde_core.estimators.options.common import KalmanOptions
from mbde_core.estimators.traits import Traits
from mbde_core.types import MechanismSnapshot, Measurement, ParticleCloud


@dataclass
class InitialState:
    """Initial guess: z (g,), zd (g,), their standard deviations, optional q hint and branch."""

    z: np.ndarray
    zd: np.ndarray
    sigma_z: np.ndarray
    sigma_zd: np.ndarray
    q_hint: np.ndarray | None = None
    branch: int | None = None


@dataclass
class UpdateResult:
    """What an update did: accepted/rejected sensor names, and the innovation statistics.

    nis: normalised innovation squared y^T S^-1 y of the accepted readings (None if the
    estimator has no Gaussian innovation); dof: its degrees of freedom (sum of channel
    dimensions); innovation: the stacked innovation y (for whiteness tests); logdet:
    log det S (NIS + logdet = -2 log-likelihood of the innovation + const); distances:
    (sensor name, squared Mahalanobis distance) of every gated reading, accepted or not,
    in reading order (the stage's gate scale, :mod:`~mbde_core.estimators.stage.guards`).
    """

    accepted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    nis: float | None = None
    dof: int = 0
    innovation: np.ndarray | None = None
    normalized_innovation: np.ndarray | None = None
    logdet: float | None = None
    distances: list = field(default_factory=list)


def accepted_result(name, y, s: float, dist) -> UpdateResult:
    """The UpdateResult of one fused scalar reading: innovation y (1,), its variance s
    (NIS y^2/s, normalised innovation y/sqrt(s), log s; NaN if s <= 0), gate distances."""
    if s > 0.0:
        e = y / math.sqrt(s)
        res = UpdateResult([name], [], float(e[0] * e[0]), 1, y, e, math.log(s))
    else:
        res = UpdateResult([name], [], float("nan"), 1, y, np.full_like(y, np.nan), float("nan"))
    res.distances = dist
    return res


def sensor_variances(options) -> dict:
    """{sensor name: variance, or (d,) per-channel variances} from the ``sensor_sigma`` option."""
    return {k: np.asarray(v, dtype=float) ** 2 if isinstance(v, (list, tuple, np.ndarray)) else float(v) ** 2
            for k, v in options.sensor_sigma.items()}


def initial_sigmas(sigma, g: int) -> tuple[np.ndarray, np.ndarray]:
    """(sigma_z (g,), sigma_zd (g,)) of a resolved ``initial_sigma`` option (numbers or one
    per coordinate): the options' group, or a mapping {z, zd} (the smoother's)."""
    z, zd = (sigma["z"], sigma["zd"]) if isinstance(sigma, Mapping) else (sigma.z, sigma.zd)
    return (np.broadcast_to(np.asarray(z, dtype=float), (g,)).copy(),
            np.broadcast_to(np.asarray(zd, dtype=float), (g,)).copy())


class EstimatorInterface(abc.ABC):
    """What the stage drives (module doc). Attributes: mech, sensors, t."""

    @abc.abstractmethod
    def reset(self, t: float, init: InitialState) -> None:
        """Start again at time t from the initial guess ``init``."""

    @abc.abstractmethod
    def predict(self, dt: float) -> None:
        """Advance the state from t to t + dt with the model."""

    @abc.abstractmethod
    def update(self, measurements: list[Measurement], gates: dict[str, float] | None = None) -> UpdateResult:
        """Fuse the readings taken at the current time; gates: sensor -> chi-square threshold."""

    @abc.abstractmethod
    def estimate(self) -> MechanismSnapshot:
        """The current estimate (a new snapshot: the caller may keep or edit it)."""

    @abc.abstractmethod
    def rebase(self, t: float) -> None:
        """The clock jumped (a backward time jump): the same state, now at time t."""

    @abc.abstractmethod
    def reacquire(self, inflation: float) -> None:
        """Widen the uncertainty after the stage's gate rejected every reading for a while."""

    @abc.abstractmethod
    def add_restart_hypotheses(self, reason: str, ceiling: float | None = None) -> bool:
        """Carry a restart from the initial guess as extra hypotheses (True), or leave the
        decision to the stage (False)."""

    @abc.abstractmethod
    def particles(self) -> ParticleCloud | None:
        """The particle cloud (a particle filter), else None."""

    @abc.abstractmethod
    def diagnostics(self) -> dict:
        """Estimator-specific numbers for /diagnostics and metrics.json."""

    @abc.abstractmethod
    def expect_steps(self, steps: int) -> None:
        """The caller will run about ``steps`` more steps (a replay knows its bag's length)."""


class Estimator(EstimatorInterface):
    """Base class of the observers: defaults for everything but reset/predict/update/estimate.

    Parameters: mech (Mechanism, the estimator's model, possibly with model errors),
    sensors (SensorSet: models of every sensor it may receive), options (its frozen
    ``Options``, validated and resolved by :mod:`~mbde_core.estimators.configure`), rng
    (numpy Generator, for stochastic estimators). Declared by every estimator class: ``name``,
    ``Options`` (its options dataclass: the defaults, :mod:`~mbde_core.estimators.options`),
    ``traits`` (:class:`~mbde_core.estimators.traits.Traits`), and the checks of its options
    (:meth:`validate_config`, :meth:`check_run`).
    """

    name = "estimator"
    Options = KalmanOptions
    traits = Traits()

    def __init__(self, mech, sensors, options, rng: np.random.Generator | None = None):
        if getattr(mech, "drivers", None) and not self.traits.drivers:

            raise ConfigError(mech.spec.file, "driving_constraints",
                              f"the {self.name} estimator does not support time-dependent driving constraints (pf and vipf do)")
        self.mech = mech
        self.sensors = sensors
        self.options = options
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.t = 0.0
        self._plant_noise_cache: dict[float, np.ndarray] = {}

    # -- the clock -------------------------------------------------------------------------
    @property
    def t(self) -> float:
        """The estimator's time [s] (the stamps' clock: Unix time in a bag or a live run)."""
        return self._t

    @t.setter
    def t(self, value: float) -> None:
        self._t, self._t_low = float(value), 0.0

    def advance_clock(self, dt: float) -> None:
        """t += dt without accumulating rounding: t + t_low is the exact sum of the steps
        (Knuth's TwoSum: t = fl(t + x), t_low = (t + x) - fl(t + x) exactly), so t stays
        within half an ulp of the stage's grid time t_0 + k dt. A plain ``t += dt`` at Unix
        time (1.8e9 s: ulp 2.4e-7 s) adds fl(1.8e9 + 0.005) - 1.8e9 = 0.005 + 1.1e-7 s per 5 ms
        step: 11 ms after 500 s, which a filter that predicts each reading at its stamp's
        offset from t (the particle filter, :mod:`~mbde_core.estimators.particle.likelihood`)
        takes for a real lag."""
        t, x = self._t, float(dt) + self._t_low
        s = t + x
        bp = s - t
        self._t_low = (t - (s - bp)) + (x - bp)
        self._t = s

    @classmethod
    def validate_config(cls, cfg: dict, file: str, path: str) -> None:
        """Check the estimator's own options in the merged options ``cfg`` (plain values,
        ``auto`` unresolved): ConfigError naming ``file`` and ``<path>.<key>``."""

    @classmethod
    def check_run(cls, cfg: dict, mech, sensors, file: str, path: str) -> None:
        """Check the options ``cfg`` against the run's model and sensors before it starts
        (ConfigError naming ``file`` and the key path); the sensor and coordinate names of
        the common options are checked by the pipeline."""

    @classmethod
    def follower_options(cls, cfg: dict):
        """(name, options, (group, key)) of another estimator whose options are nested in
        ``cfg`` (the particle filters' Gaussian follower: validated and resolved with these,
        stored at ``cfg[group][key]``), or None."""
        return None

    @classmethod
    def transition_orders(cls, cfg: dict) -> tuple[int, int]:
        """(order of the z update, order of the zd update) of its transition for options
        ``cfg``: its local errors are O(dt^(p+1)) (the default-tuning rule's q_disc and
        velocity noise, :mod:`~mbde_core.estimators.options.rule`). Default: second order."""
        return (2, 2)

    @classmethod
    def estimates_inputs(cls, options) -> bool:
        """Whether it estimates unknown forces with ``options`` (resolved; None: its
        defaults): the suitability check's question (:mod:`~mbde_core.estimators.assess.suitability`)."""
        return bool(cls.traits.input_states) and options is not None and bool(options.inputs)

    def plant_noise(self, dt: float) -> np.ndarray:
        """Sigma^P (2g, 2g) of [z, zd] over dt from the ``plant_noise`` option (Van Loan,
        :func:`mbde_core.estimators.noise.kinematic_plant_noise`), cached per dt."""
        Q = self._plant_noise_cache.get(dt)
        if Q is None:
            pn = self.options.plant_noise
            Q = kinematic_plant_noise(self.mech.dof, dt, pn.acceleration_psd, pn.velocity_psd)
            self._plant_noise_cache[dt] = Q
        return Q

    def rebase(self, t: float) -> None:
        """The clock jumped (EstimatorStage, a backward time jump): the same state, now at
        time t. Subclasses drop what they cached at the old time."""
        self.t = float(t)

    def add_restart_hypotheses(self, reason: str, ceiling: float | None = None) -> bool:
        """Carry the restart from the initial guess as extra hypotheses of this estimate
        after a disturbance (``jump``: the clock jumped back to the first stamp;
        ``silence``: no reading for a while) instead of the stage choosing one. True if
        done (the particle filter); False: the stage decides as it does for the Kalman
        observers."""
        return False

    def reacquire(self, inflation: float) -> None:
        """Widen the uncertainty after the stage's gate rejected every reading for a while
        (its re-acquisition rule), so that the next readings can be fused. Default: restart
        from the current estimate with its standard deviations x sqrt(inflation); the
        Kalman observers scale their covariance (:class:`CovarianceInflation`), the particle
        filter re-initialises."""
        snap = self.estimate()
        g = len(snap.z)
        sd = np.sqrt(np.clip(np.diag(snap.cov), 0.0, None) * float(inflation))
        self.reset(self.t, InitialState(snap.z, snap.zd, sd[:g], sd[g:], snap.q, snap.branch if snap.branch >= 0 else None))

    def set_known_inputs(self, values, variances) -> None:
        """The known inputs held by the stage for the next step (values, variances (m,) of
        the generalized forces of ``sensors.inputs``), before every prediction of an
        estimator whose traits say ``known_inputs`` (:mod:`~mbde_core.estimators.stage.inputs`).
        Nothing by default."""

    def particles(self) -> ParticleCloud | None:
        return None

    def diagnostics(self) -> dict:
        """Estimator-specific numbers for /diagnostics (e.g. ESS, resets)."""
        return {}

    def expect_steps(self, steps: int) -> None:
        """Nothing to prepare by default (the particle filter and the errorEKF choose their
        compiled paths by the run's length)."""


class CovarianceInflation:
    """Mixin of the Kalman observers whose covariance is ``self.P``: re-acquisition
    (:meth:`Estimator.reacquire`) scales it, P <- inflation P, keeping the mean, the
    correlations and any augmented states (inputs, biases)."""

    def rebase(self, t: float) -> None:
        """The clock jumped (EstimatorStage, a backward time jump): the same state, now at
        time t. Subclasses drop what they cached at the old time."""
        self.t = float(t)

    def reacquire(self, inflation: float) -> None:
        self.P = self.P * float(inflation)
