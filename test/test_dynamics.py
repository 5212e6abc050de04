"""Dynamics against analytic values, an independent formulation, conservation laws and MSC Adams."""
import os

import numpy as np
import pytest

from conftest import MSC_DIR
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import INTEGRATOR_NAMES, MBState, get_integrator
from mbde_core.engine.inverse_dynamics import driver_forces
from mbde_core.model.mechanism import load_mechanism


def simulate(m, name, h, duration):
    integ = get_integrator(name)
    s = MBState(m.q0.copy(), m.qd0.copy())
    steps = int(round(duration / h))
    qs, qds = [s.q], [s.qd]
    t = 0.0
    for _ in range(steps):
        s = integ.step(m, t, s, h)
        t += h
        assert s.ok
        qs.append(s.q)
        qds.append(s.qd)
    return np.array(qs), np.array(qds)


def test_pendulum_released_horizontal(mechanisms):
    m = mechanisms["pendulum"]
    g, L = 9.81, 0.5
    zdd, qdd = dynamics.forward(m, 0.0, m.q0, np.zeros(m.n))
    assert zdd[0] == pytest.approx(-3 * g / (2 * L), rel=1e-9)
    assert zdd[0] == pytest.approx(-29.43, rel=1e-9)
    tip_ydd = qdd[m.coordinate_index("P.y")]
    assert tip_ydd == pytest.approx(zdd[0] * L, rel=1e-9)
    assert qdd[m.coordinate_index("P.x")] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank", "fourbar_pf"])
def test_r_matrix_equals_lagrange_multipliers(mechanisms, name):
    m = mechanisms[name]
    rng = np.random.default_rng(0)
    z = m.q0[m.independent] + rng.uniform(-0.3, 0.3, m.dof)
    q = kinematics.solve_position(m, z, m.q0)[0]
    qd = kinematics.velocity(m, q, rng.normal(size=m.dof))
    _, qdd_r = dynamics.forward(m, 0.0, q, qd)
    qdd_l, _ = dynamics.forward_lagrange(m, 0.0, q, qd)
    np.testing.assert_allclose(qdd_r, qdd_l, rtol=1e-9, atol=1e-9 * np.max(np.abs(qdd_l)))


def test_free_fourbar_rk4_10s_conserves_energy_and_constraints(fourbar):
    qs, qds = simulate(fourbar, "rk4", 1e-3, 10.0)
    assert np.max(np.abs(fourbar.phi(qs))) < 1e-8
    drift = dynamics.energy_drift(fourbar, qs, qds)
    assert drift < 1e-4
    assert np.ptp(qs[:, 4]) > 1.0  # it really moved (crank swings)


def test_ali3p_is_drift_free(fourbar):
    qs, qds = simulate(fourbar, "ali3p", 2e-3, 10.0)
    assert np.max(np.abs(fourbar.phi(qs))) < 1e-8
    # velocity constraints hold after the projections
    vel = np.einsum("kij,kj->ki", fourbar.phi_q(qs), qds)
    assert np.max(np.abs(vel)) < 1e-8
    assert dynamics.energy_drift(fourbar, qs, qds) < 1e-3


def test_variational_integrators_bounded_energy_where_euler_drifts(fourbar):
    h, T = 0.02, 20.0
    err = {}
    for name in ("euler", "midpoint", "symplectic_euler"):
        qs, qds = simulate(fourbar, name, h, T)
        E = fourbar.energy(qs, qds)
        Tmax = np.max(fourbar.kinetic_energy(qds))
        e = np.abs(E - E[0]) / Tmax
        half = len(e) // 2
        err[name] = (np.max(e[:half]), np.max(e[half:]))
        assert np.max(np.abs(fourbar.phi(qs))) < 1e-8
    # explicit Euler's energy error grows with time, and is large
    assert err["euler"][1] > 1.5 * err["euler"][0]
    assert err["euler"][1] > 0.3
    for name in ("midpoint", "symplectic_euler"):
        first, second = err[name]
        assert second < 1.5 * first + 1e-6  # bounded: does not grow
        assert second < 0.1 * err["euler"][1]


