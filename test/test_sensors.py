"""Sensor models: Jacobians vs finite differences, physics checks, noise statistics."""
import numpy as np
import pytest

from conftest import fd, mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.base import NoiseModel, wrap_angle
from mbde_core.sensors.config import load_sensors

SENSORS = {
    "slider_crank": """
- {name: enc, type: encoder, body: crank, rate: 100, noise: {sigma: 0.01}}
- {name: enc_rel, type: encoder, body: rod, reference_body: crank, rate: 100, noise: {sigma: 0.01}}
- {name: gyro, type: gyroscope, body: rod, rate: 100, noise: {sigma: 0.01}}
- {name: acc_slider, type: accelerometer, slider: slider, rate: 100, noise: {sigma: 0.01}}
- {name: acc_body, type: accelerometer, body: rod, offset: [0.07, 0.02], axes: [0.3, 1.9], rate: 100, noise: {sigma: 0.01}}
- {name: acc_point, type: accelerometer, point: P1, axes: [0.5], rate: 100, noise: {sigma: 0.01}}
- {name: imu, type: imu, body: crank, offset: [0.03, -0.01], rate: 100, noise: {sigma: [0.01, 0.1, 0.1]}}
- {name: lin, type: slider_position, slider: slider, rate: 100, noise: {sigma: 0.001}}
""",
    "fivebar": """
- {name: g1, type: gyroscope, body: coupler1, rate: 200, noise: {sigma: 0.0175}}
- {name: g2, type: gyroscope, body: coupler2, rate: 200, noise: {sigma: 0.0175}}
- {name: e1, type: encoder, body: crank1, rate: 200, noise: {sigma: 0.0175}}
- {name: imu, type: imu, body: coupler2, offset: [1.0, 0.2], axis_angle: 0.4, rate: 200, noise: {sigma: 0.1}}
""",
}


def state(m, seed):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.4, 0.4, m.dof)
    q = kinematics.solve_position(m, z, m.q0)[0]
    qd = kinematics.velocity(m, q, rng.normal(0, 3, m.dof))
    qdd = kinematics.acceleration(m, q, qd, rng.normal(0, 10, m.dof))
    return q, qd, qdd


@pytest.mark.parametrize("mech_name", list(SENSORS))
def test_sensor_jacobians_match_finite_differences(mech_name):
    m = load_mechanism(mech_path(mech_name))
    ss = load_sensors(parse_yaml(SENSORS[mech_name]), m)
    for seed in range(3):
        q, qd, qdd = state(m, seed)
        for s in ss:
            Hq, Hqd, Hqdd = s.jacobians(q, qd, qdd)
            for H, f in (
                (Hq, lambda x: s.h(x, qd, qdd)),
                (Hqd, lambda x: s.h(q, x, qdd)),
                (Hqdd, lambda x: s.h(q, qd, x)),
            ):
                num = fd(f, {id(Hq): q, id(Hqd): qd, id(Hqdd): qdd}[id(H)].copy())
                scale = max(np.max(np.abs(num)), 1e-9)
                assert np.max(np.abs(H - num)) / scale < 1e-6, (s.name, seed)
            # batched == single, to rounding (reading units per coordinate unit): the
            # two paths may run different numpy/BLAS kernels on other CPUs
            Hb = s.jacobians(np.stack([q, q]), np.stack([qd, qd]), np.stack([qdd, qdd]))
            np.testing.assert_allclose(Hb[0][1], Hq, rtol=0, atol=1e-13 * max(1.0, np.max(np.abs(Hq))))



@pytest.mark.parametrize("mech_name", list(SENSORS) + ["fourbar"])
def test_single_state_linearize_equals_h_and_jacobians(mech_name):
    """Sensors with a float fast path (linearize) agree with the batched h and jacobians,
    also on bodies with a fixed basis point (the four-bar crank and rocker), for encoders
    with an offset (the wrap) and against another body."""
    m = load_mechanism(mech_path(mech_name))
    text = SENSORS.get(mech_name) or "".join(
        f"- {{name: g{k}, type: gyroscope, body: {b}, rate: 100, noise: {{sigma: 0.01}}}}\n"
        f"- {{name: a{k}, type: accelerometer, body: {b}, offset: [0.7, 0.2], axes: [0.3, 1.9], rate: 100, noise: {{sigma: 0.01}}}}\n"
        f"- {{name: e{k}, type: encoder, body: {b}, offset: 2.5, rate: 100, noise: {{sigma: 0.01}}}}\n"
        + (f"- {{name: r{k}, type: encoder, body: {b}, reference_body: {m.body_names[0]}, rate: 100, noise: {{sigma: 0.01}}}}\n"
           if k else "")
        for k, b in enumerate(m.body_names))
    checked = 0
    for s in load_sensors(parse_yaml(text), m):
        if not hasattr(s, "linearize"):
            continue
        for seed in range(3):
            q, qd, qdd = state(m, seed)
            h, Hq, Hqd, Hqdd = s.linearize(q, qd, qdd)
            ref = (s.h(q, qd, qdd),) + tuple(s.jacobians(q, qd, qdd))
            for a, b in zip((h, Hq, Hqd, Hqdd), ref):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked > 0


