"""DIEKFpm's transitions: the local error of one prediction against an rk4 reference.

``heun`` (the default) has O(dt^3) local errors in z and zd; the
``constant_acceleration`` transition's velocity update is forward Euler, O(dt^2). The
test also guards against ``heun`` being accepted but run as ``constant_acceleration``.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults, validate
from mbde_core.estimators import make_estimator
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors


@pytest.fixture(scope="module")
def fourbar():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml("- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 0.01}}"), m)
    return m, ss


def _reference(m, q, qd, dt):
    """z, zd after dt by rk4 with 64 substeps (error ~1e-12 here)."""
    s, h = MBState(q, qd), dt / 64
    integ = get_integrator("rk4")
    for k in range(64):
        s = integ.step(m, k * h, s, h)
    return s.q[m.independent], s.qd[m.independent]


def _one_step(m, ss, transition, dt):
    est = make_estimator("diekfpm", m, ss, dict(defaults("diekfpm"), transition=transition, step=dt))
    z0, zd0 = m.q0[m.independent], np.array([2.0])
    est.reset(0.0, InitialState(z0, zd0, np.array([0.01]), np.array([0.1]), m.q0, None))
    q, qd = est.X[: est.n].copy(), est.X[est.n :].copy()
    est.predict(dt)
    z, zd = est.X[: est.n][m.independent], est.X[est.n :][m.independent]
    zr, zdr = _reference(m, q, qd, dt)
    return abs(float(z[0] - zr[0])), abs(float(zd[0] - zdr[0]))


def test_default_transition_is_heun():
    assert defaults("diekfpm")["transition"] == "heun"


@pytest.mark.parametrize("transition, order_z, order_zd", [("heun", 3, 3), ("constant_acceleration", 3, 2)])
def test_local_error_order(fourbar, transition, order_z, order_zd):
    """Halving dt divides the local error by 2^order: at least the method's order less 0.5
    (Heun's z update is exact for an acceleration linear in time: measured 3.9), and the
    constant-acceleration velocity update no better than first order (measured 2.0)."""
    m, ss = fourbar
    e1 = np.array(_one_step(m, ss, transition, 0.02))
    e2 = np.array(_one_step(m, ss, transition, 0.01))
    orders = np.log2(e1 / e2)
    assert orders[0] > order_z - 0.5, orders
    assert orders[1] > order_zd - 0.5, orders
    if order_zd == 2:
        assert orders[1] < 2.5, orders


def test_heun_velocity_is_more_accurate_than_constant_acceleration(fourbar):
    m, ss = fourbar
    _, e_heun = _one_step(m, ss, "heun", 0.01)
    _, e_ca = _one_step(m, ss, "constant_acceleration", 0.01)
    assert e_heun < 0.2 * e_ca, (e_heun, e_ca)
