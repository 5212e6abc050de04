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
  channel, position only). Reference sensors are written the same way on their topics.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mbde_core.rosio import convert as cv
from mbde_core.rosio.bag import BagWriter
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.stamps import ns_to_sec
from mbde_core.scenario.description import (DESCRIPTION_TOPIC, GROUND_TRUTH_JOINTS_TOPIC, GROUND_TRUTH_TOPIC,
                                            write_description)
from mbde_core.simulator.core import TruthSnapshot, simulate

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

        def joint(t, value):
            return cv.joint_state_msg(factory, t, names, value, frame_id=sensor.frame_id)

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
                         progress=None) -> BagSummary:
    """Simulate ``scenario`` and stream everything into a new bag directory ``path``.

    progress(k, n_steps) is called after every internal step. The bag is closed (and
    readable) also when the simulation fails; the error then propagates.
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
        for ev in simulate(scenario, progress=progress):
            if isinstance(ev, TruthSnapshot):
                bag.write(GROUND_TRUTH_TOPIC, ev.stamp, cv.mechanism_state_msg(factory, ev, cnames, inames, frame))
                bag.write(GROUND_TRUTH_JOINTS_TOPIC, ev.stamp,
                          cv.joint_state_msg(factory, ev.stamp, cnames, ev.q, ev.qd, ev.effort, frame))
                summary.truth_samples += 1
                summary.phi_max = max(summary.phi_max, ev.phi_max)
            else:
                topic, build = builders[ev.sensor]
                bag.write(topic, ev.stamp, build(ev.stamp, ev.value))
        summary.counts = dict(bag.counts)
    summary.duration = scenario.n_steps * scenario.step_ns / 1e9
    summary.wall_time = time.perf_counter() - t_wall
    return summary
