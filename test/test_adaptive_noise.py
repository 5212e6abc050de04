"""Adaptive plant noise (mbde_core/estimators/kalman/adaptive_noise.py, ``plant_noise.adaptive``):
the score and information against the innovation likelihood's finite differences, the
bounded rate and range of the scale, off by default, and on a simulated four-bar the
scale learnt below the rule's (an exact model: the rule's plant noise is absent from
the truth)."""
from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.kalman import adaptive_noise as an

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _loglik(y, R, A, m):
    S = R + m * A
    return -0.5 * (np.linalg.slogdet(S)[1] + y @ np.linalg.solve(S, y))


def test_score_and_information_match_the_likelihood():
    rng = np.random.default_rng(3)
    B = rng.normal(size=(3, 3))
    A = B @ B.T * 0.3
    R = np.diag([0.5, 1.0, 2.0])
    y = rng.normal(size=3)
    score, info = an.score_and_information(y, R + A, A)
    h = 1e-5
    assert score == pytest.approx((_loglik(y, R, A, 1 + h) - _loglik(y, R, A, 1 - h)) / (2 * h), rel=1e-6)
    # Fisher information: minus the expected second derivative, E[y y^T] = S
    W = np.linalg.solve(R + A, A)
    assert info == pytest.approx(0.5 * np.trace(W @ W), rel=1e-12)
    # one channel: the summary (NIS, log det) gives the same numbers
    s, a, r = 1.7, 1.2, 0.5
    exact = an.score_and_information(np.array([s ** 0.5 * 1.3]), np.array([[a + r]]), np.array([[a]]))
    summ = an.summary_score(1.69 * s / (a + r), 1, math.log(a + r), math.log(r))
    assert summ == pytest.approx(exact, rel=1e-12)


class _Base:
    def plant_noise(self, dt):
        return np.eye(2) * dt


class _Filter(an.AdaptivePlantNoise, _Base):
    def __init__(self, window=1.0):
        self.options = SimpleNamespace(plant_noise=SimpleNamespace(adaptive=True, adaptive_window=window))
        self.model = SimpleNamespace(noise_covariance=lambda names, sigma: np.eye(len(names)))
        self._sigma = None
        self.g = 1
        self.t = 0.0
        self._init_adaptive()


def _feed(f, nis_of_t, seconds, rate=200.0, share=0.5):
    """Scalar updates whose predicted state's share of S is ``share`` (R = 1)."""
    s = 1.0 / (1.0 - share)
    for _ in range(int(seconds * rate)):
        f.t += 1.0 / rate
        f.learned(UpdateResult(["enc"], [], nis_of_t(f.t), 1, np.zeros(1), np.zeros(1), math.log(s)))


def test_scale_rate_and_range_are_bounded():
    f = _Filter()
    _feed(f, lambda t: 1.0, 1.0)
    assert f.noise_scale == 1.0  # consistent innovations (and the first window): unchanged
    _feed(f, lambda t: 400.0, 1.0)  # a bias step: huge NIS for 1 s
    assert 1.0 < f.noise_scale <= math.exp(an.RATE_UP * 1.0) * 1.0001
    g = _Filter()
    _feed(g, lambda t: 1e-6, 60.0)  # innovations far smaller than predicted for a minute
    assert g.noise_scale == pytest.approx(an.LOW)
    assert np.allclose(g.plant_noise(0.1), an.LOW * 0.1 * np.eye(2))
    _feed(g, lambda t: 1e6, 60.0)
    assert g.noise_scale == pytest.approx(an.HIGH)


def test_rejected_readings_are_not_learnt_from():
    f = _Filter()
    _feed(f, lambda t: 1.0, 1.0)
    for _ in range(400):
        f.t += 0.005
        f.learned(UpdateResult(["enc"], ["gyro"], 1e4, 1, np.zeros(1), np.zeros(1), math.log(2.0)))
    assert f.noise_scale == 1.0


@pytest.fixture(scope="module")
def fourbar(tmp_path_factory):
    from mbde_bench.common import simulate_scenario_bag

    _, inputs = simulate_scenario_bag(os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml"), 3.0,
                                      str(tmp_path_factory.mktemp("adaptive")))
    return inputs


@pytest.mark.parametrize("name", ["ukf", "errorekf"])
def test_learnt_on_a_simulated_fourbar(fourbar, name):
    from mbde_core.estimators.configure import defaults
    from mbde_core.replay.runner import evaluate, run_estimator

    off = run_estimator(fourbar, name, defaults(name), particle_budget=0)
    assert "plant_noise_scale" not in off.diagnostics
    cfg = defaults(name)
    cfg["plant_noise"]["adaptive"] = True
    on = run_estimator(fourbar, name, cfg, particle_budget=0)
    scale = on.diagnostics["plant_noise_scale"]
    assert an.LOW <= scale < 0.5  # the exact model's innovations ask for less than the rule's noise (measured 0.08)
    m_off, m_on = evaluate(fourbar, off), evaluate(fourbar, on)
    assert m_on["nees"]["mean"] > m_off["nees"]["mean"]  # less cautious
    assert max(m_on["rmse"]["z"]) < 1.2 * max(m_off["rmse"]["z"])


def test_options_checked():
    from mbde_core.errors import ConfigError
    from mbde_core.estimators.configure import validate

    validate("ukf", {"plant_noise": {"adaptive": True, "adaptive_window": 0.5}})
    with pytest.raises(ConfigError, match=r"dekf\.plant_noise\.adaptive"):
        validate("dekf", {"plant_noise": {"adaptive": True}})
    with pytest.raises(ConfigError, match=r"ukf\.plant_noise\.adaptive_window"):
        validate("ukf", {"plant_noise": {"adaptive": True, "adaptive_window": 0}})


def test_trust_bench_runs_the_adaptive_variant(tmp_path):
    from mbde_bench.trust_runs import run_case

    path = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")
    rows = run_case(("fourbar_gyro", path, "exact", "nominal", 0, 1.5, ["ukf", "ukf+adaptive"], str(tmp_path)))
    assert [r["estimator"] for r in rows] == ["ukf", "ukf+adaptive"]
    assert all(r["status"] == "ok" and r["nees"] > 0 for r in rows), rows
