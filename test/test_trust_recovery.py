"""The trust verdict's recovery from LOST needs fresh evidence (estimators.stage.trust):
innovations of the right size but a steady bias since the last LOST window hold LOST, a
run that never was LOST is untouched, and a real gyroscope-only UKF locked far off is
called LOST while it is off (checked against the simulated truth)."""
import os

import numpy as np

from conftest import REPO
from mbde_core.estimators.base import UpdateResult
from mbde_core.estimators.stage.trust import BIAS_RECOVER, DEGRADED, LOST, OK, RECOVER, SINCE_WINDOW, TrustMonitor

DT = 0.005  # s, a 200 Hz scalar gyroscope fused every step


def _reading(rng, mean=0.0):
    e = float(rng.normal(mean, 1.0))
    return UpdateResult(["gyro"], [], e * e, 1, normalized_innovation=np.array([e]))


def _run(segments, seed):
    """Feed (duration s, mean of e) segments; the (t, verdict) of every step."""
    rng = np.random.default_rng(seed)
    mon, out, t = TrustMonitor(), [], 0.0
    for dur, mean in segments:
        for _ in range(round(dur / DT)):
            out.append((t, mon.step(t, _reading(rng, mean))))
            t += DT
    return out


def test_a_steady_bias_after_a_loss_holds_lost_until_fresh_readings_agree():
    """1 s of innovations of mean 1.5 (a sum of ~21 sigma per window: LOST), then 4 s of
    mean 0.3: each 1 s window's bias is ~4 sigma, below the window's LOST test and mostly
    below its DEGRADED one (the sliding window alone is OK again from ~4.3 s), but their
    sum since the last LOST window grows to 7-10 sigma (above BIAS_RECOVER): LOST from the
    time it has (the first half second after the last LOST window may flicker to
    recovering). Then unbiased readings: LOST until the biased ones leave the
    SINCE_WINDOW, DEGRADED (recovering) for RECOVER s, then OK."""
    out = _run([(2.0, 0.0), (1.0, 1.5), (4.0, 0.3), (8.0, 0.0)], seed=5)
    first = min(t for t, v in out if v.level == LOST)
    assert 2.0 < first < 3.0
    assert all(v.level == LOST for t, v in out if 5.5 <= t < 7.0)
    assert np.mean([v.level == LOST for t, v in out if 3.0 <= t < 7.0]) >= 0.75
    assert any(v.code == "still_lost" for t, v in out if 5.5 <= t < 7.0)
    end = max(t for t, v in out if v.level == LOST)
    assert 7.0 < end < 7.0 + SINCE_WINDOW  # s: held while the biased readings are in the since-window
    assert all(v.level == DEGRADED and v.code == "recovering" for t, v in out if end < t < end + RECOVER - DT)
    assert np.mean([v.level == OK for t, v in out if t > end + RECOVER]) >= 0.95


def test_the_hold_needs_a_bias_consistent_readings_recover_as_before():
    """After the same loss, unbiased readings: the since-bias stays below BIAS_RECOVER, so
    the loss ends one window after the last LOST window, as the sliding window alone says."""
    out = _run([(2.0, 0.0), (1.0, 1.5), (6.0, 0.0)], seed=6)
    end = max(t for t, v in out if v.level == LOST)
    assert 3.0 < end < 3.0 + 1.5  # s
    assert np.mean([v.level == OK for t, v in out if t > end + RECOVER]) >= 0.95


def test_a_run_never_lost_is_never_held():
    """A mild steady bias (mean 0.2: ~2.8 sigma per window, the kind a small model error
    leaves) without any loss: never LOST, mostly OK (the since-test acts only after a LOST)."""
    for seed in range(3):
        out = _run([(20.0, 0.2)], seed=10 + seed)
        assert not any(v.level == LOST for t, v in out)
        assert np.mean([v.level == OK for t, v in out if t > 1.0]) >= 0.9
    assert BIAS_RECOVER < 4.5  # below the window's DEGRADED bias test: the hold is the stricter one


def test_a_gyroscope_only_ukf_locked_far_off_is_lost_while_it_is_off(tmp_path):
    """The four-bar with one gyroscope, the UKF's first angle started ~1 rad off (the
    bench's far-off start, run 3): it locks 10-30 sigma off for the whole run with NIS near
    1. The steps off by more than 10 sigma for at least 1 s are LOST at >= 90 % (the
    sliding window alone: 64 %); no OK step is more than 3 sigma off. The same run from the
    scenario's own start is never LOST."""
    from mbde_bench.trust_runs import run_case

    path = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")
    far = run_case(("fourbar_gyro", path, "exact", "far", 3, 6.0, ["ukf"], str(tmp_path)))[0]
    assert far["status"] == "ok", far
    assert far["off_steps"] >= 500
    assert far["off_lost"] >= 0.9 * far["off_steps"]
    assert far["ok_within"] == far["ok_steps"]
    nominal = run_case(("fourbar_gyro", path, "exact", "nominal", 3, 6.0, ["ukf"], str(tmp_path)))[0]
    assert nominal["status"] == "ok", nominal
    assert nominal["fraction"]["LOST"] == 0.0 and nominal["off_steps"] == 0
