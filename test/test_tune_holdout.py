"""mbde tune never makes an estimator worse: the held-out check, the widened grid, the PF's own fit.

The bags: the shipped pendulum (rod 0.5 m, 0.5 kg, I = m L^2 / 3 about its hinge, a
0.01 rad encoder at 200 Hz), its model otherwise exact, shaken by an unmodelled random
torque on its hinge (i.i.d. N(0, s^2) values every D = 2 ms, linearly interpolated: a
hinge-acceleration density q = s^2 D / I^2, test_tune.py's derivation), either from the
start or only from ``quiet_until`` on.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from conftest import REPO, mech_path, run_mbde

D = 0.002
INERTIA = 0.5 * 0.5**2 / 3


def shaken_pendulum(path, q: float, duration: float, quiet_until: float = 0.0, seed: int = 13, period: float = 0.005):
    """Write the bag (module doc) with density q [rad^2/s^3] after ``quiet_until`` [s], none before."""
    from mbde_core.scenario.scenario import Scenario
    from mbde_core.simulator.bag import write_simulation_bag

    rng = np.random.default_rng(seed)
    s = math.sqrt(q * INERTIA**2 / D)
    times = np.arange(0.0, duration + 2 * D, D)
    vals = s * rng.standard_normal(len(times)) * (times >= quiet_until)
    doc = {
        "name": "pendulum_shaken",
        "mechanism": mech_path("pendulum"),
        "sensors": [{"name": "enc", "type": "encoder", "body": "rod", "period": period, "noise": {"sigma": 0.01}}],
        "unmodelled_loads": [{"name": "shaker", "type": "generalized_force", "coordinate": "theta",
                              "value": {"table": [[float(t), float(v)] for t, v in zip(times, vals)]}}],
        "initial_state": {"release_from": {"theta": -1.2}},
        "duration": duration, "step": 0.001, "ground_truth_rate": 200, "seed": 5,
    }
    write_simulation_bag(Scenario(doc, file="<test_tune_holdout>", base_dir=f"{REPO}/config/scenarios"), path)
    return path


def test_grid_search_widens_at_an_edge_and_says_when_it_stays_there():
    """A convex cost with its minimum beyond the grid's lower end: found after one widening;
    one further out still: the result is at the widened grid's lower end (``edge``)."""
    from mbde_core.tuning.search import grid_search

    best, _, cell, searched, grown, edge = grid_search(lambda x: (x + 4.2) ** 2, (-3.0, 3.0), 9)
    assert grown == 1 and edge is None and searched == pytest.approx((-9.0, 3.0))
    assert abs(best + 4.2) <= cell / 2
    best, _, _, searched, grown, edge = grid_search(lambda x: (x + 20.0) ** 2, (-3.0, 3.0), 9)
    assert grown == 1 and edge == "lower" and best == pytest.approx(-9.0)
    best, _, _, _, grown, edge = grid_search(lambda x: (x - 0.3) ** 2, (-3.0, 3.0), 9)
    assert grown == 0 and edge is None and best == pytest.approx(0.0)


def test_an_unrepresentative_fit_is_rejected_on_the_held_out_readings(tmp_path):
    """The fit part is quiet (the exact model explains it: the fit wants no plant noise, at
    the lower edge of even the widened grid, and says so); the held-out part is shaken
    (q = 40 rad^2/s^3): there the fitted options predict far worse than the default rule's,
    so the rule's numbers are written and the tuned ones are not."""
    bag = shaken_pendulum(tmp_path / "bag", 40.0, 6.0, quiet_until=4.2)
    out = tmp_path / "tuned.yaml"
    res = run_mbde("tune", bag, "--estimators", "errorekf", "--window", 6, "--out", out, "--jobs", "1")
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("errorekf (step"))
    assert "kept the starting options" in line and "widened" in line and "still at the lower edge" in line
    from mbde_core.estimators.configure import load
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import resolved_options

    rule = resolved_options(load_inputs(str(bag)), load(None, ["errorekf"])["errorekf"])
    written = yaml.safe_load(out.read_text())["errorekf"]["plant_noise"]["acceleration_psd"]
    assert np.allclose(np.atleast_1d(written), np.atleast_1d(rule.plant_noise.acceleration_psd), rtol=1e-9)


