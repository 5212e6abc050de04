"""A Python API for notebooks: load a linkage and its sensors, build an estimator, feed it
readings as arrays with stamps, read estimates and covariances. No ROS, no bags.

FilterPy in spirit (one object per filter, ``update`` with a reading, ``x`` and ``P``),
with what a multibody estimator needs on top: readings carry a stamp and a sensor name,
any mix of sensors at any rates, and the filter runs on a fixed step (``f.dt``) through
the same :class:`~mbde_core.estimators.stage.core.EstimatorStage` as ``mbde replay`` and
the live node (a reading is fused at the grid time nearest its stamp; the gate, the
re-acquisition rule and the counters are the replay's)::

    from mbde_core import api

    mech = api.load_mechanism("my_linkage.yaml")
    sensors = api.load_sensors("my_imu.yaml", mech)
    f = api.Filter("ukf", mech, sensors, options={"plant_noise": {"acceleration_psd": 10.0}})
    for t, value in zip(stamps, values):          # values (K, 3) of the IMU, SI units
        f.update(t, "imu_coupler", value)
    f.x, f.P                                      # [z, zd] (2g,) and its covariance (2g, 2g)
    est = f.estimates()                           # every step so far: t, z, zd, zdd, P, q, ...

Options are a mapping, as a section of an options file (``config/estimators/*.yaml``,
the [estimator options reference]), or the path of such a file; they are checked and
converted inside, so this signature does not depend on how options are represented.
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.config.yamlnode import Node, parse_yaml
from mbde_core.engine import kinematics
from mbde_core.errors import ConfigError
from mbde_core.estimators.base import InitialState, initial_sigmas
from mbde_core.estimators.configure import load as load_options, make_estimator, resolve, validate
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.registry import estimator_rng, names as estimator_names
from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
from mbde_core.model.mechanism import load_mechanism as load
from mbde_core.scenario import load_scenario
from mbde_core.sensors.config import load_sensor_file, load_sensors as from_node
from mbde_core.simulator import run
from mbde_core.types import Measurement

__all__ = ["Filter", "load_mechanism", "load_sensors", "simulate", "ESTIMATORS"]


ESTIMATORS = estimator_names()


def load_mechanism(path):
    """A :class:`~mbde_core.model.mechanism.Mechanism` from a mechanism YAML file."""
    return load(path)


def load_sensors(spec, mechanism):
    """A SensorSet on ``mechanism`` from: a sensor YAML file (top-level ``sensors:``), a YAML
    text, or a list of sensor mappings (the sensor YAML reference's keys)."""
    if isinstance(spec, (list, tuple)):
        return from_node(Node(list(spec), "<sensors>", "sensors"), mechanism)
    if isinstance(spec, str) and "\n" in spec:
        root = parse_yaml(spec, "<sensors>")
        return from_node(root.get("sensors") if root.has("sensors") else root, mechanism)
    return load_sensor_file(os.fspath(spec), mechanism)


def simulate(scenario, duration: float | None = None, seed: int | None = None, settings=()):
    """Simulate a scenario YAML in memory: (result, scenario). ``result.measurements`` is
    {sensor: (stamps (M,), values (M, d))}, ``result.t``/``z``/``zd``/``q``... the ground
    truth; ``scenario.estimator_mechanism()`` the model with the scenario's model errors."""
    sc = scenario if hasattr(scenario, "with_overrides") else load_scenario(os.fspath(scenario))
    sc = sc.with_overrides(duration=duration, seed=seed, settings=list(settings))
    return run(sc), sc


def _options(name: str, options):
    """Validated options (a Spec) of estimator ``name`` from a mapping or an options file."""
    if options is None or isinstance(options, dict):
        return validate(name, options or {}, "<options>", name)
    return load_options(os.fspath(options), [name])[name]


class Filter:
    """One estimator of one mechanism and sensor set, fed time-stamped readings.

    estimator: one of :data:`ESTIMATORS` (``ukf``, ``errorekf``, ``pf``, ...).
    mechanism: a Mechanism or a mechanism YAML path. sensors: a SensorSet, a path, a YAML
    text or a list of sensor mappings (:func:`load_sensors`); default: the mechanism file's
    ``sensors:``. options: a mapping (an options file's section) or an options file path.
    initial, initial_velocity: {independent coordinate: value} of the initial guess
    (default: the mechanism file's); branch: its assembly branch (default: the file's).
    seed: the random generator of a stochastic estimator (the particle filters).
    """

    def __init__(self, estimator: str, mechanism, sensors=None, options=None, *, initial=None,
                 initial_velocity=None, branch: int | None = None, seed: int = 0, context=None):
        if estimator not in estimator_names():
            raise ConfigError("<Filter>", "estimator", f"unknown estimator {estimator!r} (one of {', '.join(estimator_names())})")
        mech = load_mechanism(mechanism) if isinstance(mechanism, (str, os.PathLike)) else mechanism
        if sensors is None:
            sensors = load_sensors(mech.spec.sensors or [], mech)
        elif not hasattr(sensors, "names"):
            sensors = load_sensors(sensors, mech)
        self.name, self.mechanism, self.sensors = estimator, mech, sensors
        self.options = resolve(_options(estimator, options), mech, sensors, context)  # frozen, typed
        self.config = self.options.as_dict()  # the same values, plain (``auto`` resolved)
        self.estimator = make_estimator(estimator, mech, sensors, self.options, rng=estimator_rng(seed, estimator))
        z = mech.q0[mech.independent].astype(float).copy()
        zd = np.zeros(mech.dof)
        names = list(mech.independent_names)
        for values, target, what in ((initial, z, "initial"), (initial_velocity, zd, "initial_velocity")):
            for key, v in (values or {}).items():
                if key not in names:
                    raise ConfigError("<Filter>", f"{what}.{key}", f"not an independent coordinate ({', '.join(names)})")
                target[names.index(key)] = float(v)
        if initial_velocity is None and mech.spec.initial_velocity:
            zd = np.array([mech.spec.initial_velocity.get(c, 0.0) for c in mech.independent], dtype=float)
        q, ok = kinematics.solve_position(mech, z[None], mech.q0[None])
        sz, szd = initial_sigmas(self.options.initial_sigma, mech.dof)
        self.initial = InitialState(z, zd, sz, szd, q[0] if ok[0] else mech.q0.copy(), branch)
        self.stage = EstimatorStage.for_estimator(self.estimator, lambda t: self.initial, keep=True,
                                                  **dict(STAGE_DEFAULTS, reorder_window=0.0))

    # -- feeding -------------------------------------------------------------------------
    @property
    def dt(self) -> float:
        """The filter step [s] (the options' ``step``, resolved by the default rule)."""
        return self.stage.dt

    def update(self, t: float, sensor: str, value) -> None:
        """One reading of ``sensor`` at stamp ``t`` [s]: ``value`` (d,) in SI units (a
        number for one channel). Readings must come in stamp order; the filter predicts
        on its grid up to the reading and fuses it there."""
        self.stage.feed(Measurement(float(t), sensor, np.atleast_1d(np.asarray(value, dtype=float))))

    def feed(self, readings: dict) -> "Filter":
        """Readings of several sensors, {sensor: (stamps (M,), values (M, d) or (M,))}, merged
        in stamp order and fed; then :meth:`flush`. Returns self."""
        events = []
        for sensor, (stamps, values) in readings.items():
            vals = np.asarray(values, dtype=float)
            vals = vals.reshape(len(stamps), -1)
            events += [(float(t), sensor, v) for t, v in zip(stamps, vals)]
        events.sort(key=lambda e: e[0])
        self.stage.feed([Measurement(t, s, v) for t, s, v in events])
        self.flush()
        return self

    def flush(self) -> None:
        """Fuse the readings still waiting for their grid step (the end of the data)."""
        self.stage.flush()

    def reset(self) -> None:
        """Forget the estimate; the next reading starts again from the initial guess."""
        self.stage.reset()

    # -- the latest estimate -------------------------------------------------------------
    @property
    def state(self):
        """The latest estimate as a MechanismSnapshot (stamp, q, qd, qdd, z, zd, zdd, cov,
        branch, branch_probabilities, inputs), or None before the first reading."""
        return self.stage.records[-1].estimate if self.stage.records else None

    def _field(self, name):
        s = self.state
        return None if s is None else getattr(s, name)

    t = property(lambda self: self._field("stamp"), doc="stamp of the latest estimate [s]")
    z = property(lambda self: self._field("z"), doc="independent coordinates (g,) [rad or m]")
    zd = property(lambda self: self._field("zd"), doc="their rates (g,)")
    zdd = property(lambda self: self._field("zdd"), doc="their accelerations (g,)")
    q = property(lambda self: self._field("q"), doc="natural coordinates (n,): points' x, y, angles")
    branch = property(lambda self: self._field("branch"), doc="most probable assembly branch (-1: unknown)")

    @property
    def x(self):
        """[z, zd] (2g,) of the latest estimate (FilterPy's x)."""
        s = self.state
        return None if s is None else np.concatenate([s.z, s.zd])

    @property
    def P(self):
        """Covariance (2g, 2g) of [z, zd] of the latest estimate (FilterPy's P)."""
        return self._field("cov")

    @property
    def inputs(self) -> dict:
        """Estimated unknown inputs {name: value} (N m or N) of the latest estimate."""
        s = self.state
        if s is None or s.inputs is None:
            return {}
        return dict(zip(s.input_names, np.asarray(s.inputs, dtype=float).tolist()))

    @property
    def counters(self) -> dict:
        """What the stage did: received, fused, rejected_gate, reacquisitions, ... (replay's)."""
        return self.stage.counters.as_dict()

    def estimates(self) -> dict:
        """Every step so far as arrays: t (K,), z, zd, zdd (K, g), P (K, 2g, 2g), sd (K, 2g)
        standard deviations of [z, zd], q (K, n), branch (K,), nis (K,) of the step's update
        (NaN without one), inputs (K, k)."""
        recs = self.stage.records
        g, K = self.mechanism.dof, len(recs)
        snaps = [r.estimate for r in recs]
        P = np.array([s.cov if s.cov is not None else np.full((2 * g, 2 * g), np.nan) for s in snaps]).reshape(K, 2 * g, 2 * g)
        nis = [r.update.nis if r.update is not None and r.update.nis is not None else np.nan for r in recs]
        k = len(snaps[0].input_names) if snaps else 0
        return {
            "t": np.array([s.stamp for s in snaps]), "z": np.array([s.z for s in snaps]).reshape(K, g),
            "zd": np.array([s.zd for s in snaps]).reshape(K, g), "zdd": np.array([s.zdd for s in snaps]).reshape(K, g),
            "P": P, "sd": np.sqrt(np.clip(np.diagonal(P, axis1=1, axis2=2), 0, None)),
            "q": np.array([s.q for s in snaps]).reshape(K, self.mechanism.n),
            "branch": np.array([s.branch for s in snaps]), "nis": np.array(nis, dtype=float),
            "inputs": np.array([s.inputs if s.inputs is not None else np.full(k, np.nan) for s in snaps]).reshape(K, k),
        }

    @classmethod
    def from_scenario(cls, estimator: str, scenario, options=None, seed: int = 0) -> "Filter":
        """The estimator a replay of the scenario's bag would run: the scenario's estimator
        model (with its model errors), sensors, initial guess and motor (the rule's force
        limits)."""
        init = scenario.estimator_initial_state()
        mech = scenario.estimator_mechanism()
        names = list(mech.independent_names)
        f = cls(estimator, mech, scenario.estimator_sensors(), options, initial=dict(zip(names, init.z)),
                initial_velocity=dict(zip(names, init.zd)), branch=init.branch, seed=seed,
                context=scenario_context(scenario))
        return f
