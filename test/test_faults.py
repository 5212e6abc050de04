"""Sensor faults: default gating, stamp anomalies in the stage, live = replay, the bench.

The stage (shared by `mbde replay` and the live node) must count and handle duplicate
stamps, backward jumps, readings from the future and long gaps; every estimator gates
outliers by default and re-acquires after a real jump; the same faulty readings give the
same counters live and in replay; `mbde bench faults` runs and prints its table.
"""
from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from conftest import mech_path, run_mbde
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.options.common import GATE
from mbde_core.estimators.particle.likelihood import predictive_d2
from mbde_core.estimators.registry import ESTIMATOR_NAMES
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.faults.kinds import FAULT_NAMES, inject
from mbde_core.faults.score import errors
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
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


# ------------------------------------------------------------------------------ stage
SENSORS = """
- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 1*pi/180}}
- {name: enc, type: encoder, body: crank, rate: 200, noise: {sigma: 1*pi/180}}
"""


@pytest.fixture(scope="module")
def rig():
    from mbde_core.engine.integrators import MBState, get_integrator

    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(SENSORS), m)
    rng = np.random.default_rng(3)
    samplers = {s.name: s.noise.sampler(rng) for s in ss}
    integ = get_integrator("rk4")
    st = MBState(m.q0, m.qd0)
    ms, truth = [], []
    for k in range(2001):
        t = k * 1e-3
        if k % 5 == 0:
            ms.append(Measurement(t, "gyro", samplers["gyro"].apply(t, ss["gyro"].h(st.q, st.qd))))
            ms.append(Measurement(t, "enc", samplers["enc"].apply(t, ss["enc"].h(st.q))))
            truth.append((t, st.q[m.independent][0]))
        st = integ.step(m, t, st, 1e-3)
    return m, ss, ms, np.array(truth)


def stage_for(m, ss, name="dekf", z_offset=0.0, sigma_z=0.05, **kw):
    cfg = defaults(name)
    est = make_estimator(name, m, ss, cfg)
    z = m.q0[m.independent] + z_offset
    init = InitialState(z, m.qd0[m.independent], np.array([sigma_z]), np.array([0.5]), None)
    return EstimatorStage.for_estimator(est, lambda t: init, **kw)


def z_of(stage):
    return np.array([[r.estimate.stamp, r.estimate.z[0]] for r in stage.records])


def test_duplicate_stamps_one_fused_rest_counted(rig):
    m, ss, ms, _ = rig
    doubled = []
    for k, x in enumerate(ms):
        doubled.append(x)
        if k % 37 == 0:
            doubled.append(Measurement(x.stamp, x.sensor, x.value + 0.3))  # same stamp, another value
    a, b = stage_for(m, ss), stage_for(m, ss)
    a.feed(ms)
    a.flush()
    b.feed(doubled)
    b.flush()
    assert b.counters.duplicates == len(doubled) - len(ms)
    assert b.counters.fused == a.counters.fused == len(ms)
    assert np.array_equal(z_of(a), z_of(b))


def _jumped_back(rig, at: float, by: float):
    """The rig's readings with the stamps from ``at`` on moved back by ``by`` seconds, fed
    through a stage: (stage, z rows [t, z], index of the last step before the jump, error
    of z against the truth at the true times)."""
    m, ss, ms, truth = rig
    jump = [x if x.stamp < at else Measurement(x.stamp - by, x.sensor, x.value) for x in ms]
    st = stage_for(m, ss)
    st.feed(jump)
    st.flush()
    z = z_of(st)
    back = int(np.flatnonzero(np.diff(z[:, 0]) < -0.5 * by)[0])
    true_t = np.where(np.arange(len(z)) > back, z[:, 0] + by, z[:, 0])
    return st, z, back, z[:, 1] - np.interp(true_t, truth[:, 0], truth[:, 1])


def test_backward_jump_restarts_from_the_estimate_counted_with_size(rig):
    st, z, back, err = _jumped_back(rig, 1.0, 2.0)
    c = st.counters
    assert c.resets == 1 and abs(c.backward_jump_last - 2.0) < 0.01 and c.backward_jump_max == c.backward_jump_last
    assert abs(z[back + 1, 1] - z[back, 1]) < 0.05  # the track goes on from the last estimate
    assert np.max(np.abs(err[back + 1:])) < 0.1
    assert c.reacquisitions == 0 and c.reconvergence_last is not None and c.reconvergence_last < 0.2


