"""The stage rig of the fault tests: a four-bar with a coupler gyroscope and a crank
encoder at 200 Hz, 2 s of noisy readings with the truth (the ``rig`` fixture), and a
stage around a default estimator started near the truth (``stage_for``)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

SENSORS = """
- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 1*pi/180}}
- {name: enc, type: encoder, body: crank, rate: 200, noise: {sigma: 1*pi/180}}
"""


@pytest.fixture(scope="module")
def rig():
    from mbde_core.engine.integrators import MBState, get_integrator

    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(SENSORS), m)
    rng = np.random.default_rng(3)
    samplers = {s.name: s.noise.sampler(rng) for s in ss}
    integ = get_integrator("rk4")
    st = MBState(m.q0, m.qd0)
    ms, truth = [], []
    for k in range(2001):
        t = k * 1e-3
        if k % 5 == 0:
            ms.append(Measurement(t, "gyro", samplers["gyro"].apply(t, ss["gyro"].h(st.q, st.qd))))
            ms.append(Measurement(t, "enc", samplers["enc"].apply(t, ss["enc"].h(st.q))))
            truth.append((t, st.q[m.independent][0]))
        st = integ.step(m, t, st, 1e-3)
    return m, ss, ms, np.array(truth)


def stage_for(m, ss, name="dekf", z_offset=0.0, sigma_z=0.05, **kw):
    cfg = defaults(name)
    est = make_estimator(name, m, ss, cfg)
    z = m.q0[m.independent] + z_offset
    init = InitialState(z, m.qd0[m.independent], np.array([sigma_z]), np.array([0.5]), None)
    return EstimatorStage.for_estimator(est, lambda t: init, **kw)


def z_of(stage):
    return np.array([[r.estimate.stamp, r.estimate.z[0]] for r in stage.records])
