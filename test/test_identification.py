"""Joint state and parameter identification end to end: synthetic recordings with known
parameters (paper 001 pendulum, paper 003 four-bar), ``mbde identify`` on bags and its
outputs. (Coverage over 40 seeded runs and speed: ``mbde bench identify``.)"""
import json
import os

import numpy as np
import pytest
import yaml

from conftest import REPO, run_mbde


def _recordings(case, seed, duration, releases=None, psd=1e-3, doc=None):
    from mbde_core.estimators.base import InitialState
    from mbde_core.identification import synthetic as S
    from mbde_core.identification.identify import Recording

    mech, sensors = S.case_mechanism(case, doc)
    rng = np.random.default_rng(seed)
    z0 = S.release_states(case, mech, rng, releases)
    recs = S.simulate(mech, sensors, z0, duration, seed=seed, acceleration_psd=psd)
    g = mech.dof
    return mech, [Recording(f"r{k}", r.measurements, InitialState(r.z[0], r.zd[0], np.full(g, 0.05), np.full(g, 0.5), r.q[0]),
                            sensors) for k, r in enumerate(recs)]


def test_fourbar_gyro_parameters_recovered_from_20_percent_off():
    """Paper 003 four-bar, gyro on the coupler: gravity, two masses and the crank damping
    from a start 20 % off, within 3 standard deviations of the truth."""
    from mbde_core.identification import synthetic as S
    from mbde_core.identification.identify import identify
    from mbde_core.identification.keypath import apply_values
    from mbde_core.identification.model import ParameterizedMechanism

    mech, recs = _recordings("fourbar_gyro", 11, 6.0)
    truth = ParameterizedMechanism(mech, S.CASES["fourbar_gyro"]["params"])
    start = truth.p0 * np.array([1.2, 0.8, 1.2, 0.8])
    mech0, sensors0 = S.case_mechanism("fourbar_gyro", apply_values(truth.doc, truth.params, start, truth.base_gravity))
    for r in recs:
        r.sensors = sensors0
    pm = ParameterizedMechanism(mech0, S.CASES["fourbar_gyro"]["params"])
    res = identify(pm, recs)
    assert res.identifiable.all() and res.status == "converged"
    z = (res.p - truth.p0) / res.std
    assert np.all(np.abs(z) < 3), dict(zip(pm.names, z))
    assert res.std[0] < 0.02 * 9.81  # gravity to better than 2 %
    assert res.first_pass_iterations <= 20
    assert 0.3 < res.sigma_a[0] / np.sqrt(1e-3 / 0.005) < 3  # the disturbance level is re-estimated
    assert abs(res.sensor_sigma["gyro_coupler"][0] / np.deg2rad(1) - 1) < 0.1
    assert np.allclose(res.correlation, res.correlation.T) and np.allclose(np.diag(res.correlation), 1)


def test_mass_scale_is_reported_not_identifiable():
    """Scaling every mass (and inertia) of a gravity-driven linkage changes nothing: with
    all masses free, their common scale is a null direction of the reduced Jacobian; they
    are reported as such (no numbers), gravity is still identified."""
    from mbde_core.identification import synthetic as S
    from mbde_core.identification.identify import identify
    from mbde_core.identification.model import ParameterizedMechanism

    doc = S.case_document("fourbar_gyro")
    del doc["loads"]  # gravity only (a damping torque would not scale with the masses)
    mech, recs = _recordings("fourbar_gyro", 3, 2.5, doc=doc)
    res = identify(ParameterizedMechanism(mech, "gravity,bodies.*.mass"), recs, options={"noise_passes": 0})
    assert res.identifiable.tolist() == [True, False, False, False]
    assert np.isnan(res.std[1:]).all() and np.all(res.p[1:] == res.p0[1:])
    (direction,) = res.identifiability.null_directions
    assert set(direction) == {"bodies.crank.mass", "bodies.coupler.mass", "bodies.rocker.mass"}
    assert abs(res.p[0] - 9.81) < 3 * res.std[0]


