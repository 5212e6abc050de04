"""The particle filter under the stage's disturbances (issue 18): it carries both
explanations of a jump back to the first stamp, and after a silence mixes its open-loop
cloud with fresh hypotheses (ParticleFilter.add_restart_hypotheses, pf_inject)."""
from __future__ import annotations

import numpy as np

from stage_rig import rig, stage_for, z_of  # noqa: F401  (rig: the shared fixture)
from mbde_core.estimators.particle import recovery
from mbde_core.types import Measurement


def _pf_error(st, truth, by=0.0, back=None):
    z = z_of(st)
    t = z[:, 0] + (by if back is None else np.where(np.arange(len(z)) > back, by, 0.0))
    return z, np.abs((z[:, 1] - np.interp(t, truth[:, 0], truth[:, 1]) + np.pi) % (2 * np.pi) - np.pi)


def test_pf_carries_both_explanations_of_a_jump_to_the_first_stamp(rig):
    """The particle filter keeps its cloud at a jump back to the first stamp and adds the
    uniform prior's hypotheses (PF.add_restart_hypotheses): the readings decide. The clock
    stepped back while the mechanism moved on: the track goes on (the stage alone would
    restart it from the uniform prior, as for a bag loop); a real loop: the readings of the
    restarted motion win."""
    m, ss, ms, truth = rig
    by = 1.2
    st = stage_for(m, ss, "pf")
    st.feed([x if x.stamp < by else Measurement(x.stamp - by, x.sensor, x.value) for x in ms])
    st.flush()
    z = z_of(st)
    back = int(np.flatnonzero(np.diff(z[:, 0]) < -0.5 * by)[0])
    _, err = _pf_error(st, truth, by, back)
    assert err[back - 20:back + 1].max() < 0.05  # on track before the jump
    assert err[back + 1:].max() < 0.1 and err[back + 10:].max() < 0.05
    d = st.est.diagnostics()
    assert d["recovery_reasons"]["jump"] == 1 and d["recoveries"] == 0
    loop = stage_for(m, ss, "pf")  # a loop of the first 1.5 s
    loop.feed(ms + [x for x in ms if x.stamp < 1.5])
    loop.flush()
    z, err = _pf_error(loop, truth)
    second = np.flatnonzero(np.diff(z[:, 0]) < -1.0)[0] + 1
    late = np.arange(len(z)) > second
    assert err[second + 10:].max() < 0.1  # the restarted motion's hypotheses won within 0.05 s
    assert err[late & (z[:, 0] > 0.6)].max() < 0.02


def test_pf_after_a_silence_mixes_the_prediction_with_fresh_hypotheses(rig):
    m, ss, ms, truth = rig
    st = stage_for(m, ss, "pf")
    st.feed([x for x in ms if not 1.0 <= x.stamp < 1.3])
    st.flush()
    z, err = _pf_error(st, truth)
    d = st.est.diagnostics()  # 0.3 s: the cloud bridges it (injected, no fresh start: pf_inject.BRIDGE)
    assert d["recovery_reasons"]["silence"] == 1 and d["recoveries"] == 0
    assert err[z[:, 0] > 1.4].max() < 0.05


def test_pf_after_a_silence_longer_than_its_cloud_can_bridge_starts_afresh(tmp_path):
    """pf_sim (one rocker gyroscope, up to 37 rad/s), mbde bench faults' gap (no reading
    for 2 s from 2 s on): the open-loop cloud covers the circle (its spread is the
    prior's) and the filter re-initialises from the uniform prior as at a first
    acquisition (pf_inject.BRIDGE). Before (the cloud plus copies plus fresh particles
    with 0.1 of the weight) pf with seed 2 and vipf with seed 0 locked onto the mirrored
    motion and never recovered; now within 0.6 s, as the first acquisition."""
    import dataclasses

    from conftest import load_options
    from mbde_core.faults.kinds import inject
    from mbde_core.faults.score import errors
    from mbde_core.live.model_source import load_source
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.simulator.bag import write_simulation_bag

    write_simulation_bag(load_source(scenario_file="scenarios/pf_sim.yaml", settings=["duration=5.0"]), tmp_path / "bag")
    inp = load_inputs(str(tmp_path / "bag"))
    sigma = {s.name: np.sqrt(np.diag(s.covariance())) for s in inp.sensors}
    angular = np.isin(inp.mechanism.independent, inp.mechanism.rel_columns)
    gap = inject("gap", inp.measurements, next(iter(inp.sensors)).name, sigma, 0)
    assert gap.resume is not None
    for name, seed in (("pf", 2), ("vipf", 0)):
        cfg = load_options(None, [name])[name]
        run = run_estimator(dataclasses.replace(inp, measurements=gap.measurements), name, cfg, seed=seed,
                            particle_budget=0)
        t, e, _ = errors(run.records, gap, inp.truth, angular)
        assert run.diagnostics["recovery_reasons"]["silence"] == 1 and run.diagnostics["recoveries"] >= 1, name
        bad = np.flatnonzero((t >= gap.resume) & ~(e < 0.05))  # |e| < 0.05 rad from resume + back on
        back = 0.0 if not bad.size else (t[bad[-1] + 1] - gap.resume if bad[-1] + 1 < t.size else np.inf)
        assert back < 0.9, (name, seed, back)


def test_position_spread_is_the_cloud_s_over_the_prior_s(rig):
    """recovery.position_spread against its analytic values: a cloud uniform on the circle 1, a
    Gaussian one of standard deviation s (small against pi) s / (pi / sqrt(3))."""
    from mbde_core.estimators import make_estimator
    from mbde_core.estimators.configure import defaults

    m, ss, _, _ = rig
    pf = make_estimator("pf", m, ss, defaults("pf"))
    N = 20000
    rng = np.random.default_rng(1)
    for z, want in ((rng.uniform(-np.pi, np.pi, N), 1.0), (0.3 + 0.2 * rng.standard_normal(N), 0.2 / (np.pi / np.sqrt(3)))):
        pf.q = np.tile(m.q0, (N, 1))
        pf.q[:, m.independent[0]] = z
        pf.logw = np.full(N, -np.log(N))
        got = float(recovery.position_spread(pf)[0])
        assert abs(got - want) < 0.02, (got, want)
