"""The observers' fast paths against the generic code, and their configuration variants.

The speed work on the observers (ReducedModel.solve_full / linearize / assemble_near on
the generated kernels, float sensor linearisations, cached F and noise) must not change
what they compute: here the fast results are checked against the generic engine
functions and finite differences, and every configuration variant (integrators of the
errorEKF, estimated acceleration offset and inputs, the full transition Jacobian,
accelerometers that read qdd) runs a short four-bar case and must track.
"""
import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.kalman.reduced import ReducedModel
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

SENSORS = {
    "fourbar": """
- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 1*pi/180}}
- {name: enc, type: encoder, body: crank, rate: 200, noise: {sigma: 1*pi/180}}
- {name: acc, type: accelerometer, body: coupler, offset: [0.1, 0.05], rate: 200, noise: {sigma: 0.05}}
""",
    "fivebar": """
- {name: g1, type: gyroscope, body: coupler1, rate: 200, noise: {sigma: 0.0175}}
- {name: e2, type: encoder, body: crank2, rate: 200, noise: {sigma: 0.0175}}
- {name: acc, type: accelerometer, body: coupler2, offset: [0.3, 0.1], rate: 200, noise: {sigma: 0.05}}
""",
}


def random_state(m, seed):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.3, 0.3, m.dof)
    q = kinematics.solve_position(m, z, m.q0)[0]
    qd = kinematics.velocity(m, q, rng.normal(0, 2, m.dof))
    return q, qd


@pytest.mark.parametrize("mech_name", list(SENSORS))
def test_full_state_and_linearize_equal_the_generic_code(mech_name):
    m = load_mechanism(mech_path(mech_name))
    ss = load_sensors(parse_yaml(SENSORS[mech_name]), m)
    model = ReducedModel(m, ss)
    names = [s.name for s in ss]
    for seed in range(3):
        q, qd = random_state(m, seed)
        g = m.dof
        z, zd = q[m.independent], qd[m.independent]
        # position problem from a perturbed guess + one kernel call for qd, accelerations, R
        st, ok = model.solve_full(0.0, z, zd, q + 1e-3)
        assert ok
        ev = dynamics.evaluate(m, 0.0, q[None], qd[None])
        np.testing.assert_allclose(st.q, q, atol=1e-12)
        np.testing.assert_allclose(st.qd, qd, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(st.qdd, ev.qdd[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(st.R, kinematics.r_matrix(m, q), rtol=1e-10, atol=1e-12)
        # sensors and the chain-rule Jacobian vs the generic measurement Jacobian
        for subset in (names[:1], names[:2], names):
            h, H, _ = model.linearize(subset, 0.0, st)
            uses = ss.uses_qdd(subset)
            qdd = ev.qdd[0] if uses else None
            np.testing.assert_allclose(h, model.predict_measurements(subset, q, qd, qdd), rtol=1e-9, atol=1e-10)
            Hg = model.measurement_jacobian(subset, 0.0, q, qd, qdd)
            np.testing.assert_allclose(H, Hg, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(Hg).max()))
            # and vs central differences of h(assemble(x)) (independent of both)
            x = np.concatenate([z, zd])
            num = np.zeros_like(H)
            for k in range(2 * g):
                e = np.zeros(2 * g)
                e[k] = 1e-6
                vals = []
                for xx in (x + e, x - e):
                    qq, qqd, _ = model.assemble(xx, q)
                    qqdd = dynamics.forward(m, 0.0, qq, qqd)[1] if uses else None
                    vals.append(model.predict_measurements(subset, qq, qqd, qqdd))
                num[:, k] = (vals[0] - vals[1]) / 2e-6
            np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(num).max()))


