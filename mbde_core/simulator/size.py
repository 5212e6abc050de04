"""How many bytes ``mbde simulate`` will write, checked against the free disk before it runs.

Per simulated second the bag holds, for every sensor, ``rate`` messages of its type, and
the ground truth (a MechanismState and a JointState per ground-truth sample). Each
message costs its CDR size (built here with the same message builders the writer uses,
so names, frame ids and array lengths count) plus :data:`RECORD_OVERHEAD` bytes of
storage (mcap message record, chunk and index entries; a sqlite3 row and its index).
"""
from __future__ import annotations

import os
import shutil

import numpy as np

from mbde_core.errors import ConfigError
from mbde_core.rosio import convert as cv
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.simulator.bag import sensor_message_builder
from mbde_core.simulator.core import TruthSnapshot

# storage bytes per message beyond its CDR payload: with 64 the estimate is 6-8 % above
# the bags written (fourbar_gyro, pf_sim, adekf_slider_crank; mcap and sqlite3, 5 s)
RECORD_OVERHEAD = 64
MARGIN_BYTES = 64 * 2**20  # left free beyond the estimate


def bytes_per_second(scenario) -> float:
    """Estimated bag bytes per simulated second of ``scenario`` (see module doc)."""
    f = RosbagsFactory()
    store = f.typestore
    total = 0.0
    for sensor in scenario.all_sensors:
        msg = sensor_message_builder(sensor, f)(0.0, np.zeros(len(sensor.channels)))
        size = len(store.serialize_cdr(msg, sensor.msg_type)) + RECORD_OVERHEAD
        total += size / (scenario.sensor_every[sensor.name] * scenario.step)
    truth = scenario.truth_mechanism()
    n, g = truth.n, truth.dof
    k = len(truth.spec.loads) + 1  # true inputs: at most every load and the speed controller
    z = np.zeros
    snap = TruthSnapshot(0.0, z(n), z(n), z(n), z(g), z(g), z(g), input_names=[f"u{i}" for i in range(k)],
                         inputs=z(k), effort=z(n))
    state = cv.mechanism_state_msg(f, snap, truth.coordinate_names, truth.independent_names, scenario.frame_id)
    joints = cv.joint_state_msg(f, 0.0, list(truth.coordinate_names), z(n), z(n), z(n), scenario.frame_id)
    per_truth = (len(store.serialize_cdr(state, cv.MECHANISM_STATE)) + len(store.serialize_cdr(joints, cv.JOINT_STATE))
                 + 2 * RECORD_OVERHEAD)
    return total + per_truth / scenario.ground_truth_period


def _existing(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        p = os.path.dirname(p)
    return p


def check_times(scenario) -> None:
    """ConfigError unless the bag's last stamp fits rosbag2's int64 nanoseconds (2262)."""
    if scenario.start_ns + (scenario.n_steps + 1) * scenario.step_ns >= 2**63:
        raise ConfigError(scenario.file, "duration", "start_time + duration is beyond the year 2262 (bag times are "
                          "int64 nanoseconds)")


def check_disk(scenario, out: str) -> float:
    """ConfigError (the scenario's ``duration``) if the bag of ``scenario`` would not fit on
    the disk that holds ``out``; returns the estimated size [bytes]."""
    rate = bytes_per_second(scenario)
    need = rate * scenario.duration
    folder = _existing(out)
    free = shutil.disk_usage(folder).free
    if not np.isfinite(need) or need + MARGIN_BYTES > free:
        raise ConfigError(scenario.file, "duration",
                          f"{scenario.duration:g} s would write a bag of about {_size(need)} ({_size(rate)} per "
                          f"simulated second), more than the {_size(free)} free on {folder}")
    return need


def _size(b: float) -> str:
    if not np.isfinite(b):
        return f"{b} B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if b < 1000:
            return f"{b:.3g} {unit}"
        b /= 1000
    return f"{b:.3g} PB"
