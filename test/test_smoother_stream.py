"""The windowed smoother streamed end to end: readings binned as they arrive
(:class:`~mbde_core.trajectory.readings.ReadingsStream`), windows solved as they fill,
and ``mbde smooth --window`` (:func:`mbde_core.replay.smoothing.smooth_bag`) reading the
bag chunk by chunk and writing each window's steps as it ends. Its results equal the same
windowed smoother on the whole bag read into memory (same code and readings: measured
identical; asserted to 1e-9 in the quantities' units). The flat memory is measured by
``mbde bench smoother --cli-memory`` (not asserted here)."""
import os

import numpy as np
import pytest

from conftest import REPO, run_mbde
from mbde_bench.common import TruthRecord
from mbde_core.config.paths import config_path
from mbde_core.estimators.base import InitialState
from mbde_core.scenario import load_scenario
from mbde_core.trajectory.readings import ReadingsStream, bin_readings
from mbde_core.trajectory.smoother import BatchSmoother
from mbde_core.trajectory.windowed import iter_windows, smooth_windowed
from mbde_core.types import Measurement

DT = 0.005


@pytest.fixture(scope="module")
def fourbar_truth():
    return TruthRecord(load_scenario(config_path("scenarios", "fourbar_gyro.yaml")), 3.0)


def _same_rows(a, b):
    assert (a.t0, a.dt, a.N, a.first) == (b.t0, b.dt, b.N, b.first)
    assert [s.name for s in a.sensors] == [s.name for s in b.sensors]
    for s, r in zip(a.sensors, b.sensors):
        np.testing.assert_array_equal(s.idx, r.idx)
        np.testing.assert_array_equal(s.values, r.values)
        np.testing.assert_array_equal(s.whiten, r.whiten)


def test_readings_stream_bins_as_bin_readings(fourbar_truth):
    """Readings arriving out of order by less than the lag give the windows of
    bin_readings of the whole list; one arriving later than that is counted late and
    skipped; bad ones are counted as bin_readings counts them."""
    sc = fourbar_truth.scenario
    sensors = sc.estimator_sensors()
    meas = fourbar_truth.measurements(sc.sensors, DT, seed=2)
    meas += [Measurement(0.5, "gyro_coupler", np.array([np.nan])), Measurement(0.52, "nope", np.array([1.0]))]
    meas.sort(key=lambda m: m.stamp)
    arrival = list(meas)
    for i in range(0, len(arrival) - 1, 2):  # neighbours swapped: stamps go back by one step
        arrival[i], arrival[i + 1] = arrival[i + 1], arrival[i]
    late = Measurement(0.25, "gyro_coupler", np.array([0.3]))  # step 50, arriving after the first window is taken
    arrival.insert(400, late)
    full = bin_readings(meas, sensors, DT)
    rs = ReadingsStream(iter(arrival), sensors, DT, lag=0.1)
    rs.fill(99)
    assert rs.N is None and rs.t_max < 0.5 + 0.1 + 2 * DT  # read about lag past step 99, not the run
    _same_rows(rs.take(0, 100), full.window(0, 100))
    rs.drop_before(80)
    rs.fill(199)
    _same_rows(rs.take(80, 200), full.window(80, 200))
    rs.drop_before(180)
    rs.fill(10**9)
    assert rs.N == full.N
    _same_rows(rs.take(180, full.N), full.window(180, full.N))
    c, f = rs.counters, full.counters
    assert c["late"] == 1 and c["received"] == f["received"] + 1
    assert all(c[k] == f[k] for k in ("used", "non_finite", "unknown_sensor", "per_sensor"))


