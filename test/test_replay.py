"""mbde replay end to end: outputs, estimates bag, bags without description or truth, errors."""
import json
import os

import numpy as np
import pytest

from conftest import REPO, run_mbde
from mbde_core.rosio.bag import BagReader, BagWriter

SCEN = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    d = tmp_path_factory.mktemp("rp")
    out = d / "bag"
    proc = run_mbde("simulate", SCEN, "--out", out, "--set", "duration=1.5")
    assert proc.returncode == 0, proc.stderr
    return out


def test_replay_outputs(bag, tmp_path):
    out = tmp_path / "out"
    proc = run_mbde("replay", bag, "--estimators", "dekf,ukf", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "dekf" in proc.stdout and "RMSE z" in proc.stdout
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["ground_truth"] is True
    for name in ("dekf", "ukf"):
        m = doc["estimators"][name]["metrics"]
        assert m["steps"] == 301
        assert m["rmse"]["z"][0] < 0.05
        for key in ("nees", "nis", "whiteness", "step_time_us", "realtime_factor", "counters", "max_error"):
            assert key in m, key
        assert m["counters"]["fused"] == 301
        assert len(m["nees"]["band_95"]) == 2
    for f in ("report.md", "summary.png", "dekf.png", "ukf.png"):
        assert (out / f).stat().st_size > 100, f
    with BagReader(out / "estimates") as r:
        topics = {t: (ty, n) for t, ty, n in r.topics()}
        assert topics["/mbde/dekf/state"] == ("mbde_msgs/msg/MechanismState", 301)
        assert topics["/mbde/ukf/joint_states"] == ("sensor_msgs/msg/JointState", 301)
        assert "/mbde/description" in topics
        last = None
        for topic, t, msg in r.messages(["/mbde/dekf/state"]):
            last = (t, msg)
        t, msg = last
        assert abs(t - r.start - 1.5) < 1e-6  # s: stamps from an epoch of now (float: 0.24 us spacing)
        assert len(msg.covariance) == 4 and list(msg.independent_names) == ["theta"]
    check_viewable(out / "estimates", ["dekf", "ukf"])
    # deterministic: a second replay gives the same numbers
    out2 = tmp_path / "out2"
    assert run_mbde("replay", bag, "--estimators", "dekf,ukf", "--out", out2, "--no-plots").returncode == 0
    doc2 = json.loads((out2 / "metrics.json").read_text())
    assert doc2["estimators"]["ukf"]["metrics"]["rmse"] == doc["estimators"]["ukf"]["metrics"]["rmse"]


def check_viewable(path, names):
    """The estimates bag carries what Foxglove / RViz need: /tf (REP 105 world -> each
    estimator's body frames, stamped like its estimates), /tf_static (its sensor mounts),
    model and estimate markers in the world frame."""
    from mbde_core.rosio.tf import transforms_from_message

    with BagReader(path) as r:
        topics = {t: (ty, n) for t, ty, n in r.topics()}
        for topic in ("/tf", "/tf_static", "/mbde/model/markers", *(f"/mbde/{n}/markers" for n in names)):
            assert topic in topics, topic
        assert topics["/tf"][0] == "tf2_msgs/msg/TFMessage" and topics["/tf_static"][1] == 1
        states = {n: [t for _, t, _ in r.messages([f"/mbde/{n}/state"])] for n in names}
        tf = {}
        for _, t, msg in r.messages(["/tf"]):
            for tr in transforms_from_message(msg):
                assert tr["parent"] == "world" and abs(tr["stamp"] - t) < 1e-6
                tf.setdefault(tr["child"], []).append(t)
        for n in names:  # one estimate frame per moving body, at every estimate
            for body in ("crank", "coupler", "rocker"):
                assert tf[f"{n}/{body}"] == pytest.approx(states[n], abs=1e-6)
        (static,) = [transforms_from_message(m) for _, _, m in r.messages(["/tf_static"])]
        mounts = {tr["child"]: tr["parent"] for tr in static}
        assert all(mounts[f"{n}/gyro_coupler"] == f"{n}/coupler" for n in names)
        for _, _, msg in r.messages(["/mbde/ukf/markers"]):
            assert {m.header.frame_id for m in msg.markers} == {"world"}
            break


def test_replay_without_description_and_truth(bag, tmp_path):
    stripped = tmp_path / "sensors_only"
    with BagReader(bag) as r, BagWriter(stripped) as w:
        w.add_topic("/mbde/sensors/gyro_coupler", "sensor_msgs/msg/Imu", "sensor")
        for topic, t, msg in r.messages(["/mbde/sensors/gyro_coupler"]):
            w.write(topic, t, msg)
    sensors = tmp_path / "sensors.yaml"
    sensors.write_text("sensors:\n  - {name: gyro_coupler, type: gyroscope, body: coupler, period: 0.005, noise: {sigma: deg2rad(1)}}\n")
    mech = os.path.join(REPO, "config", "mechanisms", "fourbar.yaml")
    out = tmp_path / "out"
    proc = run_mbde("replay", stripped, "--estimators", "errorekf", "--mechanism", mech, "--sensors", sensors, "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "metrics.json").read_text())
    m = doc["estimators"]["errorekf"]["metrics"]
    assert doc["ground_truth"] is False
    assert "rmse" not in m and "nees" not in m  # omitted, not faked
    assert m["counters"]["fused"] == 301 and "step_time_us" in m
    # without --mechanism this bag cannot be replayed
    bad = run_mbde("replay", stripped, "--out", tmp_path / "x")
    assert bad.returncode == 2 and "give --mechanism" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--estimators", "kalman"], "unknown kalman"),
        (["--config", "/nonexistent.yaml"], "file not found"),
    ],
)
def test_replay_errors(bag, tmp_path, args, fragment):
    proc = run_mbde("replay", bag, "--out", tmp_path / "o", *args)
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_replay_missing_bag_and_existing_out(tmp_path, bag):
    proc = run_mbde("replay", tmp_path / "nobag", "--out", tmp_path / "o")
    assert proc.returncode == 2 and "no such bag" in proc.stderr
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "notes.txt").write_text("mine")
    proc = run_mbde("replay", bag, "--out", tmp_path / "exists", "--estimators", "dekf")
    assert proc.returncode == 2 and "--force" in proc.stderr
    (tmp_path / "empty").mkdir()  # an empty folder made for the output: used
    proc = run_mbde("replay", bag, "--out", tmp_path / "empty", "--estimators", "dekf", "--no-plots")
    assert proc.returncode == 0 and (tmp_path / "empty" / "metrics.json").exists(), proc.stderr