def test_a_bad_start_is_fitted_and_the_fit_kept(tmp_path):
    """A start with 1e-4 of the true plant noise (q = 40 rad^2/s^3 throughout): the fit moves
    it to within a factor of 2 of the truth and the held-out readings confirm it."""
    bag = shaken_pendulum(tmp_path / "bag", 40.0, 6.0)
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("errorekf:\n  plant_noise: {acceleration_psd: 0.004}\n")
    out = tmp_path / "tuned.yaml"
    res = run_mbde("tune", bag, "--estimators", "errorekf", "--window", 6, "--config", cfg, "--out", out, "--jobs", "1")
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    assert "kept the tuned options" in res.stdout
    q = float(np.max(np.atleast_1d(yaml.safe_load(out.read_text())["errorekf"]["plant_noise"]["acceleration_psd"])))
    assert 20.0 <= q <= 80.0, q


def test_the_particle_filter_is_fitted_on_its_own_likelihood_at_its_own_step(tmp_path):
    """The PF alone (no Kalman observer involved), a 500 Hz encoder: its resolved step (2 ms,
    not 5) is the one written and used; from a start of sigma_a = 60 rad/s^2 (a density
    sigma_a^2 dt = 7.2 rad^2/s^3, 5.5x below the truth q = 40 rad^2/s^3) its marginal
    likelihood moves it to within 1.5 grid cells (10^0.75) of the truth (measured: 23 from
    the rule's start over 3 s), and the held-out readings confirm the fit."""
    from mbde_core.estimators.configure import load
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import resolved_options

    bag = shaken_pendulum(tmp_path / "bag", 40.0, 2.0, period=0.002)
    cfg = tmp_path / "start.yaml"
    cfg.write_text("pf:\n  acceleration_sigma: 60.0\n")
    out = tmp_path / "tuned.yaml"
    res = run_mbde("tune", bag, "--estimators", "pf", "--window", 2, "--config", cfg, "--out", out, "--jobs", "1")
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    step = float(resolved_options(load_inputs(str(bag)), load(str(cfg), ["pf"])["pf"]).step)
    sec = yaml.safe_load(out.read_text())["pf"]
    assert step < 0.004 and sec["step"] == pytest.approx(step) and "refine" not in sec
    assert "marginal likelihood" in out.read_text()
    density = sec["acceleration_sigma"] ** 2 * step
    print(f"pf step {step:g} s, fitted sigma_a^2 dt = {density:.3g} rad^2/s^3 (true 40)")
    assert "kept the tuned options" in res.stdout
    assert 40.0 / 10 ** 0.75 <= density <= 40.0 * 10 ** 0.75, density


def test_holdout_out_of_range_is_one_line(tmp_path):
    for bad, says in (("1", "must be in [0, 1)"), ("-0.1", "must be in [0, 1)"), ("nan", "not a finite number")):
        res = run_mbde("tune", tmp_path / "no_bag", f"--holdout={bad}")
        assert res.returncode == 2 and "--holdout" in res.stderr and says in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_verdict_cautions_when_the_fit_falls_far_below_the_start():
    """The exact-model steel four-bar of ``mbde bench tune``: x7e-7 after widening, RMSE 5x lower
    but NEES 4.5-50 (dim 2): the readings cannot show it, the verdict says to check."""
    from types import SimpleNamespace

    from mbde_core.tuning.output import verdict

    r = SimpleNamespace(name="ukf", step=0.005, log_factors={"plant_noise": -6.16}, start_sigma_a=None,
                        held_start=None, searched=(-9.0, 3.0), widened=1, edge=None)
    text = verdict(r)
    assert "widened to x1e-09..x1e+03" in text and "caution" in text and "NEES" in text
    r.log_factors, r.widened, r.searched = {"plant_noise": -0.6}, 0, (-3.0, 3.0)
    assert "caution" not in verdict(r) and "widened" not in verdict(r)
