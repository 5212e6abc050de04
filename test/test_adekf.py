"""ADE-KF (paper 004): learned minimal-coordinate map, analytic F and H, PBH test, input estimation.

Numbers checked here:

- tanh MLP jets (orders 1-3) and the loss gradient against central differences;
- exact map g_n(z): J, d2q/dz2, d3q/dz3 against central differences of the map itself,
  and H2[zd, zd] = the engine's R'zd;
- learned map (paper 004's 2 x 8 tanh MLP, default options): held-out relative errors of
  the value and of the derivatives 1-3 within the documented tolerances
  (mbde_core.minimal.learned.TOLERANCES = 1e-4, 1e-3, 5e-3, 2e-2);
- F* = df*/dx and H = dh/dx (eqs. 34-51; body-frame axes, offset points, every input
  kind, loads with damping) against central differences; zdd equals the engine's
  R-matrix forward dynamics with the inputs as extra generalized forces;
- PBH (eqs. 57-58): the paper's configuration (slider accelerometer along the track) is
  observable, an accelerometer across the track (it reads only gravity) is not;
- the simulated slider-crank of paper 004 sec. 5 (scenario adekf_slider_crank, crank
  started at pi/2, see the bench): with only the slider accelerometer, the estimated motor
  torque's RMSE after the first second is below 5 % of the torque range and the crank
  angle error stays below 0.1 rad for the whole 10 s (no drift: the last 3 s are no worse
  than the first 3);
- `mbde replay BAG --estimators adekf` end to end (input RMSE in metrics.json, effort in
  the estimates' JointState).
"""
import itertools
import json
import os

import numpy as np
import pytest

from conftest import MSC_DIR, REPO, mech_path, run_mbde
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.errors import ConfigError, DataError
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors

SCENARIO = os.path.join(REPO, "config", "scenarios", "adekf_slider_crank.yaml")
CONFIG = os.path.join(REPO, "config", "estimators", "adekf.yaml")


# ------------------------------------------------------------------------------------------
# the MLP
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("g", [1, 2])
def test_mlp_jets_and_gradient_match_finite_differences(g):
    from mbde_core.learn.mlp import Features, TanhMLP

    rng = np.random.default_rng(11)
    feat = Features(np.array([True, False][:g]), np.zeros(g), np.full(g, 2.0))
    net = TanhMLP.initial([feat.p, 6, 5, 3], rng)
    for _, b in net.weights:
        b[:] = rng.normal(size=b.shape)
    z = rng.normal(size=(5, g))
    y = net.jet(feat.jet(z, 3))
    h = 1e-5
    for i in range(g):
        zp, zm = z.copy(), z.copy()
        zp[:, i] += h
        zm[:, i] -= h
        yp, ym = net.jet(feat.jet(zp, 3)), net.jet(feat.jet(zm, 3))
        for k in range(3):
            fd = (yp[k] - ym[k]) / (2 * h)
            assert np.max(np.abs(fd - y[k + 1][..., i])) < 1e-8 * max(1.0, np.max(np.abs(y[k + 1])))
    # loss gradient: symmetric targets (derivative tensors are symmetric)
    tg = [rng.normal(size=a.shape) for a in y]
    for k in (2, 3):
        perms = list(itertools.permutations(range(k)))
        tg[k] = sum(np.transpose(tg[k], (0, 1) + tuple(2 + np.array(p))) for p in perms) / len(perms)
    w = np.array([1.0, 0.7, 0.5, 0.3])
    phi = feat.jet(z, 3)
    _, grad = net.loss_and_gradient(phi, tg, w)
    th = net.vector()
    fd = np.zeros_like(th)
    for j in range(th.size):
        e = np.zeros_like(th)
        e[j] = 1e-6
        fd[j] = (net.with_vector(th + e).loss_and_gradient(phi, tg, w)[0]
                 - net.with_vector(th - e).loss_and_gradient(phi, tg, w)[0]) / 2e-6
    assert np.max(np.abs(fd - grad)) < 1e-6 * np.max(np.abs(grad))


