"""``mbde bench motors``: its scenarios' motors, the rows per estimator read from the traits
(an estimator appears by itself once it declares the input), the targets as pass/fail,
and the default rule with a measured torque (the motor's input state cut to the residual)."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from conftest import run_mbde

from mbde_bench import motors, motors_rows, motors_tables
from mbde_core.config.paths import config_path
from mbde_core.estimators import registry
from mbde_core.estimators.configure import configure
from mbde_core.estimators.options.rule import input_rate, rule_scales, scenario_context
from mbde_core.estimators.options.step_rule import update_interval
from mbde_core.scenario import load_scenario
from mbde_core.scenario.scenario import Scenario
from mbde_core.sensors.sensor_set import SensorSet


def _scenario(name: str, **changes) -> Scenario:
    sc = load_scenario(config_path("bench", "motors", motors.SCENARIOS[name][0] + ".yaml"))
    doc = copy.deepcopy(sc.raw)
    doc.update(changes)
    return Scenario(doc, file=sc.file, base_dir=sc.base_dir)


def test_released_document_drops_the_motors_and_nothing_else():
    doc = _scenario("fivebar").raw
    rel = motors.released_document(doc)
    assert [s["name"] for s in rel["sensors"]] == ["gyro_coupler1", "gyro_coupler2"]
    assert "unmodelled_loads" not in rel and rel["mechanism"] == doc["mechanism"]
    sc = _scenario("speedstep")
    rel = motors.released_document(sc.raw)
    assert "speed_controller" not in rel and rel["unmodelled_loads"] == sc.raw["unmodelled_loads"]  # friction stays
    assert scenario_context(Scenario(rel, file=sc.file, base_dir=sc.base_dir)) is None


def test_the_context_limits_an_unmodelled_motor_by_its_peak_and_ignores_a_disturbance():
    """Pulse signal of 1 V through 0.05 N m/V: the limit is the pulse's 0.05 N m (sampled on
    the scenario's grid, the table's values); the five-bar's two sines: 8 and 6 N m (their
    amplitudes, within a step's change); a ``generalized_force`` is a disturbance, no motor."""
    assert scenario_context(_scenario("pendulum"))["force_limits"] == pytest.approx([0.05])
    assert scenario_context(_scenario("fivebar"))["force_limits"] == pytest.approx([8.0, 6.0], rel=1e-3)
    sc = _scenario("pendulum")
    doc = copy.deepcopy(sc.raw)
    doc["unmodelled_loads"][0]["type"] = "generalized_force"
    assert scenario_context(Scenario(doc, file=sc.file, base_dir=sc.base_dir)) is None


def test_a_measured_torque_leaves_a_residual_input_state():
    """The speed-step slider-crank (2 N m motor): unknown, the UKF's input state is the
    motor's (sigma0 = limit = 2 N m); measured, it is the model error eps = 0.1 of it (sigma0
    0.2 N m changing at the motion's rate w', psd (0.2 w')^2 dt over the interval between
    corrections, no limit) and the coordinate stays covered (no q_force)."""
    sc = _scenario("moving", duration=1.0)
    mech, sensors, ctx = sc.estimator_mechanism(), sc.estimator_sensors(), scenario_context(sc)
    unknown = configure("ukf", {}, mech, SensorSet(list(sensors), ()), ctx).as_dict()
    measured = configure("ukf", {}, mech, sensors, ctx).as_dict()
    (u,), (m,) = unknown["inputs"], measured["inputs"]
    assert (u["sigma0"], u["limit"]) == (2.0, 2.0)
    w = input_rate(rule_scales(mech, measured, ctx))  # the residual force eps F changes at the motion's rate
    dt = update_interval(measured["step"], sensors)  # s: the step, or the readings' period when the step divides it
    assert m["sigma0"] == pytest.approx(0.2) and m["psd"] == pytest.approx((0.2 * w) ** 2 * dt) \
        and "limit" not in m
    assert measured["plant_noise"] == unknown["plant_noise"]


