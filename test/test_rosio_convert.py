"""Message conversions round-trip exactly (through CDR) and reject malformed messages.

Every conversion runs with two factories: the rosbags one (message serialized to CDR and
deserialized again before reading) and an rclpy-like one (plain objects, array.array
sequences, numpy fixed-size arrays, as rclpy-generated classes hold them), proving that
the conversion code only reads and sets attributes.
"""
import array
from types import SimpleNamespace

import numpy as np
import pytest

from mbde_core.errors import DataError
from mbde_core.rosio import convert as cv
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.stamps import sec_to_stamp
from mbde_core.rosio.typestore import fielddefs, get_typestore
from mbde_core.types import MechanismSnapshot, ParticleCloud

TYPECODES = {"float64": "d", "float32": "f", "int32": "i", "uint32": "I", "int64": "q",
             "uint64": "Q", "int16": "h", "uint16": "H", "int8": "b", "uint8": "B"}


class RclpyLikeFactory:
    """Messages shaped like rclpy's: sequences array.array / list, fixed arrays numpy."""

    def __init__(self):
        self.defs = fielddefs(get_typestore())

    def new(self, typename):
        return SimpleNamespace(**{n: self._default(d) for n, d in self.defs[typename][1]})

    def _default(self, desc):
        kind, rest = int(desc[0]), desc[1]
        if kind == 1:
            return "" if rest[0] == "string" else 0.0 if rest[0].startswith("float") else 0
        if kind == 2:
            return self.new(rest)
        (sub_kind, sub), count = rest
        if int(sub_kind) == 1 and sub[0] != "string":
            return np.zeros(count) if kind == 3 else array.array(TYPECODES[sub[0]])
        return [self._default((sub_kind, sub)) for _ in range(count if kind == 3 else 0)]

    def array(self, values, dtype):
        return array.array(TYPECODES[dtype], np.ascontiguousarray(values, dtype).ravel().tobytes())

    def time(self, t):
        sec, nanosec = sec_to_stamp(t)
        return SimpleNamespace(sec=sec, nanosec=nanosec)


@pytest.fixture(params=["rosbags-cdr", "rclpy-like"])
def factory(request):
    return RosbagsFactory() if request.param == "rosbags-cdr" else RclpyLikeFactory()


def through_wire(factory, msg, typename):
    """CDR round trip for rosbags messages; rclpy-like messages are read as built."""
    if isinstance(factory, RosbagsFactory):
        store = factory.typestore
        return store.deserialize_cdr(bytes(store.serialize_cdr(msg, typename)), typename)
    return msg


