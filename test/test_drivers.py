"""Time-dependent driving constraints (rheonomic Phi(q, t)): loader, kinematic consistency
(velocity and acceleration against finite differences of the position problem), dynamics
against the Lagrange-multiplier formulation, integrators, estimators."""
import numpy as np
import pytest

from conftest import mech_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.errors import ConfigError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import defaults
from mbde_core.model.drivers import derivatives
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism, load_mechanism
from mbde_core.sensors.base import NoiseModel
from mbde_core.sensors.point_position import PointPosition

CRANE_TEXT = open(mech_path("crane")).read()


@pytest.fixture(scope="module")
def crane():
    return load_mechanism(mech_path("crane"))


def trajectory(m, ts, z_fn):
    """q(t) on the manifold for a prescribed z(t) (position problems at each t)."""
    qs, q = [], m.q0.copy()
    for t in ts:
        q, ok = kinematics.solve_position(m, np.atleast_1d(z_fn(t)), q, t=t)
        assert ok
        qs.append(q)
    return np.array(qs)


def test_crane_model(crane):
    assert (crane.n, crane.m, crane.dof) == (5, 4, 1) and crane.independent_names == ["swing"]
    assert crane.rheonomic and [s.name for s in crane.drivers.specs] == ["cart", "winch"]
    for t in (0.0, 0.7, 3.1):
        q, ok = kinematics.solve_position(crane, [-1.4], crane.q0, t=t)
        assert ok and np.max(np.abs(crane.phi(q, t))) < 1e-14
        P, C = crane.points(q)[1], crane.points(q)[0]
        assert C[0] == pytest.approx(0.4 * np.sin(0.9 * t) + 0.15 * np.sin(2.3 * t), abs=1e-14) and abs(C[1]) < 1e-15
        assert np.hypot(*(P - C)) == pytest.approx(0.6 + 0.15 * np.sin(0.6 * t) ** 2, abs=1e-13)
    with pytest.raises(ValueError, match="time"):
        crane.phi(crane.q0)


def test_velocity_and_acceleration_are_the_derivatives_of_the_position_problem(crane):
    z = lambda t: -1.5 + 0.3 * np.sin(1.3 * t)  # noqa: E731
    zd = lambda t: 0.39 * np.cos(1.3 * t)  # noqa: E731
    zdd = lambda t: -0.507 * np.sin(1.3 * t)  # noqa: E731
    h = 1e-4
    for t in (0.3, 1.7, 4.2):
        qm, q0, qp = trajectory(crane, (t - h, t, t + h), z)
        qd = kinematics.velocity(crane, q0, [zd(t)], t=t)
        np.testing.assert_allclose(qd, (qp - qm) / (2 * h), atol=1e-7)
        qdd = kinematics.acceleration(crane, q0, qd, [zdd(t)], t=t)
        np.testing.assert_allclose(qdd, (qp - 2 * q0 + qm) / h**2, atol=2e-4)
        # velocity constraint Phi_q qd + Phi_t = 0, with Phi_t = -c'(t)
        np.testing.assert_allclose(crane.phi_q(q0) @ qd, crane.drivers.rates(t)[0], atol=1e-12)
        # batched = single (kernels vs dense code)
        Q = np.stack([q0, q0])
        np.testing.assert_allclose(kinematics.velocity(crane, Q, [[zd(t)]] * 2, t=t)[1], qd, atol=1e-13)
        np.testing.assert_allclose(kinematics.acceleration(crane, Q, np.stack([qd, qd]), [[zdd(t)]] * 2, t=t)[0], qdd, atol=1e-12)


def test_finite_difference_derivatives_of_the_drivers():
    f = lambda t: 0.6 + 0.15 * np.sin(0.6 * t) ** 2  # noqa: E731
    for t in (0.0, 1.3):
        v, d1, d2 = derivatives(f, t)
        assert d1 == pytest.approx(0.15 * 0.6 * np.sin(1.2 * t), abs=1e-10)
        assert d2 == pytest.approx(0.15 * 0.72 * np.cos(1.2 * t), abs=1e-7)
    text = CRANE_TEXT.replace('position: "0.4*sin(0.9*t) + 0.15*sin(2.3*t)"',
                              'position: "0.4*sin(0.9*t) + 0.15*sin(2.3*t)", velocity: "0.36*cos(0.9*t) + 0.345*cos(2.3*t)", '
                              'acceleration: "-0.324*sin(0.9*t) - 0.7935*sin(2.3*t)"')
    exact = Mechanism(mechanism_spec_from_text(text, "crane.yaml"))
    fd = load_mechanism(mech_path("crane"))
    for t in (0.2, 2.0):
        for a, b in zip(exact.drivers.rates(t), fd.drivers.rates(t)):
            np.testing.assert_allclose(a, b, atol=1e-7)


