"""Dry (regularised Coulomb) friction loads: the law, its Jacobians against finite
differences near and away from zero velocity, the generated kernels against the generic
loads, and the energy lost by a simulated motion against the friction's work."""
import numpy as np
import pytest

from conftest import fd
from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism
from linkages import USER_SLIDER_CRANK

PENDULUM = """
points:
  - {name: O, x: 0, y: 0, fixed: true}
  - {name: P, x: 0.3, y: 0}
planar_bodies:
  - {name: arm, points: [O, P], length: auto, mass: 0.5, I0: mass*length^2/3, cog: [length/2, 0]}
relative_coordinates: [{name: theta, type: RelativeAngleAbsoluteDOF, points: [O, P]}]
loads:
  - {name: hinge, type: joint_friction, body: arm, c: 0.02, velocity_scale: 0.05}
"""

SLIDER_CRANK = USER_SLIDER_CRANK + """loads:
  - {type: joint_friction, body: rod, body2: crank, c: 0.01, velocity_scale: 0.1}
  - {type: joint_friction, body: crank, c: 0.015}
  - {type: point_friction, point: P2, c: 0.4, velocity_scale: 0.02}
"""


def _state(m, z, zd):
    q, ok = kinematics.solve_position(m, np.atleast_1d(z), m.q0)
    assert ok
    return q, kinematics.velocity(m, q, np.atleast_1d(zd))


def test_regularised_coulomb_law():
    """T = -c w / sqrt(w^2 + eps^2): -c sign(w) for |w| >> eps, 0 at rest, odd."""
    m = Mechanism(mechanism_spec_from_text(PENDULUM))
    for w, expect in ((10.0, -0.02 * 10 / np.hypot(10, 0.05)), (-3.0, 0.02 * 3 / np.hypot(3, 0.05)), (0.0, 0.0),
                      (0.05, -0.02 / np.sqrt(2))):
        q, qd = _state(m, 0.7, w)
        Q = m.forces(0.0, q, qd) - m.Q_gravity
        # the torque's virtual work on the angle: Q . dq/dtheta = T (R is the motion's tangent)
        R = kinematics.r_matrix(m, q[None])[0][:, 0]
        assert Q @ R == pytest.approx(expect, rel=1e-12, abs=1e-15)
        assert abs(Q @ R) < 0.02


@pytest.mark.parametrize("speed", [1e-3, 0.03, 2.0])
def test_friction_jacobians_match_finite_differences(speed):
    """dQ/dq and dQ/dqd of the friction loads against central differences, at speeds
    below, at and far above the regularisation scales (where the law bends most)."""
    m = Mechanism(mechanism_spec_from_text(SLIDER_CRANK))
    q, qd = _state(m, 0.9, speed / 0.1)  # slider speed ~ crank speed x 0.1 m
    K, C = m.force_jacobians(0.0, q, qd)
    h = 1e-7 * max(speed, 1e-3)
    Kfd = fd(lambda x: m.forces(0.0, x, qd), q, 1e-7)
    Cfd = fd(lambda x: m.forces(0.0, q, x), qd, h)
    scale_k = max(np.max(np.abs(Kfd)), 1e-9)
    scale_c = max(np.max(np.abs(Cfd)), 1e-9)
    assert np.max(np.abs(K - Kfd)) / scale_k < 1e-6
    assert np.max(np.abs(C - Cfd)) / scale_c < 1e-6


def test_kernels_equal_generic_forces():
    """The generated kernels' Q (with sqrt) equals the generic LoadSet's, to rounding."""
    m = Mechanism(mechanism_spec_from_text(SLIDER_CRANK))
    K = fastpath.kernels(m)
    assert K is not None
    rng = np.random.default_rng(3)
    for _ in range(5):
        q, qd = _state(m, rng.uniform(-3, 3), rng.uniform(-5, 5))
        Qk = np.array(K.scalar.forces(q.tolist(), qd.tolist(), K.time_values(0.0)))
        np.testing.assert_allclose(Qk, m.forces(0.0, q, qd), rtol=0, atol=1e-13)


@pytest.mark.parametrize("text", [PENDULUM, SLIDER_CRANK])
def test_energy_lost_equals_friction_work(text):
    """E(T) - E(0) = int Q_friction . qd dt (trapezoid over a fine RK4 run, 1 s)."""
    m = Mechanism(mechanism_spec_from_text(text))
    q, qd = _state(m, 0.4, 6.0)
    h = 2e-4
    integ = get_integrator("rk4")
    state = MBState(q, qd, dynamics.evaluate(m, 0.0, q[None], qd[None]).qdd[0])
    power = []
    E0 = float(m.energy(q, qd))
    for k in range(5001):
        P = (m.forces(k * h, state.q, state.qd) - m.Q_gravity) @ state.qd
        power.append(float(P))
        if k < 5000:
            state = integ.step(m, k * h, state, h)
            assert state.ok
    work = h * (sum(power) - 0.5 * (power[0] + power[-1]))
    lost = float(m.energy(state.q, state.qd)) - E0
    assert work < 0 and all(p <= 1e-15 for p in power)  # friction only dissipates
    assert lost == pytest.approx(work, rel=2e-3)