@pytest.mark.parametrize("name", INTEGRATOR_NAMES)
def test_integrators_converge_to_rk4_reference(fourbar, name):
    ref, _ = simulate(fourbar, "rk4", 1e-3, 0.5)
    qs, _ = simulate(fourbar, name, 1e-3, 0.5)
    tol = {"euler": 5e-3, "symplectic_euler": 5e-3}.get(name, 1e-5)
    assert abs(qs[-1, 4] - ref[-1, 4]) < tol


def test_batched_integration_equals_single(mechanisms):
    m = mechanisms["fourbar_pf"]
    for name in ("euler", "rk4", "trapezoidal", "midpoint", "symplectic_euler"):
        integ = get_integrator(name)
        single = integ.step(m, 0.0, MBState(m.q0, m.qd0), 3e-3)
        batch = integ.step(m, 0.0, MBState(np.stack([m.q0] * 3), np.stack([m.qd0] * 3)), 3e-3)
        np.testing.assert_allclose(batch.q[2], single.q, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(batch.qd[2], single.qd, rtol=1e-10, atol=1e-12)


def test_extra_acceleration_changes_zdd_by_exactly_v(mechanisms):
    m = mechanisms["fourbar"]
    v = np.array([0.7])
    h = 1e-4
    for name in ("euler", "rk4", "midpoint", "symplectic_euler", "trapezoidal"):
        integ = get_integrator(name)
        a = integ.step(m, 0.0, MBState(m.q0, m.qd0), h)
        b = integ.step(m, 0.0, MBState(m.q0, m.qd0), h, extra_zdd=v)
        dzd = (b.qd[m.independent] - a.qd[m.independent]) / h
        assert dzd[0] == pytest.approx(0.7, rel=2e-3), name


def test_inverse_dynamics_reproduces_msc_adams():
    m = load_mechanism(os.path.join(MSC_DIR, "fourbars1-with-rel-angle.yaml"))
    traj = np.loadtxt(os.path.join(MSC_DIR, "fourbars1-with-rel-angle-trajectory.txt"), comments="%")
    msc = np.loadtxt(os.path.join(MSC_DIR, "InverseDynamics_4bars_MSC.tab"), comments="%")
    tau, _ = driver_forces(m, traj[:, 0], traj[:, 1], [4])
    np.testing.assert_allclose(traj[:, 0], msc[:, 0])
    # MSC's column is the reaction: the torque the motor applies is its negative
    err = np.abs(tau[:, 0] - (-msc[:, 1]))
    assert np.max(err) < 0.05
    assert tau[0, 0] == pytest.approx(66.0, abs=0.05)


def test_inverse_dynamics_inverts_forward_dynamics(fourbar):
    rng = np.random.default_rng(3)
    q = kinematics.solve_position(fourbar, [0.4], fourbar.q0)[0]
    qd = kinematics.velocity(fourbar, q, [1.3])
    zdd, qdd = dynamics.forward(fourbar, 0.0, q, qd)
    tau = dynamics.inverse(fourbar, 0.0, q, qd, qdd)
    assert abs(tau[0]) < 1e-9 * (1 + abs(zdd[0]))  # free motion needs no driver
    zdd2 = zdd + rng.normal(size=1)
    qdd2 = kinematics.acceleration(fourbar, q, qd, zdd2)
    tau2 = dynamics.inverse(fourbar, 0.0, q, qd, qdd2)
    # applying tau2 as a generalized force reproduces zdd2
    extra = np.zeros(fourbar.n)
    extra[fourbar.independent[0]] = tau2[0]
    z3, _ = dynamics.forward(fourbar, 0.0, q, qd, extra_Q=extra)
    assert z3[0] == pytest.approx(zdd2[0], rel=1e-10)
