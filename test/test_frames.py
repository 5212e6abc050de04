"""TF frames of mechanisms and sensors (mbde_core.viz.frames, mbde_core.rosio.tf), checked
against the engine's points and the sensor models: each frame is where the model says
the body or sensor is, and its x axis is the axis the sensor measures along."""
import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import kinematics
from mbde_core.model.mechanism import load_mechanism
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.tf import TF_MESSAGE, tf_message, transforms_from_message
from mbde_core.rosio.typestore import get_typestore
from mbde_core.sensors.config import load_sensors
from mbde_core.viz.frames import MechanismFrames, yaw_quaternion

SENSORS = """
- {name: gyro, type: gyroscope, body: rod, rate: 100, noise: {sigma: 0.01}}
- {name: enc, type: encoder, body: crank, rate: 100, noise: {sigma: 0.01}, frame_id: crank_encoder}
- {name: acc_body, type: accelerometer, body: rod, offset: [0.07, 0.02], axes: [0.3, 1.9], rate: 100, noise: {sigma: 0.01}}
- {name: acc_slider, type: accelerometer, slider: slider, rate: 100, noise: {sigma: 0.01}}
- {name: imu, type: imu, body: crank, offset: [0.03, -0.01], axis_angle: 0.4, rate: 100, noise: {sigma: [0.01, 0.1, 0.1]}}
- {name: lin, type: slider_position, slider: slider, rate: 100, noise: {sigma: 0.001}}
"""


def compose(a, b):
    """Pose b (x, y, yaw) given in frame a, expressed in a's parent."""
    c, s = math.cos(a[2]), math.sin(a[2])
    return (a[0] + c * b[0] - s * b[1], a[1] + s * b[0] + c * b[1], a[2] + b[2])


def wrap(a):
    return (a + math.pi) % (2 * math.pi) - math.pi


def random_state(m, seed):
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.5, 0.5, m.dof)
    q, ok = kinematics.solve_position(m, z, m.q0)
    assert ok
    return q


def test_yaw_quaternion_equals_scipys_rotation():
    """The TF quaternion of a yaw against an implementation it did not produce: scipy's
    Rotation.from_euler('z', yaw).as_quat() (scalar last, ROS's order), over several turns."""
    yaws = np.linspace(-3 * math.pi, 3 * math.pi, 1201)
    ref = Rotation.from_euler("z", yaws[:, None]).as_quat(canonical=False)
    ours = np.array([yaw_quaternion(float(y)) for y in yaws])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-15)


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank"])
def test_body_frames_sit_on_the_bodies(name):
    m = load_mechanism(mech_path(name))
    fr = MechanismFrames(m, prefix="est/")
    for seed in range(3):
        q = random_state(m, seed)
        P = m.points(q)
        tfs = {t.child: t for t in fr.moving(q)}
        for b, bname in enumerate(m.body_names):
            i, j, L = m.body_basis[b]
            t = tfs.get("est/" + bname)
            if t is None:  # a ground link: static
                assert any(s.child == "est/" + bname for s in fr.static())
                continue
            assert t.parent == "world"
            assert (t.x, t.y) == pytest.approx(tuple(P[i]), abs=1e-12)  # m
            assert wrap(t.yaw - float(m.body_angle(q, b))) == pytest.approx(0.0, abs=1e-12)  # rad
            # a body-frame point (the YAML's cog/offset convention) lands where the model puts it
            local = (0.3 * L, -0.1 * L)
            C, _ = m.body_point_matrix(b, local)
            model = C @ np.concatenate([P[i], P[j]])
            x, y, _ = compose((t.x, t.y, t.yaw), (*local, 0.0))
            assert (x, y) == pytest.approx(tuple(model), abs=1e-9)  # m (|d| = L to the constraint tolerance)
            qx, qy, qz, qw = t.quaternion
            assert (qx, qy) == (0.0, 0.0) and qz**2 + qw**2 == pytest.approx(1.0, abs=1e-15)
            assert wrap(2 * math.atan2(qz, qw) - t.yaw) == pytest.approx(0.0, abs=1e-12)


def test_sensor_mounts_match_the_sensor_models():
    m = load_mechanism(mech_path("slider_crank"))
    ss = load_sensors(parse_yaml(SENSORS), m)
    fr = MechanismFrames(m, ss, prefix="")
    static = {t.child: t for t in fr.static()}
    assert static["gyro"].parent == "rod" and (static["gyro"].x, static["gyro"].yaw) == (0.0, 0.0)
    assert static["crank_encoder"].parent == "crank"  # the configured frame_id, not the name
    assert (static["imu"].parent, static["imu"].x, static["imu"].y, static["imu"].yaw) == ("crank", 0.03, -0.01, 0.4)
    track = m.spec.sliders[0]
    assert static["lin"].parent == "world" and (static["lin"].x, static["lin"].y) == tuple(track.origin)
    assert "acc_slider" not in static and "acc_slider" in fr.frame_names  # moves with the slider
    q = random_state(m, 4)
    moving = {t.child: t for t in fr.moving(q)}
    zero = np.zeros(m.n)
    g = m.gravity
    # at rest an accelerometer reads -g along its axes: the frame's x axis is its first axis
    for name, parent in (("acc_body", "rod"), ("acc_slider", None)):
        mount = static.get(name) or moving[name]
        pose = (mount.x, mount.y, mount.yaw)
        if parent is not None:
            body = moving[parent]
            pose = compose((body.x, body.y, body.yaw), pose)
        e = np.array([math.cos(pose[2]), math.sin(pose[2])])
        assert ss[name].h(q, zero, zero)[0] == pytest.approx(-(g @ e), abs=1e-9)  # m/s^2
    acc = ss["acc_body"]
    body = moving["rod"]
    x, y, _ = compose((body.x, body.y, body.yaw), (static["acc_body"].x, static["acc_body"].y, 0.0))
    i, j, _ = m.body_basis[acc.body]
    P = m.points(q)
    C, _ = m.body_point_matrix(acc.body, acc.offset)
    assert (x, y) == pytest.approx(tuple(C @ np.concatenate([P[i], P[j]])), abs=1e-9)  # m


def test_prefix_applies_to_bodies_and_sensors_not_to_the_fixed_frame():
    m = load_mechanism(mech_path("slider_crank"))
    fr = MechanismFrames(m, load_sensors(parse_yaml(SENSORS), m), world="map", prefix="ukf/")
    assert all(n.startswith("ukf/") for n in fr.frame_names)
    assert {t.parent for t in fr.moving(m.q0)} == {"map"}
    assert {t.parent for t in fr.static()} <= {"map"} | {"ukf/" + b for b in m.body_names}


def test_tf_message_round_trip_through_cdr():
    m = load_mechanism(mech_path("fivebar"))
    fr = MechanismFrames(m, prefix="truth/")
    q = random_state(m, 1)
    f = RosbagsFactory()
    msg = tf_message(f, fr.moving(q), 1_700_000_000.25)
    store = get_typestore()
    back = store.deserialize_cdr(store.serialize_cdr(msg, TF_MESSAGE), TF_MESSAGE)
    got = transforms_from_message(back)
    assert [t["child"] for t in got] == [t.child for t in fr.moving(q)]
    for t, ref in zip(got, fr.moving(q)):
        assert t["parent"] == "world" and t["stamp"] == pytest.approx(1_700_000_000.25, abs=1e-9)
        assert (t["x"], t["y"], t["z"]) == pytest.approx((ref.x, ref.y, 0.0), abs=1e-12)
        assert wrap(t["yaw"] - ref.yaw) == pytest.approx(0.0, abs=1e-12)
