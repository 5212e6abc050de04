"""Identification parameters: key paths, bounds, the parameterised model and its
derivatives (checked against finite differences of the forward dynamics), the
calibrated YAML writer and the identifiability test."""
import math

import numpy as np
import pytest
import yaml

from conftest import mech_path


def _pm(name, keys, bounds=None):
    from mbde_core.identification.model import ParameterizedMechanism
    from mbde_core.model.mechanism import load_mechanism

    return ParameterizedMechanism(load_mechanism(mech_path(name)), keys, bounds)


def test_key_paths_aliases_wildcards_and_values():
    pm = _pm("fourbar", "bodies.crank.mass,bodies.coupler.inertia,gravity,joints.*.damping,bodies.rocker.cog.x,"
                        "planar_bodies[2].mass,bodies.rocker.mass,parameters.L2")
    assert pm.names == ["bodies.crank.mass", "bodies.coupler.inertia", "gravity", "joints.A.damping",
                        "joints.P1.damping", "joints.P2.damping", "joints.B.damping", "bodies.rocker.cog.x",
                        "bodies.rocker.mass", "parameters.L2"]
    np.testing.assert_allclose(pm.p0, [2.0, 8.0 * 64 / 3, 9.81, 0, 0, 0, 0, 2.5, 5.0, 8.0])
    assert pm.kinds == ["dynamic"] * 9 + ["geometric"]
    assert [p.unit for p in pm.params[:4]] == ["kg", "kg m^2", "m/s^2", "N m s/rad"]
    assert pm.lower[0] == 0 and pm.lower[3] == 0 and pm.lower[7] == -math.inf
    # the moving point P2's coordinates are only an assembly guess in this file (explicit lengths)
    assert _pm("fourbar", "points.P2.x").kinds == ["inert"]


def test_setting_values_follows_expressions_and_adds_joint_loads():
    pm = _pm("fourbar", "bodies.crank.mass,gravity,joints.P1.damping")
    spec = pm.spec([3.0, 10.0, 0.5])
    crank = spec.bodies[0]
    assert crank.mass == 3.0 and crank.I0 == pytest.approx(3.0 * 4 / 3)  # I0: (1/3)*mass*length^2 follows
    assert spec.gravity == pytest.approx((0.0, -10.0))
    (ld,) = spec.loads
    assert ld.kind == "joint_damping" and ld.c == 0.5 and {ld.body, ld.body2} == {0, 1}
    # an existing damping load is edited, not duplicated
    pend = _pm("pendulum_paper001", "joints.O.damping,loads.hinge.c")
    assert pend.P == 2 and pend.p0.tolist() == [2e-4, 2e-4]
    assert len(pend.spec([1e-3, 1e-3]).loads) == 1


@pytest.mark.parametrize("keys, message", [
    ("bodies.nope.mass", "unknown body 'nope'"),
    ("bodies.crank.colour", "identifiable body fields"),
    ("sensor.gyro.noise", "not an identifiable section"),
    ("sensors.gyro.noise", "sensors have one identifiable field: gain"),
    ("sensors.gyro.gain", "no known-input (type: effort) sensor"),
    ("joints.A.stiffness", "joints have two identifiable fields"),
    ("gravity.x,gravity.tilt", "overlap"),
    ("loads.x.c", "unknown load"),
    ("gravity.z", "gravity components"),
    ("bodies..mass", "malformed"),
    ("gravity,gravity.y", "overlap"),
])
def test_bad_key_paths_name_file_and_key(keys, message):
    from mbde_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _pm("fourbar", keys)
    assert message in str(err.value) and "fourbar.yaml" in str(err.value)


def test_bounds():
    from mbde_core.errors import ConfigError
    from mbde_core.identification.keypath import parse_bounds

    assert parse_bounds("gravity=9:10.5, joints.*.damping=:1") == {"gravity": (9.0, 10.5), "joints.*.damping": (-math.inf, 1.0)}
    pm = _pm("fourbar", "gravity,joints.*.damping", "gravity=9:10.5,joints.*.damping=0:1")
    assert pm.lower.tolist() == [9, 0, 0, 0, 0] and pm.upper.tolist() == [10.5, 1, 1, 1, 1]
    for bad in ("gravity", "gravity=2:1", "gravity=a:b"):
        with pytest.raises(ConfigError):
            parse_bounds(bad)
    with pytest.raises(ConfigError, match="matches no identified parameter"):
        _pm("fourbar", "gravity", "bodies.crank.mass=0:1")


