"""Write a scenario's simulation to a ROS 2 bag (rosbag2 via ``rosbags``; no ROS needed).

Topics (header stamps equal the bag times, ns-exact):

- ``/mbde/description`` std_msgs/String, transient_local QoS, one message at the start
  time: the YAML description (:mod:`mbde_core.scenario.description`), enough to rebuild
  the truth, the sensors and the estimator's model from the bag alone;
- ``/mbde/ground_truth`` mbde_msgs/MechanismState: q, qd, qdd, z, zd, zdd, the assembly
  branch label, the true inputs (``input_names``/``input_forces``, e.g. the motor
  torque); empty covariance/branch probabilities (exact state);
- ``/mbde/ground_truth/joint_states`` sensor_msgs/JointState: names = coordinate names,
  position/velocity = q/qd, effort = generalized input force on each coordinate;
- one topic per sensor (SensorDataQoS), frame id from the sensor config:
  gyroscopes, accelerometers and IMUs as sensor_msgs/Imu (REP 145: orientation not
  provided, orientation_covariance[0] = -1; a block the sensor does not measure has
  covariance[0] = -1; a measured block has diag(variance) from the noise model,
  sigma^2 + step^2/12, its unmeasured axes read 0 with the block's variance),
  encoders and slider encoders as sensor_msgs/JointState (joint name = the sensor's
  channel, position only), a measured input force (``effort`` sensors: the motor
  torque) as sensor_msgs/JointState with the reading in its ``effort`` array (or the
  array its ``field`` names) and no position. Reference sensors are written the same
  way on their topics.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.rosio import convert as cv
from mbde_core.rosio.bag import BagWriter
from mbde_core.rosio.cdr_batch import Layout
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.stamps import NS_PER_S, ns_to_sec, sec_to_ns
from mbde_core.scenario.description import (DESCRIPTION_TOPIC, GROUND_TRUTH_JOINTS_TOPIC, GROUND_TRUTH_TOPIC,
                                            write_description)
from mbde_core.simulator.core import TruthSnapshot
from mbde_core.simulator.pipeline import pipelined_events

_AXIS_INDEX = {"x": 0, "y": 4, "z": 8}


@dataclass
class BagSummary:
    """What was written: path, storage, counts {topic: n}, types {topic: type},
    ground-truth samples, max |Phi| over them, simulated duration [s], wall time [s]."""

    path: str
    storage: str
    version: int
    counts: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)
    truth_samples: int = 0
    phi_max: float = 0.0
    duration: float = 0.0
    wall_time: float = 0.0


def sensor_message_builder(sensor, factory):
    """f(t, value (d,)) -> the ROS message of one reading of ``sensor``."""
    if sensor.msg_type == cv.JOINT_STATE:
        names = list(sensor.channels)
        field = getattr(sensor, "joint_field", "position")

        def joint(t, value):
            if field == "position":
                return cv.joint_state_msg(factory, t, names, value, frame_id=sensor.frame_id)
            msg = cv.joint_state_msg(factory, t, names, value, frame_id=sensor.frame_id)
            msg.position = factory.array([], "float64")  # the reading goes to its own field
            setattr(msg, field, factory.array([float(v) for v in np.ravel(value)], "float64"))
            return msg

        return joint
    variance = np.asarray(sensor.noise.variance(), dtype=float)
    channels = list(sensor.channels)
    gyro = [i for i, c in enumerate(channels) if c.startswith("gyro")]
    accel = [i for i, c in enumerate(channels) if c.startswith("accel")]
    unknown = [c for c in channels if c not in cv.IMU_CHANNELS]
    if unknown:
        raise ValueError(f"sensor {sensor.name}: no sensor_msgs/Imu field for channel(s) {unknown}")
    gyro_sigma = float(np.sqrt(variance[gyro[0]])) if gyro else None
    accel_sigma = float(np.sqrt(variance[accel[0]])) if accel else None
    slots = [(cv.IMU_CHANNELS[c][0], cv.IMU_CHANNELS[c][1], cv.IMU_CHANNELS[c][2]) for c in channels]

    def imu(t, value):
        msg = cv.imu_msg(factory, t, gyro_z=0.0 if gyro else None, accel_xy=(0.0, 0.0) if accel else None,
                         gyro_sigma=gyro_sigma, accel_sigma=accel_sigma, frame_id=sensor.frame_id)
        for (vec, axis, cov), v, var in zip(slots, value, variance):
            setattr(getattr(msg, vec), axis, float(v))
            getattr(msg, cov)[_AXIS_INDEX[axis]] = float(var)
        return msg

    return imu


def write_simulation_bag(scenario, path, storage: str = "sqlite3", *, version: int = 8,
                         progress=None, processes: int | None = None) -> BagSummary:
    """Simulate ``scenario`` and stream everything into a new bag directory ``path``.

    progress(k, n_steps) is called after every internal step. The bag is closed (and
    readable) also when the simulation fails; the error then propagates. Messages are
    serialised a batch at a time (:class:`_Batches`), bit-identical to building each one
    with :func:`sensor_message_builder` / :mod:`mbde_core.rosio.convert`, and written in
    the order of the events. The ground truth is integrated in a second process when
    there is a core for it (:mod:`mbde_core.simulator.pipeline`; ``processes`` 1: one
    process); the bag's contents are the same either way.
    """
    t_wall = time.perf_counter()
    factory = RosbagsFactory()
    truth = scenario.truth_mechanism()
    cnames, inames = list(truth.coordinate_names), list(truth.independent_names)
    frame = scenario.frame_id
    summary = BagSummary(str(path), storage, version)
    builders = {}
    with BagWriter(path, storage, version=version) as bag:
        topics = [(DESCRIPTION_TOPIC, cv.STRING, "transient_local"),
                  (GROUND_TRUTH_TOPIC, cv.MECHANISM_STATE, "reliable"),
                  (GROUND_TRUTH_JOINTS_TOPIC, cv.JOINT_STATE, "reliable")]
        for sensor in scenario.all_sensors:
            topics.append((sensor.topic, sensor.msg_type, "sensor"))
            builders[sensor.name] = (sensor.topic, sensor_message_builder(sensor, factory))
        for topic, typename, qos in topics:
            bag.add_topic(topic, typename, qos)
            summary.types[topic] = typename
        t0 = ns_to_sec(scenario.start_ns)
        bag.write(DESCRIPTION_TOPIC, t0, cv.string_msg(factory, write_description(scenario)))
        out = _Batches(bag, factory, scenario, cnames, inames, frame, builders)
        for ev in pipelined_events(scenario, progress, processes=processes):
            out.add(ev)
            if isinstance(ev, TruthSnapshot):
                summary.truth_samples += 1
                summary.phi_max = max(summary.phi_max, ev.phi_max)
        out.flush()
        summary.counts = dict(bag.counts)
    summary.duration = scenario.n_steps * scenario.step_ns / 1e9
    summary.wall_time = time.perf_counter() - t_wall
    return summary


class _Batches:
    """Buffers simulation events and writes them a batch at a time, in event order.

    Per topic, the first message is built by the per-message builders and serialised by
    rosbags; its bytes are the template of a :class:`~mbde_core.rosio.cdr_batch.Layout`
    whose numeric fields (stamp, q, readings ...) are filled for the whole batch.
    """

    SIZE = 4096

    def __init__(self, bag, factory, scenario, cnames, inames, frame, builders):
        self.bag, self.factory, self.store = bag, factory, factory.typestore
        self.cnames, self.inames, self.frame, self.builders = cnames, inames, frame, builders
        self.slots = {s.name: _reading_slots(s) for s in scenario.all_sensors}
        self.types = {s.name: s.msg_type for s in scenario.all_sensors}
        self.events: list = []
        self.layouts: dict = {}

    def add(self, ev) -> None:
        self.events.append(ev)
        if len(self.events) >= self.SIZE:
            self.flush()

    def _layout(self, topic, typename, make):
        """The layout of a topic; make() builds its first message (the template)."""
        if topic not in self.layouts:
            self.layouts[topic] = Layout(self.store, typename, self.store.serialize_cdr(make(), typename))
        return self.layouts[topic]

    def flush(self) -> None:
        events, self.events = self.events, []
        if not events:
            return
        groups: dict[str, list[int]] = {}
        for i, ev in enumerate(events):
            key = GROUND_TRUTH_TOPIC if isinstance(ev, TruthSnapshot) else ev.sensor
            groups.setdefault(key, []).append(i)
        data: dict[tuple[str, int], bytes] = {}
        for key, idx in groups.items():
            evs = [events[i] for i in idx]
            stamp = _stamps([e.stamp for e in evs])
            if key == GROUND_TRUTH_TOPIC:
                e0 = evs[0]
                ls = self._layout(GROUND_TRUTH_TOPIC, cv.MECHANISM_STATE, lambda: cv.mechanism_state_msg(
                    self.factory, e0, self.cnames, self.inames, self.frame))
                lj = self._layout(GROUND_TRUTH_JOINTS_TOPIC, cv.JOINT_STATE, lambda: cv.joint_state_msg(
                    self.factory, e0.stamp, self.cnames, e0.q, e0.qd, e0.effort, self.frame))
                vals = dict(stamp)
                for f in ("q", "qd", "qdd", "z", "zd", "zdd"):
                    vals[f] = np.array([getattr(e, f) for e in evs])
                vals["branch"] = np.array([e.branch for e in evs])
                if "input_forces" in ls.slots:
                    vals["input_forces"] = np.array([e.inputs for e in evs])
                joints = {**stamp, "position": vals["q"], "velocity": vals["qd"],
                          "effort": np.array([e.effort for e in evs])}
                for i, a, b in zip(idx, ls.encode(vals, len(evs)), lj.encode(joints, len(evs))):
                    data[(GROUND_TRUTH_TOPIC, i)] = a.tobytes()
                    data[(GROUND_TRUTH_JOINTS_TOPIC, i)] = b.tobytes()
                continue
            topic, build = self.builders[key]
            e0 = evs[0]
            layout = self._layout(topic, self.types[key], lambda: build(e0.stamp, e0.value))
            values = np.array([e.value for e in evs], dtype=float)
            vals = dict(stamp)
            for path, cols in self.slots[key].items():
                vals[path] = values[:, cols]
            for i, row in zip(idx, layout.encode(vals, len(evs))):
                data[(topic, i)] = row.tobytes()
        for i, ev in enumerate(events):
            if isinstance(ev, TruthSnapshot):
                self.bag.write_raw_ns(GROUND_TRUTH_TOPIC, sec_to_ns(ev.stamp), data[(GROUND_TRUTH_TOPIC, i)])
                self.bag.write_raw_ns(GROUND_TRUTH_JOINTS_TOPIC, sec_to_ns(ev.stamp), data[(GROUND_TRUTH_JOINTS_TOPIC, i)])
            else:
                topic = self.builders[ev.sensor][0]
                self.bag.write_raw_ns(topic, sec_to_ns(ev.stamp), data[(topic, i)])


def _stamps(ts) -> dict:
    ns = [sec_to_ns(t) for t in ts]
    return {"header.stamp.sec": np.array([t // NS_PER_S for t in ns]),
            "header.stamp.nanosec": np.array([t % NS_PER_S for t in ns])}


def _reading_slots(sensor) -> dict:
    """{field path: reading columns} of a sensor's message (see sensor_message_builder)."""
    if sensor.msg_type == cv.JOINT_STATE:
        return {getattr(sensor, "joint_field", "position"): list(range(len(sensor.channels)))}
    return {f"{cv.IMU_CHANNELS[c][0]}.{cv.IMU_CHANNELS[c][1]}": [k] for k, c in enumerate(sensor.channels)}
