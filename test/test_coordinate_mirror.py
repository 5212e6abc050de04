"""Coordinate mirrors (estimators/assess/coordinate_mirror.py) and the suitability warning
on issue 42's speed-step slider-crank: a gyroscope on the rod of an offset slider-crank
reads the same for theta(t) and pi - theta(t); the motor's declared limit explains the
mirrored motion unless its torque is measured.

Checked against what the detection did not produce: the simulator's own motion of the
scenario, mirrored by hand (theta -> pi - theta, the rest assembled), read by the gyro.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mbde_core.config.paths import config_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.assess.coordinate_mirror import coordinate_mirror
from mbde_core.estimators.assess.suitability import assess
from mbde_core.estimators.base import InitialState
from mbde_core.scenario import load_scenario
from mbde_core.sensors.sensor_set import SensorSet


@pytest.fixture(scope="module")
def crank():
    sc = load_scenario(config_path("bench", "motors", "slider_crank_speedstep_effort.yaml"))
    return sc, sc.estimator_mechanism(), sc.estimator_sensors()


def test_the_simulated_motion_and_its_mirror_read_the_same(crank):
    """0.3 s of the scenario's true motion (motor-driven from rest at pi/2) and its mirror
    pi - theta read the same on the rod gyroscope; the mirrored motion needs a torque within
    the motor's 2 N m; the detection finds that mirror and no other."""
    from mbde_core.simulator import run

    sc, mech, ss = crank
    sc.raw["duration"] = 0.3
    from mbde_core.scenario.scenario import Scenario
    res = run(Scenario(sc.raw, file=sc.file, base_dir=sc.base_dir))
    tm = sc.truth_mechanism()
    iz = tm.independent
    k = np.arange(10, len(res.t), 10)
    q, qd, qdd = res.q[k], res.qd[k], res.qdd[k]
    guess = q.copy()  # the crank pin mirrored about the y axis, the rod translated with it
    guess[:, 0], guess[:, 2] = -q[:, 0], q[:, 2] - 2 * q[:, 0]
    assert tm.coordinate_names[:3] == ["P1.x", "P1.y", "P2.x"]
    qm, ok = kinematics.solve_position(tm, math.pi - q[:, iz], guess)
    assert ok.all() and np.max(np.abs(qm[:, 0] + q[:, 0])) < 1e-9  # the crank pin mirrored about the y axis
    qdm = kinematics.velocity(tm, qm, -qd[:, iz])
    qddm = kinematics.acceleration(tm, qm, qdm, -qdd[:, iz])
    gyro = ss["gyro_rod"]
    np.testing.assert_allclose(gyro.h(qm, qdm, qddm), gyro.h(q, qd, qdd), atol=1e-9)
    torque = np.array([dynamics.inverse(tm, 0.0, a, b, c) for a, b, c in zip(qm, qdm, qddm)])
    assert np.max(np.abs(torque)) < 2.5  # about what the true motion needs: within reach of a 2 N m motor
    m = coordinate_mirror(mech, ss, [2.0])
    assert m is not None and m.alpha == pytest.approx(math.pi / 2) and m.describe(mech) == "theta -> pi - theta"
    assert 0 < m.torque[0] <= 2.0
    assert m.fixed(np.array([math.pi / 2]), np.array([0.0])) and not m.fixed(np.array([math.pi / 2]), np.array([15.0]))
    assert coordinate_mirror(mech, ss, [0.01]) is None  # a weak motor cannot make the mirrored motion
    assert coordinate_mirror(mech, ss, None) is None    # no unknown force: the dynamics tell them apart


def test_an_encoder_tells_the_mirror_apart(crank):
    from mbde_core.config.yamlnode import Node
    from mbde_core.sensors.config import load_sensors

    _, mech, ss = crank
    enc = load_sensors(Node([{"name": "enc", "type": "encoder", "body": "crank", "rate": 200,
                              "counts_per_revolution": 4096, "noise": {"sigma": 0}}], "s.yaml", "sensors"), mech)
    assert coordinate_mirror(mech, SensorSet(list(ss) + list(enc), ()), [2.0]) is None


def test_suitability_warns_unless_the_torque_is_measured(crank):
    sc, mech, ss = crank
    init = InitialState(np.array([math.pi / 2]), np.array([0.0]), np.array([0.1]), np.array([1.0]))
    blind = SensorSet(list(ss), ())  # the effort sensor dropped: the torque unknown
    v = assess("ukf", mech, blind, init, 0.005, force_limits=[2.0])
    assert v.warning and "theta -> pi - theta" in v.message and "coin toss" in v.message and "\n" not in v.message
    measured = assess("ukf", mech, ss, init, 0.005, force_limits=[2.0])
    assert "pi - theta" not in measured.message  # the ukf takes the measured torque: no unknown force
    pf = assess("pf", mech, ss, init, 0.005, force_limits=[2.0])
    assert "pi - theta" not in pf.message and "input states" not in pf.message  # the particle filter takes it too
    pf_blind = assess("pf", mech, blind, init, 0.005, force_limits=[2.0])
    assert "pi - theta" in pf_blind.message and "has no input states" in pf_blind.message  # its default: inputs []
    assert "has no input states" in v.message  # ukf without options: no input states either, on a weak verdict too
    moving = InitialState(np.array([math.pi / 2]), np.array([15.0]), np.array([0.1]), np.array([1.0]))
    assert "coin toss" not in assess("ukf", mech, blind, moving, 0.005, force_limits=[2.0]).message
