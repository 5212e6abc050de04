"""The particle filter's multi-rate step: a sensor faster than the filter's step has its
readings of a slot combined into one (mbde_core/estimators/stage/multirate.py) and the PF's
likelihood scales that reading's noise by its ``variance_factor``
(estimators/particle/likelihood.readings), as the Kalman observers do."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import configure
from mbde_core.estimators.particle import likelihood
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement


@pytest.fixture(scope="module")
def pendulum():
    mech = load_mechanism(mech_path("pendulum"))
    sensors = load_sensors(parse_yaml("- {name: e, type: encoder, body: rod, rate: 1000, noise: {sigma: 0.001}}\n"
                                      "- {name: w, type: gyroscope, body: rod, rate: 200, noise: {sigma: 0.01}}"), mech)
    return mech, sensors


def _pf(mech, sensors, **opts):
    cfg = configure("pf", {"particles": 200, "init": "gaussian", **opts}, mech, sensors)
    pf = make_estimator("pf", mech, sensors, cfg, rng=np.random.default_rng(3))
    g = mech.dof
    pf.reset(0.0, InitialState(np.full(g, 0.4), np.full(g, 1.0), np.full(g, 0.05), np.full(g, 0.5), None, 0))
    return pf


def test_the_auto_step_holds_several_readings_of_a_fast_sensor(pendulum):
    """The 1 kHz encoder fits five times into the rule's step: the PF steps at 5 ms."""
    mech, sensors = pendulum
    cfg = configure("pf", {}, mech, sensors)
    assert cfg.step == pytest.approx(0.005, abs=1e-12)


@pytest.mark.parametrize("name", ["e", "w"])
def test_a_combined_reading_weighs_as_the_readings_it_replaces(pendulum, name):
    """n equal readings at the filter's time and one reading with variance_factor 1/n give
    every particle the same log-likelihood (sum of n equal terms = one term with R/n)."""
    mech, sensors = pendulum
    pf = _pf(mech, sensors)
    value = np.array([0.41]) if name == "e" else np.array([0.95])
    stacked, acc, _, _, S = likelihood.log_likelihood(pf, [Measurement(pf.t, name, value)] * 5, gates={})
    one, acc1, _, _, S1 = likelihood.log_likelihood(pf, [Measurement(pf.t, name, value, 0.2)], gates={})
    assert acc == [name] * 5 and acc1 == [name]
    assert np.all(stacked < 0.0)
    np.testing.assert_allclose(one, stacked, rtol=1e-10, atol=1e-12)
    R, _ = likelihood.noise(pf, name)
    np.testing.assert_allclose(S1[0] - S[0], -0.8 * R, rtol=1e-12, atol=0.0)  # C + R/5 against C + R
