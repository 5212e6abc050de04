"""Input states of the DIEKFpm (mbde_core/estimators/kalman/diekfpm_inputs.py) on paper 004's
motor-driven slider-crank: the rule's defaults, the prediction against the DEKF's, and
tracking from the slider accelerometer alone."""
from __future__ import annotations

import numpy as np
import pytest

from mbde_core.errors import ConfigError
from mbde_core.estimators.configure import configure, defaults, validate
from mbde_core.estimators.options.frozen import AUTO
from test_kalman_inputs import DT, _filter, _track, slider  # noqa: F401 (slider: the fixture)


def test_diekfpm_takes_the_rules_input_with_jumps(slider):
    _, mech, sensors, ctx = slider
    cfg = defaults("diekfpm")
    assert cfg["inputs"] == AUTO and cfg["input_jump_nis"] == 16.0
    [inp] = configure("diekfpm", cfg, mech, sensors, ctx).inputs
    assert inp.coordinate == "theta" and inp.limit == pytest.approx(5.0, abs=1e-12)  # N m
    assert 20.0 < inp.psd < 40.0  # (N m)^2/s: with jumps the holding torque's ripple, as the errorEKF's
    assert configure("diekfpm", cfg, mech, sensors, None).inputs == ()  # no motor: no inputs
    with pytest.raises(ConfigError, match="input_jump_nis"):
        validate("diekfpm", {"input_jump_nis": -1.0})


def _diekfpm(slider, **options):
    from mbde_core.estimators.base import InitialState
    from mbde_core.estimators import make_estimator

    _, mech, sensors, _ = slider
    cfg = configure("diekfpm", validate("diekfpm", {"inputs": [{"coordinate": "theta", "psd": 90.0, "sigma0": 5.0}],
                                                        **options}),
                         mech, sensors, None)
    est = make_estimator("diekfpm", mech, sensors, cfg)
    est.reset(0.0, InitialState(np.array([1.2]), np.array([40.0]), np.array([0.003]), np.array([0.2]), mech.q0, None))
    est.u = np.array([0.5])  # N m
    return est


def test_diekfpm_input_states_predict_as_the_dekfs(slider):
    """One Heun step of [z, zd, u] with the full transition Jacobian: the DIEKFpm (dependent
    coordinates, projected) against the DEKF (independent coordinates). The input's effect
    on the mean [rad/s per N m] agrees to 1 % (the two Heun steps differ by 2e-4 rad/s at
    40 rad/s with or without it), the covariance of [z, zd, u] to 1e-4 (the same
    F = I + dt A with the inputs' columns dt^2/2 B and dt B, plus diag(psd dt); the DIEKFpm's
    df/dx in the input's direction kept, ``absorb_inputs`` off: test_absorbed_inputs)."""
    out = {}
    for u in (0.0, 0.5):  # N m
        di = _diekfpm(slider, absorb_inputs=False)
        di.u = np.array([u])
        de = _filter("dekf", slider, transition="heun", transition_jacobian="full")
        de.x[2] = u
        de._assemble_into(de.x.copy(), de.q)
        di.Pz = np.diag([0.003, 0.2, 0.3]) ** 2
        de.P = di.Pz.copy()
        di.predict(DT)
        de.predict(DT)
        iz, n = di.mech.independent, di.n
        assert di.X[iz][0] == pytest.approx(de.x[0], abs=1e-6)  # rad
        assert di.X[n + iz][0] == pytest.approx(de.x[1], abs=1e-3)  # rad/s
        assert di.u[0] == pytest.approx(u, abs=1e-12)  # N m: u' = 0
        np.testing.assert_allclose(di.Pz, de.P, rtol=1e-4, atol=1e-12)  # T and A at the two means
        assert np.array_equal(di.Pz, di.Pz.T) and np.linalg.eigvalsh(di.Pz).min() > 0
        out[u] = (di.X[n + iz][0], de.x[1])
    effect_di, effect_de = out[0.5][0] - out[0.0][0], out[0.5][1] - out[0.0][1]
    assert abs(effect_de) > 0.1  # rad/s: dt B u
    assert effect_di == pytest.approx(effect_de, rel=0.01)
    snap = di.estimate()
    assert snap.cov.shape == (2, 2) and snap.input_names == ["theta"] and snap.inputs[0] == pytest.approx(0.5)


def test_diekfpm_input_reading_jacobian_matches_finite_differences(slider):
    """dh/du of the slider accelerometer in the DIEKFpm's update (central differences of
    qdd inside the filter) against differences of the predicted reading [m/s^2 per N m]."""
    di = _diekfpm(slider)
    Xa = np.concatenate([di.X, di.u])
    _, H = di._augmented(["accel_slider"], Xa)
    h = 1e-3  # N m
    reading = []
    for s in (1.0, -1.0):
        Xs = Xa.copy()
        Xs[-1] += s * h
        reading.append(di._augmented(["accel_slider"], Xs)[0])
    fd = (reading[0] - reading[1]) / (2 * h)
    np.testing.assert_allclose(H[:, -1], fd, rtol=1e-5, atol=1e-6)
    assert np.abs(H[:, -1]).max() > 0.01  # the reading sees the torque


def test_diekfpm_input_tracks_the_slider_crank_from_its_accelerometer():
    # 5 s, the motor saturating at the start and at the speed step at 3.33 s; without the
    # input the DIEKFpm loses the crank (RMSE 1.8 rad on the 10 s transfer bag), without
    # the jumps the random walk lags the step (mean NEES 25 here)
    nees, rmse = _track("diekfpm", ["accel_slider"], 5.0)
    assert rmse < 0.03, rmse  # rad
    assert 0.6 <= nees <= 6.0, nees  # [0.3, 3] x 2 degrees of freedom
    assert _track.umax <= 5.0 + 1e-9  # N m: never beyond the motor's limit


def test_diekfpm_input_tracks_the_slider_crank_with_its_encoder():
    nees, rmse = _track("diekfpm", ["accel_slider", "motor_encoder"], 2.0)
    assert 0.6 <= nees <= 6.0, nees
    assert rmse < 0.002, rmse  # rad (encoder: 8192 counts per turn)


def test_diekfpm_simple_transition_with_inputs_is_the_euler_block(slider):
    """``transition_jacobian: simple`` with inputs: Pz propagates with F = [[1, dt, dt^2/2 B],
    [0, 1, dt B], [0, 0, 1]] plus the plant noise, so a z-only prior maps to F's first
    column e_1 (F F^T, as a first version had, gives dt = 1e-3 in the zd row)."""
    di = _diekfpm(slider)
    di.options = di.options.replace(transition_jacobian="simple")
    di.Pz = np.diag([1e-4, 0.0, 0.0])
    Qz = di._input_noise(di.plant_noise(DT), DT)
    di.predict(DT)
    np.testing.assert_allclose((di.Pz - Qz)[:, 0] / 1e-4, [1.0, 0.0, 0.0], atol=1e-4)  # T's round trip: 5e-6
