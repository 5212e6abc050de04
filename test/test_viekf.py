"""VI-EKF (paper 002 sec. 4): config, tracking, covariance, the structured transition."""
import numpy as np
import pytest

from mbde_bench.common import TruthRecord

from mbde_core.config.paths import config_path
from mbde_core.engine.vi_linearize import step_jacobian
from mbde_core.errors import ConfigError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults, validate
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.scenario import load_scenario
from mbde_core.sensors.base import wrap_angle


@pytest.fixture(scope="module")
def truth():
    sc = load_scenario(config_path("scenarios", "fourbar_encoder.yaml")).with_overrides(gravity_error=0.0)
    return TruthRecord(sc, 3.0)


def run(truth, name, over, dt, seed=100):
    sc = truth.scenario
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    cfg = defaults(name)
    cfg.update(over, step=dt)
    est = make_estimator(name, mech, sensors, cfg)
    init = sc.estimator_initial_state()
    start = InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch)
    recs = []
    stage = EstimatorStage(est, dt, lambda t: start, keep=False, on_step=recs.append)
    stage.feed(truth.measurements(sc.sensors, dt, seed=seed))
    stage.flush()
    t = np.array([r.estimate.stamp for r in recs])
    z = np.array([r.estimate.z for r in recs])
    zt = truth.at(np.round(t / 1e-3) * 1e-3)[0]
    return float(np.degrees(np.sqrt(np.mean(wrap_angle(z - zt) ** 2)))), est, recs


def test_config():
    assert defaults("viekf")["integrator"] == "midpoint"
    with pytest.raises(ConfigError, match=r"viekf\.integrator"):
        validate("viekf", {"integrator": "euler"}, "f.yaml")


def test_tracks_and_covariance_stays_spd(truth):
    rmse, est, recs = run(truth, "viekf", {}, 0.005)
    ref, _, _ = run(truth, "errorekf", {}, 0.005)
    assert rmse < 1.2 * ref + 0.05
    for r in recs[::20]:
        P = r.estimate.cov
        assert np.allclose(P, P.T) and np.linalg.eigvalsh(P).min() > 0
    assert est.diagnostics()["linearisation_failures"] == 0 and est.diagnostics()["assembly_failures"] == 0


def test_structured_transition_is_the_step_jacobian(truth):
    sc = truth.scenario
    mech = sc.estimator_mechanism()
    est = make_estimator("viekf", mech, sc.estimator_sensors(), defaults("viekf"))
    init = sc.estimator_initial_state()
    est.reset(0.0, InitialState(init.z, np.array([3.0]), np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch))
    q0, qd0, P0 = est.state.q.copy(), est.state.qd.copy(), est.P.copy()
    est.predict(0.05)
    Fx, _ = step_jacobian(mech, 0.0, 0.05, True, q0, qd0, est.state.q, est.state.qd)
    np.testing.assert_allclose(est.P, Fx @ P0 @ Fx.T + est.plant_noise(0.05), rtol=1e-10, atol=1e-14)


def test_beats_the_euler_transition_at_a_low_rate(truth):
    """20 Hz encoder on the falling four-bar: the structured linearisation of the VI step
    gives a smaller error than errorEKF with explicit Euler (paper 002 Fig. 4's trend)."""
    vi, _, _ = run(truth, "viekf", {}, 0.05)
    eu, _, _ = run(truth, "errorekf", {"integrator": "euler"}, 0.05)
    assert vi < eu


def test_acceleration_offset_and_input_blocks(truth):
    over = {"estimate_acceleration": True, "inputs": [{"coordinate": "theta", "psd": 10.0, "sigma0": 1.0}]}
    rmse, est, recs = run(truth, "viekf", over, 0.01)
    assert np.isfinite(rmse) and rmse < 2.0
    P = est.P
    assert P.shape == (4, 4) and np.linalg.eigvalsh(0.5 * (P + P.T)).min() > 0


@pytest.mark.parametrize("case, bound_deg", [("fivebar_gyro", 1.0), ("fourbar_gyro", 1.0)])
def test_cases_beyond_the_paper(case, bound_deg):
    """Not in paper 002: the 2-DOF five-bar (gyros on both couplers) and the four-bar gyro
    case with the paper-003 gravity error of 1 m/s^2 in the filter's model."""
    sc = load_scenario(config_path("scenarios", f"{case}.yaml"))
    truth = TruthRecord(sc, 1.5)
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    g = mech.dof
    init = sc.estimator_initial_state()
    start = InitialState(init.z, init.zd, np.full(g, 0.05), np.full(g, 0.5), init.q, init.branch)
    out = {}
    for name in ("viekf", "errorekf"):
        est = make_estimator(name, mech, sensors, defaults(name))
        recs = []
        stage = EstimatorStage(est, 0.005, lambda t: start, keep=False, on_step=recs.append)
        stage.feed(truth.measurements(sc.sensors, 0.005, seed=7))
        stage.flush()
        t = np.array([r.estimate.stamp for r in recs])
        z = np.array([r.estimate.z for r in recs])
        zt = truth.at(np.round(t / 1e-3) * 1e-3)[0]
        out[name] = float(np.degrees(np.sqrt(np.mean(wrap_angle(z - zt) ** 2))))
    assert out["viekf"] < bound_deg and out["viekf"] < 1.2 * out["errorekf"] + 0.05, out