def same_bits(a, b):
    """float64 arrays equal bit for bit (NaN == NaN, -0.0 != 0.0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------ Imu
def test_imu_round_trip(factory):
    msg = cv.imu_msg(factory, 1.000000001, gyro_z=0.1234567890123456789, accel_xy=(np.nan, -9.81),
                     gyro_sigma=0.003, accel_sigma=0.05, frame_id="crank_imu")
    back = through_wire(factory, msg, cv.IMU)
    values = cv.imu_values(back, ["gyro_z", "accel_x", "accel_y", "gyro_x"])
    assert same_bits(values, [0.1234567890123456789, np.nan, -9.81, 0.0])
    m = cv.imu_measurement(back, "imu1", ["accel_y"])
    assert m.stamp == 1.000000001 and m.sensor == "imu1" and same_bits(m.value, [-9.81])
    assert (back.header.stamp.sec, back.header.stamp.nanosec) == (1, 1)
    assert back.header.frame_id == "crank_imu"
    assert back.orientation_covariance[0] == -1.0
    assert list(back.angular_velocity_covariance) == [0.003**2, 0, 0, 0, 0.003**2, 0, 0, 0, 0.003**2]
    assert np.diag(np.reshape(back.linear_acceleration_covariance, (3, 3))).tolist() == [0.05**2] * 3


def test_imu_unmeasured_block_is_flagged_and_refused(factory):
    back = through_wire(factory, cv.imu_msg(factory, 2.5, gyro_z=-np.inf), cv.IMU)
    assert back.linear_acceleration_covariance[0] == -1.0
    assert list(back.angular_velocity_covariance) == [0.0] * 9  # measured, sigma unknown
    assert same_bits(cv.imu_values(back, ["gyro_z"]), [-np.inf])
    with pytest.raises(DataError, match="linear_acceleration") as info:
        cv.imu_values(back, ["gyro_z", "accel_x"])
    assert "\n" not in str(info.value)
    only_accel = through_wire(factory, cv.imu_msg(factory, 0.0, accel_xy=[1.0, 2.0]), cv.IMU)
    assert only_accel.angular_velocity_covariance[0] == -1.0
    assert cv.imu_values(only_accel, ["accel_x", "accel_y", "accel_z"]).tolist() == [1.0, 2.0, 0.0]


def test_imu_malformed_messages_raise_data_error(factory):
    msg = cv.imu_msg(factory, 0.0, gyro_z=1.0)
    msg.angular_velocity_covariance = [0.0] * 4
    with pytest.raises(DataError, match="malformed Imu"):
        cv.imu_values(msg, ["gyro_z"])
    with pytest.raises(DataError, match="malformed Imu"):
        cv.imu_values(SimpleNamespace(header=None), ["gyro_z"])
    bad_stamp = cv.imu_msg(factory, 0.0, gyro_z=1.0)
    bad_stamp.header.stamp.nanosec = 2_000_000_000
    with pytest.raises(DataError, match="time stamp"):
        cv.imu_measurement(bad_stamp, "imu", ["gyro_z"])
    with pytest.raises(ValueError, match="unknown IMU channel"):
        cv.imu_values(msg, ["gyro_w"])


# ------------------------------------------------------------------ JointState
def test_joint_state_round_trip_and_lookup(factory):
    msg = cv.joint_state_msg(factory, 1e9 + 0.5, ["crank", "slider"], [1.5, np.nan],
                             velocities=[np.inf, -0.0])
    back = through_wire(factory, msg, cv.JOINT_STATE)
    pos = cv.joint_state_values(back, ["slider", "crank", "absent"])
    assert pos[1] == 1.5 and np.isnan(pos[0]) and pos[2] is None
    vel = cv.joint_state_values(back, ["crank", "slider"], "velocity")
    assert vel[0] == np.inf and same_bits([vel[1]], [-0.0])
    assert cv.joint_state_values(back, ["crank"], "effort") == [None]  # effort left empty
    assert (back.header.stamp.sec, back.header.stamp.nanosec) == (1_000_000_000, 500_000_000)


def test_joint_state_malformed(factory):
    msg = cv.joint_state_msg(factory, 0.0, ["a", "b"], [1.0, 2.0])
    msg.position = factory.array([1.0], "float64")
    with pytest.raises(DataError, match="2 names but 1 position"):
        cv.joint_state_values(msg, ["a"])
    msg.name = ["a", 3]
    with pytest.raises(DataError, match="non-string"):
        cv.joint_state_values(msg, ["a"])
    with pytest.raises(DataError, match="malformed JointState"):
        cv.joint_state_values(SimpleNamespace(name=["a"]), ["a"])
    with pytest.raises(ValueError):
        cv.joint_state_msg(factory, 0.0, ["a", "b"], [1.0])


# ------------------------------------------------------------------ MechanismState
def full_snapshot(rng):
    return MechanismSnapshot(
        stamp=12.345678901, q=np.r_[rng.normal(size=5), np.nan], qd=rng.normal(size=6),
        qdd=np.r_[np.inf, rng.normal(size=5)], z=np.array([0.3]), zd=np.array([-1.25]),
        zdd=np.array([np.nan]), cov=rng.normal(size=(2, 2)), branch=1,
        branch_probabilities=np.array([0.25, 0.75]), input_names=["motor_torque"],
        inputs=np.array([3.5]), input_cov=np.array([[0.01]]))


CNAMES = ["x1", "y1", "x2", "y2", "x3", "theta"]


def assert_snapshots_equal(a, b):
    assert a.stamp == b.stamp and a.branch == b.branch and a.input_names == b.input_names
    for f in ("q", "qd", "qdd", "z", "zd", "zdd", "cov", "branch_probabilities", "inputs",
              "input_cov"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None and y is None) or same_bits(x, y), f


def test_mechanism_state_round_trip(factory):
    snap = full_snapshot(np.random.default_rng(3))
    msg = cv.mechanism_state_msg(factory, snap, CNAMES, ["theta"], frame_id="world")
    back = through_wire(factory, msg, cv.MECHANISM_STATE)
    assert cv.mechanism_state_names(back) == (CNAMES, ["theta"])
    assert_snapshots_equal(cv.snapshot_from_mechanism_state(back, CNAMES, ["theta"]), snap)


def test_mechanism_state_minimal_round_trip(factory):
    snap = MechanismSnapshot(stamp=-0.5, q=np.zeros(0), qd=np.zeros(0), qdd=np.zeros(0),
                             z=np.array([1.0, 2.0]), zd=np.array([0.0, -0.0]), zdd=np.zeros(0))
    back = through_wire(factory, cv.mechanism_state_msg(factory, snap, [], ["a", "b"]),
                        cv.MECHANISM_STATE)
    got = cv.snapshot_from_mechanism_state(back)
    assert_snapshots_equal(got, snap)
    assert got.cov is None and got.inputs is None and got.branch == -1


def test_mechanism_state_malformed(factory):
    snap = full_snapshot(np.random.default_rng(4))
    msg = cv.mechanism_state_msg(factory, snap, CNAMES, ["theta"])
    with pytest.raises(DataError, match="differ from expected"):
        cv.snapshot_from_mechanism_state(msg, CNAMES, ["phi"])
    msg.covariance = factory.array(np.ones(5), "float64")
    with pytest.raises(DataError, match="covariance has 5 elements") as info:
        cv.snapshot_from_mechanism_state(msg)
    assert "\n" not in str(info.value)
    msg = cv.mechanism_state_msg(factory, snap, CNAMES, ["theta"])
    msg.q = factory.array(np.ones(4), "float64")
    with pytest.raises(DataError, match="q has 4 elements"):
        cv.snapshot_from_mechanism_state(msg)
    with pytest.raises(DataError, match="malformed MechanismState"):
        cv.snapshot_from_mechanism_state(SimpleNamespace(coordinate_names=[], independent_names=[]))
    with pytest.raises(ValueError):
        cv.mechanism_state_msg(factory, snap, CNAMES[:-1], ["theta"])


# ------------------------------------------------------------------ ParticleSet
def cloud(rng, n=7, g=2):
    z = rng.normal(size=(n, g))
    z[2, 1] = np.nan
    w = rng.random(n)
    w /= w.sum()
    return ParticleCloud(stamp=3.000000007, z=z, zd=rng.normal(size=(n, g)),
                         branch=rng.integers(0, 2, n), weight=w, ess=1 / np.sum(w**2), unique=5)


def test_particle_set_round_trip(factory):
    c = cloud(np.random.default_rng(5))
    back = through_wire(factory, cv.particle_set_msg(factory, c, ["th1", "th2"]), cv.PARTICLE_SET)
    assert back.num_particles == 7 and back.dof == 2
    got = cv.cloud_from_particle_set(back, ["th1", "th2"])
    assert got.stamp == c.stamp and got.ess == c.ess and got.unique == c.unique
    assert same_bits(got.z, c.z) and same_bits(got.zd, c.zd) and same_bits(got.weight, c.weight)
    assert got.branch.tolist() == c.branch.tolist()


def test_particle_set_empty_round_trip(factory):
    c = ParticleCloud(0.0, np.zeros((0, 1)), np.zeros((0, 1)), np.zeros(0, int), np.zeros(0),
                      0.0, 0)
    got = cv.cloud_from_particle_set(
        through_wire(factory, cv.particle_set_msg(factory, c, ["th"]), cv.PARTICLE_SET))
    assert got.z.shape == (0, 1) and got.branch.shape == (0,)


def test_particle_set_malformed(factory):
    msg = cv.particle_set_msg(factory, cloud(np.random.default_rng(6)), ["th1", "th2"])
    with pytest.raises(DataError, match="differ from expected"):
        cv.cloud_from_particle_set(msg, ["th1"])
    msg.num_particles = 8
    with pytest.raises(DataError, match="z has 14 elements, expected 16"):
        cv.cloud_from_particle_set(msg)
    msg.num_particles, msg.dof = 7, 3
    with pytest.raises(DataError, match="dof 3 with 2 names"):
        cv.cloud_from_particle_set(msg)
    with pytest.raises(ValueError):
        cv.particle_set_msg(factory, cloud(np.random.default_rng(6)), ["th1"])


# ------------------------------------------------------------------ String
def test_string_round_trip(factory):
    text = "points:\n  A: {x: 0, y: 0, fixed: true}\n# ünïcödé θ\n"
    back = through_wire(factory, cv.string_msg(factory, text), cv.STRING)
    assert cv.string_from_msg(back) == text
    with pytest.raises(DataError, match="malformed String"):
        cv.string_from_msg(SimpleNamespace(data=None))


def test_conversion_modules_import_neither_ros_nor_rosbags():
    import subprocess
    import sys

    code = ("import sys, mbde_core.rosio.convert, mbde_core.rosio.factory, "
            "mbde_core.rosio.stamps; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('rclpy', 'rosbags', 'sensor_msgs')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, mbde_core.rosio.bag; print('rclpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
