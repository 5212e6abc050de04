"""The particle filter's Gaussian follower (pf_refine, option ``refine``): seeded from the
converged cloud, published while it agrees, dropped when the cloud starts over or the two
disagree; ``refine: none`` publishes the cloud; the follower's options are validated by
its own schema and resolved by the rule with the scenario's context."""
import copy
import os

import numpy as np
import pytest

from conftest import REPO
from mbde_bench.common import TruthRecord
from mbde_core.errors import ConfigError
from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults, validate
from mbde_core.estimators.configure import configure
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.estimators.registry import estimator_rng
from mbde_core.scenario import load_scenario

SCEN = os.path.join(REPO, "config", "scenarios")


@pytest.fixture(scope="module")
def fourbar():
    truth = TruthRecord(load_scenario(os.path.join(SCEN, "fourbar_gyro.yaml")), 1.5)
    sc = truth.scenario
    period = min(s.period for s in sc.sensors)
    return truth, sc.estimator_mechanism(), sc.estimator_sensors(), truth.measurements(sc.sensors, period, seed=3)


def _run(fourbar, cfg, until=1.5, hook=None):
    """Run a PF on the four-bar's readings (one update per reading stamp); hook(pf, t)
    after every update. Returns the PF."""
    truth, mech, sensors, meas = fourbar
    pf = make_estimator("pf", mech, sensors, cfg, rng=estimator_rng(0, "pf"))
    init = truth.scenario.estimator_initial_state()
    pf.reset(meas[0].stamp, init)
    t = meas[0].stamp
    for m in meas:
        if m.stamp > t + 1e-12:
            pf.predict(m.stamp - t)
            t = m.stamp
        if t > until:
            break
        pf.update([m])
        if hook is not None:
            hook(pf, t)
    return pf


def _err(pf, truth):
    e = pf.estimate()
    k = int(np.argmin(np.abs(truth.t - pf.t)))
    return abs((e.z[0] - truth.z[k, 0] + np.pi) % (2 * np.pi) - np.pi)


def test_follower_seeds_on_the_converged_cloud_and_is_published(fourbar):
    truth = fourbar[0]
    pf = _run(fourbar, defaults("pf"))
    d = pf.diagnostics()["refine"]
    assert d["estimator"] == "ukf" and d["following"] and d["seeds"] >= 1
    snap, cloud, f = pf.estimate(), pf.cloud_estimate(), pf.follower.est.estimate()
    np.testing.assert_array_equal(snap.z, f.z)
    np.testing.assert_array_equal(snap.cov, f.cov[:2, :2])
    np.testing.assert_array_equal(snap.branch_probabilities, cloud.branch_probabilities)
    assert snap.branch == cloud.branch
    assert np.allclose(snap.cov, snap.cov.T) and np.linalg.eigvalsh(snap.cov).min() > 0
    assert _err(pf, truth) < 0.05  # rad, on track


def test_refine_none_publishes_the_cloud(fourbar):
    cfg = defaults("pf")
    cfg["refine"]["estimator"] = "none"
    pf = _run(fourbar, cfg, until=0.5)
    snap, cloud = pf.estimate(), pf.cloud_estimate()
    np.testing.assert_array_equal(snap.z, cloud.z)
    np.testing.assert_array_equal(snap.cov, cloud.cov)
    assert pf.diagnostics()["refine"] == {"estimator": "none"}


