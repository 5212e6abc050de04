"""Structured linearisation of the variational step (paper 002 sec. 4.1): the implicit-function
Jacobian against finite differences of the full step."""
import numpy as np
import pytest

from engine_reference import LOADED
from mbde_core.engine import kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.engine.vi_linearize import position_hessian, step_jacobian
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism


def start(m, seed):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.2, 0.2, m.dof)
    q = kinematics.solve_position(m, z, m.q0)[0]
    return q, kinematics.velocity(m, q, rng.normal(0, 2, m.dof))


def fd_jacobian(m, integ, t, h, q0, qd0, a, eps=1e-6):
    """Central differences of (z1, zd1) w.r.t. (z0, zd0, a) through the full step."""
    g = m.dof
    I = get_integrator(integ)
    z0, zd0 = q0[m.independent], qd0[m.independent]

    def step(x):
        q = kinematics.solve_position(m, x[:g], q0)[0]
        qd = kinematics.velocity(m, q, x[g : 2 * g])
        st = I.step(m, t, MBState(q, qd), h, extra_zdd=x[2 * g :])
        assert st.ok
        return np.concatenate([st.q[m.independent], st.qd[m.independent]])

    x0 = np.concatenate([z0, zd0, a])
    J = np.empty((2 * g, 3 * g))
    for k in range(3 * g):
        d = np.zeros(3 * g)
        d[k] = eps
        J[:, k] = (step(x0 + d) - step(x0 - d)) / (2 * eps)
    return J


@pytest.fixture(scope="module")
def loaded():
    return Mechanism(mechanism_spec_from_text(LOADED, "loaded.yaml"))


@pytest.mark.parametrize("integ", ["midpoint", "symplectic_euler"])
@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank", "loaded"])
def test_step_jacobian_equals_finite_differences(mechanisms, loaded, name, integ):
    m = loaded if name == "loaded" else mechanisms[name]
    q0, qd0 = start(m, 3)
    h, t = 0.02, 0.3
    a = np.full(m.dof, 0.7)
    st = get_integrator(integ).step(m, t, MBState(q0, qd0), h, extra_zdd=a)
    Fx, Fa = step_jacobian(m, t, h, integ == "midpoint", q0, qd0, st.q, st.qd, a)
    J = fd_jacobian(m, integ, t, h, q0, qd0, a)
    scale = np.max(np.abs(J))
    np.testing.assert_allclose(Fx, J[:, : 2 * m.dof], atol=2e-7 * scale)
    np.testing.assert_allclose(Fa, J[:, 2 * m.dof :], atol=2e-7 * scale)


def test_position_hessian_equals_finite_differences_of_r(mechanisms):
    m = mechanisms["fivebar"]
    q, _ = start(m, 4)
    S = position_hessian(m, q, kinematics.r_matrix(m, q))
    eps = 1e-6
    for l in range(m.dof):
        dz = np.zeros(m.dof)
        dz[l] = eps
        z = q[m.independent]
        Rp = kinematics.r_matrix(m, kinematics.solve_position(m, z + dz, q)[0])
        Rm = kinematics.r_matrix(m, kinematics.solve_position(m, z - dz, q)[0])
        np.testing.assert_allclose(S[:, :, l], (Rp - Rm) / (2 * eps), atol=1e-7)


def test_linearisation_is_symplectic_in_conjugate_momentum(mechanisms):
    """d(z1, pz1)/d(z0, pz0) from the (z, zd) Jacobian is symplectic (structure kept)."""
    m = mechanisms["fivebar"]
    g = m.dof
    q0, qd0 = start(m, 5)
    h = 0.05
    st = get_integrator("midpoint").step(m, 0.0, MBState(q0, qd0), h)
    Fx, _ = step_jacobian(m, 0.0, h, True, q0, qd0, st.q, st.qd)

    def dp_dx(q, qd):  # d(z, pz)/d(z, zd), pz = Mbar(z) zd
        R = kinematics.r_matrix(m, q)
        S = position_hessian(m, q, R)
        MR = m.M @ R
        zd = qd[m.independent]
        T = np.eye(2 * g)
        for l in range(g):
            T[g:, l] = S[:, :, l].T @ MR @ zd + MR.T @ S[:, :, l] @ zd
        T[g:, g:] = R.T @ MR
        return T

    Jp = dp_dx(st.q, st.qd) @ Fx @ np.linalg.inv(dp_dx(q0, qd0))
    Om = np.block([[np.zeros((g, g)), np.eye(g)], [-np.eye(g), np.zeros((g, g))]])
    np.testing.assert_allclose(Jp.T @ Om @ Jp, Om, atol=1e-10)


