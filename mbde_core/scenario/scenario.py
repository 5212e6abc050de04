"""Scenario: a mechanism, its sensors, initial state, loads, model errors and run settings.

A scenario YAML file (``config/scenarios/*.yaml``) describes one simulated experiment::

    name: fourbar_gyro                     # default: the file name
    description: paper 003 sec. 4.3 ...
    mechanism: ../mechanisms/fourbar.yaml  # path relative to this file, or an inline mapping
    sensors:                               # sensor schema of mbde_core.sensors.config
      - {name: gyro_coupler, type: gyroscope, body: coupler, period: 0.005, noise: {sigma: deg2rad(1)}}
    # or  sensors_file: sensors.yaml       # (a file with a top-level `sensors:` list)
    # neither: the mechanism file's own `sensors:` section
    reference_sensors: [...]               # simulated and recorded for comparison only, never
                                           # for an estimator (topics /mbde/reference/<name>)
    initial_state:                         # default: the mechanism file's configuration and velocity
      position: {theta: 0.3}               # independent coordinates (missing ones: the file's)
      velocity: {theta: 2.0}               # (missing ones: the file's initial_velocity or 0)
      # or  release_from: {theta: 1.2}     # at rest at that position ("released by hand")
      branch: 0                            # assembly branch label (BranchTool; 0 = the file's)
    loads: [...]                           # extra loads (mechanism load schema), known to the estimator
    unmodelled_loads: [...]                # truth only (e.g. friction the estimator neglects)
    speed_controller: {...}                # PI motor (mbde_core.scenario.controller), truth only
    duration: 10.0                         # s
    step: 0.001                            # internal integration step [s]
    integrator: ali3p                      # default (drift-free index-3 augmented Lagrangian)
    ground_truth_rate: 1000                # Hz (or ground_truth_period [s]); default every step
    seed: 1                                # noise streams (one per sensor, see simulator)
    start_time: 0.0                        # bag time of the first sample [s] (stamps are float64
                                           # seconds: ns-exact below ~4.5e6 s, ~240 ns at epoch times)
    frame_id: world                        # frame of the ground truth messages
    filter_step: 0.005                     # optional: the estimator step the scenario is made for
    model_errors: {...}                    # estimator's model only (mbde_core.scenario.model_errors)

Every sensor period (and the ground-truth period) must be an integer multiple of
``step``. Any problem raises a one-line :class:`ConfigError` (file, key path, what is
wrong); the command line exits with status 2.
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.engine.integrators import INTEGRATOR_NAMES
from mbde_core.errors import ConfigError
from mbde_core.model import loader as mech_loader
from mbde_core.model.loader_items import read_load
from mbde_core.model.mechanism import Mechanism
from mbde_core.model.spec import LoadSpec, MechanismSpec, TimeFunction
from mbde_core.rosio.stamps import sec_to_ns
from mbde_core.scenario.controller import HeldInput, SpeedControllerSpec, parse_speed_controller
from mbde_core.scenario.initial import InitialState, estimator_initial_state, read_initial_state
from mbde_core.scenario.model_errors import ModelErrors, body_scale, estimator_gravity, parse_model_errors
from mbde_core.scenario.overrides import apply_settings
from mbde_core.sensors.config import load_sensors
from mbde_core.sensors.sensor_set import SensorSet

TOP_KEYS = (
    "name", "description", "mechanism", "sensors", "sensors_file", "reference_sensors",
    "initial_state", "loads", "unmodelled_loads", "speed_controller", "duration", "step",
    "integrator", "ground_truth_rate", "ground_truth_period", "seed", "start_time", "frame_id",
    "filter_step", "model_errors",
)
REQUIRED = ("mechanism", "duration", "step")
REFERENCE_TOPIC = "/mbde/reference/{}"
RESERVED_TOPICS = ("/mbde/description", "/mbde/ground_truth", "/mbde/ground_truth/joint_states")
_TOL = 1e-9  # relative tolerance of "integer multiple of the step"


@dataclass
class TruthModel:
    """The true system: ``mechanism`` (all loads), ``inputs`` {name: HeldInput} that the
    simulator sets (the speed controller's torque), ``controller`` spec or None."""

    mechanism: Mechanism
    inputs: dict[str, HeldInput] = field(default_factory=dict)
    controller: SpeedControllerSpec | None = None


def load_scenario(path: str | os.PathLike, settings=()) -> "Scenario":
    """Load a scenario YAML file, applying ``--set`` style settings ('key.path=value')."""
    root = read_yaml(path)
    if not isinstance(root.value, dict):
        raise root.error("expected a mapping (a scenario document)")
    doc = apply_settings(root.value, settings, TOP_KEYS) if settings else root.value
    return Scenario(doc, file=os.fspath(path), base_dir=os.path.dirname(os.path.abspath(path)))


class Scenario:
    """A loaded, validated scenario (see the module docstring for the YAML format).

    Attributes: name, description, file, raw (the document after settings), seed,
    duration [s], step [s], step_ns, n_steps, integrator (name), start_time [s],
    start_ns, ground_truth_period [s], ground_truth_every (steps), frame_id,
    filter_step [s] or None, model_errors (ModelErrors), controller
    (SpeedControllerSpec or None), initial_state (InitialState on the truth model),
    sensors (SensorSet on the truth model), reference_sensors (SensorSet),
    sensor_every {sensor name: period in steps}, mechanism_file (path or None).
    """

    def __init__(self, doc: dict, *, file: str = "<scenario>", base_dir: str | None = None):
        self.file = file
        self.base_dir = base_dir or os.getcwd()
        self.raw = doc
        root = Node(doc, file, "")
        root.mapping(required=REQUIRED, optional=TOP_KEYS)
        self.name = root.get("name").string() if root.has("name") else os.path.splitext(os.path.basename(file))[0]
        self.description = root.get("description").string() if root.has("description") else ""

        # -- run settings ----------------------------------------------------------------
        self.step = root.get("step").number(positive=True)
        self.step_ns = _whole_ns(root.get("step"), self.step)
        self.step = self.step_ns / 1e9
        self.duration = root.get("duration").number(positive=True)
        self.n_steps = int(math.floor(self.duration / self.step * (1 + _TOL) + _TOL))
        if self.n_steps < 1:
            raise root.get("duration").error(f"shorter than one step ({self.step:g} s)")
        self.start_time = root.get("start_time").number(nonnegative=True) if root.has("start_time") else 0.0
        self.start_ns = _whole_ns(root.get("start_time"), self.start_time) if self.start_time else 0
        self.seed = int(root.get("seed").number(integer=True, nonnegative=True)) if root.has("seed") else 0
        self.integrator = root.get("integrator").string(INTEGRATOR_NAMES) if root.has("integrator") else "ali3p"
        self.frame_id = root.get("frame_id").string() if root.has("frame_id") else "world"
        self.filter_step = root.get("filter_step").number(positive=True) if root.has("filter_step") else None
        if root.has("ground_truth_rate") and root.has("ground_truth_period"):
            raise root.error("give either 'ground_truth_rate' (Hz) or 'ground_truth_period' (s), not both")
        if root.has("ground_truth_rate"):
            node = root.get("ground_truth_rate")
            self.ground_truth_every = self._multiple(node, 1.0 / node.number(positive=True))
        elif root.has("ground_truth_period"):
            node = root.get("ground_truth_period")
            self.ground_truth_every = self._multiple(node, node.number(positive=True))
        else:
            self.ground_truth_every = 1
        self.ground_truth_period = self.ground_truth_every * self.step

        # -- mechanism, loads, controller ------------------------------------------------------
        self.spec, self.mechanism_file = self._mechanism_spec(root)
        if self.spec.drivers:  # their functions of time would meet bag/ROS stamps, not the drive signals
            raise root.get("mechanism").error(
                "driving_constraints are not supported in scenarios yet (simulation, replay and the live nodes would "
                "need the drive signals as inputs); the estimators pf and vipf take such a model in Python "
                "(mbde bench vi simulates the crane)")
        self._vars = _variables(self.spec)
        self.known_loads = self._loads(root.get("loads"), len(self.spec.loads))
        self.unmodelled_loads = self._loads(root.get("unmodelled_loads"), len(self.spec.loads) + len(self.known_loads))
        self.controller = None
        if root.get("speed_controller").value is not None:
            coords = {c: i for i, c in enumerate(self.spec.coordinate_names())}
            self.controller = parse_speed_controller(root.get("speed_controller"), coords, self._vars)
        self._truth = self.truth_model()
        truth = self._truth.mechanism

        # -- sensors ----------------------------------------------------------------------------
        self._sensor_node, self.sensors_file = self._sensor_source(root)
        self._reference_node = _with_default_topics(root.get("reference_sensors"))
        self.sensors = load_sensors(self._sensor_node, truth)
        self.reference_sensors = load_sensors(self._reference_node, truth)
        self.sensor_every: dict[str, int] = {}
        topics = dict.fromkeys(RESERVED_TOPICS, "mbde simulate")
        for node, sset in ((self._sensor_node, self.sensors), (self._reference_node, self.reference_sensors)):
            for k, sensor in enumerate(sset.ordered):  # measurement and known-input sensors, in file order
                item = Node(node.value[k], node.file, node.child_path(k))
                if sensor.name in self.sensor_every:
                    raise item.get("name").error(f"duplicate sensor name {sensor.name!r}")
                if sensor.topic in topics:
                    where = item.get("topic") if item.has("topic") else item
                    raise where.error(f"topic {sensor.topic} is already used by {topics[sensor.topic]}")
                topics[sensor.topic] = f"sensor {sensor.name!r}"
                key = "period" if item.has("period") else "rate"
                self.sensor_every[sensor.name] = self._multiple(item.get(key), sensor.period, what="sensor period")

        # -- initial state, model errors, estimator model ------------------------------------------
        self.initial_state = read_initial_state(root.get("initial_state"), truth, self._vars)
        self.model_errors: ModelErrors = parse_model_errors(root.get("model_errors"), truth, self._vars)
        self._estimator = self._build_estimator()
        self._estimator_initial = estimator_initial_state(root.get("model_errors"), self._estimator, self.initial_state,
                                                          self.model_errors)

    # =====================================================================================
    # public API
    # =====================================================================================
    def truth_model(self) -> TruthModel:
        """A fresh true system: mechanism with every load (file, ``loads``, ``unmodelled_loads``)
        plus the speed controller's torque as a held generalized force (0 until set)."""
        loads = list(self.spec.loads) + list(self.known_loads) + list(self.unmodelled_loads)
        inputs = {}
        if self.controller is not None:
            held = HeldInput(0.0)
            inputs[self.controller.name] = held
            loads.append(LoadSpec(kind="generalized_force", name=self.controller.name,
                                  coordinate=self.controller.coordinate,
                                  value=(TimeFunction("speed_controller", held),)))
        return TruthModel(Mechanism(self.spec.replace(loads=tuple(loads))), inputs, self.controller)

    def truth_mechanism(self) -> Mechanism:
        """The true mechanism (shared instance; the controller torque in it stays 0: simulate
        with :mod:`mbde_core.simulator`, which drives its own :meth:`truth_model`)."""
        return self._truth.mechanism

    def estimator_mechanism(self) -> Mechanism:
        """The estimator's model: the mechanism file plus the known ``loads``, with the model
        errors applied; no unmodelled loads, no controller torque (an unknown input).
        Same independent coordinates as the truth."""
        return self._estimator

    def sensors_for(self, mech: Mechanism, reference: bool = False) -> SensorSet:
        """The scenario's sensors (or reference sensors) built on another model, e.g. the
        estimator's (Jacobians then use its geometry)."""
        return load_sensors(self._reference_node if reference else self._sensor_node, mech)

    def estimator_sensors(self) -> SensorSet:
        """The (non-reference) sensors built on the estimator's model."""
        return self.sensors_for(self._estimator)

    def estimator_initial_state(self) -> InitialState:
        """The estimator's initial guess: true z, zd plus the ``model_errors`` initial offsets,
        assembled on the true branch of the estimator's model."""
        return self._estimator_initial

    def with_overrides(self, *, sensor_period: float | None = None, gravity_error: float | None = None,
                       seed: int | None = None, duration: float | None = None, settings=()) -> "Scenario":
        """A new Scenario with changes: every (non-reference) sensor's period [s], the gravity
        model error [m/s^2], the seed, the duration [s], then 'key.path=value' settings."""
        doc = copy.deepcopy(self.raw)
        if sensor_period is not None:
            doc.pop("sensors_file", None)
            sensors = copy.deepcopy(self._sensor_node.value) or []
            for entry in sensors:
                entry.pop("rate", None)
                entry["period"] = float(sensor_period)
            doc["sensors"] = sensors
        if gravity_error is not None:
            errors = doc.get("model_errors") or {}
            errors["gravity"] = float(gravity_error)
            doc["model_errors"] = errors
        if seed is not None:
            doc["seed"] = int(seed)
        if duration is not None:
            doc["duration"] = float(duration)
        if settings:
            doc = apply_settings(doc, settings, TOP_KEYS)
        return Scenario(doc, file=self.file, base_dir=self.base_dir)

    def document(self) -> dict:
        """Self-contained scenario document: the mechanism and the sensors inline (no file
        references), reference sensors with their topics. Loads back with ``Scenario(doc)``."""
        doc = copy.deepcopy(self.raw)
        mech = copy.deepcopy(self.spec.raw)
        mech.setdefault("name", self.spec.name)
        doc["mechanism"] = mech
        doc.pop("sensors_file", None)
        doc["sensors"] = copy.deepcopy(self._sensor_node.value) or []
        if self._reference_node.value:
            doc["reference_sensors"] = copy.deepcopy(self._reference_node.value)
        doc.setdefault("name", self.name)
        return doc

    @property
    def all_sensors(self) -> list:
        """Sensors then reference sensors (the order the simulator samples them in), each
        in file order, known-input sensors (a measured motor torque) included."""
        return list(self.sensors.ordered) + list(self.reference_sensors.ordered)

    def __repr__(self) -> str:
        return (f"<Scenario {self.name!r}: {self.spec.name}, {len(self.sensors)} sensor(s), "
                f"{self.duration:g} s at {self.step:g} s ({self.integrator})>")

    # =====================================================================================
    # parsing helpers
    # =====================================================================================
    def _multiple(self, node: Node, period: float, what: str = "period") -> int:
        k = period / self.step
        m = int(round(k))
        if m < 1 or abs(k - m) > 1e-6 * max(k, 1.0):
            raise node.error(f"{what} {period:.9g} s is not an integer multiple of the internal step "
                             f"{self.step:.9g} s ({k:.6g} steps)")
        return m

    def _mechanism_spec(self, root: Node) -> tuple[MechanismSpec, str | None]:
        node = root.get("mechanism")
        if isinstance(node.value, str):
            path = self._resolve(node.value)
            if not os.path.isfile(path):
                raise node.error(f"mechanism file not found: {path}")
            return mech_loader.load_mechanism_spec(path), path
        if isinstance(node.value, dict):
            return mech_loader.spec_from_node(Node(node.value, node.file, node.path)), None
        raise node.error("expected a mechanism file path or an inline mechanism mapping")

    def _resolve(self, rel: str) -> str:
        path = os.path.expanduser(rel)
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.base_dir, path))

    def _loads(self, node: Node, first_index: int) -> tuple[LoadSpec, ...]:
        """Loads in the mechanism schema, resolved against the mechanism's names."""
        if node.value is None:
            return ()
        spec = self.spec
        points = list(spec.points)
        point_index = {p.name: i for i, p in enumerate(points)}
        body_index = {b.name: i for i, b in enumerate(spec.bodies)}
        coord_index = {c: i for i, c in enumerate(spec.coordinate_names())}
        # the mechanism loader's own load parser (mbde_core.model.loader), same schema and errors
        return tuple(read_load(item, first_index + i, point_index, body_index, coord_index, points,
                               list(spec.bodies), self._vars)
                     for i, item in enumerate(node.sequence()))

    def _sensor_source(self, root: Node) -> tuple[Node, str | None]:
        if root.has("sensors") and root.has("sensors_file"):
            raise root.error("give either 'sensors' or 'sensors_file', not both")
        if root.has("sensors_file"):
            fnode = root.get("sensors_file")
            path = self._resolve(fnode.string())
            if not os.path.isfile(path):
                raise fnode.error(f"sensors file not found: {path}")
            sroot = read_yaml(path)
            sroot.mapping(required=("sensors",), optional=("description",))
            node = sroot.get("sensors")
            node.sequence()
            return node, path
        if root.has("sensors"):
            node = root.get("sensors")
            if node.value is not None:
                node.sequence()
            return node, None
        return Node(self.spec.sensors, self.mechanism_file or self.file,
                    "sensors" if self.mechanism_file else "mechanism.sensors"), None

    def _build_estimator(self) -> Mechanism:
        spec = self.spec.replace(loads=tuple(self.spec.loads) + tuple(self.known_loads),
                                 independent=tuple(int(i) for i in self._truth.mechanism.independent))
        base = Mechanism(spec)
        errors = self.model_errors
        gravity = estimator_gravity(base, errors)
        scale = body_scale(errors)
        if gravity is None and not scale:
            return base
        try:
            return base.modified(gravity=gravity, body_scale=scale or None)
        except ConfigError as exc:
            raise ConfigError(self.file, "model_errors", f"the estimator's model cannot be built: {exc.message}") from None

# ------------------------------------------------------------------------------------------
def _whole_ns(node: Node, seconds: float) -> int:
    """Seconds -> integer ns (exact rational value of the float, rounded; 1e-3 s -> 1000000)."""
    ns = sec_to_ns(seconds)
    if abs(ns - seconds * 1e9) > max(1e-3, 1e-12 * seconds * 1e9):
        raise node.error(f"{seconds!r} s is not a whole number of nanoseconds")
    return ns


def _variables(spec: MechanismSpec) -> dict[str, float]:
    """Expression variables of the mechanism file: parameters, x<i>, y<i> of its points."""
    out = dict(spec.parameters)
    for i, p in enumerate(spec.points):
        out[f"x{i}"] = p.x
        out[f"y{i}"] = p.y
    return out


def _with_default_topics(node: Node) -> Node:
    """Reference sensors publish on /mbde/reference/<name> unless they name a topic."""
    if node.value is None:
        return node
    items = node.sequence()
    out = []
    for item in items:
        v = item.value
        if isinstance(v, dict) and "topic" not in v and isinstance(v.get("name"), str):
            v = dict(v)
            v["topic"] = REFERENCE_TOPIC.format(v["name"])
        out.append(v)
    return Node(out, node.file, node.path)
