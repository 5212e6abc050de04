"""The default-tuning rule (mbde_core/estimators/options/rule.py, mechanism_scales.py,
sensor_scales.py, transition.py): scales against the pendulum's closed form, the step
and override rules, the transitions' exactness, and defaults that are consistent (mean
NEES within [0.3, 3] x 2g) on shipped scenarios the old numbers did not fit."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import REPO, load_options, mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators.configure import configure, defaults, validate
from mbde_core.estimators.options.mechanism_scales import mechanism_scales
from mbde_core.estimators.options.frozen import AUTO
from mbde_core.estimators.options.rule import auto_step
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors


@pytest.fixture(scope="module")
def pendulum():
    return load_mechanism(mech_path("pendulum"))


def test_scales_match_the_pendulum_closed_form(pendulum):
    """Rod of mass m, length L about its end: zdd = -(m g L/2) / I cos(theta), I = m L^2/3.
    RMS over a turn = (m g L / 2 I) / sqrt(2); falling through dV = m g L: 1/2 I v^2 = dV."""
    m, L, grav = 0.5, 0.5, 9.81
    inertia = m * L * L / 3
    sc = mechanism_scales(pendulum)
    assert sc.m_z[0] == pytest.approx(inertia, rel=1e-9)
    assert sc.a_g[0] == pytest.approx(m * grav * L / 2 / inertia / math.sqrt(2), rel=0.03)
    assert sc.v[0] == pytest.approx(math.sqrt(2 * m * grav * L / inertia), rel=1e-6)
    assert sc.a_v[0] == pytest.approx(0.0, abs=1e-6)  # a single hinge: no velocity terms
    limited = mechanism_scales(pendulum, force_limits=[2.0])
    assert limited.a_f[0] == pytest.approx(2.0 / inertia, rel=1e-9)


def test_holding_force_rate_matches_the_pendulum_closed_form(pendulum):
    """The torque that holds the rod at a constant speed v is tau = m g L/2 sin z (a single
    hinge: no velocity terms), d tau/dt = m g L/2 v cos z: RMS over a turn m g L v / (2 sqrt 2)."""
    m, L, grav = 0.5, 0.5, 9.81
    for speed in (None, [20.0]):
        sc = mechanism_scales(pendulum, speed=speed)
        assert sc.f_r[0] == pytest.approx(m * grav * L * sc.v[0] / (2 * math.sqrt(2)), rel=0.01)  # N m/s


def test_input_ripple_is_capped_by_the_force_limits_rate(pendulum):
    """With input jumps the rule's input density follows the holding torque's ripple f_r,
    but a motor of limit F cannot supply one that changes faster than its limit's rate
    F w': psd = (min(f_r, F w')^2 + (eps F w')^2) step [(N m)^2/s]."""
    from mbde_core.estimators.options.rule import auto_inputs, input_rate

    sc = mechanism_scales(pendulum, speed=[20.0])  # f_r = m g L v / (2 sqrt 2) = 8.7 N m/s
    w, step, eps = input_rate(sc), 0.001, 0.1
    for F in (0.01, 100.0):  # N m: far below and far above the ripple
        [inp] = auto_inputs(pendulum, sc, np.array([F]), step, eps)
        fr = min(float(sc.f_r[0]), F * w)
        assert inp["psd"] == pytest.approx((fr**2 + (eps * F * w) ** 2) * step, rel=1e-12)
    [small] = auto_inputs(pendulum, sc, np.array([0.01]), step, eps)
    [plain] = auto_inputs(pendulum, sc, np.array([0.01]), step)  # without jumps: the limit's rate
    assert small["psd"] <= plain["psd"] * (1 + eps**2) + 1e-15


def test_step_lands_readings_on_the_grid(pendulum):
    sc = mechanism_scales(pendulum)
    h_max = min(0.005, 0.05 / float(sc.w[0]))

    def sensors(rate):
        return load_sensors(parse_yaml(f"- {{name: e, type: encoder, body: rod, rate: {rate}, noise: {{sigma: 0.001}}}}"),
                            pendulum)

    assert auto_step(sc, sensors(1000)) == pytest.approx(0.001)         # faster than h_max: the period
    step = auto_step(sc, sensors(1 / 0.006))                              # 6 ms: whole steps of it <= h_max
    assert step <= h_max + 1e-12 and (0.006 / step) == pytest.approx(round(0.006 / step))


def test_explicit_numbers_override_the_rule(pendulum):
    ss = load_sensors(parse_yaml("- {name: g, type: gyroscope, body: rod, rate: 200, noise: {sigma: 0.01}}"), pendulum)
    auto = configure("ukf", defaults("ukf"), pendulum, ss).as_dict()
    assert AUTO not in (auto["step"], auto["plant_noise"]["acceleration_psd"], auto["initial_sigma"]["z"])
    given = validate("ukf", {"step": 0.004, "plant_noise": {"acceleration_psd": 2.5}, "initial_sigma": {"z": 0.1}})
    out = configure("ukf", given, pendulum, ss).as_dict()
    assert out["step"] == 0.004 and out["plant_noise"]["acceleration_psd"] == 2.5 and out["initial_sigma"]["z"] == 0.1
    assert out["initial_sigma"]["zd"] == auto["initial_sigma"]["zd"]  # the one left to the rule


def test_paper003_file_keeps_the_papers_numbers():
    names = ["ukf", "errorekf", "dekf", "cekf", "diekfpm", "viekf"]
    cfg = load_options(f"{REPO}/config/estimators/paper003.yaml", names)
    for n in names:
        c = cfg[n]
        assert (c["step"], c["plant_noise"]["acceleration_psd"], c["initial_sigma"]) == (0.005, 1.0, {"z": 0.05, "zd": 0.5})
    assert cfg["ukf"]["transition"] == cfg["dekf"]["transition"] == cfg["diekfpm"]["transition"] == "euler"
    assert cfg["errorekf"]["integrator"] == "euler" and cfg["cekf"]["correction_at"] == "both_ends"
    default_file = load_options(f"{REPO}/config/estimators/default.yaml", names)
    assert all(default_file[n] == defaults(n) for n in names)  # default.yaml states the built-in rule


def test_accelerometer_is_widened_by_the_model_error(pendulum):
    ss = load_sensors(parse_yaml("- {name: a, type: accelerometer, body: rod, offset: [0.25, 0], axes: [0, pi/2], "
                                 "rate: 200, noise: {sigma: 0.05}}\n- {name: g, type: gyroscope, body: rod, rate: 200, "
                                 "noise: {sigma: 0.01}}"), pendulum)
    cfg = configure("ukf", defaults("ukf"), pendulum, ss).as_dict()
    sig = np.asarray(cfg["sensor_sigma"]["a"])
    assert sig.shape == (2,) and np.all(sig > 10 * 0.05)  # gravity (~10 m/s^2) known to 10 %, over f / w_g readings
    assert "g" not in cfg["sensor_sigma"]  # a gyroscope reads neither gravity nor accelerations
    assert configure("ukf", {"sensor_sigma": {"a": 0.07}}, pendulum, ss).as_dict()["sensor_sigma"] == {"a": 0.07}


def test_transitions_are_exact_for_their_accelerations():
    from mbde_core.estimators.kalman.transition import heun_step, position_step

    z, zd, a, j, dt = np.array([[0.3]]), np.array([[2.0]]), np.array([[-4.0]]), 7.0, 0.01
    exact = z + zd * dt + a * dt**2 / 2  # constant acceleration
    assert np.allclose(position_step("constant_acceleration", z, zd, a, dt), exact, rtol=0, atol=1e-15)
    assert np.allclose(position_step("euler", z, zd, a, dt), z + zd * dt, rtol=0, atol=1e-15)
    # linear acceleration a + j t: Heun with the end acceleration a + j dt is exact
    out = heun_step(np.hstack([z, zd]), a, a + j * dt, dt, 1)
    assert out[0, 0] == pytest.approx(float(exact[0, 0] + j * dt**3 / 6), abs=1e-15)
    assert out[0, 1] == pytest.approx(float(zd[0, 0] + a[0, 0] * dt + j * dt**2 / 2), abs=1e-15)


@pytest.fixture(scope="module")
def short_bags(tmp_path_factory):
    """3 s of two shipped scenarios the paper-003 numbers do not fit (the old defaults: mean
    NEES 170-4e5 on pendulum_release's 1 kHz encoder, 16 on fivebar_gyro)."""
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag

    out = {}
    for name in ("fivebar_gyro", "pendulum_release"):
        sc = load_scenario(f"{REPO}/config/scenarios/{name}.yaml", ["duration=3"])
        path = tmp_path_factory.mktemp(name) / "bag"
        write_simulation_bag(sc, path)
        out[name] = load_inputs(str(path))
    return out


@pytest.mark.parametrize("scenario,name", [("fivebar_gyro", "ukf"), ("fivebar_gyro", "errorekf"),
                                           ("pendulum_release", "dekf")])
def test_defaults_are_consistent_on_shipped_scenarios(short_bags, scenario, name):
    from mbde_core.replay.runner import evaluate, run_estimator

    inputs = short_bags[scenario]
    run = run_estimator(inputs, name, defaults(name), seed=0)
    m = evaluate(inputs, run)
    dof = 2 * inputs.mechanism.dof
    assert 0.3 * dof <= m["nees"]["mean"] <= 3 * dof, m["nees"]
    assert run.config["step"] != AUTO and m["counters"]["rejected_gate"] == 0