# ------------------------------------------------------------------------------------------
# the maps
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["slider_crank", "fivebar", "msc"])
def test_exact_map_derivatives(name):
    from mbde_core.engine import kinematics
    from mbde_core.minimal.exact import ExactMap

    m = load_mechanism(os.path.join(MSC_DIR, "fourbars1-with-rel-angle.yaml") if name == "msc" else mech_path(name))
    E = ExactMap(m)
    z0 = m.q0[m.independent] + 0.4
    jet = E.evaluate(z0)
    assert jet.ok.all() and np.max(np.abs(m.phi(jet.q[0]))) < 1e-10
    h = 1e-5
    for i in range(m.dof):
        zp, zm = z0.copy(), z0.copy()
        zp[i] += h
        zm[i] -= h
        jp, jm = E.evaluate(zp, q_guess=jet.q[0]), E.evaluate(zm, q_guess=jet.q[0])
        for lo, hi, ref in ((jp.q, jm.q, jet.J), (jp.J, jm.J, jet.H2), (jp.H2, jm.H2, jet.H3)):
            fd = (lo - hi) / (2 * h)
            assert np.max(np.abs(fd - ref[..., i])) < 1e-8 * max(1.0, np.max(np.abs(ref)))
    zd = np.linspace(0.7, 1.9, m.dof)
    qd = jet.velocity(zd[None])[0]
    np.testing.assert_allclose(jet.acceleration(zd[None], np.zeros((1, m.dof)))[0],
                               kinematics.rdot_zd(m, jet.q[0], qd), atol=1e-12)
    # batched (numpy) = one by one (scalar kernels, ExactMap._evaluate_scalar)
    Z = z0 + np.linspace(0.0, 0.5, 7)[:, None]
    jb = E.evaluate(Z, q_guess=jet.q[0])
    js = [E.evaluate(Z[k], q_guess=jet.q[0]) for k in range(7)]
    for f, tol in (("q", 1e-13), ("J", 1e-12), ("H2", 1e-11), ("H3", 1e-10)):
        ref = getattr(jb, f)
        np.testing.assert_allclose(np.concatenate([getattr(j, f) for j in js]), ref, atol=tol * max(1.0, np.max(np.abs(ref))))


@pytest.fixture(scope="module")
def learned_slider(tmp_path_factory):
    from mbde_core.minimal.learned import train_map

    m = load_mechanism(mech_path("slider_crank"))
    lm, rep = train_map(m)
    path = tmp_path_factory.mktemp("maps") / "slider_crank.map.npz"
    lm.save(str(path))
    return m, lm, rep, str(path)


def test_learned_map_reproduces_exact_map_on_held_out_angles(learned_slider):
    from mbde_core.minimal.learned import TOLERANCES, LearnedMap

    m, lm, rep, path = learned_slider
    acc = rep["accuracy"]
    assert acc["held_out"] >= 300 and rep["fit_seconds"] < 60
    for k in range(4):
        assert acc["rel_max"][k] < TOLERANCES[k], (k, acc["rel_max"])
    # independent angles: own held-out draw, off the training grid, with another seed
    from mbde_core.minimal.exact import ExactMap

    z = np.random.default_rng(5).uniform(-np.pi, np.pi, (50, 1))
    le = lm.evaluate(z)
    ex = ExactMap(m).evaluate(z, q_guess=le.q)  # the network's q as Newton guess: same branch
    assert ex.ok.all()
    for k, (a, b) in enumerate(((le.q, ex.q), (le.J, ex.J), (le.H2, ex.H2), (le.H3, ex.H3))):
        assert np.max(np.abs(a - b)) < TOLERANCES[k] * np.max(np.abs(b))
    np.testing.assert_array_equal(le.q[:, m.independent], z)  # copied, not learned
    # file round trip, and refusal for another linkage
    back = LearnedMap.load(path, m)
    np.testing.assert_array_equal(back.evaluate(z).H3, le.H3)
    with pytest.raises(DataError, match="another mechanism"):
        LearnedMap.load(path, load_mechanism(mech_path("fivebar")))
    with pytest.raises(DataError, match="not found"):
        LearnedMap.load(path + ".missing", m)


