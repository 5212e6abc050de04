"""Unknown inputs take the known forces' state dependence (input_states.unabsorbed; the
UKF's and the DIEKFpm's ``absorb_inputs``).

- the projection removes exactly the accelerations the inputs can produce (span B) and
  keeps what is kinetic-energy orthogonal to them; with one input per coordinate nothing
  is left;
- the UKF's predicted covariance of [z, zd, u] on paper 004's slider-crank (one unknown
  torque) is then the double integrator's, F = [[1, dt, dt^2/2 B], [0, 1, dt B], [0, 0, 1]]
  (written out here), and without it the full dynamics' (finite differences of the
  prediction's mean);
- the DIEKFpm's full transition Jacobian loses its df/dx rows there (opt-in).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from mbde_core.estimators.configure import configure
from mbde_core.estimators.kalman.input_states import unabsorbed

SCENARIO = f"{REPO}/config/scenarios/adekf_slider_crank.yaml"
DT = 0.0005


def test_the_projection_removes_what_the_inputs_can_produce():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(3, 3))
    Mbar = A @ A.T + 3 * np.eye(3)  # a reduced mass matrix (SPD)
    B = rng.normal(size=(3, 1))  # one input on a 3-DOF chain
    d = rng.normal(size=(5, 3))  # five deviations (rows)
    kept = unabsorbed(d, B, Mbar)
    np.testing.assert_allclose(kept @ Mbar @ B, 0.0, atol=1e-12)  # kinetic-energy orthogonal to span(B)
    np.testing.assert_allclose(unabsorbed(kept, B, Mbar), kept, atol=1e-12)  # a projection
    np.testing.assert_allclose(unabsorbed(np.outer([1.0, -2.0], B[:, 0]), B, Mbar), 0.0, atol=1e-12)
    c = np.linalg.lstsq(B, (d - kept).T, rcond=None)[0]  # the removed part is in span(B)
    np.testing.assert_allclose(B @ c, (d - kept).T, atol=1e-12)
    B3 = rng.normal(size=(3, 3))  # an input on every coordinate: nothing left
    np.testing.assert_allclose(unabsorbed(d, B3, Mbar), 0.0, atol=1e-10)


@pytest.fixture(scope="module")
def slider():
    from mbde_core.scenario.scenario import load_scenario

    sc = load_scenario(SCENARIO)
    return sc.estimator_mechanism(), sc.estimator_sensors()


def _filter(name, slider, **options):
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.base import InitialState

    mech, sensors = slider
    cfg = configure(name, dict({"inputs": [{"coordinate": "theta", "psd": 3.0, "sigma0": 5.0}]}, **options), mech,
                    sensors, None)
    est = make_estimator(name, mech, sensors, cfg)
    est.reset(0.0, InitialState(np.array([1.2]), np.array([40.0]), np.array([0.003]), np.array([0.2]), mech.q0, None))
    return est


def _start(est, x):
    est.t = 0.0
    est.x = np.array(x, dtype=float)
    est._assemble_into(est.x.copy(), est.q)


@pytest.mark.parametrize("absorb", [True, False])
def test_the_ukfs_predicted_covariance(slider, absorb):
    ukf = _filter("ukf", slider, absorb_inputs=absorb)
    x0 = [1.2, 40.0, 0.5]  # rad, rad/s, N m
    _start(ukf, x0)
    B = float(ukf.input_gain(ukf._full().R)[0, 0])  # (rad/s^2) / (N m)
    P0 = np.diag([1e-3, 1e-2, 1e-2]) ** 2
    ukf.P = P0.copy()
    ukf.predict(DT)
    Pp = ukf.P - ukf.augmented_noise(DT)
    if absorb:
        F = np.array([[1.0, DT, 0.5 * DT * DT * B], [0.0, 1.0, DT * B], [0.0, 0.0, 1.0]])
    else:  # the full dynamics: finite differences of the prediction's mean
        est = _filter("ukf", slider, absorb_inputs=absorb)
        F = np.zeros((3, 3))
        for j, h in enumerate((1e-6, 1e-4, 1e-4)):
            ends = []
            for s in (1.0, -1.0):
                x = np.array(x0)
                x[j] += s * h
                _start(est, x)
                est.P = np.diag([1e-14] * 3)
                est.predict(DT)
                ends.append(est.x.copy())
            F[:, j] = (ends[0] - ends[1]) / (2 * h)
        assert abs(F[1, 0]) > 0.1  # df/dz dt: the inertia's variation with the crank angle [1/s]
    np.testing.assert_allclose(Pp, F @ P0 @ F.T, rtol=2e-3, atol=1e-12)


def test_the_diekfpms_jacobian_keeps_no_df_dx_with_an_input_on_its_coordinate(slider):
    est = _filter("diekfpm", slider, absorb_inputs=True)  # off by default (diekfpm_inputs.py)
    n = est.n
    q = est.X[:n]
    A = est._transition_jacobian()
    assert np.abs(A[1]).max() > 1.0  # df/dz, df/dzd of the slider-crank at 40 rad/s
    Aa = est._absorbed_jacobian(A, q)
    np.testing.assert_allclose(Aa[0], A[0])  # dz' = zd
    np.testing.assert_allclose(Aa[1], 0.0, atol=1e-9)
    off = _filter("diekfpm", slider, absorb_inputs=False)
    np.testing.assert_array_equal(off._absorbed_jacobian(A, q), A)


def test_a_measured_torques_residual_input_does_not_absorb():
    from mbde_core.estimators.kalman.input_states import absorbing

    class Est:  # an unknown input on coordinate 4 (theta) and one on 2; a measured torque on 4
        input_cols, k_unknown = [4, 2, 4], 2
    assert absorbing(Est) == [1]
    Est.input_cols, Est.k_unknown = [4], 1  # the torque unknown
    assert absorbing(Est) == [0]
