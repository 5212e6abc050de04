"""Input jumps seen through the step (input_states.jump_directions): a reading without an
input column (a gyroscope, an encoder) sees a jump of the unknown inputs since the last
update only through the z and zd it moved; checked against the EKF's algebra."""
from __future__ import annotations

import numpy as np


def test_a_jump_shows_in_a_reading_without_an_input_column_through_the_step():
    # a gyroscope-like reading y = H x with no input column: a jump du at the previous
    # update moved zd by span B du and z by span^2/2 B du (jump_directions), so the test
    # sees it through H Gamma; the UKF's jump (statistical linearisation) equals the EKF's
    from mbde_core.estimators.kalman.input_states import input_jump, jump_directions
    from mbde_core.estimators.kalman.ukf import UKF

    P = np.diag([1e-6, 1e-4, 0.01])
    H = np.array([[0.0, 0.3, 0.0]])
    R = np.array([[0.01**2]])
    y = np.array([0.3 * 0.005 * 300.0 * 2.0])  # a 2 N m jump over 5 ms, B = 300 rad/s^2 per N m
    B = np.array([[300.0]])
    assert input_jump(P, y, H, R, slice(2, 3), np.array([4.0]), 16.0) is P  # no input column: no jump
    G = jump_directions(3, 1, 2, B, 0.005)
    np.testing.assert_allclose(G[:, 0], [0.5 * 0.005**2 * 300.0, 0.005 * 300.0, 1.0])
    P1 = input_jump(P, y, H, R, slice(2, 3), np.array([4.0]), 16.0, G)
    assert P1[2, 2] > P[2, 2] and P1[1, 1] > P[1, 1] and P1[1, 2] > 0  # the jump's variance, along Gamma
    ukf = UKF.__new__(UKF)
    ukf.g, ukf.k, ukf.P, ukf.input_jumps = 1, 1, P.copy(), 0
    ukf.k_unknown, ukf._span, ukf.x = 1, 0.005, np.zeros(3)
    ukf._u_sigma0 = np.array([2.0])
    ukf.options = UKF.Options(input_jump_nis=16.0)
    ukf.input_gain = lambda R: B
    ukf._full = lambda: type("S", (), {"R": None})()
    S, Pxy = ukf._input_jump(y, H @ P @ H.T + R, P @ H.T)
    assert ukf.input_jumps == 1
    np.testing.assert_allclose(ukf.P, P1, rtol=1e-12)
    np.testing.assert_allclose(S, H @ P1 @ H.T + R, rtol=1e-9)