@pytest.mark.parametrize("start", [0.0, 0.5])
def test_bag_loop_restarts_from_the_initial_guess(rig, start):
    """A loop of the recording: the initial guess. Whether the jump goes back to the first
    stamp or further (a node that started mid-recording), the readings decide between the
    track going on and the initial guess (a two-hypothesis bank): no re-acquisition."""
    m, ss, ms, truth = rig
    st = stage_for(m, ss)
    st.feed([x for x in ms if x.stamp >= start] + [x for x in ms if x.stamp < 1.5])
    st.flush()
    assert st.counters.resets == 1 and st.counters.reacquisitions == 0 and st.counters.multistarts == 1
    z = z_of(st)
    tail = z[-50:]
    assert np.max(np.abs(tail[:, 1] - np.interp(tail[:, 0], truth[:, 0], truth[:, 1]))) < 0.05


def test_backward_jump_to_the_first_stamp_while_the_mechanism_moved_on(rig):
    """A clock that steps back by exactly the elapsed time lands on the first stamp, as a
    bag loop does; the readings, not the stamps, decide: the two-hypothesis bank keeps the
    track (the initial guess at rest no longer fits) instead of restarting at rest."""
    st, z, back, err = _jumped_back(rig, 1.2, 1.2)
    c = st.counters
    assert c.resets == 1 and c.multistarts == 1 and c.reacquisitions == 0 and c.rejected_gate == 0
    assert np.max(np.abs(err[back + 1:])) < 0.05  # never the initial guess (0.3+ rad away by then)


def test_gap_bank_keeps_the_prediction_as_a_hypothesis(rig):
    """After a silence the open-loop prediction is one member of the bank (the estimator
    itself, member 0), next to candidates over its 3-sigma range, also when not lost."""
    from mbde_core.estimators.stage import multistart

    m, ss, ms, truth = rig
    seen = []
    real = multistart.MultiStart.__init__

    def spy(self, est, t, starts, window, cap, keep=False, **kw):
        real(self, est, t, starts, window, cap, keep, **kw)
        seen.append((keep, self.members[0] is est, len(self.members), self.ceiling))

    st = stage_for(m, ss)
    try:
        multistart.MultiStart.__init__ = spy
        st.feed([x for x in ms if not 1.0 <= x.stamp < 1.3])
        st.flush()
    finally:
        multistart.MultiStart.__init__ = real
    assert st.counters.multistarts == 1 and seen and seen[0][0] and seen[0][1] and seen[0][2] > 2
    assert seen[0][3] is not None  # gravity only, no force limits: a passive mechanism, bounded energy
    z = z_of(st)
    late = z[:, 0] > 1.6
    assert np.max(np.abs(z[late, 1] - np.interp(z[late, 0], truth[:, 0], truth[:, 1]))) < 0.05


def test_energy_ceiling_of_a_passive_mechanism_only(rig):
    """A linkage under gravity alone cannot gain energy: the ceiling is its energy plus
    ENERGY_MARGIN x range(V); with unknown forces expected (force limits) there is none."""
    from mbde_core.estimators.options.mechanism_scales import mechanism_scales
    from mbde_core.estimators.stage.multistart import ENERGY_MARGIN, energy_ceiling

    m, ss, _, _ = rig
    est = make_estimator("dekf", m, ss, defaults("dekf"))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
    est.reset(0.0, init)
    snap = est.estimate()
    sc = mechanism_scales(m)
    V = m.potential_energy(sc.configurations)
    got = energy_ceiling(est, snap)
    assert got == pytest.approx(float(m.energy(snap.q, snap.qd)) + ENERGY_MARGIN * float(V.max() - V.min()))
    motor = copy.copy(m)
    motor.__dict__ = dict(m.__dict__)
    motor.__dict__["_scales_cache"] = {"k": dataclasses.replace(sc, a_f=np.ones_like(sc.a_f))}
    est.mech = motor
    assert energy_ceiling(est, snap) is None