# ------------------------------------------------------------------------------------------
# F and H
# ------------------------------------------------------------------------------------------
SENSORS = """
- {name: acc, type: accelerometer, slider: slider, axes: [0], rate: 1000, noise: {sigma: 0.05}}
- {name: accb, type: accelerometer, body: rod, offset: [0.07, 0.01], axes: [0.3, 1.9], rate: 1000, noise: {sigma: 0.05}}
- {name: gyro, type: gyroscope, body: rod, rate: 1000, noise: {sigma: 0.01}}
- {name: enc, type: encoder, body: crank, rate: 1000, noise: {sigma: 0.01}}
"""


@pytest.mark.parametrize("source,rates", [("exact", False), ("learned", False), ("exact", True)])
def test_transition_and_measurement_jacobians(source, rates, learned_slider):
    from mbde_core.engine import dynamics
    from mbde_core.minimal.augmented import AugmentedModel, parse_inputs
    from mbde_core.minimal.exact import ExactMap
    from mbde_core.minimal.learned import LearnedMap
    from mbde_core.scenario.scenario import load_scenario

    mech = load_scenario(SCENARIO).truth_mechanism()  # slider damping + the motor's generalized force
    ss = load_sensors(parse_yaml(SENSORS), mech)
    inputs = parse_inputs(mech, [{"coordinate": "theta"}, {"torque": "rod"}, {"force": "P2", "direction": [1, 1]}])
    cmap = ExactMap(mech) if source == "exact" else LearnedMap.load(learned_slider[3], mech)
    model = AugmentedModel(mech, ss, cmap, inputs, input_rates=rates)
    x = np.array([0.7, 35.0, 0.3, -0.2, 1.5] + ([4.0, -3.0, 2.0] if rates else []))
    t = 0.3
    names = ss.names
    lin = model.evaluate(t, x, model.jet(x[:1]), names)
    zdd, qdd = dynamics.forward(mech, t, lin.q, lin.qd, extra_Q=lin.S @ x[2:5])
    if source == "exact":
        np.testing.assert_allclose(lin.zdd, zdd, rtol=1e-10)
        np.testing.assert_allclose(lin.qdd, qdd, atol=1e-9)

    def f(xx):
        li = model.evaluate(t, xx, model.jet(xx[:1], q_guess=lin.q), names, jacobians=False)
        fx = np.zeros_like(xx)
        fx[0], fx[1] = xx[1], li.zdd[0]
        if rates:
            fx[2:5] = xx[5:]
        return fx, li.h

    A_fd, H_fd = np.zeros_like(lin.A), np.zeros_like(lin.H)
    for k in range(len(x)):
        h = 1e-6 * max(1.0, abs(x[k]))
        xp, xm = x.copy(), x.copy()
        xp[k] += h
        xm[k] -= h
        (fp, hp), (fm, hm) = f(xp), f(xm)
        A_fd[:, k], H_fd[:, k] = (fp - fm) / (2 * h), (hp - hm) / (2 * h)
    assert np.max(np.abs(A_fd - lin.A)) < 1e-7 * np.max(np.abs(lin.A))
    assert np.max(np.abs(H_fd - lin.H)) < 1e-7 * np.max(np.abs(lin.H))


