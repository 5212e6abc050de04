"""``mbde bench motors`` scores acquisition apart from tracking (:mod:`mbde_bench.motors_rows`):
a run that searches first (a particle filter's uniform start) and then tracks is scored
on its tracking, its acquisition time in a column of its own; a run not on track within
1 s, or never, is lost. Checked on synthetic estimates against a known truth (the
acquisition rule of :mod:`mbde_core.estimators.assess.acquisition`: 5 sigma of the
estimate's own covariance, 0.5 deg floor, 10 deg cap)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mbde_bench import motors_rows, motors_tables
from mbde_bench.motors_rows import Row


def _inputs(t):
    mech = SimpleNamespace(independent=np.array([0]), rel_columns=np.array([0]), length_scale=0.1)
    truth = SimpleNamespace(t=t, z=np.sin(t)[:, None], zd=np.cos(t)[:, None])
    return SimpleNamespace(mechanism=mech, truth=truth)


def _run(t, t_found: float, off: float, noise: float, seed: int = 0):
    """Estimates off by ``off`` rad before t_found, then the truth plus N(0, noise^2); sigma 2 noise."""
    rng = np.random.default_rng(seed)
    e = np.where(t < t_found, off, 0.0) + noise * rng.standard_normal(len(t))
    z = np.sin(t)[:, None] + e[:, None]
    zd = np.cos(t)[:, None] + noise * rng.standard_normal((len(t), 1))
    cov = [np.diag([(2 * noise) ** 2, (2 * noise) ** 2])] * len(t)
    return z, zd, cov


def test_a_search_then_tracking_is_scored_on_the_tracking():
    t = np.arange(0.0, 3.0, 0.005)
    inp = _inputs(t)
    z, zd, cov = _run(t, 0.6, 1.5, 0.002)
    row = motors_rows.score(inp, t, z, zd, cov, 1.0)
    assert row.acquired_after == pytest.approx(0.6, abs=0.01)
    assert row.tracking_rmse == pytest.approx(0.002, rel=0.15) and row.track == row.tracking_rmse
    assert row.rmse > 0.5 and row.tracking_nees == pytest.approx(0.25, rel=0.25)  # sigma = 2 x the noise
    assert not motors_tables.lost(row)
    late = motors_rows.score(inp, t, *_run(t, 1.6, 1.5, 0.002), 1.0)  # found after 1 s: lost
    assert late.acquired_after == pytest.approx(1.6, abs=0.01) and motors_tables.lost(late)
    never = motors_rows.score(inp, t, *_run(t, 9.0, 1.5, 0.002), 1.0)
    assert never.acquired_after is None and np.isnan(never.track) and motors_tables.lost(never)


def test_tables_show_the_acquisition_time_and_fail_a_lost_estimator():
    found = Row(0.9, 1e4, 2.0, None, 0.4, 0.003, 0.8)  # whole run 0.9 rad: its search; tracking 0.003
    kalman = Row(0.002, 0.9, 0.1, None, 0.0, 0.002, 0.9)
    never = Row(1.2, 1e5, 2.0, None, None, None, None)
    rows = [{"scenario": "s", "seed": k, "smoother": {},
             "variants": {"unknown": {"ukf": kalman, "pf": found, "pf_noinputs": never}}} for k in (1, 2)]
    tg = motors_tables.targets(motors_tables.stats(rows, "s"), None)["unknown"]
    assert tg["ukf"] == (pytest.approx(1.0), True) and tg["pf"] == (pytest.approx(1.5), True)
    assert tg["pf_noinputs"] == (np.inf, False)
    scen = {"s": ("s", (), 1.0, None)}
    md = motors_tables.summary_tables(rows, ["s"], scen)
    assert "on track after [s]" in md
    assert "| pf | 3.00e-03 | 0.40 | 0 / 2 | 0.8 |" in md and "| pf_noinputs | lost (whole run 1.20e+00) | never | 2 / 2 |" in md
    assert "| s | - | 2 / 3 (not: pf_noinputs) |" in motors_tables.targets_table(rows, ["s"], scen)


def test_option_rows_run_a_registered_estimator_with_options():
    assert motors_rows.estimator_of("pf_noinputs") == ("pf", {"inputs": []})
    assert motors_rows.estimator_of("ukf") == ("ukf", {})
    sensors = SimpleNamespace()
    assert motors_rows.not_applicable("pf_noinputs", "measured", sensors) == "n/a: only with the torque unknown (the pf row here)"


def test_the_smoother_is_the_best_when_no_filter_is_on_track():
    """Every filter on the mirror (never on track), the smoother tracking: it is the best."""
    never = Row(1.2, 1e5, 2.0, None, None, None, None)
    smooth = Row(0.0007, 0.8, 1.0, None, 0.0, 0.0007, 0.8)
    rows = [{"scenario": "s", "seed": 1, "smoother": {}, "variants": {"unknown": {"ukf": never, "smoother": smooth}}}]
    tg = motors_tables.targets(motors_tables.stats(rows, "s"), None)["unknown"]
    assert tg["ukf"] == (np.inf, False) and np.isnan(tg["smoother"][0]) and tg["smoother"][1] is True
    md = motors_tables.targets_table(rows, ["s"], {"s": ("s", (), 1.0, None)})
    assert "| s | - | 0 / 1 (not: ukf) | - / yes (no filter on track) |" in md