def test_bank_emits_the_best_candidate_within_the_energy_ceiling():
    """Scores rank the candidates; one whose energy exceeds the ceiling is skipped (the
    best overall if none is within it)."""
    import types

    from mbde_core.estimators.stage.multistart import MultiStart

    class Member:
        def __init__(self, energy):
            self.e = energy

        def estimate(self):
            return types.SimpleNamespace(q=np.array([self.e]), qd=np.zeros(1))

    bank = MultiStart.__new__(MultiStart)
    bank.est = types.SimpleNamespace(mech=types.SimpleNamespace(energy=lambda q, qd: float(q[0])))
    bank.members = [Member(5.0), Member(1.0), Member(0.5)]
    bank.scores = np.array([-10.0, -8.0, -9.0])
    bank.ceiling = 2.0
    assert bank._admissible_best() == 2
    bank.ceiling = 0.1
    assert bank._admissible_best() == 0
    bank.ceiling = None
    assert bank._admissible_best() == 0


def test_future_stamps_skipped_without_reset(rig):
    m, ss, ms, _ = rig
    bad = list(ms)
    idx = list(range(100, len(ms), 150))
    for j, i in enumerate(idx):
        bad[i] = Measurement(ms[i].stamp + (5.0 if j % 2 else 1000.0), ms[i].sensor, ms[i].value)
    a, b = stage_for(m, ss), stage_for(m, ss)
    a.feed([x for k, x in enumerate(ms) if k not in idx])
    a.flush()
    b.feed(bad)
    b.flush()
    assert b.counters.future == len(idx)
    assert b.counters.resets == 0 and b.counters.gap_resets == 0
    assert np.array_equal(z_of(a), z_of(b))
    # a future reading at the very end (nothing after it to confirm it) is dropped too
    c = stage_for(m, ss)
    c.feed(ms[:50] + [Measurement(ms[50].stamp + 100.0, "gyro", ms[50].value)])
    c.flush()
    assert c.counters.future == 1 and c.time < 1.0


def test_forward_gap_confirmed_by_the_next_reading(rig):
    m, ss, ms, _ = rig
    st = stage_for(m, ss, max_gap=1.0)
    st.feed([x for x in ms if not 0.5 <= x.stamp < 2.0 - 1e-9] + [Measurement(x.stamp + 2.0, x.sensor, x.value)
                                                                  for x in ms if x.stamp < 0.5])
    st.flush()
    assert st.counters.gap_resets == 1 and st.counters.future == 0 and st.counters.resets == 0
    assert st.counters.reconvergence_last is not None


def test_reacquisition_after_a_real_jump(rig):
    """The estimate is 0.4 rad off with a confident covariance: the gate rejects the encoder
    (the gyro, near rest, cannot tell); after `reacquire.time` of rejections the covariance
    is inflated and the filter converges. Without the rule it would reject forever."""
    m, ss, ms, truth = rig
    st = stage_for(m, ss, z_offset=0.4, sigma_z=0.005)
    st.feed(ms)
    st.flush()
    assert st.counters.reacquisitions >= 1 and st.counters.rejected_gate >= 20
    z = z_of(st)
    late = z[:, 0] > 1.0
    assert np.max(np.abs(z[late, 1] - np.interp(z[late, 0], truth[:, 0], truth[:, 1]))) < 0.05
    off = stage_for(m, ss, z_offset=0.4, sigma_z=0.005)
    off.reacq = None
    off.feed(ms[:200])
    off.flush()
    assert off.counters.per_sensor_rejected == {"enc": 100} and "enc" not in off.counters.per_sensor_fused


def test_reacquisition_rule_runs_of_mostly_rejected_readings():
    """A lost filter that accepts a reading now and then still re-acquires; isolated
    outliers and a short burst (then accepted readings) never do."""
    from types import SimpleNamespace

    from mbde_core.estimators.stage.guards import Reacquisition

    def feed(pattern, dt=0.005):  # pattern: 'r' rejected, 'a' accepted reading of one sensor
        rule = Reacquisition(10, 0.2)
        fired = []
        for k, c in enumerate(pattern):
            res = SimpleNamespace(accepted=["s"] if c == "a" else [], rejected=["s"] if c == "r" else [])
            if rule.observe(k * dt, res):
                fired.append(k)
        return fired

    assert feed("rra" * 40) == [40, 82]        # 2 of 3 rejected: lost, fires every 0.2 s
    assert feed("r" * 41)[0] == 40             # consecutive rejections: as before
    assert feed(("r" + "a" * 49) * 20) == []   # isolated outliers
    assert feed(("r" * 10 + "a" * 90) * 5) == []  # bursts of 10 readings (50 ms)
    assert feed("ra" * 200) == []              # half rejected is not "mostly"


