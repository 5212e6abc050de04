"""The UKF's sigma points with input states take R from the generated kernels of their
position problems (ReducedModel.assemble_near's r_out) instead of evaluating R(q) again
(kinematics.r_matrix) for the inputs' accelerations: the same R, and the same filter
state and covariance after steps and updates, on paper 004's slider-crank (torque unknown)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from mbde_core.engine import kinematics
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import configure, defaults
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.types import Measurement

SCENARIO = f"{REPO}/config/scenarios/adekf_slider_crank.yaml"


@pytest.fixture(scope="module")
def rig():
    from mbde_core.scenario.scenario import load_scenario

    sc = load_scenario(SCENARIO).with_overrides(duration=3.0)
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    return mech, sensors, configure("ukf", defaults("ukf"), mech, sensors, scenario_context(sc))


def _start(rig):
    mech, sensors, options = rig
    est = make_estimator("ukf", mech, sensors, options, rng=np.random.default_rng(0))
    assert est.k >= 1  # the torque as an input state
    z0 = mech.q0[mech.independent]
    est.reset(0.0, InitialState(z0, np.full(len(z0), 40.0), np.full(len(z0), 0.01), np.full(len(z0), 1.0), mech.q0, None))
    return est


def _run(rig, evaluate_r: bool):
    est = _start(rig)
    if evaluate_r:
        plain = est.with_inputs
        est.with_inputs = lambda q, zdd, qdd, U, R=None: plain(q, zdd, qdd, U)
    rng = np.random.default_rng(1)
    for k in range(20):
        est.predict(0.0005)
        if k % 2:
            est.update([Measurement(est.t, "accel_slider", np.array([rng.normal(0.0, 5.0)]))], {})
    return est


def test_sigma_points_r_is_r_of_q(rig):
    est = _start(rig)
    X = est._sigma_points(est.x, est.P)
    rs = []
    q = est.model.assemble_near(est.t, X[:, : 2 * est.g], est._full(), True, center=0, r_out=rs)[0]
    assert len(rs) == len(X)
    np.testing.assert_allclose(np.array(rs), kinematics.r_matrix(est.mech, q), rtol=0, atol=1e-12)  # m/rad


def test_filter_with_the_kernels_r_follows_the_evaluated_one(rig):
    a, b = _run(rig, False), _run(rig, True)
    np.testing.assert_allclose(a.x, b.x, rtol=0, atol=1e-9)  # rad, rad/s, N m
    np.testing.assert_allclose(a.P, b.P, rtol=1e-8, atol=1e-14)


def test_one_dof_input_gain_is_the_solve(rig):
    est = _start(rig)
    R = kinematics.r_matrix(est.mech, np.array([est.mech.q0, est.mech.q0 + 0.01]))
    Rt = np.swapaxes(R, -1, -2)
    np.testing.assert_allclose(est.input_gain(R), np.linalg.solve(Rt @ est.mech.M @ R, Rt @ est._E), rtol=1e-14, atol=0)
    np.testing.assert_allclose(est.input_gain(R[0]), np.linalg.solve(Rt[0] @ est.mech.M @ R[0], Rt[0] @ est._E), rtol=1e-14, atol=0)
