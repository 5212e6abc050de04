"""Identification of paper 001's parameters: dry and viscous friction, the stand's tilt and
a motor gain from the recorded control signal -- in memory on the synthetic motor cases
and end to end from a bag made by ``mbde simulate`` (the gain recovered within its
interval); the robust covariance against Monte Carlo; the key paths' documents."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

from conftest import run_mbde


def _identify(case, seed, psd=0.0, tau=0.0):
    from mbde_core.estimators.base import InitialState
    from mbde_core.identification import synthetic as S
    from mbde_core.identification.identify import Recording, identify
    from mbde_core.identification.model import ParameterizedMechanism

    rng = np.random.default_rng(seed)
    mech, sensors, start_doc, truth, names = S.setup(case, rng)
    recs = S.simulate(mech, sensors, S.release_states(case, mech, rng), 4.0, seed=seed, acceleration_psd=psd,
                      correlation_time=tau)
    mech0, sensors0 = S.case_mechanism(case, start_doc)
    g = mech.dof
    data = [Recording(f"r{k}", r.measurements, InitialState(r.z[0], r.zd[0], np.full(g, 0.05), np.full(g, 0.5), r.q[0]),
                      sensors0) for k, r in enumerate(recs)]
    return identify(ParameterizedMechanism(mech0, S.CASES[case]["params"]), data), truth, names


@pytest.mark.parametrize("case", ["motor_pendulum", "motor_slider_crank"])
def test_motor_cases_recover_friction_tilt_and_gain(case):
    """Every parameter from 20 % off (the tilt from 0) to within 3 std of the truth, the
    gain to better than 1 %."""
    res, truth, names = _identify(case, 21)
    assert res.identifiable.all()
    z = (res.p - truth) / res.std
    assert np.all(np.abs(z) < 3), dict(zip(names, z))
    k = names.index("sensors.motor_u.gain")
    assert abs(res.p[k] / truth[k] - 1) < 0.01 and res.std[k] / truth[k] < 0.01


def test_coloured_disturbance_widens_the_intervals():
    """An unmodelled slowly varying force leaves correlated residuals: the robust
    (batch-means) standard deviations exceed the model's, never the other way round."""
    res, truth, names = _identify("motor_pendulum", 4, psd=0.025, tau=0.2)
    assert np.all(res.std >= res.std_model * (1 - 1e-12))
    assert np.any(res.std > 1.2 * res.std_model)


def test_batch_means_covariance_against_monte_carlo():
    """A plain regression y = X b + e with AR(1) errors (rho 0.9): the batch-means
    sandwich of mbde_core.identification.robust without its Student-t widening, averaged
    over 300 replications, matches the Monte Carlo variance of the estimate within 25 %,
    where the model covariance (X^T X)^-1 is ~10 times too small."""
    import scipy.stats
    from types import SimpleNamespace

    from mbde_core.identification.robust import hac_covariance, small_sample
    from mbde_core.trajectory.normal import RowBlock

    rng = np.random.default_rng(0)
    N, rho = 2000, 0.9
    t = np.arange(N) / N
    X = np.stack([np.ones(N), np.sin(6 * t), t], axis=1)
    est, hac, model = [], [], []
    for _ in range(300):
        w = rng.standard_normal(N) * np.sqrt(1 - rho**2)
        e = np.empty(N)
        e[0] = rng.standard_normal()
        for i in range(1, N):
            e[i] = rho * e[i - 1] + w[i]
        b = np.linalg.lstsq(X, e, rcond=None)[0]
        r = e - X @ b
        B = np.linalg.inv(X.T @ X)
        proj = SimpleNamespace(T_blocks=[X[:, None, :]])
        rows = [RowBlock("obs:y", np.arange(N), r[:, None], np.zeros((N, 1, 1)))]
        H, _ = hac_covariance(proj, rows, np.array([0, N]), B)
        est.append(b)
        hac.append(np.diag(H))
        model.append(np.diag(B))
    mc = np.var(np.array(est), axis=0)
    edges = np.linspace(0, N, 11).astype(int)
    _, nu = small_sample(np.linalg.inv(X.T @ X), np.array([X[a:b].T @ X[a:b] for a, b in zip(edges[:-1], edges[1:])]))
    widen = (scipy.stats.t.ppf(0.975, nu) / 1.959963984540054) ** 2
    ratio = np.mean(hac, axis=0) / widen / mc
    assert np.all((ratio > 0.75) & (ratio < 1.4)), ratio
    assert np.all(np.mean(model, axis=0) < 0.2 * mc)