def test_gyroscope_is_time_derivative_of_body_angle():
    m = load_mechanism(mech_path("fourbar_pf"))
    ss = load_sensors(parse_yaml(
        "- {name: g, type: gyroscope, body: rocker, rate: 1000, noise: {sigma: 0}}\n"
        "- {name: e, type: encoder, body: rocker, rate: 1000, noise: {sigma: 0}}"), m)
    integ = get_integrator("rk4")
    s = MBState(m.q0, kinematics.velocity(m, m.q0, [8.0]))
    h = 1e-3
    angles, rates = [], []
    for k in range(800):
        angles.append(ss["e"].h(s.q)[0])
        rates.append(ss["g"].h(s.q, s.qd)[0])
        s = integ.step(m, k * h, s, h)
    angles = np.unwrap(np.array(angles))
    rates = np.array(rates)
    # 4th-order central differences of the sampled angle
    deriv = (-angles[4:] + 8 * angles[3:-1] - 8 * angles[1:-3] + angles[:-4]) / (12 * h)
    assert np.max(np.abs(deriv - rates[2:-2])) < 1e-6 * np.max(np.abs(rates))


def test_accelerometer_at_rest_reads_minus_g():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml(
        "- {name: a, type: accelerometer, body: coupler, offset: [3.0, 0.5], axes: [0.0, 1.2], rate: 100, noise: {sigma: 0}}\n"
        "- {name: w, type: accelerometer, point: P2, axes: [0.0, 1.5707963267948966], rate: 100, noise: {sigma: 0}}"), m)
    q = m.q0
    zero = np.zeros(m.n)
    theta = m.body_angle(q, m.body_index("coupler"))
    g = m.gravity
    for k, a in enumerate([0.0, 1.2]):
        e = np.array([np.cos(theta + a), np.sin(theta + a)])
        assert ss["a"].h(q, zero, zero)[k] == pytest.approx(-(g @ e), abs=1e-12)  # m/s^2
    np.testing.assert_allclose(ss["w"].h(q, zero, zero), [0.0, 9.81], rtol=0, atol=1e-12)  # m/s^2


def test_accelerometer_matches_second_derivative_of_point_position():
    m = load_mechanism(mech_path("slider_crank"))
    ss = load_sensors(parse_yaml(
        "- {name: a, type: accelerometer, body: rod, offset: [0.05, 0.01], axes: [0.0, 1.5707963267948966], rate: 100, noise: {sigma: 0}}"), m)
    s = ss["a"]
    q, qd, _ = state(m, 7)
    zdd, qdd = dynamics.forward(m, 0.0, q, qd)
    # point position along the motion q(t) with constant zdd; second derivative by FD
    C, (i, j) = m.body_point_matrix(m.body_index("rod"), (0.05, 0.01))

    def point(t):
        z = q[m.independent] + t * qd[m.independent] + 0.5 * t * t * zdd
        qq = kinematics.solve_position(m, z, q)[0]
        P = m.points(qq)
        return C @ np.concatenate([P[i], P[j]])

    h = 1e-3  # 4th-order stencil
    acc = (-point(2 * h) + 16 * point(h) - 30 * point(0.0) + 16 * point(-h) - point(-2 * h)) / (12 * h**2)
    d = m.points(q)[j] - m.points(q)[i]
    u = d / np.linalg.norm(d)
    ey = np.array([-u[1], u[0]])
    expected = [u @ (acc - m.gravity), ey @ (acc - m.gravity)]
    np.testing.assert_allclose(s.h(q, qd, qdd), expected, rtol=1e-6, atol=1e-6)


def test_noise_statistics_over_1e4_samples():
    rng = np.random.default_rng(42)
    model = NoiseModel(np.array([0.2]), np.array([0.05]), np.array([0.0]), np.array([0.0]), 0.0)
    sampler = model.sampler(rng)
    x = np.array([sampler.apply(k * 0.01, np.array([1.0]))[0] for k in range(10000)])
    assert abs(x.mean() - 1.05) < 4 * 0.2 / 100  # 4 standard errors
    assert x.std() == pytest.approx(0.2, rel=0.03)
    # quantization: every reading is a multiple of the step; error variance step^2/12
    step = 2 * np.pi / 1000
    qm = NoiseModel(np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([step]), 0.0)
    qs = qm.sampler(rng)
    truth = rng.uniform(-3, 3, 10000)
    y = np.array([qs.apply(0.0, np.array([v]))[0] for v in truth])
    np.testing.assert_allclose(np.round(y / step) * step, y, atol=1e-12)
    assert np.max(np.abs(y - truth)) <= step / 2 + 1e-12
    assert np.var(y - truth) == pytest.approx(step**2 / 12, rel=0.05)
    assert qm.variance()[0] == pytest.approx(step**2 / 12)
    # dropout probability
    dm = NoiseModel(np.array([0.1]), np.array([0.0]), np.array([0.0]), np.array([0.0]), 0.2)
    ds = dm.sampler(rng)
    lost = sum(ds.apply(0.0, np.array([0.0])) is None for _ in range(10000))
    assert abs(lost / 10000 - 0.2) < 4 * np.sqrt(0.2 * 0.8 / 10000)
    # random-walk bias: variance grows as density^2 t
    rw = NoiseModel(np.array([0.0]), np.array([0.0]), np.array([0.01]), np.array([0.0]), 0.0)
    ends = []
    for _ in range(400):
        s = rw.sampler(rng)
        for k in range(101):
            v = s.apply(k * 0.1, np.array([0.0]))
        ends.append(v[0])
    assert np.var(ends) == pytest.approx(0.01**2 * 10.0, rel=0.25)


