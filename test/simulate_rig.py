"""The simulator tests' rig: the shipped scenarios, the ground-truth topics, and a
slider-crank scenario carrying every sensor kind (``ALL_SENSORS``, simulated once per
module by the ``all_sensors`` fixture)."""
import os

import pytest

from conftest import REPO, mech_path
from mbde_core.scenario import Scenario
from mbde_core.simulator import run

SCEN_DIR = os.path.join(REPO, "config", "scenarios")
GT, GT_JS, DESC = "/mbde/ground_truth", "/mbde/ground_truth/joint_states", "/mbde/description"


def scen(name):
    return os.path.join(SCEN_DIR, name + ".yaml")


# Every sensor kind on the slider-crank, driven by the speed controller: exercises every
# message conversion, the true input and reference sensors.
ALL_SENSORS = {
    "name": "all_sensors",
    "mechanism": mech_path("slider_crank"),
    "sensors": [
        {"name": "gyro_rod", "type": "gyroscope", "body": "rod", "period": 0.002, "frame_id": "rod_gyro",
         "noise": {"sigma": 0.01}},
        {"name": "acc_slider", "type": "accelerometer", "slider": "slider", "period": 0.001, "noise": {"sigma": 0.05}},
        {"name": "acc_rod", "type": "accelerometer", "body": "rod", "offset": [0.1, 0.0], "axes": [0, "pi/2"],
         "period": 0.004, "noise": {"sigma": [0.1, 0.2], "quantization": 0.01}},
        {"name": "imu_crank", "type": "imu", "body": "crank", "offset": [0.03, 0], "period": 0.005,
         "noise": {"sigma": [0.01, 0.1, 0.3]}},
        {"name": "enc_crank", "type": "encoder", "body": "crank", "period": 0.003, "joint_name": "crank_joint",
         "counts_per_revolution": 4096, "noise": {"sigma": 0.001}},
        {"name": "lin", "type": "slider_position", "slider": "slider", "period": 0.001, "noise": {"sigma": 1e-4}},
    ],
    "reference_sensors": [{"name": "ref_enc", "type": "encoder", "body": "crank", "period": 0.001, "noise": {"sigma": 0}}],
    "unmodelled_loads": [{"type": "point_damping", "point": "P2", "c": 1.0}],
    "speed_controller": {"coordinate": "theta", "target": {"steps": [[0, 20], [0.05, 30]]}, "kp": 1.2, "ki": 40,
                         "torque_limit": 5},
    "initial_state": {"velocity": {"theta": 5.0}},
    "duration": 0.1,
    "step": 0.001,
    "start_time": 1000.25,   # a later start: stamps stay ns-exact
    "ground_truth_period": 0.002,
    "seed": 7,
}


@pytest.fixture(scope="module")
def all_sensors():
    sc = Scenario(ALL_SENSORS, file="all_sensors.yaml")
    return sc, run(sc)
