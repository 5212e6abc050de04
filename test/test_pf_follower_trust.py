"""The particle filter's Gaussian follower named and judged (particle/refine.py): the
diagnostics, metrics.json and replay's table say ``pf -> ukf at 0.31 s``; the stage gives
the follower its own trust monitor, and a follower whose readings degrade its verdict is
dropped back to the particles for the monitor's window."""
import os
import re

import pytest

from conftest import REPO
from mbde_bench import pf_acquisition as pa
from mbde_bench.common import TruthRecord
from mbde_core.replay.outputs import summary_table
from mbde_core.scenario import load_scenario

FOURBAR = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")


@pytest.fixture(scope="module")
def fourbar():
    return TruthRecord(load_scenario(FOURBAR), 1.5)


def test_follower_named(fourbar):
    run = pa.run_filter(fourbar, "pf", 3)
    ref = run["estimator"].diagnostics()["refine"]
    assert re.fullmatch(r"pf -> ukf at \d+\.\d\d s", ref["label"]), ref["label"]
    assert 0.0 < ref["first_at"] < 1.5 and ref["label"].endswith(f"{ref['first_at']:.2f} s")
    assert 0.0 < ref["followed_s"] <= 1.5 - ref["first_at"] + 1e-9
    assert ref["drop_reasons"]["trust"] == 0  # a follower that agrees with its readings stays
    doc = {"estimators": {"pf": {"metrics": {"diagnostics": {"refine": ref}}, "config": {}}}}
    assert summary_table(doc).splitlines()[1].startswith(ref["label"])


def test_no_follower_is_plain_name(fourbar):
    run = pa.run_filter(fourbar, "pf", 3, {"refine": {"estimator": "none"}})
    assert run["estimator"].diagnostics()["refine"] == {"estimator": "none"}


def test_degraded_follower_dropped_to_particles(fourbar):
    """A follower that trusts the gyroscope 100x more than its noise: its innovations are
    far beyond its own chi-square band, the verdict degrades, the particles publish."""
    bad = {"refine": {"options": {"sensor_sigma": {"gyro_coupler": 1.7e-4}}}}
    run = pa.run_filter(fourbar, "pf", 3, bad)
    est = run["estimator"]
    ref = est.diagnostics()["refine"]
    assert ref["drop_reasons"]["trust"] >= 1 and ref["last_trust_drop"]
    hold = est.follower._hold_until
    assert hold is not None and ref["followed_s"] < 1.5 - ref["first_at"]
