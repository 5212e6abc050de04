"""Paper 004's slider-crank (1 kHz accelerometer, torque unknown) as a test rig: the
estimator-side mechanism, sensors and an estimator's resolved default options."""
from __future__ import annotations

import numpy as np

from conftest import REPO
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import configure, defaults
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.scenario.scenario import load_scenario
from mbde_core.types import Measurement

SCENARIO = f"{REPO}/config/scenarios/adekf_slider_crank.yaml"


def adekf_rig(name: str, duration: float = 3.0):
    """(mech, sensors, options) of estimator ``name`` on the scenario (``duration`` s: the
    step rule reads the scenario's speeds over it)."""
    sc = load_scenario(SCENARIO).with_overrides(duration=duration)
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    return mech, sensors, configure(name, defaults(name), mech, sensors, scenario_context(sc))


def started(rig, name: str):
    """Estimator ``name`` of ``rig`` (:func:`adekf_rig`) reset at the rig's q0 turning at
    40 rad/s, its torque an input state."""
    mech, sensors, options = rig
    est = make_estimator(name, mech, sensors, options, rng=np.random.default_rng(0))
    assert est.k >= 1  # the torque as an input state
    z0 = mech.q0[mech.independent]
    est.reset(0.0, InitialState(z0, np.full(len(z0), 40.0), np.full(len(z0), 0.01), np.full(len(z0), 1.0), mech.q0, None))
    return est


def stepped(est, steps: int = 20):
    """``est`` after ``steps`` predictions of 0.5 ms with a seeded accelerometer reading
    (N(0, 5) m/s^2) fused every second step."""
    rng = np.random.default_rng(1)
    for k in range(steps):
        est.predict(0.0005)
        if k % 2:
            est.update([Measurement(est.t, "accel_slider", np.array([rng.normal(0.0, 5.0)]))], {})
    return est