@pytest.mark.parametrize("name, keys", [
    ("fourbar", "bodies.crank.mass,bodies.coupler.inertia,gravity,joints.*.damping,bodies.rocker.cog.x,bodies.rocker.cog.y"),
    ("slider_crank", "sliders.slider.mass,bodies.rod.mass,parameters.J_shafts,gravity.x"),
    ("fivebar", "bodies.crank1.mass,joints.P2.damping,gravity"),
])
def test_acceleration_sensitivity_matches_finite_differences(name, keys):
    from mbde_core.engine import dynamics, kinematics

    pm = _pm(name, keys)
    rng = np.random.default_rng(1)
    p = pm.p0 * (1 + 0.1 * rng.standard_normal(pm.P)) + 0.05 * (pm.p0 == 0)
    mech = pm.mechanism(p)
    z = mech.q0[mech.independent] + 0.2 * rng.standard_normal((6, mech.dof))
    q = kinematics.solve_position_continuation(mech, z)
    qd = kinematics.velocity(mech, q, rng.standard_normal((6, mech.dof)))
    ev = dynamics.evaluate(mech, 0.0, q, qd)
    S = pm.accel_sensitivity(p, 0.0, q, qd, ev.R, ev.qdd)
    for k in range(pm.P):
        h = 1e-6 * max(abs(p[k]), 1.0)
        lo, hi = p.copy(), p.copy()
        lo[k] -= h
        hi[k] += h
        fd = (dynamics.evaluate(pm.mechanism(hi), 0.0, q, qd).zdd - dynamics.evaluate(pm.mechanism(lo), 0.0, q, qd).zdd) / (2 * h)
        assert np.max(np.abs(S[:, :, k] - fd)) <= 1e-6 * max(np.max(np.abs(fd)), 1e-3), pm.names[k]


def test_invalid_parameter_values_are_config_errors():
    from mbde_core.errors import ConfigError

    pm = _pm("pendulum_paper001", "bodies.arm.inertia")
    with pytest.raises(ConfigError, match="I0"):
        pm.mechanism([1e-4])  # below m |cog|^2 = 1e-3


def test_calibrated_yaml_keeps_the_file_and_comments_the_values():
    from mbde_core.identification.calibrated import calibrated_text

    path = mech_path("fourbar")
    pm = _pm("fourbar", "bodies.coupler.mass,gravity,joints.A.damping,bodies.rocker.inertia")
    p = np.array([8.4, 9.9, 3.1, 40.0])
    std = np.array([0.2, 0.03, 0.1, np.nan])
    ok = np.array([True, True, True, False])
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    text, mode = calibrated_text(source, pm.doc, pm.document(p), pm.params, p, std, ok, ["header line"])
    assert mode == "edited"
    assert "FourBars1" in text and "# header line" in text  # original comments and the header survive
    doc = yaml.safe_load(text)
    assert doc["planar_bodies"][1]["mass"] == 8.4
    assert doc["gravity"] == pytest.approx([0, -9.9])
    assert doc["loads"] == [{"type": "joint_damping", "name": "joint_A_damping", "body": "crank", "c": 3.1}]
    assert "identified bodies.coupler.mass = 8.4 +- 0.2 kg" in text
    assert "identified joints.A.damping = 3.1 +- 0.1 N m s/rad" in text
    assert "bodies.rocker.inertia: not identifiable" in text
    # a layout that cannot be edited in place is rewritten whole, with the same content
    flow = source.replace("gravity: [0, -9.81]", "gravity: [0, -9.81]\nloads: []")
    text2, mode2 = calibrated_text(flow, yaml.safe_load(flow), pm.document(p), pm.params, p, std, ok, ["h"])
    assert mode2 == "rewritten" and yaml.safe_load(text2.split("---", 1)[1])["loads"][0]["c"] == 3.1