@pytest.mark.parametrize("rates", [False, True])
def test_one_dof_float_path_equals_the_numpy_path(mechanisms, rates):
    from mbde_core.minimal.augmented import AugmentedModel, parse_inputs
    from mbde_core.minimal.exact import ExactMap

    mech = mechanisms["fourbar"]  # no loads: augmented_g1 applies (not with a torque input)
    ss = load_sensors(parse_yaml("\n".join(SENSORS.replace("rod", "coupler").splitlines()[2:])), mech)
    inputs = parse_inputs(mech, [{"coordinate": mech.coordinate_names[mech.independent[0]]}, {"force": "P2", "direction": [1, 1]}])
    model = AugmentedModel(mech, ss, ExactMap(mech), inputs, input_rates=rates)
    assert model._g1
    x = np.array([0.7, 3.5, 0.3, -0.2] + ([4.0, -3.0] if rates else []))
    jet = model.jet(x[:1])
    a, b = model.evaluate(0.3, x, jet, ss.names), model.evaluate(0.3, x, jet, ss.names, jacobians=False)
    model._g1 = False
    c, d = model.evaluate(0.3, x, jet, ss.names), model.evaluate(0.3, x, jet, ss.names, jacobians=False)
    for u, v in ((a, c), (b, d)):
        for f in ("q", "qd", "qdd", "zdd", "S", "h") + (("A", "H") if u is a else ()):
            np.testing.assert_allclose(getattr(u, f), getattr(v, f), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------
# observability
# ------------------------------------------------------------------------------------------
ACC = "[{name: acc, type: accelerometer, slider: slider, axes: [0], rate: 1000, noise: {sigma: 0.05}}]"
BLIND = "[{name: blind, type: accelerometer, slider: slider, axes: [pi/2], rate: 1000, noise: {sigma: 0.05}}]"


def test_pbh_paper_configuration_observable_blind_accelerometer_not():
    from mbde_core.minimal.augmented import AugmentedModel, parse_inputs
    from mbde_core.minimal.exact import ExactMap
    from mbde_core.minimal.observability import observability_along, pbh_test, steady_states

    m = load_mechanism(mech_path("slider_crank"))
    ss = load_sensors(parse_yaml(ACC[:-1] + ", " + BLIND[1:]), m)
    model = AugmentedModel(m, ss, ExactMap(m), parse_inputs(m, []))
    X = steady_states(model, 40.0, 36)
    good = observability_along(model, ["acc"], X)
    blind = observability_along(model, ["blind"], X)
    deficient = [k for k, r in enumerate(good.results) if not r.observable]
    assert deficient == [0, 18]  # only at the two dead centres theta = 0, pi
    assert min(r.margin for k, r in enumerate(good.results) if k not in deficient) > 1e-4
    assert not any(r.observable for r in blind.results)
    assert max(r.margin for r in blind.results) < 1e-12
    # a trivially observable pair and an unobservable one
    assert pbh_test(np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[1.0, 0.0]])).observable
    assert not pbh_test(np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[0.0, 1.0]])).observable


def test_observability_cli():
    ok = run_mbde("adekf-observability", mech_path("slider_crank"), "--sensors", ACC, "--samples", "24")
    assert ok.returncode == 0, ok.stderr
    assert "OBSERVABLE along the trajectory" in ok.stdout
    bad = run_mbde("adekf-observability", mech_path("slider_crank"), "--sensors", BLIND, "--samples", "24", "--json")
    assert bad.returncode == 1, bad.stderr
    doc = json.loads(bad.stdout)
    assert doc["observable"] is False and doc["full_rank_states"] == 0
    err = run_mbde("adekf-observability", mech_path("slider_crank"), "--sensors", ACC, "--only", "nope")
    assert err.returncode == 2 and "unknown sensor" in err.stderr


# ------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------
def test_config_file_and_errors(tmp_path):
    from conftest import load_options
    from mbde_core.estimators.configure import validate

    cfg = load_options(CONFIG, ["adekf"])["adekf"]
    assert cfg["map"] == "exact" and cfg["step"] == 0.001 and cfg["r_a"] > 0
    with pytest.raises(ConfigError, match="adekf.map"):
        validate("adekf", {"map": "neural"})
    with pytest.raises(ConfigError, match="adekf.r_a"):
        validate("adekf", {"r_a": -1})
    with pytest.raises(ConfigError, match="learn.hidden"):
        validate("adekf", {"learn": {"hidden": [8, 0]}})
    from mbde_core.minimal.augmented import parse_inputs

    m = load_mechanism(mech_path("slider_crank"))
    with pytest.raises(ConfigError, match=r"inputs\[0\].coordinate"):
        parse_inputs(m, [{"coordinate": "phi"}])
    with pytest.raises(ConfigError, match="exactly one"):
        parse_inputs(m, [{"coordinate": "theta", "torque": "crank"}])
    # a relative map_file is resolved next to the config file
    p = tmp_path / "e.yaml"
    p.write_text("adekf: {map: learned, map_file: maps/x.npz}\n")
    cfg = load_options(str(p), ["adekf"])["adekf"]
    assert cfg["map_file"] == str(tmp_path / "maps" / "x.npz")


