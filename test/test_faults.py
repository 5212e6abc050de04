"""Sensor faults: what each fault kind does, default gating, live = replay, the bench.

Every estimator gates outliers by default and re-acquires after a real jump; the same
faulty readings give the same counters live and in replay; no stamp fault crashes an
estimator; `mbde bench faults` runs and prints its table. The stage's handling of stamp
anomalies is in test_faults_stamps.py, gating and re-acquisition in test_faults_gating.py.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import run_mbde
from live_rig import description
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.options.common import GATE
from mbde_core.estimators.registry import ESTIMATOR_NAMES
from mbde_core.faults.kinds import FAULT_NAMES, inject
from mbde_core.faults.score import errors
from mbde_core.types import Measurement


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    from mbde_core.live.model_source import load_source
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.simulator.bag import write_simulation_bag

    sc = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=4.5"])
    out = tmp_path_factory.mktemp("faults") / "bag"
    write_simulation_bag(sc, out)
    return out, load_inputs(str(out))


def _sigma(inputs):
    return {s.name: np.sqrt(np.diag(s.covariance())) for s in inputs.sensors}


# ------------------------------------------------------------------------------ fault kinds
def test_fault_kinds_do_what_they_say(bag):
    _, inputs = bag
    ms = inputs.measurements
    sig = _sigma(inputs)["gyro_coupler"][0]
    got = {name: inject(name, ms, "gyro_coupler", _sigma(inputs), seed=1) for name in FAULT_NAMES}
    assert [m.stamp for m in got["clean"].measurements] == [m.stamp for m in ms]
    vals = lambda f: np.array([m.value[0] for m in got[f].measurements])  # noqa: E731
    base = np.array([m.value[0] for m in ms])
    assert np.sum(~np.isfinite(vals("nan_inf"))) == 20
    out = np.abs(vals("outliers") - base) > 50 * sig
    assert out.sum() == len(ms) // 50 and np.allclose(np.abs(vals("outliers") - base)[out], 100 * sig)
    assert (np.abs(vals("bursts") - base) > 50 * sig).sum() == 30
    stamps = np.array([m.stamp for m in got["duplicate_stamps"].measurements])
    assert np.sum(np.diff(stamps) == 0) == 20
    jumped = np.array([m.stamp for m in got["backward_jump"].measurements])
    assert np.sum(np.diff(jumped) < -1.0) == 1 and np.isclose(np.min(np.diff(jumped)), -2.0 + 0.005)
    assert len(got["gap"].measurements) < len(ms) and got["gap"].resume is not None
    fut = np.array([m.stamp for m in got["future_stamps"].measurements]) - np.array([m.stamp for m in ms])
    assert sorted(set(np.round(fut[fut > 0], 6))) == [5.0, 1000.0] and np.sum(fut > 0) == 10
    stuck = vals("stuck")
    assert np.sum(np.diff(stuck) == 0) > 150
    assert np.allclose((vals("bias_step") - base)[vals("bias_step") != base], 10 * sig)
    assert 0.05 < 1 - len(got["dropout_10"].measurements) / len(ms) < 0.15
    assert 0.4 < 1 - len(got["dropout_50"].measurements) / len(ms) < 0.6
    drift = got["clock_drift"]
    s = np.array([m.stamp for m in drift.measurements])
    assert np.allclose(drift.true_times(s), [m.stamp for m in ms])


@pytest.mark.parametrize("length, begins", [(4.0, 1.0), (5.0, 2.0), (10.0, 4.0), (3.0, 1.2)])
def test_gap_leaves_a_second_of_data_after_it(length, begins):
    """The gap begins at 40 % of the run unless less than 1 s of data would follow it (the
    4 s rig scenarios: then at 1 s); a run too short for 1 s before and after keeps 40 %."""
    stamps = np.round(np.arange(0.0, length + 1e-9, 0.01), 6)
    ms = [Measurement(float(t), "g", np.zeros(1)) for t in stamps]
    inj = inject("gap", ms, "g", {"g": np.ones(1)})
    got = np.array([m.stamp for m in inj.measurements])
    missing = np.setdiff1d(stamps, got)
    assert begins - 1e-9 <= missing[0] <= begins + 0.01
    if length >= 4.0:
        assert missing[-1] - missing[0] == pytest.approx(1.99) and length - inj.resume >= 1.0 - 1e-9


def test_gap_start_of_a_recording_ending_one_period_early():
    """A 4 s recording read every 6 ms ends at 3.996 s (the rig bags): the gap still moves
    to ~1 s (it stayed at 40 %, 1.6-3.6 s, leaving 0.4 s), and 1 s of data (within one
    period) follows it."""
    stamps = np.round(np.arange(0.0, 3.9999, 0.006), 6)
    assert stamps[-1] == pytest.approx(3.996)
    ms = [Measurement(float(t), "g", np.zeros(1)) for t in stamps]
    inj = inject("gap", ms, "g", {"g": np.ones(1)})
    missing = np.setdiff1d(stamps, [m.stamp for m in inj.measurements])
    assert 0.99 <= missing[0] <= 1.0 and stamps[-1] - inj.resume >= 1.0 - 0.006 - 1e-9


# ------------------------------------------------------------------------------ defaults
def test_gate_and_reacquisition_on_by_default_everywhere():
    from mbde_core.live.estimator import load_config

    for name in ESTIMATOR_NAMES:
        on = GATE  # the particle filters' likelihood version too (pf_gate)
        assert defaults(name)["gate"] == on and defaults(name)["gate_window"] > defaults(name)["reacquire"]["time"]
        assert defaults(name)["reacquire"]["rejections"] >= 1
        cfg = load_config(name)  # the shipped config the live node uses
        assert cfg["gate"] == on, name


# ------------------------------------------------------------------------------ live = replay
def _live_counters(bag_path, inputs, name, readings):
    from mbde_core.live.estimator import EstimatorOptions, LiveEstimator
    from mbde_core.live.model_source import from_description
    from mbde_core.rosio.factory import RosbagsFactory
    from mbde_core.simulator.bag import sensor_message_builder

    factory = RosbagsFactory()
    core = LiveEstimator(from_description(description(bag_path)), EstimatorOptions(name, defaults(name)), factory,
                         lambda k, m: None)
    build = {s.name: (s.topic, sensor_message_builder(s, factory)) for s in inputs.sensors}
    for x in readings:
        topic, make = build[x.sensor]
        core.on_message(topic, make(x.stamp, x.value))
    core.stage.flush()  # the end of the data (replay flushes)
    return core.counters.as_dict()


def test_live_core_counts_every_fault_as_replay(bag):
    from mbde_core.replay.runner import run_estimator

    path, inputs = bag
    for fault in FAULT_NAMES:
        inj = inject(fault, inputs.measurements, "gyro_coupler", _sigma(inputs), seed=0)
        run = run_estimator(dataclasses.replace(inputs, measurements=inj.measurements), "dekf", defaults("dekf"))
        live = _live_counters(path, inputs, "dekf", inj.measurements)
        replay = {k: run.counters[k] for k in live}
        assert live == replay, fault
        assert run.counters["estimator_errors"] == 0


# ------------------------------------------------------------------------------ no crash
@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_stamp_faults_never_crash(bag, name):
    from mbde_core.replay.runner import run_estimator

    _, inputs = bag
    short = [x for x in inputs.measurements if x.stamp < inputs.measurements[0].stamp + 1.0]
    mech = inputs.mechanism
    ang = np.isin(mech.independent, mech.rel_columns)
    for fault in ("clean", "nan_inf", "duplicate_stamps", "backward_jump", "future_stamps", "outliers"):
        inj = inject(fault, short, "gyro_coupler", _sigma(inputs), seed=0)
        run = run_estimator(dataclasses.replace(inputs, measurements=inj.measurements), name, defaults(name))
        assert run.counters["estimator_errors"] == 0, (fault, run.counters.get("last_estimator_error"))
        if fault == "clean":  # the default gate's false rejections (< 0.1 %: none of these 200)
            assert run.counters["rejected_gate"] <= 1e-3 * run.counters["received"], run.counters
        _, e, health = errors(run.records, inj, inputs.truth, ang)
        assert health["non_finite_estimates"] == 0 and health["bad_nees"] == 0, (fault, health)


def test_bench_faults_cli(tmp_path):
    out = tmp_path / "bench"
    proc = run_mbde("bench", "faults", "--scenario", "fourbar_encoder", "--estimators", "dekf", "--faults",
                    "outliers,gap,future_stamps", "--duration", "3", "--jobs", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "fourbar_encoder: RMSE(z) / clean RMSE" in proc.stdout and "crashes 0" in proc.stdout
    assert (out / "faults.csv").exists() and (out / "faults.json").exists()
    row = next(line for line in proc.stdout.splitlines() if line.startswith("outliers"))
    assert float(row.split()[1].rstrip("!")) <= 1.5
    # --merge: runs made apart in one table (here the same rows relabelled as a second estimator)
    other = tmp_path / "other"
    other.mkdir()
    rows = json.loads((out / "faults.json").read_text())
    (other / "faults.json").write_text(json.dumps([dict(r, estimator="ukf") for r in rows]))
    proc = run_mbde("bench", "faults", "--merge", f"{out},{other}", "--out", tmp_path / "merged")
    assert proc.returncode == 0, proc.stderr
    assert f"{2 * len(rows)} runs merged" in proc.stdout and "| fault | ukf | dekf |" in proc.stdout