@pytest.mark.parametrize("name", ["ukf", "errorekf", "cekf", "diekfpm", "adekf", "pf"])
def test_every_estimator_gates_outliers(rig, name):
    m, ss, ms, _ = rig
    cfg = copy.deepcopy(defaults(name))
    if name == "pf":
        cfg.update(init="gaussian", particles=200, gate=GATE)
    ms = [x for x in ms if x.stamp < 0.8]
    spiked = [Measurement(x.stamp, x.sensor, x.value + (2.0 if k % 40 == 20 else 0.0)) for k, x in enumerate(ms)]
    est = make_estimator(name, m, ss, cfg, rng=np.random.default_rng(0))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0, 0)
    st = EstimatorStage.for_estimator(est, lambda t: init)
    st.feed(spiked)
    st.flush()
    n_out = sum(1 for k in range(len(ms)) if k % 40 == 20)
    assert st.counters.rejected_gate == n_out, st.counters


def test_pf_gate_is_the_mahalanobis_gate_for_a_gaussian_cloud():
    rng = np.random.default_rng(0)
    N, sp, ss_ = 20000, 2.0, 1.0
    pred = rng.normal(0.0, sp, (N, 1))
    logw = np.full(N, -np.log(N))
    W = np.array([[1.0 / ss_]])

    def d2(o, p=pred):
        e = (o - p) @ W.T
        return predictive_d2(-0.5 * np.einsum("ij,ij->i", e, e), logw, p, lambda a, b: a - b, W)

    for o in (0.0, 1.0, 3.0, 5.0):
        assert abs(d2(o) - o * o / (ss_**2 + sp**2)) < 0.1 + 0.02 * o * o
    two = np.concatenate([rng.normal(-10.0, 0.5, (N // 2, 1)), rng.normal(10.0, 0.5, (N // 2, 1))])
    assert d2(10.0, two) < 1.0 and d2(-10.0, two) < 1.0 and d2(0.0, two) > 50.0  # multimodal: not moments


def test_pf_gate_kernel_smooths_a_sparse_cloud():
    """A uniform cloud spaced 0.01 read with noise 0.0005: a reading between two particles
    is no outlier once the kernel is widened (kernel_whitening), and stays one outside."""
    from mbde_core.estimators.particle.likelihood import kernel_whitening

    pred = np.linspace(-np.pi, np.pi, 629)[:, None]
    logw = np.full(len(pred), -np.log(len(pred)))
    R = np.array([[0.0005**2]])
    C = np.atleast_2d(np.var(pred))

    def d2(o, W):
        e = (o - pred) @ W.T
        return predictive_d2(-0.5 * np.einsum("ij,ij->i", e, e), logw, pred, lambda a, b: a - b, W)

    raw, smooth = np.array([[2e3]]), kernel_whitening(R, C, len(pred))
    mid = 0.5 * float(pred[314, 0] + pred[315, 0])
    assert d2(mid, raw) > 50.0 and d2(mid, smooth) < 1.0
    narrow = np.random.default_rng(1).normal(0.0, 0.01, (2000, 1))
    e = narrow - narrow.mean()
    W = kernel_whitening(R, np.atleast_2d(np.mean(e * e)), len(narrow))
    ll = -0.5 * ((0.2 - narrow) @ W.T) ** 2
    assert predictive_d2(ll[:, 0], np.full(2000, -np.log(2000)), narrow, lambda a, b: a - b, W) > 23.9


# ------------------------------------------------------------------------------ live = replay
def _live_counters(bag_path, inputs, name, readings):
    from mbde_core.live.estimator import EstimatorOptions, LiveEstimator
    from mbde_core.live.model_source import from_description
    from mbde_core.rosio.factory import RosbagsFactory
    from mbde_core.simulator.bag import sensor_message_builder
    from live_rig import description

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

