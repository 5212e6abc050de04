"""Gating and re-acquisition in the stage: a filter lost after a real jump re-acquires,
runs of mostly rejected readings fire the rule (isolated outliers never do), every
estimator gates outliers by default, and the particle filters' predictive gate."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.estimators.options.common import GATE
from mbde_core.estimators.particle.likelihood import predictive_d2
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.types import Measurement
from stage_rig import rig, stage_for, z_of  # noqa: F401  (rig: the shared fixture)


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
