"""The errorEKF's compiled single-state path (:mod:`mbde_core.estimators.kalman.errorekf_numba`)
equals the Python one (:func:`mbde_core.engine.rk4_single.rk4_step`, errorekf_scalar):

- ``rk4_one`` called with one state against ``rk4_step`` (four-bar, five-bar 2 DOF,
  slider-crank; with and without carried accelerations and extra accelerations): the
  state at t + h and the kernel values there, to 1e-12 (the same operations in the same
  order: equal bits in practice, libm's sin/cos on both paths);
- an errorEKF on the compiled path against one on the Python path over predictions and
  gyroscope updates (accepted and gated), to 1e-12 rad;
- the backend rule: ``python`` never loads a module, ``auto`` waits for the disk cache.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import COUPLER_GYRO, load_options, random_states
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import dynamics, fastpath, numba_kernels
from mbde_core.engine.rk4_single import rk4_step
from mbde_core.estimators import make_estimator
from mbde_core.estimators.kalman import errorekf_numba
from mbde_core.estimators.base import InitialState
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

pytest.importorskip("numba")

GYRO = COUPLER_GYRO


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank"])
def test_compiled_rk4_step_equals_rk4_single(mechanisms, name):
    m = mechanisms[name]
    K = fastpath.kernels(m)
    mod = numba_kernels.load(m)
    assert mod is not None
    q, qd = random_states(m, 6, seed=7)
    qdd = dynamics.forward(m, 0.3, q, qd)[1]
    v = np.random.default_rng(8).normal(size=(6, m.dof))
    h = 5e-3
    tv = [tuple(float(x) for x in K.time_values(s)) for s in (0.3, 0.3 + 0.5 * h, 0.3 + h)]
    for k in range(6):
        acc = qdd[k] if k % 2 else None
        extra = v[k] if k % 3 == 0 else None
        q1, qd1, qdd1, ok, (tr1, J1, R1, zdd1, rd1) = rk4_step(
            m, K, 0.3, q[k].tolist(), qd[k].tolist(), None if acc is None else acc.tolist(), h,
            None if extra is None else extra.tolist())
        out = mod.rk4_one(tuple(q[k]), tuple(qd[k]), tuple(acc) if acc is not None else (0.0,) * m.n, acc is not None,
                          tuple(extra) if extra is not None else (0.0,) * m.dof, *tv, h)
        cq, cqd, cqdd, cok, cbad, ctr, cJ, cR, czdd, crd = out
        assert ok and cok and not cbad
        for a, b in ((q1, cq), (qd1, cqd), (qdd1, cqdd), (tr1, ctr), (J1, cJ), (R1, cR), (zdd1, czdd), (rd1, crd)):
            np.testing.assert_allclose(np.array(b, float), np.array(a, float), rtol=1e-12, atol=1e-12)


def _errorekf(m, backend, monkeypatch):
    monkeypatch.setenv("MBDE_EKF_BACKEND", backend)
    sensors = load_sensors(parse_yaml(GYRO), m)
    cfg = load_options(None, ["errorekf"])["errorekf"]
    est = make_estimator("errorekf", m, sensors, cfg)
    assert (est._nb is not None) == (backend == "numba") or backend == "auto"
    est.reset(0.0, InitialState(z=m.q0[m.independent] + 0.05, zd=np.zeros(1), sigma_z=0.2, sigma_zd=0.5))
    return est


def test_compiled_errorekf_equals_the_python_path(mechanisms, monkeypatch):
    m = mechanisms["fourbar"]
    a, b = _errorekf(m, "numba", monkeypatch), _errorekf(m, "python", monkeypatch)
    rng = np.random.default_rng(3)
    for k in range(200):
        for est in (a, b):
            est.predict(0.005)
        value = 40.0 if k % 50 == 7 else 0.5 * np.sin(0.01 * k) + 0.02 * rng.normal()  # some gated
        ra, rb = (e.update([Measurement(e.t, "gyro", np.array([value]))], {"gyro": 9.0}) for e in (a, b))
        assert ra.accepted == rb.accepted and ra.rejected == rb.rejected
    assert a.t == b.t
    np.testing.assert_allclose(a.state.q, b.state.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.state.qd, b.state.qd, rtol=0, atol=1e-11)
    np.testing.assert_allclose(a.P, b.P, rtol=1e-10, atol=1e-18)
    np.testing.assert_allclose(a.full.R, b._full().R, rtol=0, atol=1e-12)


def test_backend_rule(mechanisms, monkeypatch):
    m = mechanisms["slider_crank"]
    monkeypatch.setenv("MBDE_EKF_BACKEND", "python")
    assert errorekf_numba.select(m) is None
    monkeypatch.setenv("MBDE_EKF_BACKEND", "auto")
    monkeypatch.setenv("MBDE_CACHE_DIR", "/nonexistent-mbde-cache")  # nothing cached there
    K = fastpath.kernels(m)
    monkeypatch.setattr(K, "_numba", None, raising=False)  # as a fresh process: only the disk tells
    monkeypatch.setattr(K, "_numba_on_disk", None, raising=False)
    monkeypatch.setattr(numba_kernels, "_MODULES", {})
    monkeypatch.setattr(numba_kernels, "_folders", lambda: ["/nonexistent-mbde-cache"])
    assert errorekf_numba.select(m) is None


def test_auto_rule_compiles_in_the_background_after_a_long_run(mechanisms, monkeypatch):
    m = mechanisms["fourbar"]
    monkeypatch.setattr(errorekf_numba, "AUTO_STEPS", 3)
    monkeypatch.setattr(errorekf_numba, "_cached", lambda mech: False)
    b = _errorekf(m, "python", monkeypatch)
    a = _errorekf(m, "auto", monkeypatch)  # the thread reads MBDE_EKF_BACKEND: auto
    for k in range(40):
        if k == 3:  # three predictions: the thread started at the third
            a._nb_bg.thread.join()  # compiled (or loaded) by now: used from the next step
            assert a._nb_bg.error is None and a._nb_bg.module is not None
        for est in (a, b):
            est.predict(0.005)
            est.update([Measurement(est.t, "gyro", np.array([0.3]))], {"gyro": 9.0})
    assert a._nb is not None and b._nb is None
    np.testing.assert_allclose(a.state.q, b.state.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.P, b.P, rtol=1e-10, atol=1e-18)


def test_auto_rule_keeps_a_short_run_on_the_python_path(mechanisms, monkeypatch):
    m = mechanisms["fourbar"]
    monkeypatch.setattr(errorekf_numba, "_cached", lambda mech: True)  # a load would be cheap, yet not paid
    est = _errorekf(m, "auto", monkeypatch)
    assert est._nb is None  # decided at expect_steps or the first step, not at construction
    est.expect_steps(errorekf_numba.LOAD_STEPS - 1)
    assert est._nb is None and est._nb_wait == errorekf_numba.AUTO_STEPS
    est.predict(0.005)
    assert est._nb is None