def test_windows_are_solved_as_the_stream_fills(fourbar_truth):
    """iter_windows on a generator yields its first window after reading about 1.5
    windows plus the lag (1 s), not the whole run, and the whole stream gives the same
    trajectory as the list of the same readings (bin_readings' path)."""
    sc = fourbar_truth.scenario
    mech, sensors, init = sc.estimator_mechanism(), sc.estimator_sensors(), sc.estimator_initial_state()
    start = InitialState(init.z, init.zd, np.full(1, 0.05), np.full(1, 0.5), init.q, init.branch)
    meas = fourbar_truth.measurements(sc.sensors, DT, seed=4)
    pulled = [0]

    def stream():
        for m in meas:
            pulled[0] += 1
            yield m

    sm = BatchSmoother(mech, sensors)
    parts = iter_windows(sm, stream(), start, window=0.5, overlap=0.25)
    first = next(parts)
    assert first.info["kept"] == (0, 100) and pulled[0] <= 150 + 200 + 2 < len(meas), pulled
    parts = [first] + list(parts)
    whole = smooth_windowed(sm, meas, start, window=0.5, overlap=0.25)
    assert [p.info["kept"] for p in parts] == [(0, 100), (100, 200), (200, 300), (300, 400), (400, 500), (500, 601)]
    np.testing.assert_allclose(np.concatenate([p.z for p in parts]), whole.z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([p.cov for p in parts]), whole.cov, rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("ss") / "bag"
    proc = run_mbde("simulate", os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml"), "--out", out,
                    "--set", "duration=3")
    assert proc.returncode == 0, proc.stderr
    return out


def test_streamed_smooth_equals_the_windows_in_memory(bag, tmp_path, monkeypatch):
    """mbde smooth's streamed path, the bag read 64 messages at a time (the readings and
    the 1 kHz ground truth interleaved, six windows of 0.5 s): its estimates bag and
    metrics equal the windowed smoother on the bag read whole into memory, and the
    metrics equal those computed here from the in-memory trajectory and the truth. The
    truth read ahead of a window (1.75 s here) is kept even beyond replay's bound for a
    silent filter (lowered to 500 samples, 0.5 s here)."""
    from mbde_core.replay import evaluation
    from mbde_bench.smoother_cli import read_estimates
    from mbde_core.estimators.configure import defaults
    from mbde_core.estimators.assess.metrics import coordinate_errors, truth_at
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import initial_state
    from mbde_core.replay.smoothing import smooth_bag
    from mbde_core.replay.source import open_source
    from mbde_core.trajectory.config import smoother_defaults

    monkeypatch.setattr(evaluation, "TRUTH_BOUND", 500)
    monkeypatch.setattr(evaluation, "TRUTH_KEEP", 0.5)
    cfg = dict(smoother_defaults(), window=0.5, overlap=0.25)
    guess = defaults("errorekf")
    out = tmp_path / "s"
    out.mkdir()
    doc = smooth_bag(open_source(bag), cfg, guess, str(out), "sqlite3", plots=False, chunk=64)
    inputs = load_inputs(bag)
    mech = inputs.mechanism
    from mbde_core.replay.smoothing import resolved

    cfg = resolved(inputs, cfg)
    ref = smooth_windowed(BatchSmoother(mech, inputs.sensors, cfg, guess), inputs.measurements, initial_state(inputs, cfg))
    t, z, zd, cov = read_estimates(out / "estimates")
    assert len(t) == len(ref.t) == 601
    np.testing.assert_allclose(t, ref.t, rtol=0, atol=1e-9)  # s (stamps through ns)
    np.testing.assert_allclose(z, ref.z, rtol=0, atol=1e-9)  # rad
    np.testing.assert_allclose(zd, ref.zd, rtol=0, atol=1e-9)  # rad/s
    np.testing.assert_allclose(cov, ref.cov, rtol=1e-9, atol=1e-15)
    m = doc["estimators"]["smoother"]["metrics"]
    s = m["solver"]
    assert s["windows"] == ref.info["windows"] == 6 and s["iterations"] == ref.info["iterations"]
    assert s["final_cost"] == pytest.approx(ref.info["final_cost"], rel=1e-9)
    angular = np.isin(mech.independent, mech.rel_columns)
    tr = inputs.truth
    e = np.hstack([coordinate_errors(ref.z, truth_at(ref.t, tr.t, tr.z, angular), angular), ref.zd - truth_at(ref.t, tr.t, tr.zd)])
    assert m["rmse"]["z"][0] == pytest.approx(np.sqrt(np.mean(e[:, 0] ** 2)), abs=1e-9)
    assert m["rmse"]["zd"][0] == pytest.approx(np.sqrt(np.mean(e[:, 1] ** 2)), abs=1e-9)
    assert m["nees"]["mean"] == pytest.approx(np.mean(np.einsum("ki,kij,kj->k", e, np.linalg.inv(ref.cov), e)), rel=1e-9)
    assert m["counters"]["fused"] == len(inputs.measurements) and m["counters"]["late"] == 0
    assert doc["readings"] == {"gyro_coupler": 601} and m["steps"] == 601
    assert not any(name.startswith(".") for name in os.listdir(out))  # the part file is gone


def test_reference_file_interpolates_as_truth_at(tmp_path):
    """The --reference smoother file (written part by part, read back around each group of
    stamps) gives what truth_at gives over the whole arrays: stamps on and between grid
    points, out of order, far apart (separate reads) and outside the run (clamped)."""
    from mbde_core.estimators.assess.metrics import truth_at
    from mbde_core.replay.reference import ReferenceWriter

    rng = np.random.default_rng(3)
    K, g = 5000, 2
    t = 10.0 + DT * np.arange(K)
    z = np.column_stack([np.cumsum(rng.normal(0, 0.3, K)), rng.normal(0, 1, K)])  # angle column wraps many times
    zd, zdd = rng.normal(size=(K, g)), rng.normal(size=(K, g))
    A = rng.normal(size=(K, 2 * g, 2 * g))
    cov = A @ A.transpose(0, 2, 1)
    w = ReferenceWriter(tmp_path / "ref", g)
    for lo in range(0, K, 1234):
        w.add(t[lo:lo + 1234], z[lo:lo + 1234], zd[lo:lo + 1234], zdd[lo:lo + 1234], cov[lo:lo + 1234])
    angular = np.array([True, False])
    ref = w.close(angular)
    stamps = np.concatenate([t[100:140], t[4000:4010] + 0.3 * DT, rng.uniform(t[0], t[-1], 50), [t[0] - 1, t[-1] + 1]])
    rng.shuffle(stamps)
    got = ref.at(stamps)
    np.testing.assert_allclose(got["z"], truth_at(stamps, t, z, angular), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["zd"], truth_at(stamps, t, zd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["zdd"], truth_at(stamps, t, zdd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["cov"], truth_at(stamps, t, cov.reshape(K, -1)).reshape(-1, 2 * g, 2 * g),
                               rtol=0, atol=1e-12)


def test_readings_stamped_far_outside_the_bag_are_skipped_and_counted():
    """A corrupt stamp far in the future (or past) would stretch the smoother's grid to
    it: the stream drops readings more than SPAN_MARGIN outside the bag's span."""
    from types import SimpleNamespace

    from mbde_core.replay.smoothing import SPAN_MARGIN, SmoothedStream

    sm = SmoothedStream.__new__(SmoothedStream)
    sm.source = SimpleNamespace(start=100.0, end=110.0)
    sm.on_truth, sm.out_of_range = None, 0
    stamps = [100.0, 100.5, 100.0 + 1e6, 110.0 + 0.5 * SPAN_MARGIN, 99.0 - SPAN_MARGIN, float("nan"), 105.0]
    sm.stream = [SimpleNamespace(truth=[], readings=[Measurement(t, "gyro", np.zeros(1)) for t in stamps])]
    kept = [m.stamp for m in sm._readings()]
    assert kept[:2] == [100.0, 100.5] and kept[2] == 110.0 + 0.5 * SPAN_MARGIN and kept[-1] == 105.0
    assert np.isnan(kept[3]) and len(kept) == 5
    assert sm.out_of_range == 2
