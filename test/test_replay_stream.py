"""Streamed replay (mbde_core.replay.worker/pipeline) against the in-memory path, parallel
against serial, several bags, a failing run, and readings recorded late (bag order, the
stage's reorder window)."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from conftest import REPO, load_options, run_mbde
from mbde_core.config.paths import config_path
from mbde_core.replay import pipeline, worker
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import evaluate, run_estimator
from mbde_core.replay.source import Stream, open_source
from mbde_core.rosio import convert as cv
from mbde_core.rosio.bag import BagReader, BagWriter
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.sensor_io import estimate_messages, sensor_reading

NAMES = ["errorekf", "ukf", "pf"]


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("st") / "imu"
    proc = run_mbde("simulate", os.path.join(REPO, "config", "scenarios", "fourbar_imu.yaml"), "--out", out,
                    "--set", "duration=0.8", "--set", "ground_truth_rate=1000")
    assert proc.returncode == 0, proc.stderr
    return str(out)


@pytest.fixture(scope="module")
def configs():
    cfg = load_options(config_path("estimators", "pf.yaml"), NAMES)
    cfg["pf"]["uniform"]["particles"] = 300
    return cfg


def _close(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12, nan_ok=True), path
    else:
        assert a == b, path


@pytest.mark.parametrize("name", NAMES)
def test_streamed_run_equals_in_memory_run(bag, configs, tmp_path, name, monkeypatch):
    """Same estimates bit for bit, same metrics to rounding, same bytes as the per-message
    conversion; the chunk and batch sizes do not matter."""
    monkeypatch.setattr(worker, "BATCH", 37)
    inputs = load_inputs(bag)
    ref = run_estimator(inputs, name, configs[name], seed=4)
    evaluate(inputs, ref)
    src = open_source(bag)
    task = worker.ReplayTask(bag, name, configs[name], 4, str(tmp_path / "part"))
    monkeypatch.setattr("mbde_core.replay.source.CHUNK", 300)
    res = worker.run_streamed(src, task)
    skip = {"wall_time_s", "step_time_us", "realtime_factor"}
    _close({k: v for k, v in res.metrics.items() if k not in skip}, {k: v for k, v in ref.metrics.items() if k not in skip})
    from mbde_core.replay.encode import read_part

    f = RosbagsFactory()
    store = f.typestore
    parts = list(read_part(task.part))
    states = [p for p in parts if p[1] == 0 and p[2] == 0]
    assert len(states) == len(ref.records)
    for rec, (t_ns, _, _, data) in zip(ref.records, states):
        msg, _ = estimate_messages(f, rec.estimate, inputs.mechanism, trust=rec.trust)  # the verdict travels with it
        assert data == bytes(store.serialize_cdr(msg, cv.MECHANISM_STATE))
    clouds = [p for p in parts if p[1] == 1]
    assert len(clouds) == len(ref.particles)
    assert [p[0] for p in parts] == sorted(p[0] for p in parts)


def test_parallel_replay_equals_serial_and_writes_one_bag(bag, configs, tmp_path):
    docs, bags = [], []
    for jobs in (1, 2):
        out = str(tmp_path / f"j{jobs}")
        os.makedirs(out)
        (bo,) = pipeline.replay([bag], NAMES, configs, out, plots=jobs == 2, jobs=jobs, log=lambda s: None)
        docs.append(bo.doc)
        with BagReader(os.path.join(out, "estimates")) as r:
            bags.append([(t, topic, data) for topic, t, _, data in r.raw_messages()])
    for name in NAMES:
        a, b = docs[0]["estimators"][name]["metrics"], docs[1]["estimators"][name]["metrics"]
        for key in ("rmse", "max_error", "nees", "nis", "counters", "whiteness"):
            assert a.get(key) == b.get(key), (name, key)
    assert bags[0] == bags[1]
    t = [x[0] for x in bags[0]]
    assert t == sorted(t) and not any(f.endswith(".part") for f in os.listdir(tmp_path / "j2"))
    assert {x[1] for x in bags[0]} >= {"/mbde/pf/particles", "/mbde/ukf/state", "/mbde/description"}
    for f in ("summary.png", "pf.png", "ukf.png", "errorekf.png", "report.md"):
        assert os.path.getsize(tmp_path / "j2" / f) > 100


def test_one_estimator_live_merge_equals_serial(bag, configs, tmp_path):
    """One task with a spare core: it runs in a worker process while this process merges
    its part file into the bag as it grows (mbde_core.replay.merge.LiveMerge)."""
    bags = []
    for jobs in (1, 2):
        out = str(tmp_path / f"j{jobs}")
        os.makedirs(out)
        pipeline.replay([bag], ["pf"], configs, out, plots=False, jobs=jobs, log=lambda s: None)
        with BagReader(os.path.join(out, "estimates")) as r:
            bags.append(([t for t, _, _ in r.topics()], [(t, topic, data) for topic, t, _, data in r.raw_messages()]))
    assert sorted(bags[0][0]) == sorted(bags[1][0]) and bags[0][1] == bags[1][1]
    assert "/mbde/pf/particles" in bags[0][0]


def test_several_bags_one_summary_and_a_failed_run_is_reported(bag, tmp_path):
    folder = tmp_path / "bags"
    folder.mkdir()
    shutil.copytree(bag, folder / "a")
    shutil.copytree(bag, folder / "b")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("dekf: {step: 0.005}\n")
    out = tmp_path / "out"
    proc = run_mbde("replay", folder, "--estimators", "dekf,ukf", "--out", out, "--no-plots", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    lines = (out / "summary.csv").read_text().splitlines()
    assert lines[0].startswith("bag,estimator,rmse_z") and len(lines) == 5
    assert "a  " in proc.stdout and "b  " in proc.stdout
    da = json.loads((out / "a" / "metrics.json").read_text())
    db = json.loads((out / "b" / "metrics.json").read_text())
    assert da["estimators"]["ukf"]["metrics"]["rmse"] == db["estimators"]["ukf"]["metrics"]["rmse"]


@pytest.mark.parametrize("jobs", [1, 2])  # 2: the bag is merged by the parent while the tasks run
def test_failed_task_is_reported_with_its_cause_others_kept(bag, configs, tmp_path, monkeypatch, jobs):
    real = worker.run_streamed

    def flaky(source, task):
        if task.name == "ukf":
            raise RuntimeError("boom in ukf")
        return real(source, task)

    monkeypatch.setattr(worker, "run_streamed", flaky)
    lines = []
    (bo,) = pipeline.replay([bag], ["errorekf", "ukf"], configs, str(tmp_path), plots=False, jobs=jobs, log=lines.append)
    assert [r.name for r in bo.results] == ["errorekf"]
    assert bo.failed[0][0] == "ukf" and "RuntimeError: boom in ukf" in bo.failed[0][1]
    assert any("failed:" in s and "boom in ukf" in s for s in lines)
    with BagReader(tmp_path / "estimates") as r:
        assert {t for t, _, _ in r.topics()} == {"/mbde/description", "/mbde/errorekf/state", "/mbde/errorekf/joint_states",
                                                 "/tf", "/tf_static", "/mbde/model/markers", "/mbde/errorekf/markers"}


def test_readings_in_bag_order_and_the_stage_reorder_window(bag, configs, tmp_path):
    """The source yields the readings as they were recorded (bag order): the estimator
    stage re-sorts them with its reorder window and sees stamp anomalies as the live node
    does. Readings recorded up to 0.3 s late (header stamp < bag time) give the original
    bag's estimates with ``--reorder-window 0.3``; with the live default (0.02 s) the late
    ones are counted out of order, as the node would count them."""
    late = tmp_path / "late"
    rng = np.random.default_rng(0)
    with BagReader(bag) as r, BagWriter(late) as w:
        for topic, ty, _ in r.topics():
            w.add_topic(topic, ty)
        for topic, t_ns, ty, data in r.raw_messages():
            delay = int(rng.integers(0, 300_000_000)) if topic.startswith("/mbde/sensors") else 0
            w.write_raw_ns(topic, t_ns + delay, data)
    src = open_source(str(late))
    got = [m for c in Stream(src, chunk=50) for m in c.readings]
    ref = []  # the per-message path over the bag's order
    with BagReader(late) as r:
        for topic, _, msg in r.messages([s.topic for s in src.sensors]):
            ref += [sensor_reading(s, msg) for s in src.sensors if s.topic == topic]
    assert [(m.stamp, m.sensor) for m in got] == [(m.stamp, m.sensor) for m in ref]
    assert all(np.array_equal(a.value, b.value) for a, b in zip(got, ref))
    assert any(b.stamp < a.stamp for a, b in zip(got, got[1:]))  # not sorted
    original = worker.run_streamed(open_source(bag), worker.ReplayTask(bag, "ukf", configs["ukf"]))
    wide = worker.run_streamed(src, worker.ReplayTask(str(late), "ukf", configs["ukf"], reorder_window=0.3))
    live = worker.run_streamed(src, worker.ReplayTask(str(late), "ukf", configs["ukf"]))
    assert wide.counters["out_of_order"] == 0 and wide.counters["fused"] == original.counters["fused"]
    _close(wide.metrics["rmse"], original.metrics["rmse"])
    assert live.counters["out_of_order"] > 0