"""Ground-truth simulator and `mbde simulate` / `mbde bag-info`: every shipped scenario
simulates, drift-free truth, energy, speed controller, seeded noise streams, sampling
grids, outputs and epochs. The bags' contents read back with rosbags and the mcap readers
in test_simulate_bags.py."""
import io
import json
import math
import os

import numpy as np
import pytest

from conftest import run_mbde
from mbde_core.cli.main import main as mbde
from mbde_core.engine import dynamics
from mbde_core.rosio import convert as cv
from mbde_core.rosio.stamps import ns_to_sec, sec_to_ns
from mbde_core.rosio.typestore import get_typestore
from mbde_core.scenario import Scenario, load_scenario
from mbde_core.scenario.description import scenario_from_bag
from mbde_core.simulator import noise_rng, run
from mbde_core.simulator.progress import ProgressBar
from simulate_rig import ALL_SENSORS, DESC, GT, GT_JS, SCEN_DIR, all_sensors, scen  # noqa: F401  (all_sensors: the shared fixture)

SHIPPED = sorted(f[:-5] for f in os.listdir(SCEN_DIR) if f.endswith(".yaml"))


# ------------------------------------------------------------------------------ shipped files
EXPECTED_TOPICS = {  # scenario: {sensor topic: (type, rate Hz)}
    "pf_sim": {"/mbde/sensors/gyro_rocker": (cv.IMU, 200)},
    "pf_rig_branch0": {"/mbde/sensors/gyro_rocker": (cv.IMU, 1 / 0.006),
                       "/mbde/reference/crank_encoder": (cv.JOINT_STATE, 1 / 0.006)},
    "pf_rig_branch1": {"/mbde/sensors/gyro_rocker": (cv.IMU, 1 / 0.006),
                       "/mbde/reference/crank_encoder": (cv.JOINT_STATE, 1 / 0.006)},
    "fourbar_gyro": {"/mbde/sensors/gyro_coupler": (cv.IMU, 200)},
    "fourbar_encoder": {"/mbde/sensors/encoder_crank": (cv.JOINT_STATE, 200)},
    "fourbar_imu": {"/mbde/sensors/gyro_coupler": (cv.IMU, 200), "/mbde/sensors/accel_rocker": (cv.IMU, 200)},
    "fivebar_gyro": {"/mbde/sensors/gyro_coupler1": (cv.IMU, 200), "/mbde/sensors/gyro_coupler2": (cv.IMU, 200)},
    "fivebar_encoder": {"/mbde/sensors/encoder_crank1": (cv.JOINT_STATE, 200),
                        "/mbde/sensors/encoder_crank2": (cv.JOINT_STATE, 200)},
    "pendulum_release": {"/mbde/sensors/encoder": (cv.JOINT_STATE, 1000)},
    "adekf_slider_crank": {"/mbde/sensors/accel_slider": (cv.IMU, 1000),
                           "/mbde/reference/motor_encoder": (cv.JOINT_STATE, 1000)},
}


def check_bag_info(info, name, duration):
    want = dict(EXPECTED_TOPICS[name])
    want[DESC] = (cv.STRING, None)
    want[GT] = want[GT_JS] = (cv.MECHANISM_STATE, 1000)
    want[GT_JS] = (cv.JOINT_STATE, 1000)
    got = {t["topic"]: t for t in info["topics"]}
    assert set(got) == set(want)
    for topic, (typ, rate) in want.items():
        assert got[topic]["type"] == typ
        if rate is None:
            assert got[topic]["count"] == 1
        else:
            assert got[topic]["rate_hz"] == pytest.approx(rate, rel=0.01)
            assert got[topic]["count"] == int(duration * rate + 1e-6) + 1
    assert info["duration"] == pytest.approx(duration, abs=1e-9)


