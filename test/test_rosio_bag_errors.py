"""Broken bags raise a one-line DataError naming the path; broken messages are skipped and
counted; rclpy/Fast DDS trailing padding is tolerated; foreign types decode from the bag."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from mbde_core.errors import DataError
from mbde_core.rosio import convert as cv
from mbde_core.rosio.bag import MAX_TRAILING_PADDING, BagReader, BagWriter, bag_info, deserialize
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.typestore import build_typestore, get_typestore
from mbde_core.types import MechanismSnapshot, ParticleCloud

F = RosbagsFactory()
REPO_MSG = Path(__file__).resolve().parents[1] / "mbde_msgs" / "msg"


def small_bag(path, storage="sqlite3", n=200):
    """A bag with n JointState + n Imu messages (big enough to span several sqlite pages)."""
    with BagWriter(path, storage) as bag:
        bag.add_topic("/joint_states", cv.JOINT_STATE, "sensor")
        bag.add_topic("/imu", cv.IMU, "sensor")
        for k in range(n):
            bag.write("/joint_states", k * 1e-3, cv.joint_state_msg(F, k * 1e-3, ["crank"], [k]))
            bag.write("/imu", k * 1e-3, cv.imu_msg(F, k * 1e-3, gyro_z=float(k), frame_id="x" * 64))
    return Path(path)


def storage_file(bag: Path) -> Path:
    (f,) = [p for p in bag.iterdir() if p.suffix in (".db3", ".mcap")]
    return f


def read_all(path):
    """Open, read every message and bag_info; whichever raises."""
    with BagReader(path) as bag:
        list(bag.messages())
    bag_info(path)


def assert_one_line_error(path, match):
    with pytest.raises(DataError, match=match) as info:
        read_all(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text
    return text


def test_missing_path(tmp_path):
    assert_one_line_error(tmp_path / "nope", "no such bag")


def test_directory_without_metadata(tmp_path):
    (tmp_path / "dir").mkdir()
    assert_one_line_error(tmp_path / "dir", "no metadata.yaml")


def test_plain_file_is_not_a_bag(tmp_path):
    (tmp_path / "file.db3").write_bytes(b"")
    assert_one_line_error(tmp_path / "file.db3", "not a rosbag2 bag directory")


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_missing_storage_file(tmp_path, storage):
    bag = small_bag(tmp_path / "bag", storage, n=3)
    storage_file(bag).unlink()
    assert_one_line_error(bag, "cannot open bag")


def test_garbage_metadata(tmp_path):
    bag = small_bag(tmp_path / "bag", n=3)
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [unclosed\n  - x: {\n")
    assert_one_line_error(bag, "cannot open bag")


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
@pytest.mark.parametrize("keep", [0.5, 0.05])
def test_truncated_storage_file(tmp_path, storage, keep):
    bag = small_bag(tmp_path / "bag", storage)
    f = storage_file(bag)
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * keep)])
    assert_one_line_error(bag, "cannot open bag|corrupt bag")


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
@pytest.mark.parametrize("start, stop", [(0.0, 0.5), (0.3, 0.5), (0.6, 0.8), (0.85, 0.9)])
def test_overwritten_storage_file(tmp_path, storage, start, stop):
    bag = small_bag(tmp_path / "bag", storage)
    f = storage_file(bag)
    data = bytearray(f.read_bytes())
    i, j = int(len(data) * start), int(len(data) * stop)
    data[i:j] = np.random.default_rng(1).integers(0, 256, j - i, dtype=np.uint8).tobytes()
    f.write_bytes(bytes(data))
    assert_one_line_error(bag, "cannot open bag|corrupt bag")


# ------------------------------------------------------------------ the Fast DDS padding wrinkle
def rclpy_like_bytes(msg, typename, surplus):
    """msg serialized by rosbags plus ``surplus`` non-zero bytes, as rclpy/Fast DDS emits
    them (measured with the Jazzy wheels: +4 B for a JointState with empty effort, +8 B
    with empty velocity and effort, +24 B for a MechanismState with every optional array
    empty; the extra bytes are uninitialised, not zero)."""
    raw = bytes(get_typestore().serialize_cdr(msg, typename))
    return raw + bytes((0x61 + i) % 256 for i in range(surplus))


E = np.zeros(0)
PADDED = [  # (id, typename, message, surplus bytes)
    ("joint_state_no_effort", cv.JOINT_STATE,
     cv.joint_state_msg(F, 1.5, ["crank"], [0.25], velocities=[np.nan]), 4),
    ("joint_state_positions_only", cv.JOINT_STATE, cv.joint_state_msg(F, 1.5, ["crank"], [0.25]), 8),
    ("mechanism_state_all_empty", cv.MECHANISM_STATE,
     cv.mechanism_state_msg(F, MechanismSnapshot(1.5, E, E, E, np.ones(1), E, E), [], ["th"]), 24),
]


class NoInternals:
    """A typestore exposing only the public API (forces deserialize's fallback path)."""

    def __init__(self, store):
        self.deserialize_cdr = store.deserialize_cdr


@pytest.mark.parametrize("typename, msg, surplus", [p[1:] for p in PADDED], ids=[p[0] for p in PADDED])
@pytest.mark.parametrize("store", ["rosbags", "public-api-only"])
def test_plain_rosbags_rejects_the_padding_we_tolerate(typename, msg, surplus, store):
    raw = rclpy_like_bytes(msg, typename, surplus)
    with pytest.raises(Exception) as info:  # SerdeError; a bare AssertionError before 0.11
        get_typestore().deserialize_cdr(raw, typename)
    assert "size mismatch" in str(info.value) or isinstance(info.value, AssertionError)
    ts = get_typestore() if store == "rosbags" else NoInternals(get_typestore())
    back = deserialize(ts, raw, typename)
    assert plain_fields(back) == plain_fields(msg)


def plain_fields(msg):
    return repr({k: (v.tolist() if isinstance(v, np.ndarray) else repr(v))
                 for k, v in vars(msg).items()})


def test_too_much_surplus_is_refused():
    msg = cv.joint_state_msg(F, 1.5, ["crank"], [0.25])
    raw = rclpy_like_bytes(msg, cv.JOINT_STATE, MAX_TRAILING_PADDING + 8)
    with pytest.raises(DataError, match="cannot decode sensor_msgs/msg/JointState"):
        deserialize(get_typestore(), raw, cv.JOINT_STATE)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_padded_and_broken_messages_in_a_bag(tmp_path, storage):
    good = rclpy_like_bytes(PADDED[1][2], cv.JOINT_STATE, 8)
    with BagWriter(tmp_path / "bag", storage) as bag:
        bag.add_topic("/joint_states", cv.JOINT_STATE, "sensor")
        bag.write_raw("/joint_states", 1.5, good)
        bag.write_raw("/joint_states", 1.6, good[:20])  # truncated message
        bag.write_raw("/joint_states", 1.7, good + bytes(MAX_TRAILING_PADDING))  # far too long
        bag.write_raw("/joint_states", 1.8, good)
    with BagReader(tmp_path / "bag") as reader:
        got = [(t, cv.joint_state_values(m, ["crank"])) for _, t, m in reader.messages()]
        assert reader.skipped == {"/joint_states": 2}
        assert "\n" not in reader.skip_reasons["/joint_states"]
    assert got == [(1.5, [0.25]), (1.8, [0.25])]
    with BagReader(tmp_path / "bag") as reader:
        with pytest.raises(DataError, match=r"/joint_states at t=1.6: cannot decode") as info:
            list(reader.messages(strict=True))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ definitions
def test_foreign_type_decodes_from_the_bags_definition(tmp_path):
    from rosbags.typesys import get_types_from_msg

    store = build_typestore()
    store.register(get_types_from_msg("string label\nfloat64[] values\n", "acme_msgs/msg/Reading"))
    Reading = store.types["acme_msgs/msg/Reading"]
    with BagWriter(tmp_path / "bag", typestore=store) as bag:
        bag.add_topic("/acme", "acme_msgs/msg/Reading")
        bag.write("/acme", 0.5, Reading(label="t", values=np.array([1.0, np.nan])))
    with BagReader(tmp_path / "bag") as reader:  # default (process-wide) typestore
        ((_, t, msg),) = list(reader.messages())
    assert t == 0.5 and msg.label == "t" and np.isnan(msg.values[1])
    assert "acme_msgs/msg/Reading" not in get_typestore().types  # shared store untouched


def test_mbde_types_decode_with_our_definitions_not_the_bags(tmp_path):
    """A bag whose embedded ParticleSet definition text differs (an added constant) still
    decodes with this checkout's definitions."""
    msg_dir = tmp_path / "msg"
    shutil.copytree(REPO_MSG, msg_dir)
    with open(msg_dir / "ParticleSet.msg", "a") as fh:
        fh.write("uint8 LAYOUT_VERSION=2\n")
    other = build_typestore(msg_dir)

    cloud = ParticleCloud(2.0, np.ones((3, 1)), np.zeros((3, 1)), np.zeros(3, int),
                          np.full(3, 1 / 3), 3.0, 1)
    with BagWriter(tmp_path / "bag", "mcap", typestore=other) as bag:
        bag.add_topic("/particles", cv.PARTICLE_SET)
        bag.write("/particles", 2.0, cv.particle_set_msg(RosbagsFactory(other), cloud, ["th"]))
    mcap = (tmp_path / "bag" / "bag.mcap").read_bytes()
    assert b"LAYOUT_VERSION=2" in mcap
    with BagReader(tmp_path / "bag") as reader:
        ((_, _, msg),) = list(reader.messages())
    assert not hasattr(msg, "LAYOUT_VERSION")  # decoded as our own class
    got = cv.cloud_from_particle_set(msg, ["th"])
    assert got.z.tolist() == [[1.0]] * 3 and got.weight.tolist() == [1 / 3] * 3