@pytest.mark.parametrize("integ", ["midpoint", "symplectic_euler"])
@pytest.mark.parametrize("name", ["fivebar", "slider_crank", "loaded"])
def test_step_jacobian_of_a_generalized_force_equals_finite_differences(mechanisms, loaded, name, integ):
    """The step with a generalized force fe = E u held over it (``extra_force``, a motor
    torque on a coordinate): (Fx, Fu) against central differences in (z0, zd0, u)."""
    m = loaded if name == "loaded" else mechanisms[name]
    q0, qd0 = start(m, 5)
    h, t, g = 0.02, 0.3, m.dof
    E = np.zeros((m.n, g))
    E[m.independent, np.arange(g)] = 1.0
    u0 = np.full(g, 0.4)
    I = get_integrator(integ)

    def f(x):
        q, _ = kinematics.solve_position(m, x[:g], q0)
        qd = kinematics.velocity(m, q, x[g : 2 * g])
        st = I.step(m, t, MBState(q, qd), h, extra_force=E @ x[2 * g :])
        return np.concatenate([st.q[m.independent], st.qd[m.independent]])

    st = I.step(m, t, MBState(q0, qd0), h, extra_force=E @ u0)
    Fx, _, Fu = step_jacobian(m, t, h, integ == "midpoint", q0, qd0, st.q, st.qd, None, E @ u0, E)
    x0 = np.concatenate([q0[m.independent], qd0[m.independent], u0])
    J = np.empty((2 * g, 3 * g))
    for k in range(3 * g):
        e = np.zeros(3 * g)
        e[k] = 1e-6 * max(1.0, abs(x0[k]))
        J[:, k] = (f(x0 + e) - f(x0 - e)) / (2 * e[k])
    scale = np.max(np.abs(J))
    np.testing.assert_allclose(Fx, J[:, : 2 * g], atol=2e-7 * scale)
    np.testing.assert_allclose(Fu, J[:, 2 * g :], atol=2e-7 * scale)


def test_midpoint_step_with_a_motor_torque_has_no_drift():
    """A constant torque u on the crank of paper 004's slider-crank (60 rad/s, 2 N m, 1 ms
    steps around a turn): as the generalized force it is (``extra_force``) the midpoint
    step's mean zd error against a fine RK4 reference (50 substeps, B(z) u re-evaluated)
    is < 1e-4 rad/s per step; as the acceleration B(z0) u held over the step it was
    -1.1e-3 rad/s per step (the size of the plant noise's 0.05 rad/s)."""
    from mbde_core.config.paths import config_path
    from mbde_core.estimators.kalman.reduced import ReducedModel
    from mbde_core.scenario import load_scenario

    m = load_scenario(config_path("scenarios", "adekf_slider_crank.yaml")).estimator_mechanism()
    model = ReducedModel(m, [])
    col, h, u = m.coordinate_index("theta"), 1e-3, 2.0
    fe = np.zeros(m.n)
    fe[col] = u
    rk, mid = get_integrator("rk4"), get_integrator("midpoint")
    err = []
    for z in np.linspace(0.0, 2.0 * np.pi, 37)[:-1]:
        q0, _ = kinematics.solve_position(m, np.array([z]), m.q0)
        st0 = MBState(q0, kinematics.velocity(m, q0, np.array([60.0])))
        st = st0
        for _ in range(50):
            st = rk.step(m, 0.0, st, h / 50, extra_zdd=model.input_gain(st.q, [col]) @ np.array([u]))
        one = mid.step(m, 0.0, st0, h, extra_force=fe)
        err.append(one.qd[m.independent][0] - st.qd[m.independent][0])
    assert abs(np.mean(err)) < 1e-4, np.mean(err)