def test_encoder_residual_wraps():
    m = load_mechanism(mech_path("fourbar"))
    ss = load_sensors(parse_yaml("- {name: e, type: encoder, body: crank, rate: 100, noise: {sigma: 0.01}}"), m)
    assert ss["e"].residual([np.pi - 0.01], [-np.pi + 0.01])[0] == pytest.approx(-0.02)
    assert wrap_angle(3 * np.pi) == pytest.approx(-np.pi)


@pytest.mark.parametrize(
    "entry, keypath, fragment",
    [
        ("{name: g, type: gyroscope, body: nobody, rate: 10, noise: {sigma: 1}}", "[0].body", "unknown body 'nobody'"),
        ("{name: g, type: gyroscope, body: crank, noise: {sigma: 1}}", "[0].rate", "missing required key"),
        ("{name: g, type: gyroscope, body: crank, rate: -1, noise: {sigma: 1}}", "[0].rate", "must be > 0"),
        ("{name: g, type: gyroscope, body: crank, rate: 10, noise: {sigma: -1}}", "[0].noise.sigma", "must be >= 0"),
        ("{name: g, type: gyroscope, body: crank, rate: 10, axes: [0], noise: {sigma: 1}}", "[0].axes", "not used by a 'gyroscope'"),
        ("{name: g, type: laser, body: crank, rate: 10, noise: {sigma: 1}}", "[0].type", "must be one of"),
        ("{name: a, type: accelerometer, rate: 10, noise: {sigma: 1}}", "[0]", "exactly one of 'body', 'point' or 'slider'"),
        ("{name: e, type: encoder, body: crank, rate: 10, noise: {sigma: 1, dropout: 2}}", "[0].noise.dropout", "must be <= 1"),
    ],
)
def test_sensor_config_errors(entry, keypath, fragment):
    from mbde_core.errors import ConfigError

    m = load_mechanism(mech_path("fourbar"))
    with pytest.raises(ConfigError) as err:
        load_sensors(parse_yaml("- " + entry, "s.yaml"), m)
    msg = str(err.value)
    assert msg.startswith("s.yaml: ") and keypath in msg and fragment in msg, msg


@pytest.mark.parametrize("mech_name", list(SENSORS) + ["fourbar"])
def test_ukf_sigma_readings_equal_batched_h(mech_name):
    """The UKF's float readings at its few sigma points (estimators.ukf_readings) equal the
    sensors' batched h to rounding, for every sensor (gyroscopes and accelerometers on floats,
    the others batched), bodies with a fixed basis point included (the four-bar's crank)."""
    from mbde_core.estimators.kalman.ukf_readings import SigmaReadings

    m = load_mechanism(mech_path(mech_name))
    text = SENSORS.get(mech_name) or "".join(
        f"- {{name: g{k}, type: gyroscope, body: {b}, rate: 100, noise: {{sigma: 0.01}}}}\n"
        f"- {{name: a{k}, type: accelerometer, body: {b}, offset: [0.7, 0.2], axes: [0.3, 1.9], rate: 100, noise: {{sigma: 0.01}}}}\n"
        f"- {{name: e{k}, type: encoder, body: {b}, offset: 2.5, rate: 100, noise: {{sigma: 0.01}}}}\n"
        + (f"- {{name: r{k}, type: encoder, body: {b}, reference_body: {m.body_names[0]}, rate: 100, noise: {{sigma: 0.01}}}}\n"
           if k else "")
        for k, b in enumerate(m.body_names))
    ss = load_sensors(parse_yaml(text), m)
    states = [state(m, seed) for seed in range(5)]
    q, qd, qdd = (np.array([s[i] for s in states]) for i in range(3))
    readings = SigmaReadings(m, ss)
    names = list(ss.names)
    ref = np.concatenate([ss[n].h(q, qd, qdd) for n in names], axis=1)
    scale = max(1.0, float(np.max(np.abs(ref))))
    np.testing.assert_allclose(readings(names, q, qd, qdd), ref, rtol=0, atol=1e-13 * scale)
    for n in names:  # one sensor at a time, and a batch above SMALL_BATCH (the batched h itself)
        np.testing.assert_allclose(readings([n], q, qd, qdd), ss[n].h(q, qd, qdd), rtol=0, atol=1e-13 * scale)
    big = [np.repeat(a, 3, axis=0) for a in (q, qd, qdd)]
    np.testing.assert_array_equal(readings(names, *big), np.concatenate([ss[n].h(*big) for n in names], axis=1))