def test_sigma_points_assembled_near_the_mean_equal_independent_solves():
    m = load_mechanism(mech_path("fivebar"))
    ss = load_sensors(parse_yaml(SENSORS["fivebar"]), m)
    model = ReducedModel(m, ss)
    q, qd = random_state(m, 4)
    st = model.full_state_at(0.0, q, qd)
    x = np.concatenate([q[m.independent], qd[m.independent]])
    rng = np.random.default_rng(0)
    X = np.vstack([x, x + rng.normal(0, [0.05, 0.05, 0.5, 0.5], (8, 4))])
    qs, qds, zdd, qdd, ok = model.assemble_near(0.0, X, st, accelerations=True, center=0)
    assert ok.all()
    for i, xi in enumerate(X):
        qi, oki = kinematics.solve_position(m, xi[: m.dof], q)
        assert oki
        np.testing.assert_allclose(qs[i], qi, atol=1e-12)
        np.testing.assert_allclose(qds[i], kinematics.velocity(m, qi, xi[m.dof :]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(qdd[i], dynamics.forward(m, 0.0, qi, qds[i])[1], rtol=1e-9, atol=1e-9)


# -- configuration variants on a short four-bar run --------------------------------------------
DT, DURATION = 0.005, 2.0


@pytest.fixture(scope="module")
def fourbar_case():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(SENSORS["fourbar"]), m)
    integ = get_integrator("rk4")
    s = MBState(m.q0, m.qd0)
    h = 1e-3
    rows = []
    for k in range(int(round(DURATION / h)) + 1):
        if k % 5 == 0:
            qdd = dynamics.forward(m, k * h, s.q, s.qd)[1]
            rows.append((k * h, s.q, s.qd, qdd))
        s = integ.step(m, k * h, s, h)
    rng = np.random.default_rng(5)
    samplers = {s.name: s.noise.sampler(rng) for s in ss}
    meas = [Measurement(t, s.name, samplers[s.name].apply(t, s.h(q, qd, qdd)))
            for t, q, qd, qdd in rows for s in ss]
    z = np.array([r[1][m.independent] for r in rows])
    return m, ss, meas, z


VARIANTS = [
    ("errorekf", {"integrator": "rk4"}, None),
    ("errorekf", {"integrator": "ali3p"}, None),
    ("errorekf", {"integrator": "trapezoidal"}, None),
    ("errorekf", {"estimate_acceleration": True}, None),
    ("errorekf", {"inputs": [{"coordinate": "theta", "psd": 10.0, "sigma0": 1.0}]}, None),
    ("errorekf", {"transition_jacobian": "full"}, None),
    ("errorekf", {"correction": "linear"}, None),
    ("errorekf", {"correction": "linear", "integrator": "rk4"}, ["enc", "acc"]),
    ("dekf", {"transition_jacobian": "full"}, None),
    ("cekf", {"transition_jacobian": "full"}, None),
    ("ukf", {}, ["gyro", "acc"]),
    # accelerometer alone: with the paper-003 acceleration_psd 1.0 (tuned for
    # gyroscopes/encoders) the random-walk acceleration explains the readings and every
    # reduced-coordinate observer loses the crank within 0.5 s here; 0.1 tracks to ~0.4 deg.
    # The model is exact here: model_error 0 (the default rule trusts a model to 10 % and
    # widens an accelerometer's sigma for it, which then cannot carry the crank alone)
    ("dekf", {"plant_noise": {"acceleration_psd": 0.1, "velocity_psd": 0.0}, "rule": {"model_error": 0.0}}, ["acc"]),
    ("ukf", {"plant_noise": {"acceleration_psd": 0.1, "velocity_psd": 0.0}, "rule": {"model_error": 0.0}}, ["acc"]),
    ("errorekf", {}, ["enc", "acc"]),
    ("cekf", {}, ["gyro", "acc"]),
    ("diekfpm", {}, ["gyro", "acc"]),
]


@pytest.mark.parametrize("name,changes,fused", VARIANTS,
                         ids=[f"{n}-{'-'.join(f'{k}' for k in c) or 'default'}-{'+'.join(f or ['all'])}" for n, c, f in VARIANTS])
def test_observer_variants_track(fourbar_case, name, changes, fused):
    m, ss, meas, z_true = fourbar_case
    cfg = defaults(name)
    cfg.update(changes)
    est = make_estimator(name, m, ss, cfg)
    z0, zd0 = m.q0[m.independent] + 0.02, m.qd0[m.independent] + 0.2
    stage = EstimatorStage(est, DT, lambda t: InitialState(z0, zd0, np.array([0.05]), np.array([0.5]), m.q0))
    stage.feed([r for r in meas if fused is None or r.sensor in fused])
    stage.flush()
    z = np.array([r.estimate.z for r in stage.records])
    assert len(z) == len(z_true)
    err = np.abs(z - z_true)[len(z) // 4 :]
    assert np.sqrt(np.mean(err**2)) < np.radians(2.0), (name, changes, float(np.degrees(np.sqrt(np.mean(err**2)))))
    q = np.array([r.estimate.q for r in stage.records])
    if changes.get("correction") == "linear":
        # the paper's linear feedback leaves the manifold by O(|dz|^2) at a correction; the
        # next step's position problem removes it: small, and no drift
        L2 = m.length_scale**2  # Phi is in m^2 (distance constraints)
        assert np.max(np.abs(m.phi(q))) < 1e-3 * L2 and np.max(np.abs(m.phi(q[len(q) // 2 :]))) < 1e-5 * L2
    else:
        assert np.max(np.abs(m.phi(q))) < 1e-8
    assert all(np.all(np.isfinite(r.estimate.cov)) for r in stage.records)


def test_errorekf_correction_option_is_validated():
    from mbde_core.errors import ConfigError
    from mbde_core.estimators.configure import validate

    assert validate("errorekf", {"correction": "linear"}, "est.yaml", "errorekf")["correction"] == "linear"
    with pytest.raises(ConfigError) as e:
        validate("errorekf", {"correction": "projected"}, "est.yaml", "errorekf")
    assert "errorekf.correction" in str(e.value) and "exact, linear" in str(e.value)
