"""``mbde bench trust`` at CI size: the tables' structure, and table 1's NEES and table 2's
OK-within-3-sigma figure recomputed independently from the same run's records."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import REPO, run_mbde

SCEN = "config/bench/trust/steel_fourbar_encoder.yaml"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("trust") / "b"
    res = run_mbde("bench", "trust", "--out", out, "--scenarios", f"{REPO}/{SCEN}", "--estimators", "errorekf",
                   "--seeds", 1, "--duration", 1.5, "--faults", "bias_step", "--tables", "1,2", "--smoother-runs", 0,
                   "--identify-cases", "", "--no-motors", "--jobs", 1, "--results", out.parent / "page")
    assert res.returncode == 0, res.stderr
    return out, json.loads((out / "trust.json").read_text()), res.stdout


def test_tables_structure(bench):
    out, data, printed = bench
    cal = data["calibration"]
    assert [(s["case"], s["model"], s["estimator"]) for s in cal] == [
        ("trust/steel_fourbar_encoder", "exact", "errorekf"), ("trust/steel_fourbar_encoder", "mass", "errorekf")]
    assert all(s["runs"] == 1 and s["failed"] == 0 and 0 <= s["coverage"] <= 1 for s in cal)
    kinds = [(s["kind"], s["estimator"]) for s in data["verdict"]]
    assert kinds == [("nominal", "errorekf"), ("far", "errorekf"), ("bias_step", "errorekf")]
    for s in data["verdict"]:
        assert s["runs"] == 2 and sum(s["fraction"].values()) == pytest.approx(1.0)
    assert "# 1. Filters' uncertainty" in printed and "# 2. The trust verdict against truth" in printed
    page = (out.parent / "page" / "trust.md").read_text()
    assert page.startswith("# `mbde bench trust`") and "| trust/steel_fourbar_encoder | exact | errorekf | 1 |" in page
    assert not os.listdir(out / "bags")  # each run removes its own bag


def test_numbers_against_independent_computation(bench):
    """The nominal exact-model run replayed again: mean NEES of [z, zd] (e^T P^-1 e by hand)
    and the share of OK steps with every z within 3 sigma match the bench's figures."""
    from mbde_bench.trust_runs import scenario_for
    from mbde_core.estimators.configure import defaults
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.simulator.bag import write_simulation_bag

    out, data, _ = bench
    sc = scenario_for(f"{REPO}/{SCEN}", "exact", "nominal", 0, 1.5)
    bag = str(out.parent / "again")
    write_simulation_bag(sc, bag)
    inputs = load_inputs(bag)
    run = run_estimator(inputs, "errorekf", defaults("errorekf"), seed=0, particle_budget=0)
    t = np.array([r.estimate.stamp for r in run.records])
    tr = inputs.truth
    ez = np.array([r.estimate.z for r in run.records])[:, 0] - np.interp(t, tr.t, np.unwrap(tr.z[:, 0]))
    ez = (ez + np.pi) % (2 * np.pi) - np.pi
    ezd = np.array([r.estimate.zd for r in run.records])[:, 0] - np.interp(t, tr.t, tr.zd[:, 0])
    e = np.stack([ez, ezd], axis=1)
    P = np.array([r.estimate.cov for r in run.records])
    nees = np.einsum("ki,kij,kj->k", e, np.linalg.inv(P), e)
    row = next(r for r in data["runs"] if (r["model"], r["kind"]) == ("exact", "nominal"))
    assert row["nees"] == pytest.approx(float(np.mean(nees)), rel=1e-6)
    cal = next(s for s in data["calibration"] if s["model"] == "exact")
    assert cal["nees_per_dof"] == pytest.approx(float(np.mean(nees)) / 2, rel=1e-6)
    ok = np.array([r.trust.level == 0 for r in run.records])
    within = np.abs(ez) <= 3 * np.sqrt(P[:, 0, 0])
    assert row["ok_steps"] == int(ok.sum()) and row["ok_within"] == int((ok & within).sum())
