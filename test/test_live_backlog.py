"""A live estimator that falls behind its readings (mbde_core.live.backlog): it skips
readings evenly, counts them and warns, and keeps its track; the first tick after the
node itself was stalled does not predict over readings still waiting in its queue."""
from __future__ import annotations

import numpy as np
import pytest

from mbde_core.live.backlog import BEHIND, STALLED, Backlog
from mbde_core.live.diagnostics import WARN
from mbde_core.live.model_source import load_source
from live_rig import description, live, sensor_messages


def test_backlog_keeps_one_reading_in_four_per_sensor_while_behind():
    b = Backlog()
    assert all(b.admit("a", 0.001) for _ in range(10)) and b.admit("a", None)
    kept = [b.admit("a", BEHIND + 0.1) for _ in range(12)]
    assert kept == [False, False, False, True] * 3 and b.skipped == {"a": 9} and b.episodes == 1
    assert b.admit("b", 1.0)  # another sensor: its own count (its first reading while behind is processed)
    assert not b.admit("a", 0.6 * BEHIND)  # hysteresis: still behind until the wait halves
    assert b.admit("a", 0.4 * BEHIND) and not b.behind and b.admit("a", 0.4 * BEHIND)
    assert dict(b.values())["skipped (node behind)"] == 10 and "falling behind: 10 reading(s)" in b.problem()
    assert b.problem() is None  # a new period: none skipped in it


@pytest.fixture(scope="module")
def slider_bag(tmp_path_factory):
    """The 1 kHz slider accelerometer of paper 004 (adekf_slider_crank, theta = pi/2)."""
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_source(scenario_file="scenarios/adekf_slider_crank.yaml",
                     settings=["duration=2.5", "initial_state.position.theta=pi/2"])
    out = tmp_path_factory.mktemp("backlog") / "bag"
    write_simulation_bag(sc, out)
    return out


def crank_error(core_states, bag):
    """RMS of the crank angle error after 0.5 s [rad], estimates vs the bag's truth."""
    from mbde_core.replay.inputs import load_inputs

    truth = load_inputs(str(bag)).truth
    t = np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in core_states])
    z = np.array([m.z[0] for m in core_states])
    e = (z - np.interp(t, truth.t, np.unwrap(truth.z[:, 0])) + np.pi) % (2 * np.pi) - np.pi
    return float(np.sqrt(np.mean(e[t > truth.t[0] + 0.5] ** 2)))


def test_an_adekf_node_behind_for_a_second_skips_readings_and_keeps_its_track(slider_bag):
    """The readings of 0.8-1.8 s wait 0.4 s in the queue: 3 in 4 skipped, counted, warned,
    and the ADE-KF stays on the true crank motion (a 50 ms hole instead, the reader queue
    losing its oldest readings, sends it to the mirrored motion: backlog.py)."""
    msgs = sensor_messages(slider_bag)
    t0 = msgs[0][1]
    core, sink = live(slider_bag, "adekf", publish_rate=0.0)
    for topic, t, msg in msgs:
        core.on_message(topic, msg, t + 0.001, queued=0.4 if 0.8 <= t - t0 < 1.8 else 0.001)
    skipped = core.backlog.total
    assert skipped == pytest.approx(0.75 * 1000, abs=3)
    assert core.counters.received == len(msgs) - skipped  # what the stage was given
    assert any(level == "warn" and "falling behind" in text for level, text in sink.logs)
    status = core.status("n", msgs[-1][1])
    assert status.level == WARN and "falling behind" in status.message
    assert dict(status.values)["skipped (node behind)"] == skipped
    # while behind only the steps that fused a reading are published (one reading in 4)
    assert core.backlog.unpublished > 0.75 * 1000
    assert len(sink.msgs["state"]) == core.counters.steps - core.backlog.unpublished
    assert crank_error(sink.msgs["state"], slider_bag) < 0.05


def test_the_first_tick_after_a_stall_of_the_node_does_not_predict(tmp_path_factory):
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=1"])
    bag = tmp_path_factory.mktemp("stall") / "bag"
    write_simulation_bag(sc, bag)
    msgs = sensor_messages(bag)
    clock = {"wall": 0.0}
    core, _ = live(bag, "ukf", publish_rate=0.0, max_prediction=0.2)
    core.wall = lambda: clock["wall"]
    for topic, t, msg in msgs[:100]:
        core.on_message(topic, msg, t + 0.001)
    t_last = msgs[99][1]
    core.tick(t_last + 0.01)
    clock["wall"] += 2 * STALLED  # the node did not run: readings may wait in its queue
    core.tick(t_last + 1.0)
    assert core.time <= t_last  # not overtaken
    clock["wall"] += 0.05
    core.tick(t_last + 1.05)  # still silent one tick later: a real gap, predicted through
    assert core.time > t_last + 0.1
    assert description(bag)
