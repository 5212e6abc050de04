"""Mirror ambiguity (mbde_core/estimators/assess/symmetry.py), against the closed form.

The centred slider-crank (paper 004's rig, crank L1 about A = origin, rod L2, slider on
y = 0): x(theta) = L1 cos(theta) + sqrt(L2^2 - L1^2 sin(theta)^2) is even in theta, so a
slider accelerometer along the track reads x'' the same for theta(t) and -theta(t): with
an unknown motor torque (any theta'' possible) the readings cannot tell the motion from
its mirror image about the track. Checked here by finite differences of the closed form
(not by the module), then the module must find the mirror exactly in that case and not
with a gyroscope, an encoder, or when gravity (across the track, no unknown torque) makes
the dynamics tell them apart; gravity along the track keeps the dynamics symmetric.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.assess.suitability import assess
from mbde_core.estimators.assess.symmetry import candidate_lines, mirror_ambiguity
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors

ACCEL = "- {name: a, type: accelerometer, slider: slider, axes: [0], rate: 1000, noise: {sigma: 0.05}}"
GYRO = "- {name: g, type: gyroscope, body: rod, rate: 1000, noise: {sigma: 0.01}}"
ENCODER = "- {name: e, type: encoder, body: crank, rate: 1000, noise: {sigma: 0.001}}"


@pytest.fixture(scope="module")
def crank():
    return load_mechanism(mech_path("slider_crank"))


def sensors(mech, text):
    return load_sensors(parse_yaml(text), mech)


def test_closed_form_slider_acceleration_is_even_in_theta():
    L1, L2 = 0.05, 0.20

    def x(th):
        return L1 * np.cos(th) + np.sqrt(L2**2 - L1**2 * np.sin(th) ** 2)

    t = np.linspace(0.0, 0.3, 301)
    theta = 1.0 + 40 * t + 30 * t**2 + 5 * np.sin(25 * t)  # any motion (an unknown torque makes it possible)
    acc = [np.diff(x(sign * theta), 2) / (t[1] - t[0]) ** 2 for sign in (1, -1)]
    assert np.max(np.abs(acc[0] - acc[1])) < 1e-9 * np.max(np.abs(acc[0]))
    assert x(0.3) == pytest.approx(x(-0.3), abs=1e-15)


def test_slider_accelerometer_with_an_unknown_torque_is_mirror_ambiguous(crank):
    lines = candidate_lines(crank)
    assert any(abs(m.u[0]) == pytest.approx(1.0) for m in lines)  # the track, through the crank pivot
    m = mirror_ambiguity(crank, sensors(crank, ACCEL), inputs_everywhere=True)
    assert m is not None and abs(m.u[1]) < 1e-12 and np.allclose(m.c, 0.0)
    # the mirrored state of the module is the closed form's theta -> -theta, and a configuration
    q = crank.q0[None].copy()
    qm, _, _ = m.apply(crank, q)
    th = crank.independent[0]
    assert qm[0, th] == pytest.approx(-q[0, th]) and np.max(np.abs(crank.phi(qm[0]))) < 1e-12


def test_sensors_that_tell_the_mirror_apart(crank):
    for text in (GYRO, ENCODER, ACCEL + "\n" + GYRO):
        assert mirror_ambiguity(crank, sensors(crank, text), inputs_everywhere=True) is None, text
    # without an unknown torque the model's gravity (across the track) tells theta from -theta
    assert mirror_ambiguity(crank, sensors(crank, ACCEL), inputs_everywhere=False) is None
    along = crank.modified(gravity=(-9.81, 0.0))  # gravity along the track: dynamics mirror symmetric
    assert mirror_ambiguity(along, sensors(along, ACCEL), inputs_everywhere=False) is not None


def test_shipped_four_bar_has_no_mirror():
    fb = load_mechanism(mech_path("fourbar"))
    ss = sensors(fb, "- {name: g, type: gyroscope, body: crank, rate: 200, noise: {sigma: 0.01}}")
    assert mirror_ambiguity(fb, ss, inputs_everywhere=True) is None


def test_suitability_says_so_in_one_line(crank):
    init = InitialState(np.array([np.pi / 2]), np.array([0.0]), np.array([0.05]), np.array([3.0]), None, None)
    v = assess("dekf", crank, sensors(crank, ACCEL), init, 0.001,
               est=type("E", (), {"config": {"inputs": [{"coordinate": "theta", "psd": 1.0, "sigma0": 5.0}]}})(),
               force_limits=np.array([5.0]))
    assert v.level == "weak" and "mirror image" in v.message and "\n" not in v.message
    gyro = assess("dekf", crank, sensors(crank, GYRO), init, 0.001,
                  est=type("E", (), {"config": {"inputs": [{"coordinate": "theta", "psd": 1.0, "sigma0": 5.0}]}})(),
                  force_limits=np.array([5.0]))
    # the rod gyroscope tells the linkage's mirror image apart, not the crank's reflection
    # theta -> pi - theta (the rod's angle is the same), which the 5 N m motor explains
    assert "mirror image" not in gyro.message and "theta -> pi - theta" in gyro.message  # coordinate_mirror