def test_shipped_scenarios_expected_topics_are_complete():
    assert sorted(EXPECTED_TOPICS) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_simulates(tmp_path, capsys, name):
    out = tmp_path / "bag"
    assert mbde(["simulate", scen(name), "--out", str(out), "--set", "duration=0.12", "--start-time", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar when stderr is not a terminal
    assert f"scenario {name}:" in captured.out and "max |Phi| = " in captured.out
    assert mbde(["bag-info", str(out), "--json"]) == 0
    check_bag_info(json.loads(capsys.readouterr().out), name, 0.12)
    assert mbde(["bag-info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "/mbde/ground_truth/joint_states  sensor_msgs/msg/JointState" in text and "1000.000" in text
    back = scenario_from_bag(out)  # the bag alone rebuilds truth, sensors and estimator model
    assert back.name == name and back.duration == 0.12
    assert back.estimator_mechanism().gravity.tolist() == load_scenario(scen(name)).estimator_mechanism().gravity.tolist()


def test_full_run_through_the_cli(tmp_path):
    """pf_sim unmodified (10 s, 10001 steps): drift-free, energy conserved, expected rates."""
    out = tmp_path / "pf_sim"
    proc = run_mbde("simulate", scen("pf_sim"), "--out", out, "--start-time", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "ground truth: 10001 samples" in proc.stdout
    proc = run_mbde("bag-info", out, "--json")
    assert proc.returncode == 0, proc.stderr
    check_bag_info(json.loads(proc.stdout), "pf_sim", 10.0)
    sc = load_scenario(scen("pf_sim"))
    mech = sc.truth_mechanism()
    q, qd, t = read_truth(out, mech)
    assert len(t) == 10001 and t[-1] == 10.0
    assert np.max(np.abs(mech.phi(q))) < 1e-8  # drift-free over the whole run
    assert np.max(np.abs(np.einsum("nij,nj->ni", mech.phi_q(q), qd))) < 1e-9 * np.max(np.abs(qd))
    # trapezoidal ALI3-P: energy error bounded (O(h^2) oscillation), no drift over 10 s
    assert dynamics.energy_drift(mech, q, qd) < 5e-3
    E = mech.energy(q, qd)
    assert abs(E[-1] - E[0]) < 5e-3 * np.max(mech.kinetic_energy(qd))


def read_truth(path, mech=None):
    from rosbags.rosbag2 import Reader

    store = get_typestore()
    qs, qds, ts = [], [], []
    with Reader(path) as reader:
        conns = [c for c in reader.connections if c.topic == GT_JS]
        for conn, t_ns, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == t_ns
            qs.append(msg.position)
            qds.append(msg.velocity)
            ts.append(ns_to_sec(t_ns))
    return np.array(qs), np.array(qds), np.array(ts)


# ------------------------------------------------------------------------------ physics
@pytest.mark.parametrize("name, duration", [("fourbar_gyro", 0.6), ("fivebar_gyro", 0.6), ("pf_rig_branch1", 0.4)])
def test_truth_is_drift_free_and_conserves_energy(name, duration):
    sc = load_scenario(scen(name), [f"duration={duration}", "ground_truth_rate=200"])
    r = run(sc)
    mech = sc.truth_mechanism()
    assert r.phi_max.max() < 1e-8 and np.max(np.abs(mech.phi(r.q))) < 1e-8
    J = mech.phi_q(r.q)
    # velocity constraints to the integrator's tolerance, acceleration constraints to rounding
    vel = np.einsum("nij,nj->ni", J, r.qd)
    assert np.max(np.abs(vel)) < 1e-9 * np.max(np.abs(J)) * np.max(np.abs(r.qd))
    acc = np.einsum("nij,nj->ni", J, r.qdd) + mech.phi_q_dot_qd(r.q, r.qd)
    assert np.max(np.abs(acc)) < 1e-12 * np.max(np.abs(J)) * np.max(np.abs(r.qdd))
    assert set(r.branch.tolist()) == {sc.initial_state.branch}
    E = mech.energy(r.q, r.qd)
    peak = np.max(mech.kinetic_energy(r.qd))
    assert peak > 1e-3 * abs(mech.potential_energy(r.q[0]) - mech.potential_energy(r.q).min())  # it moves
    if sc.unmodelled_loads:  # the rig's joint friction dissipates energy
        assert np.all(np.diff(E) < 1e-9 * peak) and E[-1] < E[0] - 0.1 * peak
    else:
        assert dynamics.energy_drift(mech, r.q, r.qd) < 5e-3


def test_speed_controller_tracks_the_profile():
    """Paper 004's 40 -> 50 -> 60 rad/s steps (compressed to 0.6 s each): from 0.3 s after
    each step on, the mean speed is within 0.5 % and every sample within 4 % of the target
    (the ripple is the slider-crank's angle-dependent inertia at twice the crank frequency)."""
    sc = load_scenario(scen("adekf_slider_crank"), ["duration=1.8", "speed_controller.target.steps=[[0, 40], [0.6, 50], [1.2, 60]]"])
    r = run(sc)
    k = sc.truth_mechanism().coordinate_names.index("theta")
    w = r.qd[:, k]
    for t0, target in ((0.0, 40), (0.6, 50), (1.2, 60)):
        sel = (r.t >= t0 + 0.3) & (r.t < t0 + 0.6 - 1e-9)
        err = w[sel] - target
        assert abs(err.mean()) < 0.005 * target and np.abs(err).max() < 0.04 * target, (target, err.mean(), np.abs(err).max())
        assert np.abs(w[(r.t >= t0) & (r.t < t0 + 0.01)] - target).max() > 5  # a real transient at each step
    torque = r.inputs[:, 0]
    assert r.input_names == ["motor"] and np.abs(torque).max() == 5.0  # saturates at the limit on each step
    assert np.array_equal(r.effort[:, k], torque) and not np.delete(r.effort, k, axis=1).any()
    # each snapshot's qdd is the forward dynamics of the truth with the recorded torque
    tm = sc.truth_model()
    for i in range(0, len(r.t), 97):
        tm.inputs["motor"].value = torque[i]
        qdd = dynamics.forward(tm.mechanism, r.t[i], r.q[i], r.qd[i])[1]
        assert np.allclose(qdd, r.qdd[i], rtol=1e-9, atol=1e-9 * np.abs(r.qdd[i]).max())


# ------------------------------------------------------------------------------ noise, grids
def test_sampling_grid_and_noise_streams(all_sensors):
    sc, r = all_sensors
    for s in sc.all_sensors:
        stamps, values = r.measurements[s.name]
        every = sc.sensor_every[s.name]
        assert len(stamps) == sc.n_steps // every + 1
        ns = [sec_to_ns(t) for t in stamps]
        assert ns == [sc.start_ns + j * every * sc.step_ns for j in range(len(stamps))]
        assert values.shape == (len(stamps), s.dim)
    assert [sec_to_ns(t) for t in r.t] == [sc.start_ns + j * 2 * sc.step_ns for j in range(51)]
    # noise = reading - h(true state at the same instant), from the sensor's own stream
    mech = sc.truth_mechanism()
    for s in sc.all_sensors:
        stamps, values = r.measurements[s.name]
        idx = np.searchsorted(r.t, stamps)
        on_truth = idx < len(r.t)
        on_truth[on_truth] &= r.t[idx[on_truth]] == stamps[on_truth]
        true = s.h(r.q[idx[on_truth]], r.qd[idx[on_truth]], r.qdd[idx[on_truth]])
        noise = s.residual(values[on_truth], true)
        assert np.all(np.abs(noise) < 6 * s.noise.sigma + s.noise.quantization + 1e-12)
        rng = noise_rng(sc.seed, s.name)
        first = s.noise.sigma * rng.standard_normal(s.dim)
        if not s.noise.quantization.any():
            assert np.allclose(noise[0], first, rtol=1e-9, atol=1e-12)
    quantized = r.measurements["acc_rod"][1] / 0.01
    assert np.allclose(quantized, np.round(quantized), atol=1e-9)
    # a noise-free reference sensor reads h exactly (every other sample lies on the truth grid)
    stamps, values = r.measurements["ref_enc"]
    idx = np.searchsorted(r.t, stamps[::2])
    assert np.array_equal(r.t[idx], stamps[::2])
    np.testing.assert_allclose(values[::2, 0], sc.reference_sensors["ref_enc"].h(r.q[idx])[:, 0],
                               rtol=0, atol=1e-12)  # rad: single-state h in the simulator, batched here


def test_noise_statistics_and_reproducibility():
    sc = load_scenario(scen("fivebar_gyro"), ["duration=0.5", "sensors[0].period=0.001", "sensors[1].period=0.001",
                                              "sensors[1].noise.bias=0.05"])
    r = run(sc)
    for s, bias in zip(sc.sensors, (0.0, 0.05)):
        _, values = r.measurements[s.name]
        noise = values[:, 0] - s.h(r.q, r.qd, r.qdd)[:, 0]
        assert len(noise) == 501
        assert abs(noise.mean() - bias) < 4 * s.noise.sigma[0] / math.sqrt(501)
        assert noise.std() == pytest.approx(math.radians(1), rel=0.1)
    again = run(sc)
    for name in sc.sensors.names:
        assert np.array_equal(again.measurements[name][1], r.measurements[name][1])
    other = run(sc.with_overrides(seed=sc.seed + 1))
    assert np.array_equal(other.q, r.q)  # the truth does not depend on the seed
    assert not np.array_equal(other.measurements["gyro_coupler1"][1], r.measurements["gyro_coupler1"][1])
    # removing a sensor leaves the other sensor's stream unchanged
    solo = run(sc.with_overrides(settings=["sensors=[%s]" % json.dumps(sc.raw["sensors"][1])]))
    assert list(solo.measurements) == ["gyro_coupler2"]
    assert np.array_equal(solo.measurements["gyro_coupler2"][1], r.measurements["gyro_coupler2"][1])


def test_dropout_loses_samples():
    sc = Scenario(dict(ALL_SENSORS, sensors=[{"name": "g", "type": "gyroscope", "body": "rod", "period": 0.001,
                                               "noise": {"sigma": 0.01, "dropout": 0.5}}], reference_sensors=[],
                       duration=0.2), file="dropout.yaml")
    stamps, _ = run(sc).measurements["g"]
    assert 60 < len(stamps) < 141  # of 201 samples, p = 0.5 (> 5 sigma margins)


def test_force_and_existing_output(tmp_path, capsys):
    out = tmp_path / "bag"
    args = ["simulate", scen("pf_sim"), "--out", str(out), "--set", "duration=0.01"]
    assert mbde(args) == 0
    capsys.readouterr()
    assert mbde(args) == 2
    assert capsys.readouterr().err.strip() == f"mbde simulate: error: --out: {out} exists (use --force to replace it)"
    assert mbde(args + ["--force", "--set", "duration=0.02"]) == 0
    assert "ground truth: 21 samples" in capsys.readouterr().out
    other = tmp_path / "notabag"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    assert mbde(["simulate", scen("pf_sim"), "--out", str(other), "--force", "--set", "duration=0.01"]) == 2
    assert "carries no .mbde-output.json of an earlier mbde output; not replacing it" in capsys.readouterr().err
    assert (other / "keep.txt").read_text() == "precious"


def test_progress_bar_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = ProgressBar("simulating x", stream=stream, fps=1e9)
        for k in range(0, 11):
            bar(k, 10)
        bar.close()
    assert pipe.getvalue() == ""
    assert "simulating x [" in tty.getvalue() and "100.0%" in tty.getvalue() and tty.getvalue().endswith("\n")


def test_default_epoch_is_now_rounded_to_the_second(tmp_path, capsys):
    """Simulated stamps start at an epoch of now (whole second), not 1970-01-01, or at
    --start-time; the scenario's own time (loads, controller) still starts at 0."""
    import time as _time

    from mbde_core.rosio.bag import BagReader

    before = _time.time()
    out = tmp_path / "now"
    assert mbde(["simulate", scen("fourbar_gyro"), "--out", str(out), "--set", "duration=0.05"]) == 0
    with BagReader(out) as r:
        assert int(before) <= r.start <= _time.time() and r.start == int(r.start)
        assert r.duration == pytest.approx(0.05, abs=1e-6)  # s: float epoch stamps, 0.24 us apart
    assert any(f.suffix == ".mcap" for f in out.iterdir())  # mcap by default (ROS 2 Jazzy)
    fixed = tmp_path / "fixed"
    assert mbde(["simulate", scen("fourbar_gyro"), "--out", str(fixed), "--set", "duration=0.05",
                 "--start-time", "1000.5", "--storage", "sqlite3"]) == 0
    with BagReader(fixed) as r:
        assert r.start == 1000.5 and (fixed / "fixed.db3").is_file()
    capsys.readouterr()
    assert mbde(["simulate", scen("fourbar_gyro"), "--out", str(tmp_path / "x"), "--start-time", "soon"]) == 2
    assert "--start-time: expected 'now' or seconds" in capsys.readouterr().err
