"""The UKF's sigma points with input states take R from the generated kernels of their
position problems (ReducedModel.assemble_near's r_out) instead of evaluating R(q) again
(kinematics.r_matrix) for the inputs' accelerations: the same R, and the same filter
state and covariance after steps and updates, on paper 004's slider-crank (torque unknown)."""
from __future__ import annotations

import numpy as np
import pytest

from adekf_rig import adekf_rig, started, stepped
from mbde_core.engine import kinematics


@pytest.fixture(scope="module")
def rig():
    return adekf_rig("ukf")


def _start(rig):
    return started(rig, "ukf")


def _run(rig, evaluate_r: bool):
    est = _start(rig)
    if evaluate_r:
        plain = est.with_inputs
        est.with_inputs = lambda q, zdd, qdd, U, R=None: plain(q, zdd, qdd, U)
    return stepped(est)


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
