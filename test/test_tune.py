"""mbde tune (mbde_core/tuning/): recovery of a known plant-noise density from readings alone.

The truth: the shipped pendulum (rod 0.5 m, 0.5 kg, I = m L^2 / 3 about its hinge),
shaken by an unmodelled random torque on its hinge: a table of i.i.d. N(0, s^2) values
every D = 2 ms, linearly interpolated by the simulator (a time-function load). Its
spectral density at low frequency is s^2 D (the interpolation kernel, a triangle of unit
height and half-width D, has area D), so the hinge acceleration has the density
q = s^2 D / I^2 (the Van Loan convention of the filters: E[w(t) w(s)] = q delta(t - s)).
The interpolation's sinc^4 roll-off is below 1 % at the filter's bandwidth (~15 Hz with
a 0.01 rad encoder at 200 Hz). The estimator's model is exact otherwise, with the
errorEKF's rk4 simulation (negligible discretisation error), so the innovation
likelihood must peak at q: recovered within a factor of 1.5 from 8 s of readings.
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from conftest import REPO, mech_path, run_mbde

Q_TRUE = 40.0      # rad^2/s^3
D = 0.002          # s, table spacing
INERTIA = 0.5 * 0.5**2 / 3
DURATION = 8.0


@pytest.fixture(scope="module")
def shaken_bag(tmp_path_factory):
    from mbde_core.scenario.scenario import Scenario
    from mbde_core.simulator.bag import write_simulation_bag

    rng = np.random.default_rng(13)
    s = np.sqrt(Q_TRUE * INERTIA**2 / D)
    times = np.arange(0.0, DURATION + 2 * D, D)
    table = [[float(t), float(v)] for t, v in zip(times, s * rng.standard_normal(len(times)))]
    doc = {
        "name": "pendulum_shaken",
        "mechanism": mech_path("pendulum"),
        "sensors": [{"name": "enc", "type": "encoder", "body": "rod", "period": 0.005, "noise": {"sigma": 0.01}}],
        "unmodelled_loads": [{"name": "shaker", "type": "generalized_force", "coordinate": "theta",
                              "value": {"table": table}}],
        "initial_state": {"release_from": {"theta": -1.2}},
        "duration": DURATION, "step": 0.001, "ground_truth_rate": 200, "seed": 5,
    }
    sc = Scenario(doc, file="<test_tune>", base_dir=f"{REPO}/config/scenarios")
    path = tmp_path_factory.mktemp("tune") / "shaken"
    write_simulation_bag(sc, path)
    return path


def test_tune_recovers_a_known_plant_noise_density(shaken_bag, tmp_path):
    out = tmp_path / "tuned.yaml"
    res = run_mbde("tune", shaken_bag, "--estimators", "errorekf", "--out", out, "--window", DURATION,
                   "--holdout", 0, "--jobs", "1")
    assert res.returncode == 0, res.stderr
    assert "fit NIS/dof" in res.stdout and "fit loglik/reading" in res.stdout
    tuned = yaml.safe_load(out.read_text())
    q = float(np.max(np.atleast_1d(tuned["errorekf"]["plant_noise"]["acceleration_psd"])))
    print(f"recovered q = {q:.4g} rad^2/s^3 (true {Q_TRUE:g})")
    assert Q_TRUE / 1.5 <= q <= Q_TRUE * 1.5, q
    # the file is a config replay takes; the tuned filter is consistent on this bag
    rep = run_mbde("replay", shaken_bag, "--estimators", "errorekf", "--config", out, "--out", tmp_path / "r",
                   "--jobs", "1", "--no-plots")
    assert rep.returncode == 0, rep.stderr
    import json

    m = json.loads((tmp_path / "r" / "metrics.json").read_text())["estimators"]["errorekf"]["metrics"]
    print(f"tuned errorekf: mean NEES {m['nees']['mean']:.3g}")
    assert 0.5 * 2 <= m["nees"]["mean"] <= 2 * 2, m["nees"]


def test_likelihood_is_the_prediction_error_sum(shaken_bag):
    """Independent check of the sum: the same run's innovations recomputed from its records."""
    from mbde_core.estimators.configure import defaults
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.estimators.configure import validate
    from mbde_core.replay.runner import resolved_options, run_estimator
    from mbde_core.tuning.likelihood import LOG_2PI, innovation_fit, tuning_config

    src = load_inputs(str(shaken_bag))
    readings = [m for m in src.measurements if m.stamp <= src.start + 1.0]
    cfg = resolved_options(src, validate("ukf", defaults("ukf")))
    fit = innovation_fit(src, readings, "ukf", cfg)
    src1 = type(src)(**{**src.__dict__, "measurements": readings})
    run = run_estimator(src1, "ukf", tuning_config(cfg), seed=0)
    ups = [r.update for r in run.records if r.update is not None and r.update.nis is not None]
    ll = sum(-0.5 * (float(u.innovation @ np.linalg.solve(np.atleast_2d(np.exp(u.logdet)), u.innovation))
                     + u.logdet + u.dof * LOG_2PI) for u in ups)
    assert fit.updates == len(ups) and fit.loglik == pytest.approx(ll, rel=1e-9)


def test_tune_refuses_bad_requests(shaken_bag, tmp_path):
    res = run_mbde("tune", shaken_bag, "--estimators", "adekf", "--jobs", "1")
    assert res.returncode == 2 and "adekf needs a sensor that reads accelerations" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = run_mbde("tune", shaken_bag, "--estimators", "nope")
    assert res.returncode == 2 and "cannot tune nope" in res.stderr
