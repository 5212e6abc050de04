"""EstimatorStage: ordering, batching, resets, bad readings, gating."""
import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

SENSORS = """
- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 1*pi/180}}
- {name: enc, type: encoder, body: crank, rate: 40, noise: {sigma: 1*pi/180}}
"""


@pytest.fixture(scope="module")
def data():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(SENSORS), m)
    rng = np.random.default_rng(3)
    samplers = {s.name: s.noise.sampler(rng) for s in ss}
    integ = get_integrator("rk4")
    s = MBState(m.q0, m.qd0)
    ms = []
    h = 1e-3
    for k in range(1201):
        t = k * h
        if k % 5 == 0:
            ms.append(Measurement(t + 0.0004, "gyro", samplers["gyro"].apply(t, ss["gyro"].h(s.q, s.qd))))
        if k % 25 == 0:
            ms.append(Measurement(t, "enc", samplers["enc"].apply(t, ss["enc"].h(s.q))))
        s = integ.step(m, t, s, h)
    ms.sort(key=lambda x: x.stamp)
    return m, ss, ms


def make_stage(m, ss, name="dekf", **kw):
    est = make_estimator(name, m, ss, defaults(name))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
    return EstimatorStage(est, 0.005, lambda t: init, **kw)


def trajectory(stage):
    return np.array([np.concatenate([[r.estimate.stamp], r.estimate.z, r.estimate.zd, r.estimate.cov.ravel()]) for r in stage.records])


@pytest.mark.parametrize("name", ["dekf", "ukf", "errorekf"])
def test_one_by_one_equals_batched(data, name):
    m, ss, ms = data
    a = make_stage(m, ss, name)
    a.feed(ms)
    a.flush()
    b = make_stage(m, ss, name)
    for x in ms:
        b.feed(x)
    b.flush()
    c = make_stage(m, ss, name)
    for i in range(0, len(ms), 7):
        c.feed(ms[i : i + 7])
    c.flush()
    ta, tb, tc = trajectory(a), trajectory(b), trajectory(c)
    assert ta.shape == tb.shape == tc.shape and len(ta) > 200
    assert np.array_equal(ta, tb) and np.array_equal(ta, tc)
    assert a.counters.fused == len(ms)


def test_reorder_window_sorts_small_inversions(data):
    m, ss, ms = data
    a = make_stage(m, ss)
    a.feed(ms)
    a.flush()
    shuffled = list(ms)
    rng = np.random.default_rng(0)
    for i in range(0, len(shuffled) - 3, 3):  # swap neighbours (< 5 ms apart)
        j = i + int(rng.integers(1, 3))
        shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
    b = make_stage(m, ss, reorder_window=0.02)
    for x in shuffled:
        b.feed(x)
    b.flush()
    assert np.array_equal(trajectory(a), trajectory(b))
    assert b.counters.out_of_order == 0
    # without the window the inversions are counted and skipped
    c = make_stage(m, ss)
    for x in shuffled:
        c.feed(x)
    c.flush()
    assert c.counters.out_of_order > 0
    assert c.counters.fused + c.counters.out_of_order == len(ms)


def test_backward_time_jump_resets(data):
    m, ss, ms = data
    st = make_stage(m, ss)
    first = [x for x in ms if x.stamp < 1.2]
    again = [x for x in ms if x.stamp < 0.5]
    st.feed(first)
    st.feed(again)  # the bag looped
    st.flush()
    assert st.counters.resets == 1
    stamps = np.array([r.estimate.stamp for r in st.records])
    assert np.sum(np.diff(stamps) < 0) == 1  # one jump back in the output
    assert stamps[-1] < 0.51


def test_nan_readings_are_counted_not_fused(data):
    m, ss, ms = data
    bad = list(ms)
    idx = [10, 55, 200]
    for i in idx:
        bad[i] = Measurement(bad[i].stamp, bad[i].sensor, np.array([np.nan]))
    bad.append(Measurement(0.3, "lidar", np.array([1.0])))
    bad.sort(key=lambda x: x.stamp)
    st = make_stage(m, ss)
    st.feed(bad)
    st.flush()
    assert st.counters.non_finite == 3
    assert st.counters.unknown_sensor == 1
    assert st.counters.fused == len(ms) - 3
    ref = make_stage(m, ss)
    ref.feed([x for k, x in enumerate(ms) if k not in idx])
    ref.flush()
    assert np.array_equal(trajectory(st), trajectory(ref))
    assert np.all(np.isfinite(trajectory(st)))


def test_gate_rejects_outliers(data):
    m, ss, ms = data
    spiked = list(ms)
    k = next(i for i, x in enumerate(spiked) if x.sensor == "gyro" and x.stamp > 1.0)
    spiked[k] = Measurement(spiked[k].stamp, "gyro", spiked[k].value + 5.0)  # 5 rad/s spike
    st = make_stage(m, ss, gate=0.9999)
    st.feed(spiked)
    st.flush()
    assert st.counters.rejected_gate == 1
    assert st.counters.per_sensor_rejected == {"gyro": 1}
    ungated = make_stage(m, ss)
    ungated.feed(spiked)
    ungated.flush()
    clean = make_stage(m, ss)
    clean.feed(ms)
    clean.flush()
    t_g, t_u, t_c = trajectory(st), trajectory(ungated), trajectory(clean)
    # the gated run stays close to the clean one; the ungated one is thrown off
    assert np.max(np.abs(t_g[:, 2] - t_c[:, 2])) < 0.2 * np.max(np.abs(t_u[:, 2] - t_c[:, 2]))


def test_advance_to_emits_predictions_without_readings(data):
    m, ss, ms = data
    st = make_stage(m, ss)
    st.feed(ms[:3])
    n0 = len(st.records)
    st.advance_to(ms[2].stamp + 0.1)
    assert len(st.records) >= n0 + 19
    stamps = [r.estimate.stamp for r in st.records]
    np.testing.assert_allclose(np.diff(stamps), 0.005, atol=1e-12)


def test_long_gap_resets_instead_of_predicting(data):
    m, ss, ms = data
    st = make_stage(m, ss, max_gap=1.0)
    st.feed(ms[:10])
    late = [Measurement(x.stamp + 100.0, x.sensor, x.value) for x in ms[10:20]]
    st.feed(late)
    st.flush()
    assert st.counters.gap_resets == 1
    assert st.counters.steps < 100
