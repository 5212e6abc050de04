"""Kalman-family observers on the four-bar: accuracy bound, NEES consistency, model errors.

Setting (paper 003 sec. 4.3): FourBars1 released from theta = pi/3, a gyroscope on the
coupler sampled at every filter step (5 ms) with sigma = 1 deg/s; the truth is a
fine-step (1 ms) RK4 simulation; Monte-Carlo runs differ in the sensor noise and in the
initial guess drawn from the filter's initial covariance.

Derived RMSE bound. A consistent filter has E[e_z^2] = P_zz, so its crank RMSE over
M runs should be close to sqrt(mean P_zz) (reported by the filter itself); we require
RMSE <= 1.5 sqrt(mean P_zz), allowing for the Monte-Carlo spread, and in absolute terms
RMSE < 1 deg: the gyroscope-only observer must do better than a 1-degree encoder
(paper 003's encoder noise), which is what makes it worth running.
"""
import numpy as np
import pytest
import scipy.stats

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.assess.metrics import chi2_band, evaluate_run, truth_at
from mbde_core.estimators.noise import kinematic_plant_noise, van_loan
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

DT = 0.005
DURATION = 3.0
RUNS = 6
SIGMA0 = (0.02, 0.2)


@pytest.fixture(scope="module")
def setup():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml("- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 1*pi/180}}"), m)
    integ = get_integrator("rk4")
    s = MBState(m.q0, m.qd0)
    h = 1e-3
    times, qs, qds, qdds = [], [], [], []
    for k in range(int(round(DURATION / h)) + 1):
        if k % 5 == 0:
            times.append(k * h)
            qs.append(s.q)
            qds.append(s.qd)
        s = integ.step(m, k * h, s, h)
    from mbde_core.engine import dynamics

    qs, qds = np.array(qs), np.array(qds)
    zdd = dynamics.forward(m, 0.0, qs, qds)[0]
    truth = {"t": np.array(times), "q": qs, "qd": qds, "z": qs[:, m.independent], "zd": qds[:, m.independent], "zdd": zdd}
    return m, ss, truth


def measurements(ss, truth, seed):
    rng = np.random.default_rng(seed)
    sampler = ss["gyro"].noise.sampler(rng)
    return [Measurement(t, "gyro", sampler.apply(t, ss["gyro"].h(q, qd))) for t, q, qd in zip(truth["t"], truth["q"], truth["qd"])]


def run(m, ss, truth, name, seed, cfg_changes=None, model=None):
    cfg = defaults(name)
    for k, v in (cfg_changes or {}).items():
        cfg[k] = v
    model = model or m
    est = make_estimator(name, model, ss, cfg)
    rng = np.random.default_rng(1000 + seed)
    z0 = truth["z"][0] + rng.normal(0, SIGMA0[0], m.dof)
    zd0 = truth["zd"][0] + rng.normal(0, SIGMA0[1], m.dof)
    init = lambda t: InitialState(z0, zd0, np.array([SIGMA0[0]]), np.array([SIGMA0[1]]), m.q0)  # noqa: E731
    stage = EstimatorStage(est, DT, init)
    stage.feed(measurements(ss, truth, seed))
    stage.flush()
    return stage


@pytest.mark.parametrize("name", ["ukf", "errorekf", "dekf"])
def test_perfect_model_accuracy_and_nees(setup, name):
    m, ss, truth = setup
    err2, pzz, nees_all = [], [], []
    for seed in range(RUNS):
        stage = run(m, ss, truth, name, seed)
        recs = stage.records
        assert len(recs) == len(truth["t"])
        met = evaluate_run(recs, truth["z"], truth["zd"], truth["zdd"], np.array([True]))
        z = np.array([r.estimate.z for r in recs])
        err2.append((z - truth["z"]) ** 2)
        pzz.append([r.estimate.cov[0, 0] for r in recs])
        e = np.hstack([z - truth["z"], np.array([r.estimate.zd for r in recs]) - truth["zd"]])
        nees_all.append([ei @ np.linalg.solve(r.estimate.cov, ei) for ei, r in zip(e, recs)])
        assert met["nees"]["mean"] is not None
    rmse = float(np.sqrt(np.mean(err2)))
    sigma = float(np.sqrt(np.mean(pzz)))
    assert rmse <= 1.5 * sigma, (rmse, sigma)
    assert rmse < np.radians(1.0), rmse
    mean_nees = float(np.mean(nees_all))
    lo, hi = chi2_band(2, RUNS)
    assert lo <= mean_nees <= hi, (mean_nees, lo, hi)


def test_wrong_model_makes_nees_leave_the_band(setup):
    m, ss, truth = setup
    wrong = m.modified(gravity=(0.0, -9.81 - 4.0))
    nees_all = []
    for seed in range(3):
        stage = run(m, ss, truth, "dekf", seed, {"plant_noise": {"acceleration_psd": 0.01, "velocity_psd": 0.0}}, model=wrong)
        recs = stage.records
        z = np.array([r.estimate.z for r in recs])
        zd = np.array([r.estimate.zd for r in recs])
        e = np.hstack([z - truth["z"], zd - truth["zd"]])
        nees_all.append([ei @ np.linalg.solve(r.estimate.cov, ei) for ei, r in zip(e, recs)])
    lo, hi = chi2_band(2, 3)
    assert np.mean(nees_all) > hi


@pytest.mark.parametrize("name", ["cekf", "diekfpm"])
def test_other_observers_track(setup, name):
    m, ss, truth = setup
    stage = run(m, ss, truth, name, 0)
    z = np.array([r.estimate.z for r in stage.records])
    rmse = float(np.sqrt(np.mean((z - truth["z"]) ** 2)))
    assert rmse < np.radians(2.0), rmse
    q = np.array([r.estimate.q for r in stage.records])
    assert np.max(np.abs(m.phi(q))) < 1e-8  # estimates stay assembled


def test_van_loan_matches_closed_form():
    dt, qa = 0.01, 3.0
    Qd = kinematic_plant_noise(1, dt, qa)
    np.testing.assert_allclose(Qd, qa * np.array([[dt**3 / 3, dt**2 / 2], [dt**2 / 2, dt]]), rtol=1e-12)
    A = np.array([[0.0, 1.0], [-4.0, -0.3]])
    Phi, Qd2 = van_loan(A, np.diag([0.0, 2.0]), dt)
    import scipy.linalg

    np.testing.assert_allclose(Phi, scipy.linalg.expm(A * dt), rtol=1e-12)
    # Qd by quadrature of e^{As} Qc e^{A^T s}
    s = np.linspace(0, dt, 2001)
    vals = np.array([scipy.linalg.expm(A * x) @ np.diag([0.0, 2.0]) @ scipy.linalg.expm(A * x).T for x in s])
    np.testing.assert_allclose(Qd2, np.trapezoid(vals, s, axis=0), rtol=1e-6, atol=1e-14)


def test_chi2_band():
    lo, hi = chi2_band(2, 1)
    assert (lo, hi) == pytest.approx(tuple(scipy.stats.chi2.ppf([0.025, 0.975], 2)))
    lo, hi = chi2_band(2, 1000)
    assert lo < 2.0 < hi and hi - lo < 0.4


def test_truth_interpolation_wraps_angles():
    t = np.array([0.0, 1.0])
    v = np.array([[np.pi - 0.1], [-np.pi + 0.1]])
    out = truth_at(np.array([0.5]), t, v, np.array([True]))
    assert abs(abs(out[0, 0]) - np.pi) < 1e-12
