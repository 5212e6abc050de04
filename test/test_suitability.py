"""Suitability of a sensor set for an estimator (mbde_core/estimators/assess/suitability.py).

Analytic cases on the shipped pendulum (rod about its hinge, z = theta): an encoder reads
theta (observable); a gyroscope reads theta' only, and without gravity nothing in the
motion depends on theta (theta' is constant, the reading too): rank 1 of 2, the direction
is theta; with gravity, theta'' = -(m g L/2 I) cos(theta) makes theta show in the gyro's
readings (rank 2), but a gyroscope 1000 times noisier than the motion leaves it weak.
Then the user-facing ends: the warning line and metrics.json of `mbde replay`, the live
core's diagnostics, and the ADE-KF refused without an accelerometer (exit status 2, one line).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from conftest import REPO, mech_path, run_mbde
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.assess.suitability import UnsuitableError, assess, information, precheck
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors


def sensors(mech, text):
    return load_sensors(parse_yaml(text), mech)


def start(mech, zd=3.0):
    return InitialState(np.array([0.4]), np.array([zd]), np.array([0.05]), np.array([0.5]), None, None)


@pytest.fixture(scope="module")
def pendulum():
    return load_mechanism(mech_path("pendulum"))


def test_encoder_observes_the_pendulum(pendulum):
    ss = sensors(pendulum, "- {name: e, type: encoder, body: rod, rate: 200, noise: {sigma: 0.001}}")
    v = assess("ukf", pendulum, ss, start(pendulum), 0.005)
    assert v.level == "ok" and v.rank == 2 and v.sigma_ratio < 0.1


def test_gyroscope_without_gravity_cannot_observe_the_angle(pendulum):
    flat = pendulum.modified(gravity=(0.0, 0.0))
    ss = sensors(flat, "- {name: g, type: gyroscope, body: rod, rate: 200, noise: {sigma: 0.01}}")
    J = information(flat, ss, [0.4], [3.0], flat.q0, 0.005)
    # only theta' is read and theta' does not depend on theta: J = [[0, 0], [0, sum w]]
    assert abs(J[0, 0]) < 1e-9 * J[1, 1] and abs(J[0, 1]) < 1e-9 * J[1, 1]
    assert J[1, 1] == pytest.approx(101 * 0.005 * 200 / 0.01**2, rel=1e-6)  # 101 steps x 1 reading each
    v = assess("ukf", flat, ss, start(flat), 0.005)
    assert v.level == "unobservable" and v.rank == 1 and "theta" in v.message and v.warning
    with_gravity = assess("ukf", pendulum, sensors(pendulum, "- {name: g, type: gyroscope, body: rod, rate: 200, "
                                                             "noise: {sigma: 0.01}}"), start(pendulum), 0.005)
    assert with_gravity.level == "ok" and with_gravity.rank == 2


def test_a_very_noisy_gyroscope_is_weak(pendulum):
    ss = sensors(pendulum, "- {name: g, type: gyroscope, body: rod, rate: 200, noise: {sigma: 10.0}}")
    v = assess("errorekf", pendulum, ss, start(pendulum), 0.005)
    assert v.level == "weak" and v.rank == 2 and v.sigma_ratio > 1 / np.sqrt(2) and "weakly observable" in v.message


def test_adekf_needs_an_accelerometer(pendulum):
    gyro = sensors(pendulum, "- {name: g, type: gyroscope, body: rod, rate: 200, noise: {sigma: 0.01}}")
    with pytest.raises(UnsuitableError, match="adekf needs a sensor that reads accelerations"):
        precheck("adekf", gyro)
    acc = sensors(pendulum, "- {name: a, type: accelerometer, body: rod, offset: [0.5, 0], axes: [0, pi/2], rate: 200, "
                            "noise: {sigma: 0.05}}")
    precheck("adekf", acc)  # no error


@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    """A gyro-only four-bar (paper 003) and a gravity-free pendulum with a gyroscope, 1 s each."""
    from mbde_core.scenario import load_scenario
    from mbde_core.scenario.scenario import Scenario
    from mbde_core.simulator.bag import write_simulation_bag

    root = tmp_path_factory.mktemp("suit")
    fg = load_scenario(f"{REPO}/config/scenarios/fourbar_gyro.yaml", ["duration=1"])
    write_simulation_bag(fg, root / "fourbar_gyro")
    with open(mech_path("pendulum"), encoding="utf-8") as fh:
        mech = yaml.safe_load(fh)
    mech["gravity"] = [0, 0]
    doc = {"name": "flat", "mechanism": mech, "duration": 1.0, "step": 0.001, "seed": 3,
           "sensors": [{"name": "gyro", "type": "gyroscope", "body": "rod", "period": 0.005, "noise": {"sigma": 0.01}}],
           "initial_state": {"position": {"theta": 0.4}, "velocity": {"theta": 3.0}}}
    write_simulation_bag(Scenario(doc, file="<flat>", base_dir=str(root)), root / "flat")
    return root


def test_replay_warns_in_stdout_and_metrics(bags, tmp_path):
    res = run_mbde("replay", bags / "flat", "--estimators", "ukf", "--out", tmp_path / "r", "--jobs", "1", "--no-plots")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and "observability rank 1 of 2" in lines[0]
    doc = json.loads((tmp_path / "r" / "metrics.json").read_text())
    s = doc["estimators"]["ukf"]["metrics"]["suitability"]
    assert s["level"] == "unobservable" and s["rank"] == 1 and s["message"] in lines[0]


def test_replay_refuses_adekf_without_accelerometer(bags, tmp_path):
    res = run_mbde("replay", bags / "fourbar_gyro", "--estimators", "ukf,adekf", "--out", tmp_path / "r", "--jobs", "1",
                   "--no-plots")
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and "adekf needs a sensor that reads accelerations" in res.stderr


def test_live_core_reports_suitability(bags):
    from mbde_core.live.diagnostics import WARN
    from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
    from mbde_core.live.model_source import from_description
    from mbde_core.rosio.bag import BagReader
    from mbde_core.rosio.convert import string_from_msg
    from mbde_core.rosio.factory import RosbagsFactory

    def scenario(bag):
        with BagReader(bag) as r:
            for _, _, m in r.messages(["/mbde/description"]):
                return from_description(string_from_msg(m))

    logs = []
    core = LiveEstimator(scenario(bags / "flat"), EstimatorOptions("ukf", load_config("ukf")), RosbagsFactory(),
                         lambda k, m: None, lambda level, text: logs.append((level, text)))
    st = core.status("estimator")
    assert st.level == WARN and "observability rank 1 of 2" in st.message
    assert st.as_dict()["suitability"] == "unobservable" and logs[0][0] == "warn"
    with pytest.raises(UnsuitableError):
        LiveEstimator(scenario(bags / "fourbar_gyro"), EstimatorOptions("adekf", load_config("adekf")),
                      RosbagsFactory(), lambda k, m: None)
