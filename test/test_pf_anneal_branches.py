"""The particle filter's annealing time (particle/scales.py ``anneal_time``): one coordinate
on several assembly branches read by position sensors only anneals as two coordinates do."""
import os

import numpy as np
import pytest

from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import configure
from mbde_core.estimators.particle import scales as pf_scale
from mbde_core.scenario import load_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_anneal_time_of_one_coordinate_on_two_branches_read_by_positions_only():
    T = pf_scale.ANNEAL_PER_PAIR
    assert pf_scale.anneal_time(1) == 0.0
    assert pf_scale.anneal_time(1, 2) == 0.0  # a gyroscope or accelerometer tells the branch
    assert pf_scale.anneal_time(1, 2, positions_only=True) == pytest.approx(T)
    assert pf_scale.anneal_time(1, 1, positions_only=True) == 0.0
    assert pf_scale.anneal_time(2, 2, positions_only=True) == pytest.approx(T)
    assert pf_scale.anneal_time(3) == pytest.approx(3 * T)


def test_the_filter_anneals_on_the_encoder_four_bar_only():
    got = {}
    for name in ("fourbar_encoder", "fourbar_gyro"):
        sc = load_scenario(os.path.join(ROOT, "config", "scenarios", f"{name}.yaml"))
        mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
        est = make_estimator("pf", mech, sensors, configure("pf", {}, mech, sensors), rng=np.random.default_rng(0))
        got[name] = est.anneal
    assert got == {"fourbar_encoder": pytest.approx(pf_scale.ANNEAL_PER_PAIR), "fourbar_gyro": 0.0}
