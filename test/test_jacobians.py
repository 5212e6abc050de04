"""Every analytic Jacobian of the engine equals central finite differences (rel. 1e-6)."""
import numpy as np
import pytest

from engine_reference import LOADED  # the mechanism with loads of every kind
from mbde_core.engine import dynamics, kinematics
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism

NAMES = ["fourbar", "fourbar_pf", "fivebar", "slider_crank", "pendulum"]


def fd_jacobian(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    cols = []
    for k in range(x.size):
        dx = np.zeros_like(x)
        dx[k] = eps * max(1.0, abs(x[k]))
        cols.append((f(x + dx) - f(x - dx)) / (2 * dx[k]))
    return np.stack(cols, axis=-1)


def assert_close(analytic, numeric, rel=1e-6):
    scale = max(np.max(np.abs(numeric)), 1e-12)
    err = np.max(np.abs(analytic - numeric)) / scale
    assert err < rel, f"relative error {err:.2e}"


def moving_state(m, seed=0):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.3, 0.3, m.dof)
    q, ok = kinematics.solve_position(m, z, m.q0)
    assert ok
    zd = rng.uniform(-2, 2, m.dof)
    return q, kinematics.velocity(m, q, zd)


@pytest.mark.parametrize("name", NAMES)
def test_phi_q_matches_finite_differences(mechanisms, name):
    m = mechanisms[name]
    q, _ = moving_state(m)
    q = q + np.random.default_rng(1).normal(0, 1e-2, m.n)  # off the manifold too
    assert_close(m.phi_q(q), fd_jacobian(m.phi, q))


@pytest.mark.parametrize("name", NAMES)
def test_phi_q_dot_qd_matches_finite_differences(mechanisms, name):
    m = mechanisms[name]
    q, qd = moving_state(m)
    # d/dt (Phi_q(q(t))) qd = directional derivative of Phi_q along qd, applied to qd
    eps = 1e-6
    num = ((m.phi_q(q + eps * qd) - m.phi_q(q - eps * qd)) / (2 * eps)) @ qd
    assert_close(m.phi_q_dot_qd(q, qd), num)


@pytest.mark.parametrize("name", NAMES)
def test_r_matrix_is_derivative_of_position_problem(mechanisms, name):
    m = mechanisms[name]
    q, _ = moving_state(m)

    def q_of_z(z):
        return kinematics.solve_position(m, z, q)[0]

    R = kinematics.r_matrix(m, q)
    assert_close(R, fd_jacobian(q_of_z, q[m.independent]))
    assert np.max(np.abs(m.phi_q(q) @ R)) < 1e-12 * max(1, m.length_scale**2)


@pytest.mark.parametrize("name", NAMES)
def test_rdot_zd_and_acceleration(mechanisms, name):
    m = mechanisms[name]
    q, qd = moving_state(m)
    zd = qd[m.independent]
    zdd = np.random.default_rng(2).normal(size=m.dof)
    qdd = kinematics.acceleration(m, q, qd, zdd)
    # qdd must satisfy the acceleration constraint Phi_q qdd + (Phi_q)' qd = 0
    assert np.max(np.abs(m.phi_q(q) @ qdd + m.phi_q_dot_qd(q, qd))) < 1e-10 * max(1, m.length_scale**2)
    # and equal the time derivative of qd(t) = R(q(t)) zd(t) along the motion
    h = 1e-5

    def qd_at(s):
        zs = q[m.independent] + s * zd + 0.5 * s * s * zdd
        qs = kinematics.solve_position(m, zs, q + s * qd)[0]
        return kinematics.velocity(m, qs, zd + s * zdd)

    assert_close(qdd, (qd_at(h) - qd_at(-h)) / (2 * h), rel=1e-5)
    assert_close(kinematics.rdot_zd(m, q, qd), kinematics.acceleration(m, q, qd, np.zeros(m.dof)))


@pytest.mark.parametrize("name", NAMES)
def test_gravity_force_is_gradient_of_potential(mechanisms, name):
    m = mechanisms[name]
    q, _ = moving_state(m)
    assert_close(m.forces(0.0, q, np.zeros(m.n)), -fd_jacobian(m.potential_energy, q))


@pytest.mark.parametrize("name", NAMES)
def test_mass_matrix_matches_rigid_body_kinetic_energy(mechanisms, name):
    m = mechanisms[name]
    q, qd = moving_state(m, seed=3)
    P, V = m.points(q), m.point_velocities(qd)
    T = 0.0
    for b in m.spec.bodies:
        i, j = b.points[0], b.points[1]
        d, dd = P[j] - P[i], V[j] - V[i]
        w = (d[0] * dd[1] - d[1] * dd[0]) / (d @ d)
        ex = d / np.linalg.norm(d)
        ey = np.array([-ex[1], ex[0]])
        rg = b.cog[0] * ex + b.cog[1] * ey
        vg = V[i] + w * np.array([-rg[1], rg[0]])
        Ig = b.I0 - b.mass * (b.cog[0] ** 2 + b.cog[1] ** 2)
        T += 0.5 * b.mass * vg @ vg + 0.5 * Ig * w * w
    for s in m.spec.sliders:
        T += 0.5 * s.mass * V[s.point] @ V[s.point]
    assert m.kinetic_energy(qd) == pytest.approx(T, rel=1e-12)


def test_force_jacobians_match_finite_differences():
    m = Mechanism(mechanism_spec_from_text(LOADED))
    q, qd = moving_state(m, seed=4)
    K, C = m.force_jacobians(0.7, q, qd)
    assert_close(K, fd_jacobian(lambda x: m.forces(0.7, x, qd), q))
    assert_close(C, fd_jacobian(lambda x: m.forces(0.7, q, x), qd))
    # batched evaluation equals the single one (N or N m, to rounding)
    Qb = m.forces(0.7, np.stack([q, q]), np.stack([qd, qd]))
    Q1 = m.forces(0.7, q, qd)
    np.testing.assert_allclose(Qb[1], Q1, rtol=0, atol=1e-13 * max(1.0, np.max(np.abs(Q1))))


def test_damping_dissipates_and_torque_does_work():
    m = Mechanism(mechanism_spec_from_text(LOADED))
    q, qd = moving_state(m, seed=5)
    spec_free = m.spec.replace(loads=tuple(ld for ld in m.spec.loads if ld.kind.endswith(("damping", "friction"))))
    md = Mechanism(spec_free)
    Qd = md.forces(0.0, q, qd) - md.Q_gravity
    assert Qd @ qd < 0  # viscous and dry friction only remove power


def test_batched_dynamics_equal_single(mechanisms):
    m = mechanisms["fivebar"]
    rng = np.random.default_rng(6)
    qs, qds = [], []
    for k in range(70):  # > 64: exercises the vectorised small-matrix solver
        z = m.q0[m.independent] + rng.uniform(-0.2, 0.2, m.dof)
        q = kinematics.solve_position(m, z, m.q0)[0]
        qs.append(q)
        qds.append(kinematics.velocity(m, q, rng.normal(size=m.dof)))
    qs, qds = np.array(qs), np.array(qds)
    zdd_b, qdd_b = dynamics.forward(m, 0.0, qs, qds)
    for k in (0, 33, 69):
        zdd, qdd = dynamics.forward(m, 0.0, qs[k], qds[k])
        np.testing.assert_allclose(zdd_b[k], zdd, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(qdd_b[k], qdd, rtol=1e-10, atol=1e-12)