def test_identifiability_finds_the_mass_gravity_null_direction():
    """A pendulum J zdd = -m g l cos(theta) - b zd: m and g enter only as m g, so one
    direction of (m, g) is invisible to any data; J stays identifiable through b / J."""
    from mbde_core.identification.identifiability import analyse

    rng = np.random.default_rng(0)
    th, zd = rng.uniform(-3, 3, 500), rng.normal(0, 3, 500)
    grav = -0.1 * 9.82 * 0.1 * np.cos(th) / 0.0039
    zdd = grav - 2e-4 * zd / 0.0039
    T = np.stack([grav, -zdd, grav], axis=1)  # d zdd / d log(m, J, g)
    res = analyse(T.T @ T, ["mass", "inertia", "gravity"])
    assert res.rank == 2 and res.identifiable.tolist() == [False, True, False]
    (direction,) = res.null_directions
    assert set(direction) == {"mass", "gravity"} and direction["mass"] == pytest.approx(-direction["gravity"])
    res2 = analyse(T[:, :2].T @ T[:, :2], ["mass", "inertia"])
    assert res2.rank == 2 and res2.identifiable.all()
    # with the damping free too, (m, J, b) scale together: b moves as much as J in
    # relative terms although its column is ~100 times smaller than gravity's
    Tb = np.stack([grav, grav, -zdd, -2e-4 * zd / 0.0039], axis=1)  # d zdd / d log(m, g, J, b)
    res3 = analyse(Tb.T @ Tb, ["mass", "gravity", "inertia", "damping"])
    assert res3.rank == 2 and not res3.identifiable.any()
    Tg = Tb[:, [1, 3]]  # J known: g and b are
    res4 = analyse(Tg.T @ Tg, ["gravity", "damping"])
    assert res4.rank == 2 and res4.identifiable.all()


def test_identification_config_section(tmp_path):
    from mbde_core.errors import ConfigError
    from conftest import load_options
    from mbde_core.identification.config import load_identification_config

    path = tmp_path / "est.yaml"
    path.write_text("smoother: {step: 0.01}\nidentification: {noise_passes: 2, step: 0.002, integrator_relaxation: 0.05}\n"
                    "errorekf: {step: 0.005}\n")
    smoother, guess, ident = load_identification_config(str(path))
    assert smoother["step"] == 0.01 and smoother["integrator_relaxation"] == 0.05
    assert ident["noise_passes"] == 2 and ident["step"] == 0.002 and ident["rank_tolerance"] == 1e-9
    assert "errorekf" in load_options(str(path), ["errorekf"])  # the section is not an observer
    path.write_text("identification: {noise_passes: -1}\n")
    with pytest.raises(ConfigError, match="identification.noise_passes"):
        load_identification_config(str(path))
    path.write_text("identification: {colour: red}\n")
    with pytest.raises(ConfigError, match="identification.colour"):
        load_identification_config(str(path))


@pytest.mark.parametrize("slope", [-2.0, -0.3])
def test_sigma_search_brackets_and_converges(slope):
    """The noise search on a model of log(variance factor) = slope (s - s_true): descends
    by 10 per pass from a loose start, brackets the root, regula falsi converges in a few
    passes; with no root above the floor it stops at the floor."""
    from mbde_core.identification.noise import SigmaSearch

    s_true = np.log(0.4)
    search = SigmaSearch(1, 0.05, 10.0)
    s = np.array([np.log(14.0)])
    for passes in range(1, 12):
        s_next, done = search.update(s, slope * (s - s_true), np.array([np.log(1e-6)]))
        if done:
            break
        s = s_next
    assert done and passes <= 8 and abs(np.exp(s[0]) / 0.4 - 1) < 0.1
    floor = SigmaSearch(1, 0.05, 10.0)
    s = np.array([np.log(14.0)])
    for _ in range(6):
        s, done = floor.update(s, np.array([-1.0]), np.array([np.log(0.1)]))
        if done:
            break
    assert done and np.exp(s[0]) == pytest.approx(0.1)
