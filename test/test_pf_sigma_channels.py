"""The particle filter takes ``sensor_sigma`` per channel, as the Kalman observers do (an IMU's
gyroscope and accelerometer channels have different units and noise)."""
import numpy as np

from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import configure
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.particle import likelihood
from mbde_core.scenario import load_scenario

SCENARIO = "config/bench/pf_acquisition/double_pendulum_imu.yaml"


def test_sensor_sigma_per_channel_and_scalar():
    sc = load_scenario(SCENARIO)
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    opts = {"sensor_sigma": {"imu1": [0.01, 0.5, 0.7], "imu2": 0.2}}
    cfg = configure("pf", opts, mech, sensors, scenario_context(sc))
    pf = make_estimator("pf", mech, sensors, cfg, rng=np.random.default_rng(0))
    R1, W1 = likelihood.noise(pf, "imu1")
    np.testing.assert_allclose(np.diag(R1), [0.01**2, 0.5**2, 0.7**2], rtol=1e-12)
    np.testing.assert_allclose(W1.T @ W1, np.linalg.inv(R1), rtol=1e-9)
    R2, _ = likelihood.noise(pf, "imu2")
    np.testing.assert_allclose(R2, np.eye(3) * 0.04, rtol=1e-12)
