"""Generalized-force inputs of the trajectory problems: the model's input terms against
the forward dynamics with the force as a load and against finite differences; the
smoother with an unknown motor torque (input states) and with a measured one, against
the simulator's true torque; its goodness-of-fit verdict."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from mbde_core.engine import dynamics, kinematics
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism
from mbde_core.trajectory.model import MultibodyModel
from linkages import USER_SLIDER_CRANK

CRANK = USER_SLIDER_CRANK + """loads:
  - {type: joint_friction, body: crank, c: 0.01, velocity_scale: 0.2}
"""


def _states(m, N=6, seed=1):
    rng = np.random.default_rng(seed)
    z = rng.uniform(-3, 3, (N, 1))
    q = np.array([kinematics.solve_position(m, zi, m.q0)[0] for zi in z])
    zd = rng.uniform(-20, 20, (N, 1))
    zdd = rng.uniform(-100, 100, (N, 1))
    return np.hstack([z, zd, zdd]), q


@pytest.mark.parametrize("col", ["theta", "P2.x"])
def test_input_terms_against_a_load_and_finite_differences(col):
    """f with an input u on a coordinate equals the forward dynamics of the mechanism
    with a generalized_force load of value u there (another code path: the generated
    kernels' forces); d(f + G u)/dz equals central differences."""
    m = Mechanism(mechanism_spec_from_text(CRANK))
    model = MultibodyModel(m, [])
    X, q = _states(m)
    c = m.coordinate_index(col)
    E = np.zeros((m.n, 1))
    E[c, 0] = 1.0
    U = np.linspace(-1.5, 2.0, X.shape[0])[:, None]
    t = np.zeros(X.shape[0])
    ev = model.evaluate(t, X, q, E, U)
    for i in range(X.shape[0]):
        text = CRANK + f"  - {{type: generalized_force, coordinate: {col}, value: {float(U[i, 0])!r}}}\n"
        ml = Mechanism(mechanism_spec_from_text(text))
        qi = ev.q[i]
        qdi = kinematics.velocity(ml, qi, X[i, 1:2])
        zdd = dynamics.evaluate(ml, 0.0, qi[None], qdi[None]).zdd[0]
        assert ev.f[i, 0] == pytest.approx(zdd[0], rel=1e-10, abs=1e-9)
    h = 1e-6
    for k in range(2):  # d/dz, d/dzd
        Xp, Xm = X.copy(), X.copy()
        Xp[:, k] += h
        Xm[:, k] -= h
        fd = (model.evaluate(t, Xp, ev.q, E, U).f - model.evaluate(t, Xm, ev.q, E, U).f) / (2 * h)
        np.testing.assert_allclose(ev.F[:, :, k], fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))
    # G = dzdd/du: the difference of two inputs
    ev2 = model.evaluate(t, X, ev.q, E, U + 1.0)
    np.testing.assert_allclose(ev.G[:, :, 0], ev2.f - ev.f, rtol=1e-10, atol=1e-9)


SCENARIO = {
    "name": "speed_step",
    "sensors": [{"name": "gyro_rod", "type": "gyroscope", "body": "rod", "rate": 200, "noise": {"sigma": 0.01}}],
    "speed_controller": {"name": "motor", "coordinate": "theta", "target": {"steps": [[0, 15], [1.5, 25]]},
                         "kp": 0.5, "ki": 10, "torque_limit": 2},
    "initial_state": {"position": {"theta": "pi/2"}},
    "duration": 3.0, "step": 0.001, "seed": 5,
}