def test_a_follower_that_disagrees_is_dropped_and_seeded_again(fourbar):
    """A follower pushed 1 rad off the cloud fails the chi-square test: within
    disagree_time (+ one reading) it is dropped and (the cloud being converged) seeded
    again from the cloud in the same update."""
    truth = fourbar[0]
    state = {}

    def hook(pf, t):
        if "pushed" not in state and pf.follower.following and t > 0.8:
            f = pf.follower.est
            x = f.x.copy()
            x[0] += 1.0
            f._assemble_into(x, f.model.guess(f._full(), x[:1] - f.x[:1]))
            f.P[:] = np.diag([1e-6, 1e-4])
            state["pushed"], state["seeds"] = t, pf.follower.counts["seeds"]
        elif "pushed" in state and "dropped" not in state and pf.follower.counts["drops"]:
            state["dropped"] = t
            assert pf.follower.counts["seeds"] == state["seeds"] + 1
            assert abs(pf.estimate().z[0] - pf.cloud_estimate().z[0]) < 0.05

    pf = _run(fourbar, defaults("pf"), hook=hook)
    d = pf.diagnostics()["refine"]
    assert "dropped" in state, d
    assert state["dropped"] - state["pushed"] <= 0.1 + 0.011
    assert d["drop_reasons"]["disagree"] + d["drop_reasons"]["lost"] >= 1
    assert d["seeds"] >= 2 and d["following"]  # seeded again
    assert _err(pf, truth) < 0.05


def test_a_cloud_that_drifted_is_drawn_again_from_the_follower(fourbar):
    """The cloud pushed 0.1 rad off (the follower on track): the readings of the
    disagreement prefer the follower, so the cloud is drawn again from it, and the
    follower goes on (no drop, no lock injection)."""
    truth = fourbar[0]
    state = {}

    def hook(pf, t):
        if "pushed" not in state and pf.follower.following and t > 0.8:
            c = pf.cloud_estimate()
            pf._init_gaussian(InitialState(c.z + 0.1, c.zd, np.full(1, 0.005), np.full(1, 0.05), None, c.branch))
            pf.follower.seeded_generation = pf.follower.generation  # the follower goes on with the moved cloud
            state["pushed"], state["locks"] = t, pf.counts["locks"]
        elif "pushed" in state and "redrawn" not in state and pf.follower.counts["redraws"]:
            state["redrawn"] = t
            assert abs(pf.cloud_estimate().z[0] - pf.estimate().z[0]) < 0.05

    pf = _run(fourbar, defaults("pf"), hook=hook)
    d = pf.diagnostics()["refine"]
    assert "redrawn" in state, d
    assert state["redrawn"] - state["pushed"] <= 0.5  # 0.45 s on this seed: the cloud first half-corrects itself
    assert d["drops"] == 0 and d["following"] and pf.counts["locks"] == state["locks"]
    assert _err(pf, truth) < 0.05


def test_a_new_cloud_drops_the_follower(fourbar):
    pf = _run(fourbar, defaults("pf"), until=1.0)
    assert pf.follower.following
    pf.reset(pf.t, fourbar[0].scenario.estimator_initial_state())  # a uniform start
    snap, cloud = pf.estimate(), pf.cloud_estimate()
    assert not pf.follower.following
    np.testing.assert_array_equal(snap.z, cloud.z)


def test_follower_options_are_validated_by_its_schema():
    with pytest.raises(ConfigError, match=r"pf\.refine\.estimator"):
        validate("pf", {"refine": {"estimator": "kalman"}}, "f.yaml", "pf")
    with pytest.raises(ConfigError, match=r"pf\.refine\.options\.plant_noise\.acceleration_psd"):
        validate("pf", {"refine": {"options": {"plant_noise": {"acceleration_psd": -1.0}}}}, "f.yaml", "pf")
    with pytest.raises(ConfigError, match=r"pf\.refine\.options"):
        validate("pf", {"refine": {"options": {"no_such_option": 1}}}, "f.yaml", "pf")
    cfg = validate("pf", {"refine": {"estimator": "errorekf", "options": {"plant_noise": {"acceleration_psd": 2.0}}}})
    assert cfg["refine"]["estimator"] == "errorekf"


