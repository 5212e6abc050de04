"""Sensor readings and estimates <-> ROS messages, shared by ``mbde replay`` and the live nodes.

ROS-free: messages are read/filled through attributes only (rosbags or rclpy objects).
"""
from __future__ import annotations

import numpy as np

from mbde_core.errors import DataError
from mbde_core.rosio.convert import (
    IMU,
    JOINT_STATE,
    imu_values,
    joint_state_msg,
    joint_state_values,
    mechanism_state_msg,
)
from mbde_core.rosio.stamps import stamp_to_sec
from mbde_core.types import MechanismSnapshot, Measurement


def sensor_reading(sensor, msg) -> Measurement:
    """The Measurement of ``sensor`` carried by ``msg`` (its sensor_msgs/Imu or JointState).

    The stamp is the message header's; values are the sensor's channels. Raises DataError
    (one line) for malformed messages or missing channels -- callers count and skip.
    """
    try:
        t = stamp_to_sec(msg.header.stamp)
    except (AttributeError, TypeError, ValueError) as exc:
        raise DataError(f"{sensor.name}: message without a valid header stamp ({exc})") from None
    if sensor.msg_type == IMU:
        value = imu_values(msg, sensor.channels)
    elif sensor.msg_type == JOINT_STATE:  # position, or the field of a measured input (effort)
        vals = joint_state_values(msg, sensor.channels, getattr(sensor, "joint_field", "position"))
        missing = [c for c, v in zip(sensor.channels, vals) if v is None]
        if missing:
            raise DataError(f"{sensor.name}: JointState without joint(s) {', '.join(missing)}")
        value = np.array(vals, dtype=float)
    else:  # pragma: no cover - all sensor kinds publish one of the two
        raise DataError(f"{sensor.name}: unsupported message type {sensor.msg_type}")
    return Measurement(t, sensor.name, value)


def estimate_messages(factory, snap: MechanismSnapshot, mech, frame_id: str = "world", trust=None):
    """(mbde_msgs/MechanismState, sensor_msgs/JointState) of an estimate (trust: its
    verdict, :func:`~mbde_core.rosio.convert.mechanism_state_msg`).

    The JointState has one joint per natural coordinate (names = coordinate names,
    position = q, velocity = qd) and effort = the estimated generalized input on that
    coordinate (0 where none is estimated), the convention of the ground truth topic.
    """
    state = mechanism_state_msg(factory, snap, mech.coordinate_names, mech.independent_names, frame_id, trust)
    effort = np.zeros(mech.n)
    if snap.inputs is not None:
        for name, u in zip(snap.input_names, snap.inputs):
            if name in mech.coordinate_names:
                effort[mech.coordinate_names.index(name)] += u
    joints = joint_state_msg(factory, snap.stamp, mech.coordinate_names, snap.q, snap.qd, effort, frame_id)
    return state, joints
