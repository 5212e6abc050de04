"""The variational integrators (paper 002): reduced Newton vs a natural-coordinate reference,
the stochastic steps of eqs. 5-6, symplecticity of the step map."""
import numpy as np
import pytest
import scipy.optimize

from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator


def natural_reference(m, t, q0, qd0, h, midpoint, s1=None, s2=None):
    """The constrained discrete Euler-Lagrange step in natural coordinates, solved with
    scipy (q1, lambda): M (q1 - q0 - R0 s1) = h p0' + c_h F - Phi_q(q0)^T lambda, Phi(q1) = 0,
    p0' = M qd0 (+ M R0 s2 / 2 for the midpoint rule), then p1 and the projection qd1."""
    n, g = m.n, m.dof
    R0 = kinematics.r_matrix(m, q0)
    s1 = np.zeros(g) if s1 is None else s1
    s2 = np.zeros(g) if s2 is None else s2
    shift = R0 @ s1
    p0 = m.M @ qd0 + (m.M @ R0 @ s2 / 2 if midpoint else 0.0)
    J0 = m.phi_q(q0)

    def force(q1):
        v = (q1 - q0 - shift) / h
        return m.forces(t + h / 2, (q0 + q1) / 2, v) if midpoint else m.forces(t + h, q1, v)

    def G(x):
        q1, lam = x[:n], x[n:]
        r1 = m.M @ (q1 - q0 - shift) - h * p0 - (h * h / 2 * force(q1) if midpoint else 0.0) + J0.T @ lam
        return np.concatenate([r1, m.phi(q1)])

    x0 = np.concatenate([q0 + h * qd0 + shift, np.zeros(m.m)])
    x = scipy.optimize.fsolve(G, x0, xtol=1e-12)
    q1 = x[:n]
    R1 = kinematics.r_matrix(m, q1)
    p1 = m.M @ (q1 - q0 - shift) / h + (h / 2 if midpoint else h) * force(q1)
    zd1 = np.linalg.solve(R1.T @ m.M @ R1, R1.T @ p1) + (s2 / 2 if midpoint else s2)
    return q1, R1 @ zd1


def state(m, seed):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.2, 0.2, m.dof)
    q = kinematics.solve_position(m, z, m.q0)[0]
    return q, kinematics.velocity(m, q, rng.normal(0, 2, m.dof))


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank", "pendulum"])
@pytest.mark.parametrize("integ", ["midpoint", "symplectic_euler"])
def test_reduced_step_solves_the_natural_coordinate_equations(mechanisms, name, integ):
    m = mechanisms[name]
    q0, qd0 = state(m, 1)
    h = 0.01
    rng = np.random.default_rng(2)
    s1, s2 = 0.01 * rng.normal(size=m.dof), 0.3 * rng.normal(size=m.dof)
    I = get_integrator(integ)
    for noise in ((None, None), (s1, s2)):
        st = I.step_noisy(m, 0.1, MBState(q0, qd0), h, *noise)
        q1, qd1 = natural_reference(m, 0.1, q0, qd0, h, integ == "midpoint", *noise)
        assert st.ok
        np.testing.assert_allclose(st.q, q1, atol=1e-10 * m.length_scale)
        np.testing.assert_allclose(st.qd, qd1, atol=1e-8 * max(1.0, np.max(np.abs(qd1))))
        assert np.max(np.abs(m.phi(st.q))) < 1e-12 * max(1.0, m.length_scale**2)
        assert np.max(np.abs(m.phi_q(st.q) @ st.qd)) < 1e-10 * max(1.0, np.max(np.abs(qd1)))


def test_batched_noisy_step_equals_single_steps(mechanisms):
    m = mechanisms["fivebar"]
    rng = np.random.default_rng(3)
    N = 40
    q, qd = zip(*(state(m, s) for s in range(N)))
    q, qd = np.array(q), np.array(qd)
    s1, s2 = 0.01 * rng.normal(size=(N, 2)), 0.5 * rng.normal(size=(N, 2))
    I = get_integrator("midpoint")
    batch = I.step_noisy(m, 0.0, MBState(q, qd), 0.005, s1, s2)
    for k in (0, 17, 39):
        one = I.step_noisy(m, 0.0, MBState(q[k], qd[k]), 0.005, s1[k], s2[k])
        np.testing.assert_allclose(batch.q[k], one.q, rtol=0, atol=1e-13)
        np.testing.assert_allclose(batch.qd[k], one.qd, rtol=0, atol=1e-10)
    # the kernel context returned with a batch is reused by the next step (same results)
    again = I.step_noisy(m, 0.005, batch, 0.005, s1, s2)
    fresh = I.step_noisy(m, 0.005, MBState(batch.q.copy(), batch.qd.copy(), batch.qdd.copy()), 0.005, s1, s2)
    np.testing.assert_array_equal(again.q, fresh.q)


def test_noise_increments_have_the_stated_covariance(mechanisms):
    """Var z1 = sigma^2 h (+ O(h^3)), Var zd1 = gamma^2 h (+ O(h^2)) from a fixed state."""
    m = mechanisms["fourbar"]
    N, h, sigma, gamma = 20000, 1e-3, 0.2, 3.0
    rng = np.random.default_rng(4)
    q0, qd0 = state(m, 5)
    Q, QD = np.tile(q0, (N, 1)), np.tile(qd0, (N, 1))
    s1 = sigma * np.sqrt(h) * rng.standard_normal((N, 1))
    s2 = gamma * np.sqrt(h) * rng.standard_normal((N, 1))
    st = get_integrator("midpoint").step_noisy(m, 0.0, MBState(Q, QD), h, s1, s2)
    z1, zd1 = st.q[:, m.independent[0]], st.qd[:, m.independent[0]]
    assert np.var(z1) == pytest.approx(sigma**2 * h, rel=0.05)
    assert np.var(zd1) == pytest.approx(gamma**2 * h, rel=0.05)
    # the position noise moves the particle along the manifold, not off it
    assert np.max(np.abs(m.phi(st.q))) < 1e-12


@pytest.mark.parametrize("name", ["pendulum", "fourbar", "fivebar"])
def test_step_map_is_symplectic_in_z_and_conjugate_momentum(mechanisms, name):
    """Jac^T Omega Jac = Omega for (z0, pz0) -> (z1, pz1), pz = R^T M qd (finite differences)."""
    m = mechanisms[name]
    g = m.dof
    q0, qd0 = state(m, 6)
    I = get_integrator("midpoint")

    def to_state(x):
        q = kinematics.solve_position(m, x[:g], q0)[0]
        R = kinematics.r_matrix(m, q)
        return q, R @ np.linalg.solve(R.T @ m.M @ R, x[g:])

    def flow(x):
        q, qd = to_state(x)
        st = I.step(m, 0.0, MBState(q, qd), 0.02)
        R = kinematics.r_matrix(m, st.q)
        return np.concatenate([st.q[m.independent], R.T @ m.M @ st.qd])

    R0 = kinematics.r_matrix(m, q0)
    x0 = np.concatenate([q0[m.independent], R0.T @ m.M @ qd0])
    eps = 1e-6
    Jac = np.empty((2 * g, 2 * g))
    for k in range(2 * g):
        d = np.zeros(2 * g)
        d[k] = eps
        Jac[:, k] = (flow(x0 + d) - flow(x0 - d)) / (2 * eps)
    Om = np.block([[np.zeros((g, g)), np.eye(g)], [-np.eye(g), np.zeros((g, g))]])
    np.testing.assert_allclose(Jac.T @ Om @ Jac, Om, atol=1e-7)