def test_follower_options_follow_the_rule_with_the_scenario_context():
    """A motor the model does not know (adekf_slider_crank's speed controller) raises the
    follower's plant noise exactly as it raises that of a stand-alone UKF without input
    states when the cloud has none (``inputs: []``: the follower shares the cloud's model,
    the motor is acceleration noise, no input state, unless its options give ``inputs``);
    with the cloud's default input states (``inputs: auto``) the follower has its own."""
    sc = load_scenario(os.path.join(SCEN, "adekf_slider_crank.yaml"))
    mech, sensors, ctx = sc.estimator_mechanism(), sc.estimator_sensors(), scenario_context(sc)
    auto = configure("pf", defaults("pf"), mech, sensors, ctx).as_dict()
    assert [i["coordinate"] for i in auto["inputs"]] == ["theta"] and auto["inputs"][0]["limit"] == 5.0
    assert [i["coordinate"] for i in auto["refine"]["resolved"]["inputs"]] == ["theta"]
    pf_cfg = configure("pf", {**defaults("pf"), "inputs": []}, mech, sensors, ctx).as_dict()
    ukf_cfg = configure("ukf", {"inputs": []}, mech, sensors, ctx).as_dict()
    assert pf_cfg["refine"]["resolved"]["inputs"] == []
    assert pf_cfg["refine"]["resolved"]["plant_noise"] == ukf_cfg["plant_noise"]
    with_input = configure("pf", {"inputs": [], "refine": {"options": {"inputs": "auto"}}}, mech, sensors, ctx).as_dict()
    assert [i["coordinate"] for i in with_input["refine"]["resolved"]["inputs"]] == ["theta"]  # given: kept
    no_ctx = configure("ukf", defaults("ukf"), mech, sensors, None).as_dict()
    assert ukf_cfg["plant_noise"]["acceleration_psd"] > no_ctx["plant_noise"]["acceleration_psd"]
    assert "resolved" not in defaults("pf")["refine"]  # the defaults are not touched


def test_tuned_pf_section_gives_the_follower_the_tuned_ukf():
    """mbde tune's pf section (tuning/output.py): the PF's own fitted sigma_a at its own step
    and the follower with the tuned UKF's options, a config the PF validates."""
    from types import SimpleNamespace

    from mbde_core.estimators.registry import estimator_class
    from mbde_core.tuning.output import pf_section

    tuned = dict(defaults("ukf"), step=0.005, plant_noise={"acceleration_psd": 3.0, "velocity_psd": 0.0},
                 initial_sigma={"z": 0.05, "zd": 0.5})
    ukf = SimpleNamespace(name="ukf", chosen=estimator_class("ukf").Options.from_dict(tuned))
    pf_opts = estimator_class("pf").Options.from_dict(dict(defaults("pf"), step=0.0025, acceleration_sigma=7.5))
    pf = SimpleNamespace(name="pf", chosen=pf_opts, start_sigma_a=2.0, step=0.0025)
    sec, note = pf_section(pf, [ukf, pf])
    assert sec["step"] == 0.0025 and sec["acceleration_sigma"] == pytest.approx(7.5)
    assert sec["refine"] == {"estimator": "ukf", "options": {"plant_noise": {"acceleration_psd": 3.0, "velocity_psd": 0.0},
                                                           "initial_sigma": {"z": 0.05, "zd": 0.5},
                                                           "transition": "heun"}}
    assert "follower" in note and "marginal likelihood" in note
    cfg = validate("pf", sec, "tuned.yaml", "pf")
    assert cfg["refine"]["options"]["plant_noise"]["acceleration_psd"] == 3.0
    adekf = SimpleNamespace(name="adekf", chosen=ukf.chosen)
    assert "refine" not in pf_section(pf, [adekf, pf])[0]  # the ADE-KF does not follow
    # a UKF tuned with input states (an unknown motor) is no follower: the cloud's model has none
    with_inputs = dict(tuned, inputs=[{"coordinate": "theta", "psd": 1.0, "sigma0": 1.0, "limit": 1.0}])
    ukf_in = SimpleNamespace(name="ukf", chosen=estimator_class("ukf").Options.from_dict(with_inputs))
    sec, note = pf_section(pf, [ukf_in, pf])
    assert "refine" not in sec and "input states" in note
    # the start kept and its sigma derived inside the PF (null): the derived number is written
    pf0 = SimpleNamespace(name="pf", chosen=estimator_class("pf").Options.from_dict(dict(defaults("pf"), step=0.005)),
                          start_sigma_a=2.0, step=0.005)
    assert pf_section(pf0, [pf0])[0] == {"step": 0.005, "acceleration_sigma": 2.0}