def test_forward_dynamics_equals_lagrange_multipliers(crane):
    for t, z, w in ((0.4, -1.3, 0.8), (2.5, -1.9, -1.1)):
        q = kinematics.solve_position(crane, [z], crane.q0, t=t)[0]
        qd = kinematics.velocity(crane, q, [w], t=t)
        zdd, qdd = dynamics.forward(crane, t, q, qd)
        qdd_l, _ = dynamics.forward_lagrange(crane, t, q, qd)
        np.testing.assert_allclose(qdd, qdd_l, atol=1e-10)
        ev = dynamics.evaluate(crane, t, np.stack([q, q]), np.stack([qd, qd]))  # batched kernels
        np.testing.assert_allclose(ev.qdd[1], qdd_l, atol=1e-10)


def test_integrators_agree_and_keep_the_constraints(crane):
    ref = None
    for name, h in (("rk4", 2e-3), ("midpoint", 2e-3), ("trapezoidal", 5e-3), ("euler", 1e-3), ("symplectic_euler", 1e-3),
                    ("rk4", 0.02), ("midpoint", 0.02)):
        I = get_integrator(name)
        for batch in (False, True):
            s = MBState(np.stack([crane.q0] * 3), np.stack([crane.qd0] * 3)) if batch else MBState(crane.q0, crane.qd0)
            t = 0.0
            for _ in range(int(round(1.0 / h))):
                s = I.step(crane, t, s, h)
                t += h
            q = s.q[1] if batch else s.q
            assert np.all(s.ok) and np.max(np.abs(crane.phi(q, t))) < 1e-12
            if ref is None:
                ref = q
            tol = 5e-3 if name in ("euler", "symplectic_euler") else 1e-3 if h > 0.01 else 2e-5
            assert abs(q[4] - ref[4]) < tol, (name, h)
    with pytest.raises(ValueError, match="ali3p"):
        get_integrator("ali3p").step(crane, 0.0, MBState(crane.q0, crane.qd0), 1e-3)


def test_config_errors():
    bad_mass = CRANE_TEXT.replace("cog: [length, 0]", "cog: [0.5*length, 0]")
    with pytest.raises(ConfigError, match="driven length"):
        mechanism_spec_from_text(bad_mass, "crane.yaml")
    twice = CRANE_TEXT.replace('  - {name: winch, type: distance, body: rope, length: "r0 + 0.15*sin(0.6*t)^2"}',
                               '  - {name: winch, type: distance, body: rope, length: "r0"}\n  - {name: w2, type: distance, body: rope, length: "r0"}')
    with pytest.raises(ConfigError, match="second driving constraint"):
        mechanism_spec_from_text(twice, "crane.yaml")
    wrong_key = CRANE_TEXT.replace("type: distance, body: rope, length:", "type: distance, body: rope, position:")
    with pytest.raises(ConfigError, match="driving_constraints"):
        mechanism_spec_from_text(wrong_key, "crane.yaml")


def test_estimators_without_driver_support_refuse_the_model(crane):
    sensors = [PointPosition(crane, "cam", point=1, rate=30.0, noise=NoiseModel.white(0.01, 2), frame_id="cam", topic="/cam")]
    from mbde_core.sensors.sensor_set import SensorSet

    with pytest.raises(ConfigError, match="driving constraints"):
        make_estimator("errorekf", crane, SensorSet(sensors), defaults("errorekf"))
    for name in ("pf", "vipf"):
        est = make_estimator(name, crane, SensorSet(sensors), dict(defaults(name), init="gaussian"))
        assert est.traits.drivers
        refine = est.diagnostics()["refine"]  # no Gaussian follower (pf_refine): the Kalman observers refuse drivers
        assert refine["estimator"] == "none" and "driving constraints" in refine["reason"]


def test_point_position_sensor_jacobian(crane):
    s = PointPosition(crane, "cam", point=1, rate=30.0, noise=NoiseModel.white(0.01, 2), frame_id="cam", topic="/cam")
    q = kinematics.solve_position(crane, [-1.2], crane.q0, t=0.5)[0]
    np.testing.assert_allclose(s.h(q), crane.points(q)[1])
    Hq = s.jacobians(q)[0]
    eps = 1e-7
    fd = np.stack([(s.h(q + eps * e) - s.h(q - eps * e)) / (2 * eps) for e in np.eye(crane.n)], axis=1)
    np.testing.assert_allclose(Hq, fd, atol=1e-8)
    assert s.channels == ["cam_x", "cam_y"]


def test_scenarios_refuse_driving_constraints(tmp_path):
    from mbde_core.scenario import load_scenario

    p = tmp_path / "crane_scenario.yaml"
    p.write_text(f"name: c\nmechanism: {mech_path('crane')}\nsensors: []\nduration: 1\nstep: 0.001\nintegrator: rk4\n")
    with pytest.raises(ConfigError, match="driving_constraints are not supported in scenarios"):
        load_scenario(str(p))
