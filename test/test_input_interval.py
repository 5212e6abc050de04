"""The input states' density is that of their increment between corrections
(rule.update_interval): a step shorter than the fastest sensor's period (the dynamics
need it) leaves the random walk as it is; a step of several periods (readings combined)
keeps the per-step increment."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import REPO
from mbde_core.estimators.configure import configure, defaults
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
