"""mbde_core.runs: serial, local processes and a Dask LocalCluster give the same outcomes.

The Dask tests start an in-process ``distributed.LocalCluster`` with 2 worker processes;
they are skipped only when the optional ``cluster`` extra is not installed (``.[test]``
installs it, so CI runs them).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from mbde_core import runs
from mbde_core.errors import DataError


def seeded_task(shared, task):
    """A deterministic task: draws from its own seed, reads the shared offset."""
    seed, fail = task
    if fail:
        raise ValueError(f"task {seed} asked to fail")
    rng = np.random.default_rng(seed)
    return float(rng.standard_normal(1000).sum() + shared["offset"])


TASKS = [(s, s == 3) for s in range(6)]


def _values(outcomes):
    return [(o.index, o.value, o.error) for o in outcomes]


def test_serial_and_processes_agree_failures_reported_others_kept():
    serial = runs.run_tasks(seeded_task, TASKS, {"offset": 0.5}, jobs=1)
    procs = runs.run_tasks(seeded_task, TASKS, {"offset": 0.5}, jobs=2)
    assert _values(serial) == _values(procs)
    assert [o.ok for o in serial] == [True, True, True, False, True, True]
    assert "ValueError: task 3 asked to fail" in serial[3].error and "test_runs.py" in serial[3].error
    assert serial[0].value == pytest.approx(float(np.random.default_rng(0).standard_normal(1000).sum() + 0.5))
    lines = runs.failures(serial, lambda i: f"seed {TASKS[i][0]}")
    assert lines == [f"seed 3: {serial[3].error}"]


def test_jobs_must_be_positive():
    with pytest.raises(DataError, match="--jobs"):
        runs.run_tasks(seeded_task, TASKS, {"offset": 0.0}, jobs=0)


def test_scheduler_unreachable_is_a_user_error(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("mbde_core.runs.engine.CONNECT_TIMEOUT", "1s")
    with pytest.raises(DataError, match="cannot connect"):
        runs.run_tasks(seeded_task, TASKS, {"offset": 0.0}, scheduler="tcp://127.0.0.1:1")


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed", reason="optional extra mbde[cluster] not installed")
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        yield lc


def test_dask_local_cluster_matches_serial(cluster):
    serial = runs.run_tasks(seeded_task, TASKS, {"offset": 0.25}, jobs=1)
    dask = runs.run_tasks(seeded_task, TASKS, {"offset": 0.25}, scheduler=cluster.scheduler_address)
    assert _values(dask) == _values(serial)
    assert not dask[3].ok and "task 3 asked to fail" in dask[3].error
    assert len({o.worker for o in dask if o.ok}) >= 1


def test_bench_accuracy_task_on_dask_matches_serial(cluster):
    """The accuracy benchmark's variants (truth shared by scatter) on 2 workers = serial."""
    from mbde_bench import accuracy
    from mbde_bench.common import TruthRecord
    from mbde_core.config.paths import config_path
    from conftest import load_options
    from mbde_core.scenario import load_scenario

    truths = {"fourbar_gyro": TruthRecord(load_scenario(config_path("scenarios", "fourbar_gyro.yaml")), 0.2)}
    configs = load_options(None, ["errorekf", "ukf"])
    tasks = [("fourbar_gyro", p, 1.0, r, ["errorekf", "ukf"], configs) for p, r in ((1, 0), (5, 1))]
    tasks.append(("no_such_case", 1, 1.0, 0, ["errorekf"], configs))  # fails: KeyError

    def key(outcomes):
        return [None if not o.ok else [(r["estimator"], r["rmse_z"], r["rmse_zd"], r["failed"]) for r in o.value]
                for o in outcomes]

    serial = runs.run_tasks(accuracy._run_task, tasks, truths, jobs=1)
    dask = runs.run_tasks(accuracy._run_task, tasks, truths, scheduler=cluster.scheduler_address)
    assert key(dask) == key(serial)
    assert all(o.ok for o in serial[:-1]) and "KeyError" in serial[-1].error and "KeyError" in dask[-1].error
    assert all(np.isfinite(r["rmse_z"]) for o in serial[:-1] for r in o.value)


def test_replay_on_dask_matches_serial(cluster, tmp_path):
    """mbde replay's (bag, estimator) tasks on the cluster: same metrics and estimates bag."""
    from mbde_core.config.paths import config_path
    from conftest import load_options
    from mbde_core.replay import pipeline
    from mbde_core.rosio.bag import BagReader
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag

    bag = str(tmp_path / "bag")
    write_simulation_bag(load_scenario(config_path("scenarios", "fourbar_imu.yaml"), ["duration=0.5"]), bag)
    names = ["errorekf", "ukf"]
    configs = load_options(None, names)
    out = {}
    for label, kw in (("serial", {"jobs": 1}), ("dask", {"scheduler": cluster.scheduler_address})):
        d = tmp_path / label
        d.mkdir()
        (bo,) = pipeline.replay([bag], names, configs, str(d), plots=False, log=lambda s: None, **kw)
        with BagReader(d / "estimates") as r:
            out[label] = (bo.doc["estimators"], [(t, topic, data) for topic, t, _, data in r.raw_messages()])
    for name in names:
        a, b = out["serial"][0][name]["metrics"], out["dask"][0][name]["metrics"]
        assert a["rmse"] == b["rmse"] and a["nees"] == b["nees"] and a["counters"] == b["counters"]
    assert out["serial"][1] == out["dask"][1]