def test_bad_estimator_config_is_one_line(bag, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dekf:\n  plant_noise: {acceleration_psd: -1}\n")
    proc = run_mbde("replay", bag, "--estimators", "dekf", "--config", cfg, "--out", tmp_path / "o")
    assert proc.returncode == 2
    assert "dekf.plant_noise.acceleration_psd: must be >= 0" in proc.stderr
    cfg.write_text("dekf:\n  stepp: 0.01\n")
    proc = run_mbde("replay", bag, "--estimators", "dekf", "--config", cfg, "--out", tmp_path / "o")
    assert proc.returncode == 2 and "dekf.stepp: unknown key (did you mean 'step'?)" in proc.stderr


def test_estimator_failure_is_counted_and_the_run_goes_on(bag, monkeypatch):
    """An estimator exception in replay does what the live node does: counted, the track
    restarts from the initial guess at the next reading, no reading after it is lost."""
    from mbde_core.estimators.configure import defaults
    from mbde_core.estimators.kalman.dekf import DEKF
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator

    inputs = load_inputs(str(bag), None, None)
    calls = {"n": 0}
    update = DEKF.update

    def flaky(self, measurements, gates=None):
        calls["n"] += 1
        if calls["n"] == 100:
            raise np.linalg.LinAlgError("Singular matrix (injected)")
        return update(self, measurements, gates)

    monkeypatch.setattr(DEKF, "update", flaky)
    r = run_estimator(inputs, "dekf", defaults("dekf"))
    c = r.counters
    assert c["estimator_errors"] == 1
    assert "LinAlgError: Singular matrix (injected)" in c["last_estimator_error"]
    assert abs(c["first_estimator_error_at"] - inputs.start - 99 * 0.005) < 1e-6  # s (epoch stamps)
    assert c["received"] == 301
    assert c["fused"] == 300  # only the reading of the failed update is lost
    stamps = [rec.estimate.stamp for rec in r.records]
    assert stamps[-1] - inputs.start == pytest.approx(1.5, abs=1e-6) and len(stamps) >= 300


def test_seed_depends_on_the_estimator_name_not_its_position(bag, tmp_path):
    from mbde_core.estimators import estimator_rng

    cfg = tmp_path / "pf.yaml"
    cfg.write_text("pf: {particles: 40, uniform: {particles: 300}}\n")
    docs = []
    for order in ("pf,dekf", "dekf,pf"):
        out = tmp_path / order.replace(",", "_")
        proc = run_mbde("replay", bag, "--estimators", order, "--config", cfg, "--seed", "5", "--out", out, "--no-plots")
        assert proc.returncode == 0, proc.stderr
        docs.append(json.loads((out / "metrics.json").read_text())["estimators"]["pf"]["metrics"])
    assert docs[0]["rmse"] == docs[1]["rmse"] and docs[0]["nees"] == docs[1]["nees"]
    a, b, c = estimator_rng(5, "pf").random(3), estimator_rng(5, "pf").random(3), estimator_rng(5, "ukf").random(3)
    assert np.array_equal(a, b) and not np.allclose(a, c) and not np.allclose(a, estimator_rng(6, "pf").random(3))
