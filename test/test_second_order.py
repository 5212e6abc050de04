"""The Gaussian second-order update terms (``measurement_order: 2`` of DEKF and CEKF,
mbde_core/estimators/kalman/second_order.py), checked against what they did not produce: the
Hessians of the readings from second differences of the sensor model itself (not of the
filter's Jacobian), and the update formula written out."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults, validate
from mbde_core.estimators.kalman.reduced import ReducedModel
from mbde_core.estimators.kalman.second_order import second_order_terms
from mbde_core.errors import ConfigError
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

FIVEBAR_GYROS = """
- {name: gyro_coupler1, type: gyroscope, body: coupler1, period: 0.005, noise: {sigma: deg2rad(1)}}
- {name: gyro_coupler2, type: gyroscope, body: coupler2, period: 0.005, noise: {sigma: deg2rad(1)}}
"""
FOURBAR_IMU = """
- {name: gyro_coupler, type: gyroscope, body: coupler, period: 0.005, noise: {sigma: deg2rad(1)}}
- {name: accel_rocker, type: accelerometer, body: rocker, offset: [2.5, 0], axes: [0, pi/2], period: 0.005, noise: {sigma: 0.05}}
"""
CASES = {
    "fivebar_gyros": ("fivebar", FIVEBAR_GYROS, [0.7, 2.1], [1.0, -0.5]),
    "fourbar_imu": ("fourbar", FOURBAR_IMU, [1.0], [1.5]),
}


def _case(key):
    mech, sensors, z, zd = CASES[key]
    m = load_mechanism(mech_path(mech))
    ss = load_sensors(parse_yaml(sensors), m)
    return m, ss, np.array(z + zd, float)


def _readings_fn(m, model, names, guess):
    """h(x) from the sensor model at the assembled state (accelerations from the dynamics)."""
    g = m.dof

    def h(x):
        st, ok = model.solve_full(0.0, x[:g], x[g:], guess)
        assert ok
        return model.predict_measurements(names, st.q, st.qd, st.qdd if model.sensors.uses_qdd(names) else None)

    return h


def _hessians(h, x, e=1e-4):
    """T[i, j, k] = d^2 h_i / dx_j dx_k by central second differences of h."""
    n = x.size
    d = h(x).size
    T = np.zeros((d, n, n))
    for j in range(n):
        for k in range(n):
            ej, ek = np.eye(n)[j] * e, np.eye(n)[k] * e
            T[:, j, k] = (h(x + ej + ek) - h(x + ej - ek) - h(x - ej + ek) + h(x - ej - ek)) / (4 * e * e)
    return T


@pytest.mark.parametrize("key", sorted(CASES))
def test_terms_match_second_differences_of_the_sensor_model(key):
    m, ss, x = _case(key)
    model = ReducedModel(m, ss)
    names = list(ss.names)
    g = m.dof
    q, _, ok = model.assemble(x, m.q0)
    assert ok
    rng = np.random.default_rng(3)
    A = rng.normal(size=(2 * g, 2 * g)) * np.concatenate([np.full(g, 0.02), np.full(g, 0.3)])
    P = A @ A.T + np.diag(np.concatenate([np.full(g, 1e-4), np.full(g, 1e-2)]))
    bias, S_add = second_order_terms(model, names, 0.0, x, q, P)
    T = _hessians(_readings_fn(m, model, names, q), x)
    bias_fd = 0.5 * np.einsum("ijk,jk->i", T, P)
    S_fd = 0.5 * np.einsum("ijk,kl,mlo,oj->im", T, P, T, P)
    scale_b = np.max(np.abs(bias_fd)) + 1e-12
    assert np.allclose(bias, bias_fd, rtol=0, atol=2e-3 * scale_b), (bias, bias_fd)
    assert np.allclose(S_add, S_fd, rtol=0, atol=5e-3 * np.max(np.abs(S_fd))), (S_add, S_fd)
    assert np.allclose(S_add, S_add.T, rtol=0, atol=0)
    assert np.linalg.eigvalsh(S_add).min() >= -1e-12 * max(1.0, np.abs(S_add).max())


def test_gyro_terms_vanish_with_linear_readings():
    """An encoder reads z: no second-order terms."""
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml("- {name: enc, type: encoder, body: crank, period: 0.005, noise: {sigma: 0.001}}"), m)
    model = ReducedModel(m, ss)
    x = np.array([1.0, 1.5])
    q, _, _ = model.assemble(x, m.q0)
    bias, S_add = second_order_terms(model, ["enc"], 0.0, x, q, np.diag([1e-3, 1e-1]))
    assert np.allclose(bias, 0.0, atol=1e-9) and np.allclose(S_add, 0.0, atol=1e-12)


def _x(est, m):
    if hasattr(est, "x"):
        return est.x.copy()
    return np.concatenate([est.state.q[m.independent], est.state.qd[m.independent]])  # errorEKF


@pytest.mark.parametrize("name", ["cekf", "dekf", "errorekf"])
def test_update_is_the_second_order_formula(name):
    """With measurement_order 2 (DEKF's and CEKF's default, the errorEKF's option) a first
    update (the CEKF's correction stopped at its first Newton step, cekf.py) is
    x+ = x + P H^T S^-1 (o - h - b), S = H P H^T + R + S_add, b and S_add from the sensor
    model's second differences."""
    m, ss, _ = _case("fivebar_gyros")
    extra = {"newton_iterations": 0} if name == "cekf" else {}  # the CEKF's correction: its first Newton step
    est = make_estimator(name, m, ss, dict(defaults(name), measurement_order=2, **extra))
    assert defaults("cekf")["measurement_order"] == 2 and defaults("dekf")["measurement_order"] == 2
    z0, zd0 = np.array([0.7, 2.1]), np.array([1.0, -0.5])
    est.reset(2.0, InitialState(z0, zd0, np.full(2, 0.05), np.full(2, 2.0), None))
    x0, P0 = _x(est, m), est.P.copy()
    names = ["gyro_coupler1", "gyro_coupler2"]
    model = ReducedModel(m, ss)
    h = _readings_fn(m, model, names, est.q if hasattr(est, "q") else est.state.q)
    H = np.empty((2, 4))
    for k in range(4):
        e = np.eye(4)[k] * 1e-6
        H[:, k] = (h(x0 + e) - h(x0 - e)) / 2e-6
    T = _hessians(h, x0)
    b = 0.5 * np.einsum("ijk,jk->i", T, P0)
    S_add = 0.5 * np.einsum("ijk,kl,mlo,oj->im", T, P0, T, P0)
    o = h(np.concatenate([z0, zd0 + np.array([0.6, 0.4])]))
    res = est.update([Measurement(2.0, n, np.array([v])) for n, v in zip(names, o)], {n: 23.9 for n in names})
    assert res.accepted == names
    R = est.model.noise_covariance(names, est._sigma)
    S = H @ P0 @ H.T + R + S_add
    dx = P0 @ H.T @ np.linalg.solve(S, o - h(x0) - b)
    assert np.allclose(_x(est, m) - x0, dx, atol=1e-4)  # rad, rad/s
    assert res.logdet == pytest.approx(np.linalg.slogdet(S)[1], abs=1e-3)


def test_measurement_order_is_validated():
    with pytest.raises(ConfigError, match="measurement_order"):
        validate("dekf", dict(defaults("dekf"), measurement_order=3))


def test_no_second_order_terms_with_input_states():
    """With input states (``inputs``) the update stays first order (the terms over [z, zd]
    alone miss the inputs' mixed derivatives; kalman_base.second_order)."""
    m, ss, x = _case("fourbar_imu")
    cfg = validate("dekf", dict(defaults("dekf"), inputs=[{"coordinate": m.independent_names[0], "psd": 1.0, "sigma0": 1.0}]))
    est = make_estimator("dekf", m, ss, cfg)
    est.reset(0.0, InitialState(x[:1], x[1:], np.array([0.05]), np.array([0.5]), m.q0, None))
    assert est.k == 1
    pred, R = np.ones(3), np.eye(3)
    p2, R2 = est.second_order(list(ss.names), pred, R)
    assert p2 is pred and R2 is R
