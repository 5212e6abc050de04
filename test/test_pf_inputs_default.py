"""The particle filters' default ``inputs: auto`` (issue 42 item 2): one per-particle
random-walk torque per declared motor, within its limit; none on a linkage without a
motor, none on a coordinate whose torque is measured (:mod:`mbde_core.estimators.particle.inputs`)."""
from __future__ import annotations

import pytest

from mbde_core.config.paths import config_path
from mbde_core.estimators.configure import configure, defaults
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.scenario import load_scenario
from mbde_core.sensors.sensor_set import SensorSet


def _inputs(name: str, path: str, measured: bool) -> list:
    sc = load_scenario(path)
    sensors = sc.estimator_sensors()
    if not measured:
        sensors = SensorSet(list(sensors), ())
    return configure(name, defaults(name), sc.estimator_mechanism(), sensors, scenario_context(sc)).as_dict()["inputs"]


@pytest.mark.parametrize("name", ["pf", "vipf"])
def test_default_input_states_follow_the_declared_motor(name):
    assert defaults(name)["inputs"] == "auto"
    motor = config_path("bench", "motors", "slider_crank_speedstep_moving.yaml")  # 2 N m speed controller on theta
    (u,) = _inputs(name, motor, measured=False)
    assert u["coordinate"] == "theta" and u["limit"] == pytest.approx(2.0) and u["sigma0"] == pytest.approx(2.0)
    assert _inputs(name, motor, measured=True) == []  # the torque read: a known input, no input state
    assert _inputs(name, config_path("scenarios", "fourbar_gyro.yaml"), measured=False) == []  # no motor
