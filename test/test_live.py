"""The ROS-free estimator core of the nodes (mbde_core.live), driven with rosbags messages.

It must run the replay stage bit for bit; bad input is counted, failures restart it,
clock jumps and frame mismatches are handled and said. The drivers, the paced simulator
and the model sources are in test_live_sources.py.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import REPO
from live_rig import CONFIG, Sink, bag, live, sensor_messages  # noqa: F401  (bag: the shared fixture)
from mbde_core.errors import ConfigError
from mbde_core.live.diagnostics import ERROR, OK, WARN, diagnostic_array, level_of
from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
from mbde_core.live.model_source import load_source, scenario_for_mechanism
from mbde_core.rosio.factory import RosbagsFactory


# ------------------------------------------------------------------------------ estimator
@pytest.mark.parametrize("name", ["ukf", "errorekf", "dekf"])
def test_live_core_equals_replay_bit_for_bit(bag, name):
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.rosio.convert import snapshot_from_mechanism_state

    core, sink = live(bag, name, publish_rate=0.0, reorder_window=0.02)
    for topic, t, msg in sensor_messages(bag):  # one message at a time, clock just after the stamp
        core.on_message(topic, msg, t + 0.002)
        core.tick(t + 0.003)
    run = run_estimator(load_inputs(str(bag)), name, load_config(name, CONFIG), seed=0)
    states = [snapshot_from_mechanism_state(m) for m in sink.msgs["state"]]
    assert len(states) >= len(run.records) - 5  # the last readings wait in the reorder window
    for s, r in zip(states, run.records):
        assert abs(s.stamp - r.estimate.stamp) < 1e-9  # ns stamps
        assert np.array_equal(s.z, r.estimate.z) and np.array_equal(s.zd, r.estimate.zd)
        assert np.array_equal(s.q, r.estimate.q) and np.array_equal(s.cov, r.estimate.cov)
    assert len(sink.msgs["joint_states"]) == len(states)
    assert core.counters.out_of_order == 0 and core.counters.non_finite == 0


def test_decimation_markers_and_status(bag):
    core, sink = live(bag, "ukf", publish_rate=50.0, marker_rate=10.0)
    msgs = sensor_messages(bag)
    for topic, t, msg in msgs:
        core.on_message(topic, msg, t + 0.001)
    stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in sink.msgs["state"]]
    assert np.allclose(np.diff(stamps), 0.02, atol=1e-9)
    assert len(sink.msgs["markers"]) == pytest.approx(15, abs=1)
    spaces = {m.ns for m in sink.msgs["markers"][-1].markers}
    assert spaces == {"ukf/bars", "ukf/joints", "ukf/ellipses", "ukf/label"}
    assert "particles" not in sink.msgs
    st = core.status("test", msgs[-1][1] + 0.001)
    v = st.as_dict()
    assert st.level == OK and st.message.startswith("running, trust OK, gyro_coupler")
    assert v["trust"] == "OK" and "consistent" in v["trust reason"]  # the stage's verdict, as replay's
    assert v["readings received"] == len(msgs) and v["malformed"] == 0 and v["resets"] == 0
    assert float(v["NIS (mean, last active period)"]) > 0 and "step time mean [ms]" in v
    arr = diagnostic_array(RosbagsFactory(), 1.5, [st])
    assert level_of(arr.status[0]) == OK and arr.status[0].hardware_id == "fourbar"
    assert {kv.key for kv in arr.status[0].values} == set(v)
    # the next period without data: stale, and the last NIS / step time are still reported
    later = core.status("test", msgs[-1][1] + 3.0)
    assert later.level == WARN and "stale" in later.message
    assert "NIS (mean, last active period)" in later.as_dict()


def test_bad_messages_are_counted_never_raised(bag):
    import copy

    core, sink = live(bag, "ukf", publish_rate=0.0)
    msgs = sensor_messages(bag)
    topic = msgs[0][0]
    for i, (tp, t, msg) in enumerate(msgs[:100]):
        core.on_message(tp, msg, t)
    bad = copy.deepcopy(msgs[100][2])
    bad.angular_velocity_covariance[0] = -1.0  # "not provided" (REP 145)
    core.on_message(topic, bad, msgs[100][1])
    nan = copy.deepcopy(msgs[101][2])
    nan.angular_velocity.z = float("nan")
    core.on_message(topic, nan, msgs[101][1])
    late = copy.deepcopy(msgs[50][2])
    core.on_message(topic, late, msgs[101][1])
    core.on_message("/unrelated", msgs[102][2], msgs[102][1])  # not a sensor topic: ignored
    core.stage.flush()
    v = core.status("n", msgs[101][1]).as_dict()
    assert v["malformed"] == 1 and v["non-finite"] == 1 and v["late (out of order)"] == 1
    assert "does not provide angular_velocity" in v["gyro_coupler: last malformed"]
    assert any("skipping a malformed message" in text for _, text in sink.logs)


def test_estimator_failures_and_non_finite_estimates_restart_it(bag, monkeypatch):
    core, sink = live(bag, "ukf", publish_rate=0.0)
    msgs = sensor_messages(bag)
    for tp, t, msg in msgs[:20]:
        core.on_message(tp, msg, t)
    n_before = len(sink.msgs["state"])

    def boom(*a, **k):
        raise np.linalg.LinAlgError("singular matrix")

    monkeypatch.setattr(core.est, "update", boom)
    for tp, t, msg in msgs[20:25]:
        core.on_message(tp, msg, t)
    monkeypatch.undo()
    assert core.errors >= 1 and "LinAlgError: singular matrix" in core.last_error
    assert core.resets["estimator error"] >= 1
    st = core.status("n", msgs[24][1])
    assert st.level == ERROR and "estimator error" in st.message
    for tp, t, msg in msgs[25:60]:  # it carries on
        core.on_message(tp, msg, t)
    assert len(sink.msgs["state"]) > n_before + 20
    # a non-finite estimate is not published and restarts the estimator
    real = core.est.estimate

    def bad_estimate():
        s = real()
        s.z = s.z * np.nan
        return s

    monkeypatch.setattr(core.est, "estimate", bad_estimate)
    n = len(sink.msgs["state"])
    for tp, t, msg in msgs[60:64]:
        core.on_message(tp, msg, t)
    assert len(sink.msgs["state"]) == n and core.non_finite_estimates >= 1
    assert core.resets["non-finite estimate"] >= 1


def test_estimator_failure_loses_only_the_failed_update(bag, monkeypatch):
    """After an estimator failure the readings received but not yet fused (reorder buffer,
    the reading being processed) go to the restarted track: only the failed update's own
    reading is lost, as in mbde replay."""
    msgs = sensor_messages(bag)[:80]
    fused = {}
    for fail in (False, True):
        core, _ = live(bag, "dekf", publish_rate=0.0)
        real, calls = core.est.update, {"n": 0}

        def flaky(measurements, gates=None):
            calls["n"] += 1
            if fail and calls["n"] == 30:
                raise np.linalg.LinAlgError("singular matrix (injected)")
            return real(measurements, gates)

        monkeypatch.setattr(core.est, "update", flaky)
        for tp, t, msg in msgs:
            core.on_message(tp, msg, t)
        assert core.errors == int(fail)
        fused[fail] = core.counters.fused
    assert fused[True] == fused[False] - 1, fused


def test_clock_predicts_through_gaps_and_is_ignored_when_it_disagrees(bag):
    msgs = sensor_messages(bag)
    core, sink = live(bag, "ukf", publish_rate=0.0, max_prediction=0.2)
    core.wall = lambda: 0.0  # ticks without a stall of the node between them (test_live_backlog.py)
    for tp, t, msg in msgs[:100]:
        core.on_message(tp, msg, t + 0.001)
    t_last = msgs[99][1]
    core.tick(t_last + 0.01)  # not overdue: readings may be in flight
    assert core.time <= t_last
    core.tick(t_last + 1.0)  # overdue: predicts, but at most max_prediction past the newest reading
    assert core.time == pytest.approx(t_last + 0.2 - 0.02, abs=0.006)
    assert core.status("n", t_last + 1.0).as_dict()["state"] == "stale"
    # stamps from another clock (e.g. a bag played without --clock): never driven by the clock
    core2, _ = live(bag, "ukf", publish_rate=0.0)
    for tp, t, msg in msgs[:100]:
        core2.on_message(tp, msg, 1.7e9 + t)
    core2.tick(1.7e9 + 50.0)
    assert core2.clock_mismatch and core2.time <= t_last
    st = core2.status("n", 1.7e9 + 50.0)
    assert st.level == WARN and "clock mismatch" in st.message and "--clock" in st.message


def test_reset_and_backward_stamps(bag):
    msgs = sensor_messages(bag)
    core, sink = live(bag, "ukf", publish_rate=0.0)
    for tp, t, msg in msgs[:150]:
        core.on_message(tp, msg, t)
    core.reset("reset service")
    assert core.time is None
    for tp, t, msg in msgs[:150]:  # the data again from the start: a new track, same estimates
        core.on_message(tp, msg, t)
    first = [m for m in sink.msgs["state"]]
    n = len(first) // 2
    assert [list(m.z) for m in first[:n - 5]] == [list(m.z) for m in first[n:2 * n - 5]]
    v = core.status("n", msgs[149][1]).as_dict()
    assert "reset service: 1" in v["reset reasons"]


def test_bad_configuration_is_a_config_error(bag):
    with pytest.raises(ConfigError, match="unknown estimator"):
        load_config("ukf", os.path.join(REPO, "config", "scenarios", "pf_sim.yaml"))
    with pytest.raises(ConfigError, match="not found"):
        load_config("ukf", "estimators/nope.yaml")
    sc = scenario_for_mechanism("mechanisms/fourbar.yaml")  # no sensors at all
    with pytest.raises(ConfigError, match="no sensors"):
        LiveEstimator(sc, EstimatorOptions("ukf", load_config("ukf")), RosbagsFactory(), lambda k, m: None)


def test_clock_jumping_back_at_a_loop_wrap_is_not_another_clock(bag):
    """A looping simulator (or bag) jumps the clock back while readings of the old lap are
    still in flight: they are dropped as late, and no 'another clock' is reported."""
    msgs = sensor_messages(bag)
    core, sink = live(bag, "pf", publish_rate=0.0)
    for tp, t, msg in msgs[:300]:
        core.on_message(tp, msg, t + 0.002)
        core.tick(t + 0.003)
    late = core.counters.out_of_order
    core.reset("clock jumped back", "by 1.5 s")
    t0 = msgs[0][1]
    for tp, _, msg in msgs[-3:]:  # the old lap's last readings arrive after the jump
        core.on_message(tp, msg, t0 + 0.001)
    core.tick(t0 + 0.002)
    for tp, t, msg in msgs[:100]:  # the new lap
        core.on_message(tp, msg, t + 0.002)
        core.tick(t + 0.003)
    v = core.status("n", msgs[99][1] + 0.003).as_dict()
    assert not core.clock_mismatch and "clock mismatch" not in v["state"]
    assert not [text for _, text in sink.logs if "another clock" in text]
    assert core.counters.out_of_order == late + 3 and core.time == pytest.approx(msgs[99][1] - 0.02, abs=0.006)


def test_frame_id_mismatch_is_counted_and_tf_is_published(bag):
    from mbde_core.rosio.tf import transforms_from_message

    msgs = sensor_messages(bag)
    core, sink = live(bag, "ukf", publish_rate=50.0, tf_prefix="ukf/")
    for k, (tp, t, msg) in enumerate(msgs[:100]):
        if k in (10, 11):
            msg.header.frame_id = "imu_link"  # a driver configured with another frame
        core.on_message(tp, msg, t + 0.002)
    st = core.status("n", msgs[99][1])
    v = st.as_dict()
    assert v["gyro_coupler: frame mismatch"] == 2 and "imu_link" in v["gyro_coupler: last frame"]
    assert st.level == WARN and "another frame" in st.message
    assert [lv for lv, text in sink.logs if "imu_link" in text] == ["warn"]  # throttled: one line
    assert core.counters.fused >= 90  # the readings were used
    tfs = sink.msgs["tf"]
    assert len(tfs) == len(sink.msgs["state"]) > 0
    last = transforms_from_message(tfs[-1])
    assert {t["child"] for t in last} == {"ukf/crank", "ukf/coupler", "ukf/rocker"}
    assert {t["parent"] for t in last} == {"world"}
    state = sink.msgs["state"][-1]
    assert all(t["stamp"] == state.header.stamp.sec + 1e-9 * state.header.stamp.nanosec for t in last)
    static = transforms_from_message(core.static_tf())
    assert {(t["child"], t["parent"]) for t in static} == {("ukf/gyro_coupler", "ukf/coupler")}


def test_the_noise_rule_widening_is_said_once_at_the_start():
    """On the four-bar with an accelerometer, the node says in one info line which channels
    the default noise rule widened (as `mbde replay` does)."""
    sink = Sink()
    sc = load_source(scenario_file="scenarios/fourbar_imu.yaml", settings=["duration=0.5"])
    LiveEstimator(sc, EstimatorOptions("ukf", load_config("ukf", CONFIG)), RosbagsFactory(), sink.publish, sink.log)
    notes = [text for level, text in sink.logs if "noise rule widened" in text]
    assert len(notes) == 1 and "accel_rocker accel_x/accel_y sigma 0.05 ->" in notes[0] and "\n" not in notes[0]
    assert [level for level, text in sink.logs if text == notes[0]] == ["info"]
