"""Scenario YAML: loading, the Python API (truth vs estimator models, model errors,
overrides, initial states on branches), the bag description round trip, and one-line
config errors (exit status 2)."""
import math
import os

import numpy as np
import pytest
import yaml

from conftest import REPO, mech_path
from mbde_core.cli.main import main as mbde
from mbde_core.errors import ConfigError, DataError
from mbde_core.scenario import load_scenario
from mbde_core.scenario.description import (description_document, read_description,
                                            scenario_from_description, write_description)
from mbde_core.scenario.overrides import parse_key_path

SCEN_DIR = os.path.join(REPO, "config", "scenarios")
SHIPPED = sorted(f[:-5] for f in os.listdir(SCEN_DIR) if f.endswith(".yaml"))


def scen(name):
    return os.path.join(SCEN_DIR, name + ".yaml")


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


FOURBAR_PF = f"""
mechanism: {mech_path("fourbar_pf")}
sensors:
  - {{name: gyro, type: gyroscope, body: rocker, period: 0.005, noise: {{sigma: 0.01}}}}
duration: 0.1
step: 0.001
"""


def test_shipped_scenarios_are_the_documented_set():
    assert SHIPPED == ["adekf_slider_crank", "fivebar_encoder", "fivebar_gyro", "fourbar_encoder",
                       "fourbar_gyro", "fourbar_imu", "pendulum_release", "pf_rig_branch0", "pf_rig_branch1", "pf_sim"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load(name):
    sc = load_scenario(scen(name))
    assert sc.name == name and sc.integrator == "ali3p" and sc.step == 0.001
    truth, est = sc.truth_mechanism(), sc.estimator_mechanism()
    assert np.max(np.abs(truth.phi(sc.initial_state.q))) < 1e-12
    assert np.max(np.abs(truth.phi_q(sc.initial_state.q) @ sc.initial_state.qd)) < 1e-12
    assert list(est.independent) == list(truth.independent)
    for s in sc.sensors:
        assert sc.sensor_every[s.name] * sc.step == pytest.approx(s.period, rel=1e-12)


PAPER_003 = {  # name: (mechanism, sensor type, bodies, sigma)
    "fourbar_gyro": ("fourbar", "gyroscope", ["coupler"], math.radians(1)),
    "fourbar_encoder": ("fourbar", "encoder", ["crank"], math.radians(1)),
    "fivebar_gyro": ("fivebar", "gyroscope", ["coupler1", "coupler2"], math.radians(1)),
    "fivebar_encoder": ("fivebar", "encoder", ["crank1", "crank2"], math.radians(1)),
}


@pytest.mark.parametrize("name", sorted(PAPER_003))
def test_paper_003_scenarios(name):
    mech, kind, bodies, sigma = PAPER_003[name]
    sc = load_scenario(scen(name))
    truth = sc.truth_mechanism()
    assert truth.name == mech and sc.duration == 10 and sc.filter_step == 0.005
    assert [s.kind for s in sc.sensors] == [kind] * len(bodies)
    assert [truth.body_names[s.body] for s in sc.sensors] == bodies
    assert all(s.noise.sigma[0] == sigma and s.period == 0.005 for s in sc.sensors)
    # released at rest from the file's configuration, gravity error +1 m/s^2 on the estimator only
    assert np.array_equal(sc.initial_state.q, truth.q0) and not sc.initial_state.qd.any()
    assert truth.gravity.tolist() == [0.0, -9.81]
    assert sc.estimator_mechanism().gravity.tolist() == [0.0, -10.81]
    # the benchmark's sensor periods: 1, 5, 10, 15 filter steps
    for k in (1, 5, 10, 15):
        sk = sc.with_overrides(sensor_period=k * sc.filter_step)
        assert [sk.sensor_every[s.name] for s in sk.sensors] == [5 * k] * len(bodies)
    assert sc.with_overrides(gravity_error=4).estimator_mechanism().gravity.tolist() == [0.0, -13.81]


def test_paper_000_and_004_scenarios():
    sim = load_scenario(scen("pf_sim"))
    (gyro,) = sim.sensors
    truth = sim.truth_mechanism()
    assert truth.name == "fourbar_pf" and sim.duration == 10
    assert truth.body_names[gyro.body] == "rocker" == truth.body_names[int(np.argmax([b.length for b in truth.spec.bodies]))]
    assert gyro.noise.sigma[0] == pytest.approx(math.radians(0.3), rel=1e-15)
    assert sim.initial_state.z[0] == pytest.approx(math.radians(60)) and not sim.initial_state.zd.any()
    for b in (0, 1):
        rig = load_scenario(scen(f"pf_rig_branch{b}"))
        assert rig.initial_state.branch == b and rig.sensors["gyro_rocker"].period == 0.006
        assert [ld.kind for ld in rig.unmodelled_loads] == ["joint_damping"] * 2
        assert not rig.estimator_mechanism().loads  # the friction is not in the estimator's model
        assert rig.truth_mechanism().loads.velocity_dependent
        assert rig.reference_sensors.names == ["crank_encoder"] and len(rig.sensors) == 1
    up, down = (load_scenario(scen(f"pf_rig_branch{b}")).initial_state for b in (0, 1))
    assert up.z == pytest.approx(down.z) and up.q[3] > 0 > down.q[3]  # P2 above / below the line A-B
    ade = load_scenario(scen("adekf_slider_crank"))
    (acc,) = ade.sensors
    assert acc.kind == "accelerometer" and acc.point == ade.truth_mechanism().spec.sliders[0].point
    assert ade.controller.name == "motor" and [ade.controller.target(t) for t in (0, 3.3, 3.4, 6.6, 6.7, 10)] == [40, 40, 50, 50, 60, 60]
    assert [ld.kind for ld in ade.unmodelled_loads] == ["point_damping"]
    assert ade.reference_sensors.names == ["motor_encoder"]
    assert not ade.estimator_mechanism().loads  # neither the friction nor the motor torque


def test_model_errors_change_the_estimator_not_the_truth(tmp_path):
    text = FOURBAR_PF + """
model_errors:
  gravity: 4
  bodies: {crank: {length: 2, mass: 3}}
  initial_position: {theta: pi/16}
  initial_velocity: {theta: 0.5}
"""
    sc = load_scenario(write(tmp_path, text))
    truth, est = sc.truth_mechanism(), sc.estimator_mechanism()
    ref = load_scenario(write(tmp_path, FOURBAR_PF, "ref.yaml")).truth_mechanism()
    tb, eb = truth.spec.bodies[0], est.spec.bodies[0]
    assert tb == ref.spec.bodies[0] and truth.gravity.tolist() == [0.0, -9.81]
    assert np.array_equal(truth.M, ref.M)
    assert est.gravity.tolist() == [0.0, -13.81]
    assert eb.length == pytest.approx(1.02 * tb.length, rel=1e-15) and eb.mass == pytest.approx(1.03 * tb.mass, rel=1e-15)
    assert eb.I0 == pytest.approx(tb.I0 * 1.03 * 1.02**2, rel=1e-14)
    assert np.linalg.norm(est.points(est.q0)[1]) == pytest.approx(0.1275, rel=1e-12)  # crank re-assembled longer
    e0, t0 = sc.estimator_initial_state(), sc.initial_state
    assert e0.z[0] - t0.z[0] == pytest.approx(math.pi / 16) and e0.zd[0] - t0.zd[0] == pytest.approx(0.5)
    assert np.max(np.abs(est.phi(e0.q))) < 1e-12 and e0.branch == t0.branch
    assert "gravity +4 m/s^2" in sc.model_errors.describe()
    # the estimator's sensors use its own geometry
    (g_est,) = sc.sensors_for(est)
    assert g_est.mech is est and sc.sensors["gyro"].mech is truth


def test_initial_state_release_and_branches(tmp_path):
    base = FOURBAR_PF + "initial_state: {release_from: {theta: 1.5}, branch: %d}\n"
    states = [load_scenario(write(tmp_path, base % b, f"b{b}.yaml")).initial_state for b in (0, 1)]
    sc = load_scenario(write(tmp_path, base % 0, "b0.yaml"))
    from mbde_core.engine.branches import BranchTool

    bt = BranchTool(sc.truth_mechanism())
    assert [int(bt.label(s.q[None])[0]) for s in states] == [0, 1]
    for s in states:
        assert s.z[0] == 1.5 and not s.qd.any()
        assert np.max(np.abs(sc.truth_mechanism().phi(s.q))) < 1e-12
    moving = load_scenario(write(tmp_path, FOURBAR_PF + "initial_state: {position: {theta: 0.2}, velocity: {theta: -3}}\n"))
    assert moving.initial_state.z[0] == 0.2 and moving.initial_state.zd[0] == -3.0
    assert np.max(np.abs(moving.truth_mechanism().phi_q(moving.initial_state.q) @ moving.initial_state.qd)) < 1e-12


def test_with_overrides_and_settings(tmp_path):
    sc = load_scenario(scen("fivebar_gyro"))
    o = sc.with_overrides(sensor_period=0.075, gravity_error=4, seed=9, duration=0.5,
                          settings=["sensors[1].noise.sigma=0.1", "initial_state.velocity.theta1=2"])
    assert (o.seed, o.duration, o.n_steps) == (9, 0.5, 500)
    assert [o.sensor_every[n] for n in o.sensors.names] == [75, 75]
    assert o.sensors["gyro_coupler2"].noise.sigma[0] == 0.1 and o.initial_state.zd.tolist() == [2.0, 0.0]
    assert o.estimator_mechanism().gravity.tolist() == [0.0, -13.81]
    assert sc.seed == 3001 and sc.sensor_every["gyro_coupler1"] == 5  # the original is unchanged
    cli = load_scenario(scen("adekf_slider_crank"), ["duration=1.5", "speed_controller.target.steps=[[0, 10], [1, 20]]"])
    assert cli.n_steps == 1500 and [cli.controller.target(t) for t in (0.5, 1.0)] == [10, 20]
    assert parse_key_path("a.b[2].c") == ["a", "b", 2, "c"] == parse_key_path("a.b.2.c")


def test_sensors_file_and_mechanism_sensors(tmp_path):
    (tmp_path / "sens.yaml").write_text(
        "sensors:\n  - {name: enc, type: encoder, body: crank, rate: 200, noise: {sigma: 0.01}}\n")
    sc = load_scenario(write(tmp_path, f"mechanism: {mech_path('fourbar')}\nsensors_file: sens.yaml\nduration: 1\nstep: 0.001\n"))
    assert sc.sensors.names == ["enc"] and sc.sensor_every["enc"] == 5 and sc.sensors_file == str(tmp_path / "sens.yaml")
    assert sc.with_overrides(sensor_period=0.01).sensor_every["enc"] == 10
    mech = yaml.safe_load(open(mech_path("pendulum")))
    mech["sensors"] = [{"name": "g", "type": "gyroscope", "body": "rod", "rate": 100, "noise": {"sigma": 0.1}}]
    (tmp_path / "pend.yaml").write_text(yaml.safe_dump(mech))
    sc = load_scenario(write(tmp_path, "mechanism: pend.yaml\nduration: 1\nstep: 0.002\n", "p.yaml"))
    assert sc.sensors.names == ["g"] and sc.sensor_every["g"] == 5


@pytest.mark.parametrize("name", ["adekf_slider_crank", "pf_rig_branch1", "fivebar_encoder"])
def test_description_round_trip(name):
    sc = load_scenario(scen(name), ["model_errors.initial_position={%s: 0.1}" % load_scenario(scen(name)).truth_mechanism().independent_names[0]])
    text = write_description(sc)
    doc = read_description(text)
    assert doc["sources"]["scenario"] == scen(name)
    assert doc["truth"]["q0"] == sc.initial_state.q.tolist()  # exact float64
    back = scenario_from_description(text)
    assert back.name == sc.name and back.sensors.names == sc.sensors.names
    assert back.reference_sensors.names == sc.reference_sensors.names
    assert np.array_equal(back.initial_state.q, sc.initial_state.q)
    assert np.array_equal(back.estimator_initial_state().q, sc.estimator_initial_state().q)
    assert np.array_equal(back.estimator_mechanism().M, sc.estimator_mechanism().M)
    assert np.array_equal(back.estimator_mechanism().gravity, sc.estimator_mechanism().gravity)
    assert [s.topic for s in back.all_sensors] == [s.topic for s in sc.all_sensors]
    assert (back.controller is None) == (sc.controller is None)
    assert description_document(back)["scenario"] == description_document(sc)["scenario"]
    # a tampered initial state is detected
    doc["truth"]["q0"][0] += 1e-3
    with pytest.raises(DataError, match="initial state differs"):
        scenario_from_description(yaml.safe_dump(doc))
    with pytest.raises(DataError, match="not an mbde simulation description"):
        scenario_from_description("format: other\n")


# ------------------------------------------------------------------------------------ errors
BAD = [
    ("missing mechanism file", FOURBAR_PF.replace(mech_path("fourbar_pf"), "nowhere/mech.yaml"),
     "mechanism", "mechanism file not found"),
    ("unknown sensor body", FOURBAR_PF.replace("body: rocker", "body: rockr"), "sensors[0].body", "unknown body 'rockr'"),
    ("period not a multiple", FOURBAR_PF.replace("period: 0.005", "period: 0.0055"), "sensors[0].period",
     "not an integer multiple of the internal step 0.001 s (5.5 steps)"),
    ("rate not a multiple", FOURBAR_PF.replace("period: 0.005", "rate: 300"), "sensors[0].rate", "not an integer multiple"),
    ("unknown key", FOURBAR_PF + "seeed: 3\n", "seeed", "unknown key (did you mean 'seed'?)"),
    ("missing duration", FOURBAR_PF.replace("duration: 0.1\n", ""), "duration", "missing required key"),
    ("bad integrator", FOURBAR_PF + "integrator: rk5\n", "integrator", "must be one of"),
    ("unknown initial coordinate", FOURBAR_PF + "initial_state: {release_from: {P1.x: 1}}\n",
     "initial_state.release_from.P1.x", "not an independent coordinate"),
    ("no such branch", FOURBAR_PF + "initial_state: {branch: 2}\n", "initial_state.branch", "cannot be assembled on branch 2"),
    ("bad load", FOURBAR_PF + "unmodelled_loads: [{type: joint_damping, body: crank}]\n", "unmodelled_loads[0].c",
     "missing required key"),
    ("controller coordinate", FOURBAR_PF + "speed_controller: {coordinate: phi, target: 1, kp: 1}\n",
     "speed_controller.coordinate", "unknown coordinate 'phi'"),
    ("model error body", FOURBAR_PF + "model_errors: {bodies: {crankk: {mass: 1}}}\n", "model_errors.bodies.crankk", "unknown body"),
    ("duplicate topic", FOURBAR_PF + "reference_sensors: [{name: e, type: encoder, body: crank, period: 0.005, topic: /mbde/ground_truth, noise: {sigma: 0}}]\n",
     "reference_sensors[0].topic", "already used"),
]


@pytest.mark.parametrize("label, text, keypath, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_scenario_one_line_error(tmp_path, capsys, label, text, keypath, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.path == keypath and fragment in err.value.message
    assert mbde(["simulate", path, "--out", str(tmp_path / "bag")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"mbde simulate: error: {path}: {keypath}: {err.value.message}"
    assert not (tmp_path / "bag").exists()


BAD_SET = [
    ("duration", "--set: expected KEY.PATH=VALUE, got 'duration'"),
    ("sensors[4].period=1", "--set: sensors[4]: index out of range (the list has 1 entries)"),
    ("durration=1", "--set: durration: unknown scenario key (did you mean 'duration'?)"),
    ("duration=[1", "--set: duration: cannot parse the value '[1' as YAML"),
    ("step.x=1", "--set: step.x: cannot set key 'x' inside a float"),
    ("duration=-2", "duration: must be > 0, got -2"),
]


@pytest.mark.parametrize("setting, fragment", BAD_SET)
def test_bad_set_one_line_error(tmp_path, capsys, setting, fragment):
    path = write(tmp_path, FOURBAR_PF)
    assert mbde(["simulate", path, "--out", str(tmp_path / "bag"), "--set", setting]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines
