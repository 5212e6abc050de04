"""BagWriter / BagReader / bag_info: sqlite3 (rosbag2 format 8) and mcap bags written here
read back identically with BagReader, plain rosbags (Reader, AnyReader) and, for mcap,
the independent mcap + mcap-ros2-support readers."""
import array
import sqlite3
import struct

import numpy as np
import pytest
import yaml

from mbde_core.errors import DataError
from mbde_core.rosio import convert as cv
from mbde_core.rosio.bag import BagReader, BagWriter, bag_info
from mbde_core.rosio.bag_writer import INCOMPLETE_MARKER
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.stamps import ns_to_sec, sec_to_ns
from mbde_core.rosio.typestore import get_typestore
from mbde_core.types import MechanismSnapshot, ParticleCloud

F = RosbagsFactory()
TOPICS = {  # topic -> (type, qos)
    "/mechanism/description": (cv.STRING, "transient_local"),
    "/imu": (cv.IMU, "sensor"),
    "/joint_states": (cv.JOINT_STATE, "sensor"),
    "/estimate": (cv.MECHANISM_STATE, "reliable"),
    "/particles": (cv.PARTICLE_SET, "reliable"),
}
T0 = 1e9 + 0.5  # epoch-sized start: float64 must not lose the nanoseconds


def sample_messages():
    """[(topic, t, msg)] in write order (deliberately not time-sorted)."""
    rng = np.random.default_rng(11)
    out = [("/mechanism/description", T0, cv.string_msg(F, "points: {A: {x: 0, y: 0}}\n"))]
    for k in range(20):
        t = T0 + k * 0.01 + 1e-9 * k  # distinct nanosecond fractions
        gyro = np.nan if k == 3 else float(rng.normal())
        out.append(("/imu", t, cv.imu_msg(F, t, gyro_z=gyro, accel_xy=rng.normal(size=2),
                                          gyro_sigma=0.01, accel_sigma=0.1, frame_id="imu")))
        out.append(("/joint_states", t + 0.005,
                    cv.joint_state_msg(F, t + 0.005, ["crank"], [rng.normal()])))
    for k in range(4):  # written after the sensor data although earlier in time
        t = T0 + 0.0025 + 0.05 * k
        snap = MechanismSnapshot(t, rng.normal(size=5), rng.normal(size=5), rng.normal(size=5),
                                 rng.normal(size=1), rng.normal(size=1), np.array([np.inf]),
                                 cov=np.eye(2), branch=k % 2,
                                 branch_probabilities=np.array([0.5, 0.5]))
        out.append(("/estimate", t, cv.mechanism_state_msg(
            F, snap, ["x1", "y1", "x2", "y2", "th"], ["th"])))
        w = np.full(6, 1 / 6)
        cloud = ParticleCloud(t + 1e-6, rng.normal(size=(6, 1)), rng.normal(size=(6, 1)),
                              np.arange(6) % 2, w, 6.0, 6)
        out.append(("/particles", t + 1e-6, cv.particle_set_msg(F, cloud, ["th"])))
    return out


def write_bag(path, storage, version=8, messages=None):
    messages = sample_messages() if messages is None else messages
    with BagWriter(path, storage, version=version) as bag:
        for topic, (typename, qos) in TOPICS.items():
            bag.add_topic(topic, typename, qos)
        for topic, t, msg in messages:
            bag.write(topic, t, msg)
    return messages