def test_geometric_parameter_by_finite_differences():
    """A length changes the constraints: its column is a central difference of every row
    with the mechanism (and the sensors) rebuilt; the rocker length comes back."""
    from mbde_core.config.yamlnode import Node
    from mbde_core.identification import synthetic as S
    from mbde_core.identification.identify import identify
    from mbde_core.identification.keypath import apply_values
    from mbde_core.identification.model import ParameterizedMechanism
    from mbde_core.sensors.config import load_sensors

    mech, recs = _recordings("fourbar_gyro", 5, 4.0)
    truth = ParameterizedMechanism(mech, "parameters.L3")
    doc = apply_values(truth.doc, truth.params, [5.2], truth.base_gravity)
    mech0, sensors0 = S.case_mechanism("fourbar_gyro", doc)
    for r in recs:
        r.sensors = sensors0
    pm = ParameterizedMechanism(mech0, "parameters.L3")
    assert pm.kinds == ["geometric"]
    res = identify(pm, recs, sensor_factory=lambda m: load_sensors(Node(doc["sensors"], "<doc>", "sensors"), m))
    assert abs(res.p[0] - 5.0) < 3 * res.std[0] and res.std[0] < 0.05


@pytest.fixture(scope="module")
def pendulum_bags(tmp_path_factory):
    """Two releases of the paper-001 pendulum (1.5 s each) as bags, and a start file with
    the inertia and the damping 20 % off."""
    root = tmp_path_factory.mktemp("pendulum")
    scenario = os.path.join(REPO, "config", "scenarios", "pendulum_release.yaml")
    bags = []
    for k, angle in enumerate(("pi/2-0.06", "pi/2+0.09")):
        bag = root / f"release{k}"
        proc = run_mbde("simulate", scenario, "--out", bag, "--set", "duration=1.5", "--set", f"seed={k}",
                        "--set", "integrator=rk4", "--set", f"initial_state.release_from.theta={angle}")
        assert proc.returncode == 0, proc.stderr
        bags.append(str(bag))
    with open(os.path.join(REPO, "config", "mechanisms", "pendulum_paper001.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    start = root / "start.yaml"
    start.write_text(text.replace("I0: 0.0039", "I0: 0.00468").replace("c: 2e-4", "c: 1.6e-4"))
    return root, bags, str(start)


def test_identify_command_two_releases_one_parameter_set(pendulum_bags):
    """`mbde identify` on two bags: J and b from a start 20 % off (paper 001 Table 2's
    quantities); the calibrated file replays."""
    root, bags, start = pendulum_bags
    out = root / "id"
    proc = run_mbde("identify", *bags, "--mechanism", start, "--out", out, "--params", "bodies.arm.inertia,joints.*.damping")
    assert proc.returncode == 0, proc.stderr
    info = json.loads((out / "identification.json").read_text())
    par = info["parameters"]
    assert par["bodies.arm.inertia"]["estimate"] == pytest.approx(0.0039, rel=2e-3)
    assert par["joints.O.damping"]["estimate"] == pytest.approx(2e-4, rel=0.05)
    assert info["identifiability"]["rank"] == 2 and info["noise"]["status"] in ("converged", "pass limit", "numerical floor")
    assert len(info["cost_per_iteration"]) >= 2 and info["recordings"] == bags
    assert set(info["residual_whiteness"]) == set(bags)
    assert (out / "cost.png").exists() and (out / "residuals.png").exists()
    text = (out / "calibrated.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["planar_bodies"][0]["I0"] == pytest.approx(par["bodies.arm.inertia"]["estimate"])
    assert "identified bodies.arm.inertia" in text and "FourBars1" not in text and "PendCon" in text
    from mbde_core.model.mechanism import load_mechanism

    assert load_mechanism(out / "calibrated.yaml").spec.loads[0].c == pytest.approx(par["joints.O.damping"]["estimate"])
    rep = run_mbde("replay", bags[0], "--mechanism", out / "calibrated.yaml", "--estimators", "errorekf",
                   "--out", root / "replay", "--no-plots")
    assert rep.returncode == 0, rep.stderr


@pytest.mark.parametrize("args, message", [
    (["--params", "bodies.nope.mass"], "unknown body 'nope'"),
    (["--params", "gravity", "--bounds", "gravity=3"], "KEY=LOWER:UPPER"),
])
def test_identify_command_errors_are_one_line(pendulum_bags, args, message):
    root, bags, start = pendulum_bags
    proc = run_mbde("identify", bags[0], "--mechanism", start, "--out", root / "bad", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