# ------------------------------------------------------------------------------------------
# paper 004 sec. 5: the simulated slider-crank with only the accelerometer
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slider_run():
    from mbde_bench.adekf import run_adekf, slider_metrics
    from mbde_core.estimators.base import InitialState
    from conftest import load_options
    from mbde_core.scenario.scenario import load_scenario
    from mbde_core.simulator import run as simulate
    from mbde_core.types import Measurement

    sc = load_scenario(SCENARIO).with_overrides(settings=["initial_state.position.theta=pi/2"])
    res = simulate(sc)
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    assert sensors.names == ["accel_slider"]  # the encoder is a reference sensor only
    ts, vs = res.measurements["accel_slider"]
    ms = [Measurement(float(t), "accel_slider", v) for t, v in zip(ts, vs)]
    cfg = load_options(CONFIG, ["adekf"])["adekf"]
    ini = sc.estimator_initial_state()
    init = InitialState(ini.z, ini.zd, np.full(1, cfg["initial_sigma"]["z"]), np.full(1, cfg["initial_sigma"]["zd"]), ini.q, 0)
    run, est = run_adekf(mech, sensors, cfg, ms, init)
    truth = {"t": res.t, "q": res.q, "qd": res.qd, "qdd": res.qdd, "effort": res.effort}
    coord = int(mech.independent[0])
    return run, slider_metrics(run, truth, coord, int(mech.px[mech.point_index("P2")])), truth, coord


def test_slider_crank_torque_from_one_accelerometer(slider_run):
    run, m, truth, coord = slider_run
    assert m["steps"] == 10001
    assert m["torque_pct_after_1s"] < 5.0, m
    assert run["diagnostics"]["assembly_failures"] == 0


def test_slider_crank_angle_error_bounded_no_drift(slider_run):
    run, m, truth, coord = slider_run
    t = run["t"]
    err = (run["z"][:, 0] - truth["q"][np.searchsorted(truth["t"], t - 1e-9), coord] + np.pi) % (2 * np.pi) - np.pi
    assert np.max(np.abs(err)) < 0.1
    first, last = np.abs(err[t < 3.0]), np.abs(err[t > t[-1] - 3.0])
    rms_first, rms_last = np.sqrt(np.mean(first**2)), np.sqrt(np.mean(last**2))
    assert np.max(last) < 0.1 and rms_last < 0.03
    assert rms_last < 3.0 * rms_first + 0.005  # at 60 rad/s, not drifting away from the 40 rad/s level


# ------------------------------------------------------------------------------------------
# CLI: learn-map, replay
# ------------------------------------------------------------------------------------------
def test_learn_map_cli(tmp_path):
    out = tmp_path / "sc.npz"
    r = run_mbde("learn-map", mech_path("slider_crank"), "--out", out, "--samples", "180", "--time-limit", "3",
                 "--restarts", "1")
    assert r.returncode == 0, r.stderr
    assert out.exists() and "held-out accuracy" in r.stdout
    again = run_mbde("learn-map", mech_path("slider_crank"), "--out", out)
    assert again.returncode == 2 and "exists" in again.stderr


def test_replay_adekf_end_to_end(tmp_path):
    bag = tmp_path / "bag"
    r = run_mbde("simulate", SCENARIO, "--out", bag, "--set", "duration=2", "--set", "initial_state.position.theta=pi/2")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "replay"
    r = run_mbde("replay", bag, "--estimators", "adekf", "--config", CONFIG, "--out", out, "--no-plots")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "metrics.json").read_text())
    met = doc["estimators"]["adekf"]["metrics"]
    assert met["inputs"]["theta"]["rmse_after_1s"] < 0.5
    from mbde_core.rosio.bag_reader import BagReader

    with BagReader(str(out / "estimates")) as reader:
        msgs = [msg for _, _, msg in reader.messages(topics=["/mbde/adekf/joint_states"])]
    assert msgs and list(msgs[-1].name).index("theta") == 4
    assert max(abs(m.effort[4]) for m in msgs) > 0.5