def test_rows_follow_the_traits(monkeypatch):
    """An estimator without known inputs / input states gets "n/a" rows; the same class
    declaring them gets real rows (nothing in the bench names it); the ADE-KF without an
    accelerometer says what it needs."""
    sensors = _scenario("moving").estimator_sensors()
    assert motors_rows.not_applicable("ukf", "measured", sensors) is None
    assert "needs a sensor that reads accelerations" in motors_rows.not_applicable("adekf", "released", sensors)
    cls = registry.estimator_class("pf")
    unable = type("UnablePF", (cls,), {"traits": dataclasses.replace(cls.traits, known_inputs=False, input_states=False)})
    registry.register("unable_pf", unable)
    try:
        assert motors_rows.not_applicable("unable_pf", "measured", sensors).startswith("n/a: does not take a measured torque")
        assert motors_rows.not_applicable("unable_pf", "unknown", sensors).startswith("n/a: no input states")
        assert motors_rows.not_applicable("unable_pf", "released", sensors) is None
    finally:
        registry.unregister("unable_pf")
    assert motors_rows.not_applicable("pf", "measured", sensors) is None  # the PF declares both (particle/inputs.py)
    assert motors_rows.not_applicable("pf", "unknown", sensors) is None


def _row(scenario, variants, seed=1):
    return {"scenario": scenario, "seed": seed, "variants": variants, "smoother": {}}


def test_targets_pass_and_fail_as_issue_42_states():
    rows = [_row("pendulum", {"measured": {"a": (0.0014, 1.0, 1.0), "b": (0.003, 1.0, 1.0), "pf": "n/a: no",
                                           "smoother": (0.0013, 1.0, 1.0)},
                              "unknown": {"a": (0.002, 1.0, 1.0), "b": (0.0061, 1.0, 1.0), "c": (0.5, 9.0, 1.0),
                                          "smoother": (0.0025, 1.0, 1.0)},
                              "released": {"a": (0.001, 1.0, 1.0), "b": (0.002, 1.0, 1.0)}})]
    st = motors_tables.stats(rows, "pendulum")
    tg = motors_tables.targets(st, st["released"])
    assert tg["measured"]["a"] == (pytest.approx(1.4), True) and tg["measured"]["b"] == (pytest.approx(1.5), True)
    assert "pf" not in tg["measured"] and tg["measured"]["smoother"] == (pytest.approx(0.0013 / 0.0014), True)
    assert tg["unknown"]["b"][1] is False and tg["unknown"]["c"][1] is False  # 3.05x; lost (0.5 rad)
    assert tg["unknown"]["smoother"] == (pytest.approx(1.25), False)
    scen = {"pendulum": ("pendulum_pulse", (), 1.0, "pendulum")}
    md = motors_tables.targets_table(rows, ["pendulum"], scen)
    assert "| pendulum | 2 / 2 | 1 / 3 (not: b, c) | yes (0.93x) / NO (1.2x) |" in md
    assert "n/a: no" in motors_tables.summary_tables(rows, ["pendulum"], scen)


def test_bench_motors_page(tmp_path):
    """The smallest real run: the pulse pendulum, 0.6 s (the first pulse at 0.5 s), the UKF,
    the PF and the smoother; the targets table and every variant."""
    proc = run_mbde("bench", "motors", "--scenarios", "pendulum", "--estimators", "ukf,pf,smoother", "--duration", "0.6",
                    "--seeds", "1", "--jobs", "1", "--out", tmp_path / "m")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "m" / "motors.md").read_text()
    assert "## Targets (issue 42)" in page and "| pendulum | 2 / 2 | 2 / 2 |" in page
    row = next(line for line in page.splitlines() if line.startswith("| ukf |"))
    rmse = [float(c) for c in row.split("|")[2:-1] if c.strip()[:1].isdigit() and "e-" in c]
    assert len(rmse) == 3 and max(rmse) < 2e-3  # measured, unknown, released: within a few encoder steps
    assert "| pf | n/a" not in page and "| pf |" in page and "| smoother |" in page  # the PF takes both (particle/inputs.py)
    assert not (tmp_path / "m" / "bags").exists() and np.isfinite(rmse).all()
