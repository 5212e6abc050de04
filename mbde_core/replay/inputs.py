"""What ``mbde replay`` reads from a bag: model, sensors, readings, ground truth.

The model and the sensors come from the bag's ``/mbde/description`` (written by
``mbde simulate``: the estimator's model with the scenario's model errors), or from
``--mechanism`` / ``--sensors`` files for bags recorded elsewhere (``--mechanism`` alone
uses the mechanism file's own ``sensors:`` section). Readings are taken from each
sensor's topic with the header stamp; malformed messages are counted and skipped.
Ground truth (``/mbde/ground_truth``) is optional: without it the metrics that need it
are omitted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from mbde_core.errors import DataError, MbdeError
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import joint_state_values, snapshot_from_mechanism_state, string_from_msg
from mbde_core.rosio.sensor_io import sensor_reading
from mbde_core.types import Measurement

DESCRIPTION_TOPIC = "/mbde/description"
TRUTH_TOPIC = "/mbde/ground_truth"
TRUTH_JOINTS_TOPIC = "/mbde/ground_truth/joint_states"


@dataclass
class TruthSeries:
    """Ground truth samples: t (K,), q/qd/qdd (K, n), z/zd/zdd (K, g), inputs (K, k)."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    branch: np.ndarray
    input_names: list
    inputs: np.ndarray
    effort: np.ndarray | None = None  # (K, n) true generalized input per coordinate
    cov: np.ndarray | None = None  # (K, 2g, 2g) covariance of [z, zd] of an estimated reference
    source: str = "ground truth"  # or "smoother" (mbde replay --reference smoother)


@dataclass
class ReplayInputs:
    bag: str
    mechanism: object  # the estimators' Mechanism
    sensors: object  # SensorSet on that mechanism
    measurements: list[Measurement]
    truth: TruthSeries | None
    initial_z: np.ndarray
    initial_zd: np.ndarray
    initial_q: np.ndarray
    initial_branch: int | None
    scenario: object | None
    start: float
    end: float
    skipped: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 0.0)


def load_inputs(bag: str, mechanism_file: str | None = None, sensors_file: str | None = None) -> ReplayInputs:
    """Read everything a replay needs from ``bag`` (DataError/ConfigError on problems)."""
    from mbde_core.model.mechanism import load_mechanism
    from mbde_core.scenario.description import scenario_from_description
    from mbde_core.sensors.config import load_sensor_file, load_sensors
    from mbde_core.config.yamlnode import Node

    reader = BagReader(bag)
    with reader:
        topics = {t: ty for t, ty, _ in reader.topics()}
        scenario = None
        if mechanism_file is None:
            if DESCRIPTION_TOPIC not in topics:
                raise DataError(f"{bag}: no {DESCRIPTION_TOPIC} in the bag: give --mechanism (and --sensors)")
            text = None
            for _, _, msg in reader.messages([DESCRIPTION_TOPIC]):
                text = string_from_msg(msg)
                break
            try:
                scenario = scenario_from_description(text, f"{bag}:{DESCRIPTION_TOPIC}")
            except MbdeError:
                raise
            mech = scenario.estimator_mechanism()
            sensors = scenario.estimator_sensors()
            init = scenario.estimator_initial_state()
            z0, zd0, q0, branch0 = init.z, init.zd, init.q, init.branch
        else:
            mech = load_mechanism(mechanism_file)
            if sensors_file is not None:
                sensors = load_sensor_file(sensors_file, mech)
            else:
                sensors = load_sensors(Node(mech.spec.sensors, mech.spec.file, "sensors"), mech)
            if len(sensors) == 0:
                raise DataError(f"{mechanism_file}: no sensors: give --sensors or a `sensors:` section")
            z0, zd0, q0, branch0 = mech.q0[mech.independent], mech.qd0[mech.independent], mech.q0, None
        by_topic: dict[str, list] = {}
        for s in sensors:
            by_topic.setdefault(s.topic, []).append(s)
        missing = [t for t in by_topic if t not in topics]
        if len(missing) == len(by_topic):
            raise DataError(f"{bag}: none of the sensor topics is in the bag ({', '.join(sorted(by_topic))})")
        measurements: list[Measurement] = []
        skipped: dict[str, int] = {}
        counts: dict[str, int] = {s.name: 0 for s in sensors}
        truth_rows, effort_rows = [], []
        extra = [t for t in (TRUTH_TOPIC, TRUTH_JOINTS_TOPIC) if t in topics]
        want = [t for t in by_topic if t in topics] + extra
        for topic, _, msg in reader.messages(want):
            if topic == TRUTH_TOPIC:
                truth_rows.append(msg)
                continue
            if topic == TRUTH_JOINTS_TOPIC:
                try:
                    effort_rows.append(joint_state_values(msg, mech.coordinate_names, "effort"))
                except DataError:
                    pass
                continue
            for s in by_topic[topic]:
                try:
                    measurements.append(sensor_reading(s, msg))
                    counts[s.name] += 1
                except DataError:
                    skipped[s.name] = skipped.get(s.name, 0) + 1
        for topic, n in reader.skipped.items():  # undecodable messages, per topic
            skipped[f"undecodable {topic}"] = n
        start, end = reader.start or 0.0, reader.end or 0.0
    measurements.sort(key=lambda m: m.stamp)
    truth = _truth(truth_rows, mech) if truth_rows else None
    if truth is not None and len(effort_rows) == len(truth.t) and all(None not in r for r in effort_rows):
        truth.effort = np.array(effort_rows, dtype=float)
    if truth is not None and scenario is None:
        # bag with ground truth but no description: start from the truth (known initial state)
        z0, zd0 = truth.z[0], truth.zd[0]
    return ReplayInputs(os.fspath(bag), mech, sensors, measurements, truth, np.asarray(z0, float),
                        np.asarray(zd0, float), np.asarray(q0, float), branch0, scenario, start, end, skipped, counts)


def _truth(msgs, mech) -> TruthSeries:
    snaps = []
    for msg in msgs:
        try:
            snaps.append(snapshot_from_mechanism_state(msg))
        except DataError:
            continue
    if not snaps:
        return None
    stack = lambda a: np.array([getattr(s, a) for s in snaps])  # noqa: E731
    names = snaps[0].input_names
    inputs = np.array([s.inputs if s.inputs is not None else np.zeros(len(names)) for s in snaps]).reshape(len(snaps), -1)
    return TruthSeries(stack("stamp"), stack("q"), stack("qd"), stack("qdd"), stack("z"), stack("zd"), stack("zdd"),
                       np.array([s.branch for s in snaps]), list(names), inputs)
