"""Several readings of one sensor in one filter slot combined into one
(mbde_core/estimators/stage/multirate.py), their noise scaled in the observers
(kalman/algebra.reading_noise), and the rule's multi-rate step (options/rule.auto_step)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators.kalman.algebra import reading_noise
from mbde_core.estimators.options.mechanism_scales import mechanism_scales
from mbde_core.estimators.options.rule import auto_step
from mbde_core.estimators.stage.multirate import combine, fit_intercept
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement


@pytest.fixture(scope="module")
def pendulum():
    return load_mechanism(mech_path("pendulum"))


def _sensors(pendulum, rate=1000):
    return load_sensors(parse_yaml(f"- {{name: e, type: encoder, body: rod, rate: {rate}, noise: {{sigma: 0.001}}}}\n"
                                   f"- {{name: w, type: gyroscope, body: rod, rate: {rate}, noise: {{sigma: 0.01}}}}"),
                        pendulum)


def test_symmetric_slot_is_the_mean_with_the_variance_over_n(pendulum):
    enc = _sensors(pendulum)["e"]
    ms = [Measurement(1.0 + d, "e", np.array([0.3 + 2.0 * d + v])) for d, v in
          zip((-0.002, -0.001, 0.0, 0.001, 0.002), (1e-3, -2e-3, 0.0, 4e-3, 2e-3))]
    m = fit_intercept(ms, enc, 1.0)
    assert m.stamp == 1.0 and m.sensor == "e"
    assert m.value[0] == pytest.approx(0.3 + 1e-3, abs=1e-12)  # the slope cancels, the noise averages
    assert m.variance_factor == pytest.approx(1 / 5, rel=1e-12)


def test_one_sided_slot_is_the_least_squares_intercept(pendulum):
    """Readings at 0, 1, 2 ms of a linear signal: the intercept exactly, with the
    intercept's variance 1/n + dbar^2 / S_dd (= 5/6 here)."""
    enc = _sensors(pendulum)["e"]
    ms = [Measurement(2.0 + d, "e", np.array([0.5 - 3.0 * d])) for d in (0.0, 0.001, 0.002)]
    m = fit_intercept(ms, enc, 2.0)
    assert m.value[0] == pytest.approx(0.5, abs=1e-12)
    assert m.variance_factor == pytest.approx(1 / 3 + 0.001**2 / 2e-6, rel=1e-9)


def test_angles_are_combined_across_the_wrap(pendulum):
    enc = _sensors(pendulum)["e"]
    ms = [Measurement(d, "e", np.array([math.remainder(math.pi - 0.01 + 10.0 * d, 2 * math.pi)]))
          for d in (-0.001, 0.0, 0.001)]  # pi - 0.02, pi - 0.01, -pi (wrapped)
    m = fit_intercept(ms, enc, 0.0)
    assert math.remainder(m.value[0] - (math.pi - 0.01), 2 * math.pi) == pytest.approx(0.0, abs=1e-12)


def test_combine_keeps_single_readings_and_counts_the_rest(pendulum):
    s = _sensors(pendulum)
    single = [Measurement(0.0, "e", np.array([0.1])), Measurement(0.0, "w", np.array([1.0]))]
    out, counts = combine(single, s, 0.0)
    assert out is single and counts == {}
    many = single + [Measurement(0.001, "e", np.array([0.2]))]
    out, counts = combine(many, s, 0.0)
    assert [m.sensor for m in out] == ["e", "w"] and counts == {"e": 2}
    assert out[1] is single[1]


def test_reading_noise_scales_each_readings_block():
    R = np.diag([1.0, 4.0, 4.0, 4.0])
    R.setflags(write=False)
    ms = [Measurement(0.0, "e", np.zeros(1)), Measurement(0.0, "a", np.zeros(3))]
    assert reading_noise(R, ms, [1, 3]) is R
    ms[1].variance_factor = 0.25
    out = reading_noise(R, ms, [1, 3])
    assert np.allclose(np.diag(out), [1.0, 1.0, 1.0, 1.0]) and np.count_nonzero(out - np.diag(np.diag(out))) == 0


def test_multirate_step_is_an_odd_multiple_of_the_period(pendulum):
    sc = mechanism_scales(pendulum)
    h_max = min(0.005, 0.05 / float(sc.w[0]))
    s = _sensors(pendulum)
    assert auto_step(sc, s) == pytest.approx(0.001)  # an estimator that does not combine: the period
    step = auto_step(sc, s, combines=True)
    n = round(step / 0.001)
    assert step <= h_max + 1e-12 and n % 2 == 1 and n >= 3 and step == pytest.approx(n * 0.001)
    assert n + 2 > h_max / 0.001  # the largest such
    slow = _sensors(pendulum, rate=1 / 0.003)  # fits only once: the rule as without combining
    assert auto_step(sc, slow, combines=True) == pytest.approx(auto_step(sc, slow))


def test_pendulum_release_on_the_multirate_step(tmp_path):
    """Paper 001's released pendulum, its encoder at 1 kHz: the UKF and errorEKF with their
    defaults step at 5 ms and fuse the five readings of a slot as one (every reading
    counted as fused); the estimate stays on the truth (RMSE of the angle below 3 encoder
    counts) and consistent (mean NEES/2 within [0.2, 3])."""
    from mbde_core.config.paths import config_path
    from mbde_core.estimators.configure import defaults
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import evaluate, resolved_options, run_estimator
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_scenario(config_path("scenarios", "pendulum_release.yaml")).with_overrides(duration=1.5)
    write_simulation_bag(sc, str(tmp_path / "bag"))
    inp = load_inputs(str(tmp_path / "bag"))
    n = sum(1 for m in inp.measurements if m.sensor in inp.sensors)
    for name in ("ukf", "errorekf"):
        assert float(resolved_options(inp, defaults(name), name).step) == pytest.approx(0.005)
        run = run_estimator(inp, name, defaults(name), 1, particle_budget=0)
        out = evaluate(inp, run)
        assert run.counters["fused"] == n and run.counters["estimator_errors"] == 0
        assert out["rmse"]["z"][0] < 3 * 2 * math.pi / 4096
        assert 0.2 < out["nees"]["mean"] / 2 < 3.0, out["nees"]


def test_one_reading_per_step_gives_the_same_results(tmp_path):
    """fourbar_gyro (200 Hz gyroscope, 5 ms step: one reading per step): the observers'
    estimates and covariances are bit-identical with and without combining readings."""
    from mbde_core.config.paths import config_path
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.configure import defaults
    from mbde_core.estimators.stage.core import STAGE_DEFAULTS, EstimatorStage
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import initial_state, resolved_options
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_scenario(config_path("scenarios", "fourbar_gyro.yaml")).with_overrides(duration=0.5)
    write_simulation_bag(sc, str(tmp_path / "bag"))
    inp = load_inputs(str(tmp_path / "bag"))
    for name in ("dekf", "errorekf"):
        options = resolved_options(inp, defaults(name), name)
        runs = []
        for combines in (True, False):
            est = make_estimator(name, inp.mechanism, inp.sensors, options)
            est.combines_readings = combines
            init = initial_state(inp, options)
            stage = EstimatorStage.for_estimator(est, lambda t: init, keep=True, **dict(STAGE_DEFAULTS))
            stage.feed([m for m in inp.measurements if m.sensor in inp.sensors])
            stage.flush()
            runs.append(stage.records)
        assert len(runs[0]) == len(runs[1]) > 90
        for a, b in zip(*runs):
            assert np.array_equal(a.estimate.z, b.estimate.z) and np.array_equal(a.estimate.cov, b.estimate.cov)
