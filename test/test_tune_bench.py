"""``mbde bench tune`` on a short bag: a row per (bag, estimator) with the held-out scores,
the decision and the RMSE of start and fit against the truth."""
from __future__ import annotations

import json

from conftest import REPO, run_mbde


def test_bench_tune_rows(tmp_path):
    scen = f"{REPO}/config/bench/tune/steel_fourbar_encoder.yaml"
    res = run_mbde("bench", "tune", "--out", tmp_path / "b", "--scenarios", scen, "--estimators", "errorekf",
                   "--duration", 2, "--jobs", 1, "--results", tmp_path / "results")
    assert res.returncode == 0, res.stderr
    rows = json.loads((tmp_path / "b" / "tune.json").read_text())
    assert [(r["bag"], r["estimator"]) for r in rows] == [("steel_fourbar_encoder_tune", "errorekf")]
    r = rows[0]
    assert r["decision"] in ("start", "tuned") and r["step"] > 0
    assert (r["decision"] == "tuned") == (r["held_tuned"] > r["held_start"])
    assert 0 < r["rmse_start"] < 0.05 and 0 < r["rmse_tuned"] < 0.05  # rad: the encoder pins the crank
    page = (tmp_path / "results" / "tune.md").read_text()
    assert page.startswith("# `mbde bench tune`") and "| steel_fourbar_encoder_tune | errorekf |" in page