MECH = {
    "name": "motor_pendulum",
    "points": [{"name": "O", "x": 0, "y": 0, "fixed": True}, {"name": "P", "x": 0, "y": -0.2}],
    "planar_bodies": [{"name": "arm", "points": ["O", "P"], "length": 0.2, "mass": 0.1, "I0": 0.0039, "cog": [0.1, 0]}],
    "relative_coordinates": [{"name": "theta", "type": "RelativeAngleAbsoluteDOF", "points": ["O", "P"]}],
    "independent_coordinates": ["theta"],
    "gravity": [0, -9.82],
    "loads": [{"name": "hinge", "type": "joint_damping", "body": "arm", "c": 2e-4},
              {"name": "hinge_dry", "type": "joint_friction", "body": "arm", "c": 2e-3}],
    "sensors": [{"name": "encoder", "type": "encoder", "body": "arm", "rate": 1000, "counts_per_revolution": 4096,
                 "noise": {"sigma": 0}},
                {"name": "motor_u", "type": "effort", "coordinate": "theta", "gain": 0.05, "rate": 1000,
                 "hold": "linear", "noise": {"sigma": 0}}],
}


def test_motor_gain_identified_from_a_simulated_bag(tmp_path):
    """mbde simulate writes the control signal (an effort sensor of gain 0.05 N m/V: its
    readings are the pulses in volts) with the pendulum's encoder; mbde identify, started
    with a gain of 0.06 and no motor load (the known input stands for it), recovers
    0.05 within its interval and writes it into calibrated.yaml."""
    from mbde_core.identification.synthetic_motors import SIGNAL, pulses

    truth = dict(MECH, loads=MECH["loads"])
    scenario = {"name": "motor_pendulum", "mechanism": truth, "sensors": MECH["sensors"],
                "unmodelled_loads": [{"name": "motor", "type": "motor", "coordinate": "theta",
                                      "value": pulses(0.05, SIGNAL)}],
                "initial_state": {"release_from": {"theta": "-pi/2 + 1.0"}},
                "duration": 4.0, "step": 0.001, "seed": 9}
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(scenario))
    proc = run_mbde("simulate", tmp_path / "sc.yaml", "--out", tmp_path / "bag")
    assert proc.returncode == 0, proc.stderr
    start = json.loads(json.dumps(MECH))
    start["sensors"][1]["gain"] = 0.06
    (tmp_path / "start.yaml").write_text(yaml.safe_dump(start))
    proc = run_mbde("identify", tmp_path / "bag", "--mechanism", tmp_path / "start.yaml",
                    "--params", "sensors.motor_u.gain,joints.O.friction", "--out", tmp_path / "id", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "id" / "identification.json").read_text())
    k = doc["parameters"]["sensors.motor_u.gain"]
    assert abs(k["estimate"] - 0.05) < 3 * k["std"] and k["std"] < 0.001
    assert abs(doc["parameters"]["joints.O.friction"]["estimate"] - 2e-3) < 3 * doc["parameters"]["joints.O.friction"]["std"]
    cal = yaml.safe_load((tmp_path / "id" / "calibrated.yaml").read_text())
    assert abs(cal["sensors"][1]["gain"] - 0.05) < 0.001
    assert os.path.isfile(tmp_path / "id" / "calibrated.yaml")


def test_new_key_paths_write_the_document():
    from mbde_core.config.yamlnode import Node
    from mbde_core.identification.keypath import apply_values
    from mbde_core.identification.model import ParameterizedMechanism
    from mbde_core.model.loader import spec_from_node
    from mbde_core.model.mechanism import Mechanism

    doc = json.loads(json.dumps(MECH))
    doc["loads"] = doc["loads"][:1]  # no dry friction yet: identifying it adds the load
    mech = Mechanism(spec_from_node(Node(doc, "m.yaml", "")))
    pm = ParameterizedMechanism(mech, "gravity.tilt,joints.O.friction,sensors.motor_u.gain")
    assert pm.kinds == ["dynamic", "dynamic", "input"] and pm.p0.tolist() == [0.0, 0.0, 0.05]
    out = apply_values(pm.doc, pm.params, [0.1, 3e-3, 0.07], pm.base_gravity)
    assert out["gravity"] == pytest.approx([9.82 * np.sin(0.1), -9.82 * np.cos(0.1)])
    assert out["loads"][-1] == {"type": "joint_friction", "name": "joint_O_friction", "body": "arm", "c": 3e-3}
    assert out["sensors"][1]["gain"] == 0.07
    spec = pm.spec([0.1, 3e-3, 0.07])
    assert [ld.kind for ld in spec.loads] == ["joint_damping", "joint_friction"]
