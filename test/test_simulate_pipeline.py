"""The two-process simulation (mbde_core.simulator.pipeline) gives the serial events."""
from __future__ import annotations

import os

import numpy as np
import pytest
from rosbags.rosbag2 import Reader

from conftest import REPO
from mbde_core.scenario.scenario import load_scenario
from mbde_core.simulator import core, pipeline
from mbde_core.simulator.bag import write_simulation_bag


def _scenario(name, *settings):
    return load_scenario(os.path.join(REPO, "config", "scenarios", name + ".yaml"), list(settings))


def _same(a, b):
    assert type(a) is type(b)
    for key, v in vars(a).items():
        w = getattr(b, key)
        if isinstance(v, np.ndarray):
            assert v.dtype == w.dtype and v.shape == w.shape and np.array_equal(v, w), key
        else:
            assert v == w, key


@pytest.mark.parametrize("name", ["fourbar_gyro", "adekf_slider_crank", "fivebar_encoder"])
def test_child_integration_gives_the_serial_events(name, monkeypatch):
    # small blocks and little credit, so that several blocks and the back-pressure are used
    monkeypatch.setattr(pipeline, "BLOCK", 7)
    monkeypatch.setattr(pipeline, "AHEAD", 2)
    sc = _scenario(name, "duration=0.6")
    serial = list(core.simulate(sc))
    piped = list(pipeline.pipelined_events(sc, processes=2))
    assert len(piped) == len(serial) > 100
    for a, b in zip(piped, serial):
        _same(a, b)


def test_child_failure_is_one_simulation_error(monkeypatch):
    real = core.get_integrator

    class Failing:  # the real integrator until t = 0.3 s, then a non-converged step
        def __init__(self, name):
            self.inner = real(name)

        def step(self, mech, t, state, h):
            out = self.inner.step(mech, t, state, h)
            if t >= 0.3:
                out = core.MBState(out.q * np.nan, out.qd, out.qdd)
            return out

    monkeypatch.setattr(core, "get_integrator", Failing)
    sc = _scenario("fourbar_gyro", "duration=1")
    with pytest.raises(core.SimulationError) as serial:
        list(core.simulate(sc))
    with pytest.raises(core.SimulationError) as piped:
        list(pipeline.pipelined_events(sc, processes=2))
    assert str(piped.value) == str(serial.value)


def test_bag_is_the_same_with_one_or_two_processes(tmp_path):
    sc = _scenario("fourbar_gyro", "duration=0.5")
    bags = []
    for p in (1, 2):
        write_simulation_bag(sc, tmp_path / f"b{p}", "sqlite3", processes=p)
        with Reader(tmp_path / f"b{p}") as r:
            bags.append([(c.topic, t, bytes(raw)) for c, t, raw in r.messages()])
    assert bags[0] == bags[1]
