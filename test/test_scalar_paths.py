"""The single-state fast paths written straight on the scalar kernels equal the shared code.

- :func:`mbde_core.engine.rk4_single.rk4_step` (and ``RK4.step`` of one state, which uses
  it) against the RK4 algorithm text on the ``Single`` backend (a one-row batch runs it):
  the same operations, so the same bits, for one- and two-dof mechanisms, with and
  without carried accelerations and extra accelerations;
- the errorEKF's scalar update (:mod:`mbde_core.estimators.kalman.errorekf_scalar`) against its
  generic update (numpy Kalman update, ReducedModel.linearize, solve_full): equal to
  rounding, accepted and gated readings;
- ``Gyroscope.linearize_floats`` against the batched ``h`` and ``jacobians``.
"""
from __future__ import annotations


import numpy as np
import pytest

from conftest import COUPLER_GYRO, load_options, random_states
from mbde_core.engine import dynamics, fastpath
from mbde_core.engine.integrators import MBState, RK4
from mbde_core.engine.rk4_single import rk4_step
from mbde_core.estimators import make_estimator
from mbde_core.estimators.kalman import errorekf_scalar
from mbde_core.estimators.base import InitialState
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement


GYRO = COUPLER_GYRO


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank", "pendulum"])
def test_rk4_single_is_the_shared_algorithm_bit_for_bit(mechanisms, name):
    m = mechanisms[name]
    K = fastpath.kernels(m)
    q, qd = random_states(m, 6, seed=4)
    qdd = dynamics.forward(m, 0.3, q, qd)[1]
    v = np.random.default_rng(5).normal(size=(6, m.dof))
    for k in range(6):
        acc = qdd[k] if k % 2 else None
        extra = v[k] if k % 3 == 0 else None
        # a one-row batch runs the shared algorithm text on the Single backend
        ref = RK4().step(m, 0.3, MBState(q[k][None], qd[k][None], None if acc is None else acc[None]), 5e-3,
                         extra_zdd=None if extra is None else extra[None])
        q1, qd1, qdd1, ok, _ = rk4_step(m, K, 0.3, q[k].tolist(), qd[k].tolist(),
                                         None if acc is None else acc.tolist(), 5e-3,
                                         None if extra is None else extra.tolist())
        one = RK4().step(m, 0.3, MBState(q[k], qd[k], acc), 5e-3, extra_zdd=extra)
        for a, b, c in ((ref.q[0], q1, one.q), (ref.qd[0], qd1, one.qd), (ref.qdd[0], qdd1, one.qdd)):
            np.testing.assert_array_equal(a, np.array(b))
            np.testing.assert_array_equal(a, c)
        assert ok and one.ok and bool(ref.ok[0])


def _errorekf(mechanisms, sensors_spec):
    m = mechanisms["fourbar"]
    sensors = load_sensors(parse_yaml(sensors_spec), m)
    cfg = dict(load_options(None, ["errorekf"])["errorekf"], measurement_order=1)  # the scalar path's
    est = make_estimator("errorekf", m, sensors, cfg)
    z0 = m.q0[m.independent]
    est.reset(0.0, InitialState(z=z0 + 0.05, zd=np.zeros(1), sigma_z=0.2, sigma_zd=0.5))
    for _ in range(7):
        est.predict(0.005)
    return est


@pytest.mark.parametrize("value,gate", [(0.4, None), (0.4, 1e6), (40.0, 9.0)])
def test_errorekf_scalar_update_equals_the_generic_update(mechanisms, value, gate):
    est = _errorekf(mechanisms, GYRO)
    other = _errorekf(mechanisms, GYRO)  # the same state, built again (a deepcopy would copy the
    # shared model, which may hold compiled kernel modules of other tests)
    other._kernels = None  # the generic update (numpy Kalman update, solve_full)
    m = [Measurement(est.t, "gyro", np.array([value]))]
    gates = None if gate is None else {"gyro": gate}
    assert errorekf_scalar.applies(est, m)
    a, b = est.update(m, gates), other.update(m, gates)
    assert a.accepted == b.accepted and a.rejected == b.rejected
    assert [n for n, _ in a.distances] == [n for n, _ in b.distances]
    np.testing.assert_allclose([d for _, d in a.distances], [d for _, d in b.distances], rtol=1e-12)
    np.testing.assert_allclose(est.P, other.P, rtol=1e-12, atol=1e-18)
    np.testing.assert_allclose(est.state.q, other.state.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(est.state.qd, other.state.qd, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.state.qdd, other.state.qdd, rtol=0, atol=1e-10)
    if a.accepted:
        assert a.nis == pytest.approx(b.nis, rel=1e-12)
        assert a.logdet == pytest.approx(b.logdet, rel=1e-12)
    # and the next predictions (from the kept FullState) agree as well
    est.predict(0.005)
    other.predict(0.005)
    np.testing.assert_allclose(est.state.q, other.state.q, rtol=0, atol=1e-13)


@pytest.mark.parametrize("body", ["crank", "coupler", "rocker"])  # with and without a fixed point
def test_gyroscope_linearize_floats_matches_the_batched_model(mechanisms, body):
    m = mechanisms["fourbar"]
    s = load_sensors(parse_yaml(GYRO.replace("coupler", body)), m)["gyro"]
    q, qd = random_states(m, 3, seed=8)
    for k in range(3):
        h, hq, hqd = s.linearize_floats(q[k].tolist(), qd[k].tolist())
        Hq, Hqd, _ = s.jacobians(q[k][None], qd[k][None], None)
        np.testing.assert_allclose(h, s.h(q[k], qd[k], None)[0], rtol=1e-14)
        np.testing.assert_allclose(hq, np.reshape(Hq, (-1, m.n))[0], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(hqd, np.reshape(Hqd, (-1, m.n))[0], rtol=1e-13, atol=1e-15)