def _smooth(sensors_extra=(), cfg=None, duration=3.0, step_at=1.5, seed=5):
    from mbde_core.estimators.assess.metrics import truth_at
    from mbde_core.estimators.base import InitialState, initial_sigmas
    from mbde_core.estimators.options.rule import scenario_context
    from mbde_core.scenario.scenario import Scenario
    from mbde_core.simulator import run
    from mbde_core.trajectory.config import smoother_defaults
    from mbde_core.trajectory.smoother import BatchSmoother
    from mbde_core.types import Measurement

    doc = copy.deepcopy(SCENARIO)
    doc["mechanism"] = yaml.safe_load(CRANK.replace("loads:\n  - {type: joint_friction, body: crank, c: 0.01, velocity_scale: 0.2}\n", ""))
    doc["sensors"] += list(sensors_extra)
    doc["duration"] = duration
    doc["seed"] = seed
    doc["speed_controller"]["target"] = {"steps": [[0, 15], [step_at, 25]]}
    sc = Scenario(doc, file="speed_step.yaml")
    res = run(sc)
    meas = [Measurement(float(t), n, v) for n, (ts, vs) in res.measurements.items() for t, v in zip(ts, vs)]
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    sm = BatchSmoother(mech, sensors, dict(smoother_defaults(), **(cfg or {})), None, scenario_context(sc))
    ini = sc.estimator_initial_state()
    sz, szd = initial_sigmas(sm.config["initial_sigma"], 1)
    tr = sm.smooth(meas, InitialState(ini.z, ini.zd, sz, szd, ini.q, ini.branch))
    ez = (tr.z - truth_at(tr.t, res.t, res.z, np.array([True])) + np.pi) % (2 * np.pi) - np.pi
    e = np.hstack([ez, tr.zd - truth_at(tr.t, res.t, res.zd)])
    nees = float(np.mean(np.einsum("ki,kij,kj->k", e, np.linalg.inv(tr.cov), e)))
    torque = truth_at(tr.t, res.t, res.effort)[:, mech.coordinate_index("theta")]
    return tr, float(np.sqrt(np.mean(ez**2))), nees, torque


def test_smoother_follows_an_unknown_motor():
    """A speed controller the model does not know (15 -> 25 rad/s at 5 s, 2 N m limit,
    10 s, issue 42's bag): with its input state (inputs: auto, from the scenario's torque
    limit) the smoother keeps the crank angle to milliradians, with consistent
    covariances, and estimates the torque."""
    tr, rmse, nees, torque = _smooth(duration=10.0, step_at=5.0, seed=42)
    assert tr.input_names == ["theta"] and tr.u.shape == (len(tr), 1)
    assert tr.info["status"] == "converged", tr.info["warnings"]
    assert rmse < 0.01 and 0.5 < nees / 2 < 2.5
    assert np.sqrt(np.mean((tr.u[:, 0] - torque) ** 2)) < 0.4  # N m, of a torque between +-2


def test_smoother_lost_on_a_mirror_motion_says_so():
    """With the torque unknown a gyroscope on the rod leaves a mirror motion that an
    unknown torque explains; when both forward filters lead there (this seed) the
    smoother's solution is 1.8 rad off, and it must say so: not 'converged', a warning
    that the torque it needs exceeds the motor's limit."""
    tr, rmse, nees, torque = _smooth(duration=10.0, step_at=5.0, seed=3)
    assert rmse > 0.5  # lost (if a future guess finds the motion, this test should assert that instead)
    assert tr.info["status"] != "converged" and any("exceed their limits" in w for w in tr.info["warnings"])


def test_smoother_uses_a_measured_torque():
    """The motor's torque measured (effort, 0.02 N m noise at 200 Hz), a 3 s run on which
    the forward filters (which do not take known inputs) lose the crank: the growing
    horizon driven by the measured torque finds it, and the input state follows the
    readings (the simulator's true torque) closely."""
    effort = {"name": "motor_torque", "type": "effort", "coordinate": "theta", "rate": 200, "noise": {"sigma": 0.02}}
    tr, rmse, nees, torque = _smooth([effort])
    assert rmse < 0.01 and tr.info["status"] == "converged", tr.info["warnings"]
    assert np.sqrt(np.mean((tr.u[:, 0] - torque) ** 2)) < 0.15 and 0.3 < nees / 2 < 2.5
    assert tr.info["fit"]["factors"]["input:motor_torque"][0] < 4


def test_verdict_is_not_converged_on_a_wrong_plant_noise():
    """Plant noise fixed far too small for the unknown motor and no input states: the
    normalised cost is far from 1, so the status is not 'converged' and a warning says why."""
    tr, *_ = _smooth(cfg={"noise": "fixed", "inputs": [], "plant_noise": {"acceleration_psd": 1e-6}})
    assert tr.info["status"] != "converged"
    assert any("normalised cost" in w or "fit with" in w for w in tr.info["warnings"])
