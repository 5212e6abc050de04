"""A measured motor torque (``type: effort``): its YAML, its readings in a simulated bag
and from the live encoder driver against the simulator's true torque (which it did not
produce), its decoding by replay, and the measurement sensors that estimators see."""
from __future__ import annotations

import numpy as np
import pytest

from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.sensors.effort import input_matrix
from linkages import USER_SLIDER_CRANK

MECH = "\nname: crank_user" + USER_SLIDER_CRANK

SCENARIO = {
    "name": "motor_effort",
    "mechanism": None,  # filled below
    "sensors": [
        {"name": "gyro_rod", "type": "gyroscope", "body": "rod", "rate": 200, "noise": {"sigma": 0.01}},
        {"name": "motor_current", "type": "effort", "coordinate": "theta", "joint_name": "crank_joint", "gain": 0.5,
         "rate": 500, "noise": {"sigma": 0.0}},
    ],
    "speed_controller": {"name": "motor", "coordinate": "theta", "target": {"steps": [[0, 10], [0.5, 20]]},
                         "kp": 0.5, "ki": 10, "torque_limit": 2},
    "initial_state": {"position": {"theta": "pi/2"}},
    "duration": 1.0,
    "step": 0.001,
    "seed": 3,
}


def _mech():
    return Mechanism(mechanism_spec_from_text(MECH, "crank.yaml"))


def _scenario():
    import copy

    import yaml

    from mbde_core.scenario.scenario import Scenario

    doc = copy.deepcopy(SCENARIO)
    doc["mechanism"] = yaml.safe_load(MECH)
    return Scenario(doc, file="motor_effort.yaml")


def test_effort_yaml_and_sensor_set():
    mech = _mech()
    items = [{"name": "gyro", "type": "gyroscope", "body": "rod", "rate": 200, "noise": {"sigma": 0.01}},
             {"name": "tau", "type": "effort", "coordinate": "theta", "rate": 100, "gain": 2.0,
              "noise": {"sigma": 0.1}}]
    ss = load_sensors(Node(items, "s.yaml", "sensors"), mech)
    assert ss.names == ["gyro"] and len(ss) == 1 and "tau" not in ss  # estimators see h(q, qd, qdd) sensors only
    u = ss.input("tau")
    assert ss.input_names == ["tau"] and [s.name for s in ss.ordered] == ["gyro", "tau"]
    assert u.coordinate == mech.coordinate_index("theta") and u.coordinate_name == "theta"
    assert u.force(np.array([0.3])) == pytest.approx([0.6]) and u.force_variance() == pytest.approx(4 * 0.01)
    assert u.channels == ["tau"] and u.joint_field == "effort" and u.msg_type == "sensor_msgs/msg/JointState"
    E = input_matrix(mech.n, ss.inputs)
    assert E.shape == (mech.n, 1) and E[u.coordinate, 0] == 1.0 and E.sum() == 1.0
    with pytest.raises(TypeError, match="input force"):
        u.h(mech.q0)
    assert [d["type"] for d in ss.describe()] == ["gyroscope", "effort"]


@pytest.mark.parametrize("change, where", [
    ({"coordinate": "phi"}, "sensors[0].coordinate"),
    ({"gain": 0}, "sensors[0].gain"),
    ({"field": "current"}, "sensors[0].field"),
    ({"body": "rod"}, "sensors[0].body"),
])
def test_effort_config_errors_name_the_key(change, where):
    item = {"name": "tau", "type": "effort", "coordinate": "theta", "rate": 100, "noise": {"sigma": 0.1}}
    item.update(change)
    with pytest.raises(ConfigError) as exc:
        load_sensors(Node([item], "s.yaml", "sensors"), _mech())
    assert where in str(exc.value) and "\n" not in str(exc.value)


def test_simulated_bag_reads_the_true_torque(tmp_path):
    """The bag's effort readings (sigma 0) are the simulator's true torque / gain at every
    stamp (truth: the ground-truth effort written by the simulator for the controller)."""
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.simulator import run
    from mbde_core.simulator.bag import write_simulation_bag

    sc = _scenario()
    write_simulation_bag(sc, tmp_path / "bag")
    inp = load_inputs(str(tmp_path / "bag"))
    assert inp.sensors.names == ["gyro_rod"] and inp.sensors.input_names == ["motor_current"]
    assert inp.counts == {"gyro_rod": 201, "motor_current": 501}
    ms = [m for m in inp.measurements if m.sensor == "motor_current"]
    t = np.array([m.stamp for m in ms])
    y = np.array([m.value[0] for m in ms])
    mem = run(sc)  # the in-memory simulation: its ground truth (controller torque on theta)
    col = sc.truth_mechanism().coordinate_index("theta")
    k = np.searchsorted(mem.t, t - 1e-9)
    np.testing.assert_allclose(mem.t[k], t, atol=1e-9)
    torque = mem.inputs[k, mem.input_names.index("motor")]
    np.testing.assert_array_equal(y * 0.5, torque)
    np.testing.assert_array_equal(mem.effort[k, col], torque)
    assert np.ptp(torque) > 1.0 and np.max(np.abs(torque)) <= 2.0 + 1e-12  # the controller saturates at 2 N m


def test_live_encoder_driver_publishes_the_bag_readings(tmp_path):
    from mbde_core.live.drivers import DriverSet
    from mbde_core.rosio.bag import BagReader
    from mbde_core.rosio.factory import RosbagsFactory
    from mbde_core.simulator.bag import write_simulation_bag

    sc = _scenario()
    write_simulation_bag(sc, tmp_path / "bag")
    drivers = DriverSet(sc, "encoder_driver", RosbagsFactory())
    assert [d.sensor.name for d in drivers.drivers] == ["motor_current"]
    got, ref = [], []
    with BagReader(tmp_path / "bag") as r:
        for topic, _, m in r.messages(["/mbde/ground_truth", "/mbde/sensors/motor_current"]):
            if topic == "/mbde/ground_truth":
                got += drivers.on_truth(m)
            else:
                ref.append(m)
    assert len(got) == len(ref) == 501
    for (_, a), b in zip(got, ref):
        assert list(a.name) == ["crank_joint"] and len(a.position) == 0
        assert list(a.effort) == list(b.effort)