def test_structured_transition_with_an_input_equals_finite_differences_of_the_prediction():
    """With an input u on the crank of paper 004's slider-crank (``structured: always``), the
    VI-EKF's F is the derivative of its own prediction (the variational step with the
    generalized force E u) with respect to z, zd and u, by central differences."""
    from mbde_core.engine import kinematics
    from mbde_core.engine.integrators import MBState, get_integrator

    sc = load_scenario(config_path("scenarios", "adekf_slider_crank.yaml"))
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    inputs = [{"coordinate": "theta", "psd": 10.0, "sigma0": 5.0}]
    est = make_estimator("viekf", mech, sensors, validate("viekf", {"inputs": inputs, "structured": "always"}))
    col = mech.coordinate_index("theta")
    z0, zd0, u0, h = 1.0, 60.0, 2.0, 0.001  # rad, rad/s, N m, s

    def prediction(z, zd, u):
        q = kinematics.solve_position(mech, np.array([z]), mech.q0)[0]
        qd = kinematics.velocity(mech, q, np.array([zd]))
        fe = np.zeros(mech.n)
        fe[col] = u
        st = get_integrator("midpoint").step(mech, 0.0, MBState(q, qd), h, extra_force=fe)
        return np.array([st.q[mech.independent][0], st.qd[mech.independent][0]])

    x0, eps = np.array([z0, zd0, u0]), np.array([1e-6, 1e-5, 1e-5])
    J = np.column_stack([(prediction(*(x0 + e)) - prediction(*(x0 - e))) / (2 * e[k])
                         for k, e in enumerate(np.diag(eps))])
    q0 = kinematics.solve_position(mech, np.array([z0]), mech.q0)[0]
    est.reset(0.0, InitialState(np.array([z0]), np.array([zd0]), np.full(1, 0.05), np.full(1, 0.5), q0, None))
    est.u = np.array([u0])
    P0 = np.diag([1e-4, 1e-2, 1e-2])  # [rad^2, (rad/s)^2, (N m)^2]
    est.P = P0.copy()
    est.predict(h)
    Qd = est._F_and_Q(h, q0)[1]
    F = np.eye(3)
    F[:2, :] = J
    np.testing.assert_allclose(est.P, F @ P0 @ F.T + Qd, rtol=1e-4, atol=1e-12)


def test_structured_auto_takes_the_euler_block_with_estimated_inputs():
    """``structured: without_inputs`` (the default): the step's exact [z, zd] block without inputs,
    paper 003's Euler block with them (the inputs' column stays the exact one)."""
    from mbde_core.engine import kinematics

    sc = load_scenario(config_path("scenarios", "adekf_slider_crank.yaml"))
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    h = 0.001
    blocks = {}
    for label, inputs in (("none", []), ("motor", [{"coordinate": "theta", "psd": 10.0, "sigma0": 5.0}])):
        est = make_estimator("viekf", mech, sensors, validate("viekf", {"inputs": inputs}))
        q0 = kinematics.solve_position(mech, np.array([1.0]), mech.q0)[0]
        est.reset(0.0, InitialState(np.array([1.0]), np.array([60.0]), np.full(1, 0.05), np.full(1, 0.5), q0, None))
        k = est.k
        P0 = np.zeros((2 + k, 2 + k))
        P0[0, 0] = 1e-4  # only z uncertain: P[:2, 0] / 1e-4 is F's z-column
        est.P = P0
        est.predict(h)
        Qd = est._F_and_Q(h, q0)[1]
        blocks[label] = (est.P - Qd)[:2, 0] / 1e-4
    np.testing.assert_allclose(blocks["motor"], [1.0, 0.0], atol=1e-9)  # Euler: z1 = z0 + h zd0, zd1 = zd0
    assert abs(blocks["none"][0] - 1.0) > 1e-4 and abs(blocks["none"][1]) > 1.0  # the exact step's dzd1/dz0 ~ 1.6 1/s
