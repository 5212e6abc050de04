"""The rule's input density over the readings' period (options/inputs.py ``input_interval``):
``inputs: auto`` gives psd = (F w')^2 dt with dt the step, or the shortest reading period
if the step subdivides it -- halving the step between the same readings no longer makes
the input states stiffer (paper 004's slider-crank at 1 kHz, step 0.5 ms: the UKF and
DIEKFpm lagged the servo's torque ripple, NEES/dim 15 and 8)."""
from __future__ import annotations

import pytest

from conftest import REPO
from mbde_core.estimators.configure import configure, validate
from mbde_core.estimators.options.frozen import AUTO
from mbde_core.estimators.options.inputs import input_interval
from mbde_core.estimators.options.rule import scenario_context

SCENARIO = f"{REPO}/config/scenarios/adekf_slider_crank.yaml"  # one accelerometer at 1 kHz, 5 N m motor


class _Rate:
    def __init__(self, rate):
        self.rate = rate


def test_input_interval_is_the_step_or_the_shortest_reading_period():
    sensors = [_Rate(200.0), _Rate(1000.0), _Rate(0.0)]  # s; a rate of 0: no period
    assert input_interval(0.0005, sensors) == pytest.approx(0.001, abs=1e-15)  # subdivides: the period
    assert input_interval(0.003, sensors) == pytest.approx(0.003, abs=1e-15)  # spans readings: the step
    assert input_interval(0.0005, []) == pytest.approx(0.0005, abs=1e-15)  # no readings' rate: the step
    assert input_interval(0.0005, sensors, per_step=True) == pytest.approx(0.0005, abs=1e-15)  # the PF's


@pytest.mark.parametrize("name", ["ukf", "diekfpm"])
def test_the_rules_input_density_does_not_depend_on_a_step_that_subdivides_the_readings(name):
    from mbde_core.scenario.scenario import load_scenario

    sc = load_scenario(SCENARIO)
    mech, sensors, ctx = sc.estimator_mechanism(), sc.estimator_sensors(), scenario_context(sc)

    def psd(step):
        cfg = validate(name, {"inputs": AUTO, "input_jump_nis": 0.0, "step": step})
        [inp] = configure(name, cfg, mech, sensors, ctx).as_dict()["inputs"]
        return inp["psd"]  # (N m)^2/s

    assert psd(0.0005) == pytest.approx(psd(0.001), rel=1e-12)  # 2 steps per 1 ms reading: the same density
    assert psd(0.00025) == pytest.approx(psd(0.001), rel=1e-12)
    assert psd(0.002) == pytest.approx(2.0 * psd(0.001), rel=1e-12)  # a step over 2 readings: (F w')^2 step


def test_the_particle_filters_walk_keeps_the_steps_density():
    from mbde_core.scenario.scenario import load_scenario

    sc = load_scenario(SCENARIO)
    mech, sensors, ctx = sc.estimator_mechanism(), sc.estimator_sensors(), scenario_context(sc)

    def psd(step):
        [inp] = configure("pf", validate("pf", {"step": step}), mech, sensors, ctx).as_dict()["inputs"]
        return inp["psd"]  # (N m)^2/s

    assert psd(0.0005) == pytest.approx(0.5 * psd(0.001), rel=1e-12)  # (F w')^2 step
