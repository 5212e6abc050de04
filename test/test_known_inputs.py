"""A measured motor torque as a known input of the Kalman observers (issue 42 item 1).

Checked against what the code did not produce: finite differences of the dynamics for
the input Jacobian dzdd/du = Mbar^-1 R^T E, the analytic process noise dt^2 B var B^T of a
held force, the simulator's true torque (a speed-controlled slider-crank, its effort
sensor in the bag), and the zero-order hold of the readings in the stage.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mbde_core.engine import dynamics, kinematics
from mbde_core.estimators.base import Estimator, InitialState, UpdateResult
from mbde_core.estimators.configure import configure, defaults, make_estimator
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.estimators.stage.inputs import STALE_MIN, STALE_PERIODS
from mbde_core.estimators.traits import Traits
from mbde_core.config.yamlnode import Node
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement
from test_effort_sensor import _mech, _scenario

KALMAN = ("ukf", "errorekf", "dekf", "cekf", "diekfpm", "viekf")
SENSORS = [{"name": "gyro", "type": "gyroscope", "body": "rod", "rate": 200, "noise": {"sigma": 0.01}},
           {"name": "tau", "type": "effort", "coordinate": "theta", "rate": 200, "gain": 2.0, "noise": {"sigma": 0.05}}]


def _sensors(mech):
    return load_sensors(Node(SENSORS, "s.yaml", "sensors"), mech)


def _estimator(name, mech, sensors, options=None):
    """The estimator through the options pipeline (no unknown inputs unless asked)."""
    return make_estimator(name, mech, sensors, configure(name, {"inputs": []} if options is None else options, mech, sensors))


def _init(mech, zd=12.0):
    return InitialState(np.array([1.0]), np.array([zd]), np.array([1e-9]), np.array([1e-9]))


def _fd_gain(mech, q, qd, u=0.0, h=1e-4):
    """dzdd/du by central differences of the dynamics with the force u on theta."""
    c = mech.coordinate_index("theta")

    def zdd(v):
        Q = np.zeros(mech.n)
        Q[c] = v
        return dynamics.forward(mech, 0.0, q, qd, extra_Q=Q)[0][0]

    return (zdd(u + h) - zdd(u - h)) / (2 * h)


def test_input_jacobian_matches_finite_differences():
    """B = dzdd/du (the known inputs' Jacobian, input_states.input_gain) against central
    differences of the dynamics with the generalized force E u added."""
    mech = _mech()
    est = _estimator("ukf", mech, _sensors(mech))
    q, _ = kinematics.solve_position(mech, np.array([0.7]), mech.q0)
    qd = kinematics.velocity(mech, q, np.array([9.0]))
    B = est.input_gain(kinematics.r_matrix(mech, q))
    c = mech.coordinate_index("theta")
    h = 1e-4

    def zdd(u):
        Q = np.zeros(mech.n)
        Q[c] = u
        return dynamics.forward(mech, 0.0, q, qd, extra_Q=Q)[0]

    fd = (zdd(0.3 + h) - zdd(0.3 - h)) / (2 * h)
    assert B.shape == (1, 1) and est.k == 1 and est.k_known == 1 and est.k_unknown == 0
    assert B[0, 0] == pytest.approx(fd[0], rel=1e-6)
    assert zdd(0.3)[0] - zdd(0.0)[0] == pytest.approx(0.3 * B[0, 0], rel=1e-8)  # linear in the force


@pytest.mark.parametrize("name", KALMAN)
def test_held_torque_drives_the_prediction_and_its_noise(name):
    """One step with the torque known: the mean follows the dynamics with the force
    gain * y (against the dynamics' own finite step), and the velocity variance gains
    dt^2 B^2 var (var = gain^2 sigma^2, the reading's force variance) over the plant noise."""
    mech = _mech()
    sensors = _sensors(mech)
    var = sensors.input("tau").force_variance()
    assert var == pytest.approx(4 * 0.05**2)
    dt = 0.001  # B changes by < 1 % over the step
    out = {}
    for u in (0.0, 1.5):
        est = _estimator(name, mech, sensors)
        est.reset(0.0, _init(mech))
        est.set_known_inputs(np.array([u]), np.array([var if u else 0.0]))
        est.predict(dt)
        snap = est.estimate()
        out[u] = (snap.zd[0], snap.cov[1, 1])
    q0, _ = kinematics.solve_position(mech, np.array([1.0]), mech.q0)
    B = _fd_gain(mech, q0, kinematics.velocity(mech, q0, np.array([12.0])))  # at the step's start
    assert out[1.5][0] - out[0.0][0] == pytest.approx(dt * B * 1.5, rel=0.02)
    assert out[1.5][1] - out[0.0][1] == pytest.approx(dt * dt * B * B * var, rel=0.05)


class Recorder(Estimator):
    """A stand-in observer that records the known inputs it is given before each step."""

    name = "recorder"
    traits = Traits(known_inputs=True, local=False)

    def __init__(self, mech, sensors):
        super().__init__(mech, sensors, None)
        self.seen = []

    def reset(self, t, init):
        self.t = t

    def set_known_inputs(self, values, variances):
        self.held = (float(values[0]), float(variances[0]))

    def predict(self, dt):
        self.seen.append((self.t, *self.held, dt))
        self.t += dt

    def update(self, measurements, gates=None):
        self.seen.append((self.t, *self.held, 0.0))  # handed over before the update too (accelerometers)
        return UpdateResult([m.sensor for m in measurements], [], 0.0, 1)

    def estimate(self):
        from mbde_core.types import MechanismSnapshot
        return MechanismSnapshot(stamp=self.t, q=np.zeros(3), qd=np.zeros(3), qdd=np.zeros(3), z=np.zeros(1),
                                 zd=np.zeros(1), zdd=np.zeros(1), cov=np.eye(2))


def fed_ramp(mech, sensors):
    """(Recorder, its 5 ms stage) fed a zero gyro reading at 200 Hz to 0.6 s and a torque
    ramp y = 0.1 k at 50 Hz to 0.3 s, flushed."""
    rec = Recorder(mech, sensors)
    stage = EstimatorStage(rec, 0.005, lambda t: _init(mech), keep=False)
    ms = [Measurement(k * 0.005, "gyro", np.array([0.0])) for k in range(121)]
    ms += [Measurement(k * 0.02, "tau", np.array([0.1 * k])) for k in range(16)]
    ms.sort(key=lambda m: m.stamp)
    for m in ms:
        stage.feed(m)
    stage.flush()
    return rec, stage


def test_stage_holds_the_torque_between_readings_and_marks_it_stale():
    """Gyro at 200 Hz, torque at 50 Hz until 0.3 s: every step from a torque reading's slot
    on gets gain * y (zero-order hold) with the reading's variance plus the hold's error
    (the rate of the last two readings times the age at the middle of the step); after 5
    periods without a reading the force is stale: at least the variance of the largest force."""
    mech = _mech()
    sensors = _sensors(mech)
    rec, stage = fed_ramp(mech, sensors)
    var = sensors.input("tau").force_variance()
    period = 0.02
    assert stage.counters.inputs == 16 and stage.counters.unknown_sensor == 0
    stale = 0
    assert {dt for *_, dt in rec.seen} == {0.0, 0.005}
    for t, u, v, dt in rec.seen:
        k = math.floor(t / period + 1e-9)
        last = min(k, 15)
        age = t - last * period
        rate = 2.0 * 0.1 / period if last else 0.0  # from the last two readings
        hold = var + (rate * (age + dt / 2)) ** 2  # the hold's error at the middle of the step
        if age <= max(STALE_MIN, STALE_PERIODS * period) + 1e-9:
            assert u == pytest.approx(2.0 * 0.1 * last) and v == pytest.approx(hold)
        else:
            stale += dt > 0
            assert u == pytest.approx(2.0 * 1.5) and v == pytest.approx(max(hold, (2.0 * 1.5) ** 2))
    assert stage.counters.stale_inputs == stale > 0


def test_replay_feeds_the_torque_and_it_matches_the_simulator(tmp_path):
    """The speed-controlled slider-crank of test_effort_sensor (torque at its 2 N m limit,
    a step of the target speed): with its effort readings fed, every Kalman observer tracks
    the crank (the gyroscope on the rod alone cannot tell the direction of rotation from
    rest: with the torque unknown they may follow the mirror motion), and the held torque
    each reports is the simulator's true torque within the reading noise."""
    from mbde_core.estimators.assess.metrics import coordinate_errors, truth_at
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator, unused_inputs
    from mbde_core.simulator.bag import write_simulation_bag

    sc = _scenario()
    doc = sc.raw
    doc["sensors"][1]["noise"] = {"sigma": 0.01}
    from mbde_core.scenario.scenario import Scenario
    sc = Scenario(doc, file="motor_effort.yaml")
    write_simulation_bag(sc, tmp_path / "bag")
    inp = load_inputs(str(tmp_path / "bag"))
    tr = inp.truth
    col = inp.mechanism.coordinate_index("theta")
    for name in KALMAN:
        run = run_estimator(inp, name, defaults(name), 0, particle_budget=0)
        assert run.counters["inputs"] == 501 and run.counters["unknown_sensor"] == 0, name
        recs = run.records
        t = np.array([r.estimate.stamp for r in recs])
        z = np.array([r.estimate.z for r in recs])
        ang = np.array([True])
        rmse = float(np.sqrt(np.mean(coordinate_errors(z, truth_at(t, tr.t, tr.z, ang), ang) ** 2)))
        assert rmse < 0.02, (name, rmse)
        j = recs[-1].estimate.input_names.index("motor_current")
        held = np.array([r.estimate.inputs[j] for r in recs])
        late = t > 0.05
        # held from the last reading (every 2 ms): the true torque then (at t after an update,
        # before the step into t otherwise)
        err = np.minimum(*(np.abs(held[late] - truth_at(t - lag, tr.t, tr.effort)[late, col]) for lag in (0.0, 0.002)))
        assert np.median(err) < 0.01 and np.sqrt(np.mean(err**2)) < 0.05, name  # 0.5 x 0.01; the step
    pf = _estimator("pf", inp.mechanism, inp.sensors, {})
    assert unused_inputs(pf, inp.sensors) == {}  # the particle filter takes it too (test_pf_inputs.py)


def test_live_subscribes_to_the_torque_of_an_estimator_that_takes_it(tmp_path):
    """The live core listens on the effort sensor's JointState topic when the estimator
    takes known inputs (every shipped one: the Kalman observers, the particle filters and
    the ADE-KF), and runs replay's stage on it bit for bit."""
    from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
    from mbde_core.live.model_source import from_description
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.rosio.convert import snapshot_from_mechanism_state
    from mbde_core.rosio.factory import RosbagsFactory
    from mbde_core.simulator.bag import write_simulation_bag
    from live_rig import CONFIG, Sink, description, sensor_messages

    sc = _scenario()
    sc.raw["duration"] = 0.4
    from mbde_core.scenario.scenario import Scenario
    sc = Scenario(sc.raw, file="motor_effort.yaml")
    bag = tmp_path / "bag"
    write_simulation_bag(sc, bag)
    for name, listens in (("ukf", True), ("pf", True)):
        sink = Sink()
        core = LiveEstimator(from_description(description(bag)), EstimatorOptions(name, load_config(name, CONFIG)),
                             RosbagsFactory(), sink.publish, sink.log)
        assert any(s.name == "motor_current" for ss in core.topics.values() for s in ss) == listens, name
    sink = Sink()
    core = LiveEstimator(from_description(description(bag)), EstimatorOptions("ukf", load_config("ukf", CONFIG),
                                                                              publish_rate=0.0, reorder_window=0.02),
                         RosbagsFactory(), sink.publish, sink.log)
    for topic, t, msg in sensor_messages(bag):
        core.on_message(topic, msg, t + 0.002)
        core.tick(t + 0.003)
    run = run_estimator(load_inputs(str(bag)), "ukf", load_config("ukf", CONFIG), seed=0)
    states = [snapshot_from_mechanism_state(m) for m in sink.msgs["state"]]
    assert core.counters.inputs > 0 and len(states) >= len(run.records) - 0.02 / run.config["step"] - 2  # reorder window
    for s, r in zip(states, run.records):
        assert np.array_equal(s.z, r.estimate.z) and np.array_equal(s.cov, r.estimate.cov)


def test_forces_of_a_measured_and_an_unknown_torque_on_one_coordinate_add_up():
    from mbde_core.estimators.kalman.input_states import input_forces

    np.testing.assert_array_equal(input_forces(5, [4, 4, 1], np.array([0.5, 1.5, 2.0])), [0, 2.0, 0, 0, 2.0])


@pytest.mark.parametrize("name", ["errorekf", "ukf", "diekfpm"])
def test_an_accelerometer_with_the_measured_torque(tmp_path, name):
    """Paper 004's slider-crank (one slider accelerometer, 5 N m servo) with its torque read
    at 1 kHz: the accelerometer reads the current torque's acceleration, so the stage
    hands the held torque over before each update too; with the unknown input state
    (``inputs: auto``) on the same coordinate the two forces add up. 0.3 s from rest. The
    bound is 0.03 rad: the residual input state of a measured coordinate (the default rule,
    eps of the motor's random walk) follows this start more slowly than the motor-sized
    state did (errorEKF 0.021 rad, UKF 0.018; with the motor-sized state 0.0033 / 0.0040,
    which counted the motor twice: NEES/dim 0.02-0.07 on 4 s runs)."""
    from mbde_core.config.paths import config_path
    from mbde_core.estimators.assess.metrics import coordinate_errors, truth_at
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.scenario import load_scenario
    from mbde_core.scenario.scenario import Scenario
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_scenario(config_path("bench", "motors", "adekf_slider_crank_effort.yaml"))
    sc.raw["duration"] = 0.3
    write_simulation_bag(Scenario(sc.raw, file=sc.file, base_dir=sc.base_dir), tmp_path / "bag", processes=1)
    inp = load_inputs(str(tmp_path / "bag"))
    run = run_estimator(inp, name, defaults(name), 0, particle_budget=0)
    t = np.array([r.estimate.stamp for r in run.records])
    z = np.array([r.estimate.z for r in run.records])
    ang = np.array([True])
    err = coordinate_errors(z, truth_at(t, inp.truth.t, inp.truth.z, ang), ang)
    assert run.counters["inputs"] == 301 and np.sqrt(np.mean(err**2)) < 0.03, name
