"""The noise-bias test's offset copies keep a running Gaussian follower: on the speed-step
slider-crank with its motor torque read, unmodelled slider friction biases the acceleration
noise and the test fires once at ~1 s; the copies lose and the follower (on the truth since
~0.1 s) goes on publishing, so the seed stays acquired (before: dropped, acquired at 1.06 s).
The effort sensor is declared ``hold: zero`` here (the 1 kHz controller's torque held over
the next 5 ms): with the file's ``hold: linear`` the torque is applied where it acts and the
model bias is too small for the test to fire."""
import os

from conftest import REPO
from mbde_bench import pf_acquisition as pa
from mbde_bench.common import TruthRecord

SPEEDSTEP = os.path.join(REPO, "config", "bench", "motors", "slider_crank_speedstep_effort.yaml")


def test_bias_copies_keep_the_follower(tmp_path):
    with open(SPEEDSTEP) as f:
        text = f.read()
    assert "hold: linear" in text
    held = tmp_path / "speedstep_held.yaml"
    held.write_text(text.replace("hold: linear", "hold: zero"))
    truth = TruthRecord(pa.variant_scenario(str(held)), 1.3)
    run = pa.run_filter(truth, "pf", 1)
    est = run["estimator"]
    assert est.recovery_reasons["bias"] >= 1  # the test fired (model bias: friction)
    d = est.diagnostics()["refine"]
    assert d["drops"] == 0 and d["seeds"] == 1 and d["following"]
    res = pa.score(truth, run)
    assert res["acquired_after"] is not None and res["acquired_after"] < 0.3
    late = run["t"] > 0.5
    assert abs(run["err"][late]).max() < 0.02  # rad