def plain(x):
    """Library-neutral value of a message: dicts, lists, float bits (NaN-safe), ints, str."""
    if hasattr(x, "__dataclass_fields__"):
        # not a type's constants (rosbags keeps e.g. MechanismState.TRUST_OK as a field, mcap_ros2 does not)
        return {k: plain(getattr(x, k)) for k in x.__dataclass_fields__ if not k.startswith("__") and not k.isupper()}
    if hasattr(type(x), "__slots__") and not isinstance(x, (str, bytes, np.generic)):
        return {k: plain(getattr(x, k)) for k in type(x).__slots__}
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple, np.ndarray, array.array)):
        return [plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return struct.pack("<d", float(x))
    return int(x)


def span(messages):
    """last - first time [s] of messages, from exact nanoseconds."""
    ns = [sec_to_ns(t) for _, t, _ in messages]
    return ns_to_sec(max(ns) - min(ns))


def expected(messages):
    order = sorted(range(len(messages)), key=lambda i: (messages[i][1], i))
    return [(messages[i][0], messages[i][1], plain(messages[i][2])) for i in order]


@pytest.fixture(params=["sqlite3", "mcap"])
def storage(request):
    return request.param


def test_round_trip_with_bag_reader(tmp_path, storage):
    messages = write_bag(tmp_path / "bag", storage)
    with BagReader(tmp_path / "bag") as bag:
        got = [(topic, t, plain(msg)) for topic, t, msg in bag.messages()]
        assert bag.skipped == {}
        assert sorted(bag.topics()) == sorted(
            (topic, typ, sum(m[0] == topic for m in messages)) for topic, (typ, _) in TOPICS.items())
        assert bag.start == T0 and bag.end == max(m[1] for m in messages)
        assert bag.duration == span(messages)
        imu_only = [t for _, t, _ in bag.messages(["/imu"])]
    assert got == expected(messages)  # bag-time order, float64-exact times, bit-exact payloads
    assert imu_only == [t for topic, t, _ in expected(messages) if topic == "/imu"]
    for topic, t, msg in messages:  # header stamps hold the exact value of each float time
        if topic != "/mechanism/description":
            stamp = msg.header.stamp
            assert stamp.sec * 10**9 + stamp.nanosec == sec_to_ns(t)
    first_imu = messages[1][2].header.stamp
    assert (first_imu.sec, first_imu.nanosec) == (1_000_000_000, 500_000_000)


def test_sqlite_bag_is_rosbag2_format_8(tmp_path):
    write_bag(tmp_path / "bag", "sqlite3")
    meta = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8 and meta["storage_identifier"] == "sqlite3"
    assert meta["relative_file_paths"] == ["bag.db3"] and meta["message_count"] == 49
    qos = {}
    for entry in meta["topics_with_message_count"]:
        profiles = entry["topic_metadata"]["offered_qos_profiles"]
        assert isinstance(profiles, str)  # version 8: a YAML string with integer enums
        (profile,) = yaml.safe_load(profiles)
        qos[entry["topic_metadata"]["name"]] = (profile["reliability"], profile["durability"],
                                                profile["history"], profile["depth"])
    assert qos["/imu"] == (2, 2, 1, 5)  # best effort, volatile (SensorDataQoS)
    assert qos["/estimate"] == (1, 2, 1, 10)  # reliable, volatile
    assert qos["/mechanism/description"] == (1, 1, 1, 1)  # reliable, transient local
    db = sqlite3.connect(tmp_path / "bag" / "bag.db3")
    assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (49,)
    assert db.execute("SELECT COUNT(*) FROM topics WHERE offered_qos_profiles != ''").fetchone() == (5,)
    db.close()


def test_format_9_writes_qos_as_yaml_list(tmp_path):
    write_bag(tmp_path / "bag", "sqlite3", version=9)
    meta = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 9
    imu = next(e for e in meta["topics_with_message_count"] if e["topic_metadata"]["name"] == "/imu")
    assert imu["topic_metadata"]["offered_qos_profiles"][0]["reliability"] == "best_effort"
    assert bag_info(tmp_path / "bag")["version"] == 9


def test_plain_rosbags_readers_agree(tmp_path, storage):
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Reader

    messages = write_bag(tmp_path / "bag", storage)
    store = get_typestore()
    with Reader(tmp_path / "bag") as reader:
        got = [(c.topic, t, plain(store.deserialize_cdr(raw, c.msgtype)))
               for c, t, raw in reader.messages()]
    assert got == [(topic, sec_to_ns(t), m) for topic, t, m in expected(messages)]
    with AnyReader([tmp_path / "bag"]) as reader:  # typestore built from the bag's definitions
        got = [(c.topic, plain(reader.deserialize(raw, c.msgtype)))
               for c, _, raw in reader.messages()]
    assert got == [(topic, m) for topic, _, m in expected(messages)]


@pytest.mark.filterwarnings("ignore:the .*mcap_ros1.reader. module is deprecated:DeprecationWarning")
def test_mcap_decodes_with_independent_readers(tmp_path):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    from mcap_ros2.reader import read_ros2_messages

    messages = write_bag(tmp_path / "bag", "mcap")
    path = tmp_path / "bag" / "bag.mcap"
    with open(path, "rb") as fh:
        summary = make_reader(fh).get_summary()
    schemas = {s.name: s for s in summary.schemas.values()}
    assert {s.encoding for s in schemas.values()} == {"ros2msg"}
    mech = schemas["mbde_msgs/msg/MechanismState"].data.decode()
    assert "float64[] branch_probabilities" in mech and "MSG: std_msgs/Header" in mech
    assert "uint32 unique_particles" in schemas["mbde_msgs/msg/ParticleSet"].data.decode()

    want = [(topic, sec_to_ns(t), m) for topic, t, m in expected(messages)]
    with open(path, "rb") as fh:  # mcap's current decoder API
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        got = [(ch.topic, m.log_time, plain(ros)) for _, ch, m, ros in reader.iter_decoded_messages()]
    assert got == want
    decoded = list(read_ros2_messages(str(path)))  # the convenience reader
    assert [(m.channel.topic, m.log_time_ns, plain(m.ros_msg)) for m in decoded] == want
    # the conversion readers run unchanged on mcap_ros2's message objects
    by_topic = {m.channel.topic: m.ros_msg for m in decoded}
    snap = cv.snapshot_from_mechanism_state(by_topic["/estimate"], independent_names=["th"])
    assert snap.zdd.tolist() == [np.inf] and snap.cov.shape == (2, 2)
    assert cv.cloud_from_particle_set(by_topic["/particles"], ["th"]).z.shape == (6, 1)
    assert cv.string_from_msg(by_topic["/mechanism/description"]).startswith("points:")


def test_bag_info(tmp_path, storage):
    messages = write_bag(tmp_path / "bag", storage)
    info = bag_info(tmp_path / "bag")
    assert info["storage"] == storage and info["version"] == 8 and info["message_count"] == 49
    assert info["start"] == T0 and info["end"] == T0 + 0.19 + 19e-9 + 0.005
    assert info["duration"] == span(messages) == pytest.approx(0.195, abs=1e-6)
    topics = {t["topic"]: t for t in info["topics"]}
    assert topics["/imu"]["count"] == 20 and topics["/imu"]["type"] == cv.IMU
    assert topics["/imu"]["rate_hz"] == 19 / span([m for m in messages if m[0] == "/imu"])
    assert topics["/imu"]["rate_hz"] == pytest.approx(100.0, rel=1e-5)
    assert topics["/estimate"]["rate_hz"] == pytest.approx(20.0, rel=1e-5)
    assert topics["/mechanism/description"]["rate_hz"] is None


def test_exception_inside_with_block_keeps_written_data_marked_incomplete(tmp_path, storage):
    with pytest.raises(RuntimeError, match="simulated crash"):
        with BagWriter(tmp_path / "bag", storage) as bag:
            bag.add_topic("/imu", cv.IMU, "sensor")
            for k in range(3):
                bag.write("/imu", k * 0.1, cv.imu_msg(F, k * 0.1, gyro_z=float(k)))
            raise RuntimeError("simulated crash")
    with pytest.raises(DataError, match="incomplete bag: its writer was interrupted or failed"):
        BagReader(tmp_path / "bag")  # a bag cut short never passes for a complete one
    with BagReader(tmp_path / "bag", incomplete_ok=True) as bag:
        got = [cv.imu_values(m, ["gyro_z"])[0] for _, _, m in bag.messages()]
    assert got == [0.0, 1.0, 2.0]
    assert not (tmp_path / "good").exists()
    with BagWriter(tmp_path / "good", storage) as bag:
        assert (tmp_path / "good" / INCOMPLETE_MARKER).exists()  # while it is written
    assert not (tmp_path / "good" / INCOMPLETE_MARKER).exists()


def test_writer_errors(tmp_path, storage):
    (tmp_path / "exists").mkdir()
    with pytest.raises(DataError, match="already exists"):
        BagWriter(tmp_path / "exists", storage)
    with pytest.raises(ValueError):
        BagWriter(tmp_path / "x", "rosbag1")
    with BagWriter(tmp_path / "bag", storage) as bag:
        bag.add_topic("/js", cv.JOINT_STATE)
        with pytest.raises(ValueError, match="added twice"):
            bag.add_topic("/js", cv.JOINT_STATE)
        with pytest.raises(ValueError, match="unknown message type"):
            bag.add_topic("/x", "nope_msgs/msg/Nope")
        with pytest.raises(ValueError, match="unknown qos"):
            bag.add_topic("/y", cv.IMU, "fast")
        bag.write("/js", 1.0, cv.joint_state_msg(F, 1.0, ["a"], [1.0]))
        with pytest.raises(ValueError, match="not added"):
            bag.write("/imu", 1.0, cv.imu_msg(F, 1.0, gyro_z=1.0))
        with pytest.raises(DataError, match="cannot serialize") as info:
            bag.write("/js", 2.0, cv.imu_msg(F, 2.0, gyro_z=1.0))  # wrong type
        assert "\n" not in str(info.value) and str(tmp_path / "bag") in str(info.value)
        with pytest.raises(DataError, match="outside the bag range"):
            bag.write("/js", -1.0, cv.joint_state_msg(F, -1.0, ["a"], [1.0]))
        with pytest.raises(DataError, match=r"/js: time nan is not a finite"):
            bag.write("/js", float("nan"), cv.joint_state_msg(F, 0.0, ["a"], [1.0]))
        bag.write("/js", 3.0, cv.joint_state_msg(F, 3.0, ["a"], [3.0]))
    with pytest.raises(DataError, match="closed"):
        bag.write("/js", 4.0, cv.joint_state_msg(F, 4.0, ["a"], [4.0]))
    with BagReader(tmp_path / "bag") as reader:
        assert [t for _, t, _ in reader.messages()] == [1.0, 3.0]


def test_empty_bag(tmp_path, storage):
    with BagWriter(tmp_path / "bag", storage) as bag:
        bag.add_topic("/imu", cv.IMU, "sensor")
    with BagReader(tmp_path / "bag") as reader:
        assert reader.topics() == [("/imu", cv.IMU, 0)]
        assert reader.start is None and reader.end is None and reader.duration == 0.0
        assert list(reader.messages()) == []
    assert bag_info(tmp_path / "bag")["topics"][0]["rate_hz"] is None


def test_unknown_topic_request_is_a_data_error(tmp_path):
    write_bag(tmp_path / "bag", "sqlite3")
    with BagReader(tmp_path / "bag") as reader:
        with pytest.raises(DataError, match=r"no topic\(s\) \['/gps'\]"):
            list(reader.messages(["/imu", "/gps"]))


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_write_raw_many_equals_one_by_one(tmp_path, storage):
    """The batched writer (one executemany on sqlite3) stores the rows, counts and time range
    that write_raw_ns stores one message at a time."""
    f = RosbagsFactory()
    store = get_typestore()
    recs = [("/a" if k % 3 else "/b", 10**18 + 7 * k + (k % 5), bytes(store.serialize_cdr(cv.string_msg(f, f"m{k}"), cv.STRING)))
            for k in range(50)]
    for name, batched in (("one", False), ("many", True)):
        with BagWriter(tmp_path / name, storage) as bag:
            for topic in ("/a", "/b"):
                bag.add_topic(topic, cv.STRING)
            if batched:
                bag.write_raw_many(recs[:20])
                bag.write_raw_many([])
                bag.write_raw_many(recs[20:])
            else:
                for topic, t, data in recs:
                    bag.write_raw_ns(topic, t, data)
    a, b = ((tmp_path / n / "metadata.yaml").read_text().replace(f"{n}.", "BAG.") for n in ("one", "many"))
    assert a == b
    with BagReader(tmp_path / "one") as ra, BagReader(tmp_path / "many") as rb:
        assert [(t, n, bytes(d)) for t, n, _, d in ra.raw_messages()] == [(t, n, bytes(d)) for t, n, _, d in rb.raw_messages()]
