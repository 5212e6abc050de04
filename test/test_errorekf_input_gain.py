"""The errorEKF's input gain B = (R^T M R)^-1 R^T E with R taken from the FullState at the
simulation state (no second evaluation of the position-level R) against R evaluated at q
(kinematics.r_matrix), on paper 004's slider-crank with the torque unknown: the gain
itself, and the filter's state and covariance after steps and updates with both."""
from __future__ import annotations

import numpy as np
import pytest

from adekf_rig import adekf_rig, started, stepped


@pytest.fixture(scope="module")
def rig():
    return adekf_rig("errorekf")


def _run(rig, evaluate_r: bool):
    est = started(rig, "errorekf")
    if evaluate_r:
        est._gain = lambda q: est.model.input_gain(q, est.input_cols)
    return stepped(est)


def test_gain_with_the_fullstates_r_equals_the_evaluated_one(rig):
    est = _run(rig, False)
    st = est._full()
    est.model._input_gain_last = None
    a = np.array(est.model.input_gain(st.q, est.input_cols, st.R))
    est.model._input_gain_last = None
    b = np.array(est.model.input_gain(st.q, est.input_cols))
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)  # rad/s^2 per N m


def test_filter_with_the_fullstates_r_follows_the_evaluated_one(rig):
    a, b = _run(rig, False), _run(rig, True)
    np.testing.assert_allclose(a.state.q, b.state.q, rtol=0, atol=1e-10)  # rad, m
    np.testing.assert_allclose(a.state.qd, b.state.qd, rtol=0, atol=1e-8)  # rad/s, m/s
    np.testing.assert_allclose(a.u, b.u, rtol=0, atol=1e-8)  # N m
    np.testing.assert_allclose(a.P, b.P, rtol=1e-8, atol=1e-14)


def test_one_dof_gain_is_the_solve(rig):
    from mbde_core.engine import kinematics

    est = _run(rig, False)
    q = est.state.q
    R = kinematics.r_matrix(est.mech, q)
    est.model._input_gain_last = None
    np.testing.assert_allclose(est.model.input_gain(q, est.input_cols),
                               np.linalg.solve(R.T @ est.mech.M @ R, R.T[:, est.input_cols]), rtol=1e-14, atol=0)
