"""The input states' density is that of their increment between corrections
(rule.update_interval): a step shorter than the fastest sensor's period (the dynamics
need it) leaves the random walk as it is; a step of several periods (readings combined)
keeps the per-step increment."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import REPO
from mbde_core.estimators.configure import configure, defaults, validate
from mbde_core.estimators.options.frozen import AUTO
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.options.step_rule import update_interval

SCENARIO = f"{REPO}/config/scenarios/adekf_slider_crank.yaml"


def test_update_interval_is_the_step_or_the_fastest_period():
    fast, slow = SimpleNamespace(rate=1000.0), SimpleNamespace(rate=200.0)
    assert update_interval(0.0005, [slow, fast]) == pytest.approx(0.001, rel=1e-12)  # s: the 1 kHz period
    assert update_interval(0.005, [fast]) == pytest.approx(0.005, rel=1e-12)  # s: five readings per step
    assert update_interval(0.002, [SimpleNamespace(rate=0.0)]) == pytest.approx(0.002, rel=1e-12)  # no rate: the step


@pytest.fixture(scope="module")
def slider40():
    from mbde_core.scenario.scenario import load_scenario

    sc = load_scenario(SCENARIO).with_overrides(duration=3.0)  # 40 rad/s only: h_max 0.82 ms, the rule's step 0.5 ms
    return sc.estimator_mechanism(), sc.estimator_sensors(), scenario_context(sc)


@pytest.mark.parametrize("name", ["ukf", "errorekf", "dekf"])
def test_input_density_does_not_follow_a_shorter_step(slider40, name):
    mech, sensors, ctx = slider40
    auto = configure(name, defaults(name), mech, sensors, ctx).as_dict()
    assert auto["step"] == pytest.approx(0.0005, rel=1e-9)  # s: two steps per reading
    period = configure(name, {**defaults(name), "step": 0.001}, mech, sensors, ctx).as_dict()
    [a], [b] = auto["inputs"], period["inputs"]
    assert a["psd"] == pytest.approx(b["psd"], rel=1e-12)  # (N m)^2/s: the same random walk at 0.5 and 1 ms
    assert 3.0 < a["psd"] < 4.0  # (N m)^2/s: the ripple's rate squared over 1 ms


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
