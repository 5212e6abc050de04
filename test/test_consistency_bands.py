"""Consistency bands of correlated NEES/NIS series (effective sample size), the 95 %
coverage, and the line on the channels the default noise rule widened."""
import os

import numpy as np
import pytest
from scipy.signal import lfilter

from conftest import REPO
from mbde_core.estimators.assess.autocorrelation import SeriesMean, chi2_mean_band, integrated_time
from mbde_core.estimators.assess.metrics import RunMetrics, chi2_band


def _chi2_series(rng, n, corr, d=2, burn=2000):
    """A chi2(d) series whose underlying Gaussians are AR(1) with coefficient corr (unit
    variance): the NEES of a consistent filter whose errors persist over 1 / (1 - corr) steps.
    Its integrated autocorrelation time is (1 + corr^2) / (1 - corr^2) (lag-l correlation corr^(2l))."""
    e = rng.standard_normal((n + burn, d))
    w = lfilter([np.sqrt(1 - corr**2)], [1, -corr], e, axis=0)[burn:]
    return np.sum(w * w, axis=1)


def test_integrated_time_of_a_known_series():
    rng = np.random.default_rng(11)
    for corr in (0.0, 0.9, 0.97):
        true = (1 + corr**2) / (1 - corr**2)
        est = np.median([integrated_time(_chi2_series(rng, 20_000, corr)) for _ in range(5)])
        assert est == pytest.approx(true, rel=0.2), corr


def test_streamed_blocks_give_the_whole_series_figures():
    rng = np.random.default_rng(5)
    x = _chi2_series(rng, 9000, 0.95)
    whole = SeriesMean(cap=64)
    whole.add(x)
    chunked = SeriesMean(cap=64)
    for part in np.array_split(x, 37):
        chunked.add(part)
    a, b = whole.result(), chunked.result()
    assert a["n"] == b["n"] == 9000
    assert b["mean"] == pytest.approx(np.mean(x), abs=1e-9)
    assert b["tau"] == pytest.approx(a["tau"], rel=1e-9)
    # 64-128 block means of 64-128 steps still see the correlation time (~20 steps)
    assert b["tau"] == pytest.approx((1 + 0.95**2) / (1 - 0.95**2), rel=0.35)


@pytest.mark.parametrize("corr", [0.0, 0.9, 0.98])
def test_a_consistent_series_is_flagged_in_about_5_percent_of_runs(corr):
    """200 seeded runs of 2000 steps (a 10 s run at 5 ms): the band of the effective sample
    size flags about 5 % of them; the band of independent steps flags most correlated runs."""
    rng = np.random.default_rng(int(corr * 100) + 1)
    flagged, flagged_independent = 0, 0
    for _ in range(200):
        v = _chi2_series(rng, 2000, corr)
        s = SeriesMean()
        s.add(v)
        r = s.result()
        lo, hi = chi2_mean_band(2, r["n_eff"])
        flagged += not lo <= r["mean"] <= hi
        lo, hi = chi2_band(2, len(v))
        flagged_independent += not lo <= r["mean"] <= hi
    assert 0.01 <= flagged / 200 <= 0.12
    if corr >= 0.9:
        assert flagged_independent / 200 >= 0.4


def test_an_overconfident_series_is_flagged():
    rng = np.random.default_rng(2)
    s = SeriesMean()
    s.add(2.0 * _chi2_series(rng, 2000, 0.95))  # errors sqrt(2) x larger than the covariance says
    r = s.result()
    lo, hi = chi2_mean_band(2, r["n_eff"])
    assert r["mean"] > hi


def test_coverage_of_errors_drawn_from_the_covariance():
    """Errors drawn from N(0, P): 95 % of steps inside the 95 % region, jointly and per coordinate."""
    rng = np.random.default_rng(8)
    K, g = 4000, 1
    P = np.array([[0.01**2, 0.3 * 0.01 * 0.1], [0.3 * 0.01 * 0.1, 0.1**2]])  # rad^2, rad^2/s ...
    e = rng.multivariate_normal(np.zeros(2), P, size=K)
    arrays = {"stamps": np.arange(K) * 0.005, "z": e[:, :1], "zd": e[:, 1:], "zdd": np.zeros((K, g)),
              "covs": [P] * K, "updates": [None] * K, "costs": np.zeros(K)}
    acc = RunMetrics(np.array([True]), 20.0)
    zeros = np.zeros((K, g))
    acc.add(arrays, zeros, zeros, zeros)
    m = acc.result()["nees"]
    assert m["coverage_95"] == pytest.approx(0.95, abs=0.015)
    assert m["coverage_95_z"][0] == pytest.approx(0.95, abs=0.015)
    assert m["mean"] == pytest.approx(2.0, abs=0.15)
    assert m["in_band"] and m["effective_samples"] == pytest.approx(K, rel=0.2)


def test_the_noise_rule_says_which_channels_it_widened():
    from mbde_core.estimators.configure import resolve, validate
    from mbde_core.estimators.options.frozen import thaw
    from mbde_core.estimators.options.widening import widening, widening_line
    from mbde_core.estimators.registry import estimator_class
    from mbde_core.scenario import load_scenario

    sc = load_scenario(os.path.join(REPO, "config", "scenarios", "fourbar_imu.yaml"))
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    got = {}
    for name in ("ukf", "dekf"):
        spec = validate(name, None)
        opts = resolve(spec, mech, sensors)
        got[name] = widening(estimator_class(name), thaw(spec.values), opts.as_dict()["sensor_sigma"], sensors)
        w = got[name]["accel_rocker"]
        assert w["channels"] == ["accel_x", "accel_y"]
        assert w["from"] == pytest.approx([0.05, 0.05], rel=1e-6)  # m/s^2, the sensor's noise
        assert min(w["to"]) > 1.0  # m/s^2: widened for the model error (eps x gravity...)
        assert "gyro_coupler" not in got[name]  # a gyroscope keeps its noise
    spec = validate("pf", None)  # the particle filter widens its own (particle.scales)
    got["pf"] = widening(estimator_class("pf"), thaw(spec.values), {}, sensors, mech)
    assert got["pf"]["accel_rocker"]["from"] == pytest.approx([0.05, 0.05], rel=1e-6)
    assert min(got["pf"]["accel_rocker"]["to"]) > 1.0 and "gyro_coupler" not in got["pf"]
    listed = validate("pf", {"sensor_sigma": {"accel_rocker": 0.05}})
    assert widening(estimator_class("pf"), thaw(listed.values), {}, sensors, mech) == {}
    line = widening_line(got)
    assert line.count("accel_rocker") == 1 and "(ukf, dekf, pf)" in line and "m/s^2" in line  # the same widening
    assert "\n" not in line and "rule.model_error" in line
    listed = validate("ukf", {"sensor_sigma": {"accel_rocker": 0.05}})
    opts = resolve(listed, mech, sensors)
    assert widening(estimator_class("ukf"), thaw(listed.values), opts.as_dict()["sensor_sigma"], sensors) == {}
    assert widening_line({"ukf": {}}) is None
