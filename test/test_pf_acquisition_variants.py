"""The PF acquisition bench on motor-driven scenarios: the measured torque reaches the
filter (effort readings from the truth's input forces), the bench's variants (unknown:
effort sensors dropped; released: no motor), and the mirror a scenario's readings cannot
see (paper 004's slider-crank: theta -> -theta), against which a seed is scored too."""
import os

import numpy as np
import pytest

from conftest import REPO
from mbde_bench import pf_acquisition as pa
from mbde_bench import pf_mirror
from mbde_bench.common import TruthRecord

MOTORS = os.path.join(REPO, "config", "bench", "motors")
FIVEBAR = os.path.join(MOTORS, "fivebar_two_motors.yaml")
ADEKF = os.path.join(REPO, "config", "scenarios", "adekf_slider_crank.yaml")


@pytest.fixture(scope="module")
def fivebar():
    return TruthRecord(pa.variant_scenario(FIVEBAR), 0.2)


def test_effort_readings_are_the_true_torques(fivebar):
    sensors = fivebar.scenario.estimator_sensors()
    efforts = list(sensors.inputs)
    assert [s.name for s in efforts] == ["motor1_torque", "motor2_torque"]
    meas = pa.readings(fivebar, 3)
    for s in efforts:
        got = [m for m in meas if m.sensor == s.name]
        assert len(got) == 41  # 200 Hz over 0.2 s, both ends
        t = np.array([m.stamp for m in got])
        y = np.array([m.value[0] for m in got])
        true = fivebar.effort[fivebar.index_at(t), int(s.coordinate)] / s.gain
        sigma = float(np.sqrt(s.noise.variance()[0]))
        assert np.all(np.abs(y - true) < 5 * sigma)
        assert np.std(y - true) > 0.3 * sigma  # noisy, seeded
    assert [m.value for m in meas] == [m.value for m in pa.readings(fivebar, 3)]  # reproducible


def test_variants_drop_the_torque_or_the_motor():
    unknown = pa.variant_scenario(FIVEBAR, "unknown")
    assert not list(unknown.estimator_sensors().inputs)
    assert unknown.raw.get("unmodelled_loads")  # the motor still acts
    released = pa.variant_scenario(FIVEBAR, "released")
    assert not list(released.estimator_sensors().inputs)
    assert not released.raw.get("unmodelled_loads")
    assert unknown.name.endswith(":unknown") and released.name.endswith(":released")
    with pytest.raises(ValueError):
        pa.variant_scenario(FIVEBAR, "other")


def test_unknown_forces_and_their_mirror():
    assert pf_mirror.unknown_force_limits(pa.variant_scenario(FIVEBAR)) is None  # both torques read
    np.testing.assert_allclose(pf_mirror.unknown_force_limits(pa.variant_scenario(FIVEBAR, "unknown")), [8, 6], rtol=1e-6)
    assert pf_mirror.scenario_mirror(pa.variant_scenario(FIVEBAR, "unknown")) is None
    sc = pa.variant_scenario(ADEKF)
    kind, m = pf_mirror.scenario_mirror(sc)
    assert kind == "mirror"
    truth = TruthRecord(sc, 0.05)
    mt = pf_mirror.mirrored_truth(truth, (kind, m))
    # reflected about the track (the x axis): theta -> -theta, the slider's x unchanged
    np.testing.assert_allclose(np.angle(np.exp(1j * (mt.z + truth.z))), 0.0, atol=1e-12)
    np.testing.assert_allclose(mt.zd, -truth.zd, atol=1e-12)
    mech = sc.estimator_mechanism()
    assert np.max(np.abs(mech.phi(mt.q))) < 1e-9
    for s in sc.estimator_sensors():  # the readings cannot tell them apart
        np.testing.assert_allclose(s.h(mt.q, *m.apply(mech, truth.q, truth.qd, truth.qdd)[1:]),
                                   s.h(truth.q, truth.qd, truth.qdd), atol=1e-9)


def test_summary_counts_the_mirror():
    rows = [{"acquired": True, "acquired_after": 0.1}, {"acquired": False, "on_mirror": True},
            {"acquired": False, "on_mirror": False}]
    s = pa.summary(rows)
    assert s["acquired"] == "1/3 (+1 on the unobservable mirror)" and s["on_mirror"] == 1
    assert pa.summary(rows[:1])["acquired"] == "1/1"
