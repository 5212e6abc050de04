"""The PF's estimate assembles its mean state on the scalar kernels (particle.outputs.assemble_mean):
the same q, qd, qdd as the generic kinematics (solve_position, velocity, acceleration) to rounding."""
import numpy as np
import pytest

from mbde_core.engine import kinematics
from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.particle import outputs
from mbde_core.sensors.sensor_set import SensorSet


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank"])
def test_mean_assembly_matches_the_generic_kinematics(mechanisms, name):
    m = mechanisms[name]
    est = make_estimator("pf", m, SensorSet([]), dict(defaults("pf"), particles=20), rng=np.random.default_rng(1))
    est.reset(0.0, None)
    rng = np.random.default_rng(2)
    for j in range(5):
        guess = est.q[j]
        zm = guess[m.independent] + 0.01 * rng.standard_normal(m.dof)
        zdm, zddm = rng.standard_normal(m.dof), rng.standard_normal(m.dof)
        q, ok, qd, qdd = outputs.assemble_mean(est, zm, zdm, zddm, guess)
        q0, ok0 = kinematics.solve_position(m, zm, guess)
        assert ok and ok0 and qd is not None
        assert np.abs(q - q0).max() < 1e-12
        qd0 = kinematics.velocity(m, q0, zdm)
        assert np.abs(qd - qd0).max() < 1e-10
        assert np.abs(qdd - kinematics.acceleration(m, q0, qd0, zddm)).max() < 1e-8
