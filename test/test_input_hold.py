"""How a measured torque behaves between its readings (the effort sensor's ``hold``).

``linear``: the stage predicts into a slot once the slot's torque reading is in and gives
each step the line between the last two readings at the step's middle -- for a torque
that is a ramp in time (checked here) that is the true torque at the middle, exactly.
``zero``: the reading holds until the next one; the smoother ties it to the middle of the
interval it holds over (stamp + period / 2), the stage holds it from its stamp
(test_known_inputs).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.estimators.stage.inputs import STALE_MIN, STALE_PERIODS
from mbde_core.sensors.config import load_sensors
from mbde_core.trajectory.readings import ReadingsStream, bin_readings
from mbde_core.types import Measurement
from test_effort_sensor import _mech
from test_known_inputs import fed_ramp

GYRO = {"name": "gyro", "type": "gyroscope", "body": "rod", "rate": 200, "noise": {"sigma": 0.01}}


def _sensors(mech, hold=None, rate=200):
    tau = {"name": "tau", "type": "effort", "coordinate": "theta", "rate": rate, "gain": 2.0, "noise": {"sigma": 0.05}}
    if hold is not None:
        tau["hold"] = hold
    return load_sensors(Node([GYRO, tau], "s.yaml", "sensors"), mech)


def test_hold_key_default_and_error():
    mech = _mech()
    assert _sensors(mech).input("tau").hold == "zero"
    assert _sensors(mech, "linear").input("tau").hold == "linear"
    with pytest.raises(ConfigError) as err:
        _sensors(mech, "cubic")
    assert "s.yaml" in str(err.value) and "hold" in str(err.value)


def test_linear_hold_gives_each_step_the_line_between_readings():
    """Gyro at 200 Hz, a torque ramp (y = 0.1 k at 50 Hz, gain 2) until 0.3 s, hold linear:
    a step that ends at a torque reading's slot gets the ramp's value at its middle and
    the reading's variance plus (rate dt / 2)^2; the other steps hold the newest reading
    (rate x age at the middle of the step); after 5 periods the force is stale."""
    mech = _mech()
    sensors = _sensors(mech, "linear")
    rec, stage = fed_ramp(mech, sensors)
    assert stage.held.defers
    var = sensors.input("tau").force_variance()
    period, rate = 0.02, 2.0 * 0.1 / 0.02
    lines = stale = 0
    for t, u, v, dt in rec.seen:
        n = min(math.floor((t + dt) / period + 1e-9), 15)  # the newest reading when the step is predicted
        if dt and n >= 1 and n * period > t + dt / 2:  # the step ends at a reading: on the ramp
            lines += 1
            assert u == pytest.approx(rate * (t + dt / 2)) and v == pytest.approx(var + (rate * dt / 2) ** 2)
            continue
        last = min(math.floor(t / period + 1e-9), 15)
        age = t - last * period
        hold = var + ((rate if last else 0.0) * (age + dt / 2)) ** 2
        if age <= max(STALE_MIN, STALE_PERIODS * period) + 1e-9:
            assert u == pytest.approx(2.0 * 0.1 * last) and v == pytest.approx(hold)
        else:
            stale += dt > 0
            assert u == pytest.approx(2.0 * 1.5) and v == pytest.approx(max(hold, (2.0 * 1.5) ** 2))
    assert lines == 15 and stage.counters.stale_inputs == stale > 0
    assert {dt for *_, dt in rec.seen} == {0.0, 0.005}


@pytest.mark.parametrize("hold, shift", [("zero", 1), ("linear", 0)])
def test_smoother_ties_a_held_torque_to_the_middle_of_its_interval(hold, shift):
    """1 kHz torque on a 0.5 ms grid: a held reading (zero) stands for the torque over
    [t, t + 1 ms], its middle one step after its stamp; a sampled one (linear) its stamp.
    The stream's windows bin them alike; a held reading past the grid's end is dropped."""
    mech = _mech()
    sensors = _sensors(mech, hold, rate=1000)
    ms = [Measurement(k * 0.001, "gyro", np.array([0.0])) for k in range(11)]
    ms += [Measurement(k * 0.001, "tau", np.array([float(k)])) for k in range(11)]
    r = bin_readings(ms, sensors, 0.0005)
    (tau,) = r.inputs
    assert r.N == 21
    expect = 2 * np.arange(11) + shift
    keep = expect < r.N
    assert np.array_equal(tau.idx, expect[keep]) and np.array_equal(tau.values[:, 0], np.arange(11.0)[keep])
    stream = ReadingsStream(iter(ms), sensors, 0.0005, lag=math.inf)
    stream.fill(20)
    (w,) = stream.take(0, stream.N).inputs
    assert np.array_equal(w.idx, tau.idx)
