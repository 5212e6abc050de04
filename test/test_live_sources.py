"""Where the live graph's data come from, ROS-free (mbde_core.live): the drivers reproduce
the readings of `mbde simulate`, the paced simulator its ground truth, and the model
sources (scenario, mechanism + sensors, a published description) load what they should.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from conftest import REPO
from live_rig import bag, description  # noqa: F401  (bag: the shared fixture)
from mbde_core.config.paths import resolve
from mbde_core.errors import ConfigError, DataError
from mbde_core.live.drivers import DriverSet
from mbde_core.live.model_source import from_description, load_source, scenario_for_mechanism
from mbde_core.live.simulator import PacedSimulation, sensor_grid_steps, truth_messages, with_truth_period
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.factory import RosbagsFactory


# ------------------------------------------------------------------------------ drivers
def test_drivers_reproduce_the_simulated_bag(bag):
    f = RosbagsFactory()
    sc = from_description(description(bag))
    drivers = DriverSet(sc, "imu_driver", f)
    assert [d.sensor.name for d in drivers.drivers] == ["gyro_coupler"]
    assert len(DriverSet(sc, "encoder_driver", f)) == 0
    got, ref = [], []
    with BagReader(bag) as r:
        for topic, _, m in r.messages(["/mbde/ground_truth", "/mbde/sensors/gyro_coupler"]):
            if topic == "/mbde/ground_truth":
                got += drivers.on_truth(m)
            else:
                ref.append(m)
    assert len(got) == len(ref) == 301
    for (topic, a), b in zip(got, ref):
        assert topic == "/mbde/sensors/gyro_coupler"
        assert (a.header.stamp.sec, a.header.stamp.nanosec) == (b.header.stamp.sec, b.header.stamp.nanosec)
        assert a.angular_velocity.z == b.angular_velocity.z and a.header.frame_id == b.header.frame_id
        assert list(a.angular_velocity_covariance) == list(b.angular_velocity_covariance)
        assert a.linear_acceleration_covariance[0] == -1.0


def test_driver_rate_frame_noise_and_time_jumps(bag):
    f = RosbagsFactory()
    sc = from_description(description(bag))
    truth = []
    with BagReader(bag) as r:
        truth = [m for _, _, m in r.messages(["/mbde/ground_truth"])]
    d = DriverSet(sc, "imu_driver", f, rate=50.0, noise=False, frame_id="imu_link")
    out = [m for g in truth for _, m in d.on_truth(g)]
    assert len(out) == 76 and all(m.header.frame_id == "imu_link" for m in out)  # 1.5 s at 50 Hz
    sensor = d.drivers[0].sensor
    from mbde_core.rosio.convert import snapshot_from_mechanism_state

    s0 = snapshot_from_mechanism_state(truth[20])
    exact = DriverSet(sc, "imu_driver", f, noise=False)
    (_, m), = exact.on_truth(truth[20])
    assert m.angular_velocity.z == sensor.h(s0.q, s0.qd, s0.qdd)[0]
    # the time going back (a looping simulation) restarts the grid and the noise stream
    noisy = DriverSet(sc, "imu_driver", f)
    first = [m.angular_velocity.z for g in truth[:50] for _, m in noisy.on_truth(g)]
    again = [m.angular_velocity.z for g in truth[:50] for _, m in noisy.on_truth(g)]
    assert first == again
    other = load_source(scenario_file="scenarios/adekf_slider_crank.yaml")  # same coordinate names
    with pytest.raises(DataError, match="another mechanism than 'slider_crank'"):
        DriverSet(other, "imu_driver", f).on_truth(truth[0])
    with pytest.raises(ConfigError, match="no sensor"):
        DriverSet(sc, "imu_driver", f, names=["nope"])
    with pytest.raises(ConfigError, match="use the other driver"):
        DriverSet(sc, "encoder_driver", f, names=["gyro_coupler"])


# ------------------------------------------------------------------------------ simulator
def test_paced_simulation_is_the_simulator_in_pieces():
    from mbde_core.simulator import simulate
    from mbde_core.simulator.core import TruthSnapshot

    base = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=0.3"])
    sc = with_truth_period(base)
    assert sensor_grid_steps(base) == 5 and sc.ground_truth_every == 5
    ref = [e for e in simulate(sc) if isinstance(e, TruthSnapshot)]
    sim = PacedSimulation(sc)
    got = []
    for tau in (0.0, 0.012, 0.1, 0.1, 0.2999, 5.0):
        got += sim.advance(tau)
    assert sim.finished and len(got) == len(ref) == 61
    assert all(np.array_equal(a.q, b.q) and a.stamp == b.stamp for a, b in zip(got, ref))
    assert got[-1].stamp_ns == 300_000_000
    # wall-clock stamps without /clock; a loop keeps the time running
    wall = PacedSimulation(sc, loop=True, offset_ns=1_700_000_000_123_456_789, clock=False)
    lap1 = wall.advance(1.0)
    assert wall.lap == 1 and lap1[0].stamp_ns == 1_700_000_000_123_456_789
    lap2 = wall.advance(0.0)
    assert lap2[0].stamp_ns == lap1[-1].stamp_ns + 1_000_000  # one step after the end
    clocked = PacedSimulation(sc, loop=True)
    clocked.advance(1.0)
    assert clocked.advance(0.0)[0].stamp_ns == 0  # with /clock every lap restarts
    state, joints = truth_messages(RosbagsFactory(), lap1[3], sc.truth_mechanism().coordinate_names,
                                   sc.truth_mechanism().independent_names, "world")
    assert (state.header.stamp.sec, state.header.stamp.nanosec) == (1_700_000_000, 138_456_789)
    assert list(joints.name) == sc.truth_mechanism().coordinate_names and len(joints.effort) == 5
    with pytest.raises(ConfigError, match="333 Hz is not a whole number"):
        with_truth_period(base, rate=333.0)
    assert with_truth_period(base, rate=1000.0, duration=2.0).n_steps == 2000


# ------------------------------------------------------------------------------ model sources
def test_model_sources(tmp_path):
    sensors = tmp_path / "sensors.yaml"
    sensors.write_text("sensors:\n  - {name: enc, type: encoder, body: crank, rate: 300, noise: {sigma: 0.01}}\n"
                       "  - {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 0.01}}\n")
    sc = scenario_for_mechanism("mechanisms/fourbar.yaml", str(sensors))
    assert sc.sensors.names == ["enc", "gyro"] and sc.sensor_every == {"enc": 3333333, "gyro": 5000000}
    text = __import__("mbde_core.scenario.description", fromlist=["x"]).write_description(sc)
    back = from_description(text)
    assert back.sensors.names == ["enc", "gyro"] and back.estimator_mechanism().name == "fourbar"
    assert load_source() is None
    with pytest.raises(ConfigError, match="not both"):
        load_source("scenarios/pf_sim.yaml", "mechanisms/fourbar.yaml")
    with pytest.raises(ConfigError, match="sensors_file needs mechanism_file"):
        load_source(sensors_file=str(sensors))
    with pytest.raises(ConfigError, match="settings apply to a scenario_file only"):
        load_source(mechanism_file="mechanisms/fourbar.yaml", settings=["duration=1"])
    with pytest.raises(ConfigError, match="scenario file not found"):
        load_source("scenarios/nope.yaml")
    assert resolve("mechanisms/fourbar.yaml") == os.path.join(REPO, "config", "mechanisms", "fourbar.yaml")
    assert math.isclose(load_source("scenarios/pf_sim.yaml", settings=["duration=2"]).duration, 2.0)
