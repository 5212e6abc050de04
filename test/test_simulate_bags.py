"""`mbde simulate`'s bags read back identically: with rosbags (sqlite3 and mcap, float64-exact,
header stamp = bag time) and with the independent mcap readers; `mbde bag-info` on broken
bags is one error line."""
import shutil

import pytest
import yaml

from mbde_core.cli.main import main as mbde
from mbde_core.rosio import convert as cv
from mbde_core.rosio.stamps import sec_to_ns
from mbde_core.rosio.typestore import get_typestore
from mbde_core.scenario import load_scenario
from mbde_core.simulator.bag import write_simulation_bag
from simulate_rig import DESC, GT, GT_JS, all_sensors, scen  # noqa: F401  (all_sensors: the shared fixture)


def expected_messages(sc, r):
    """{topic: [(t_ns, content)]} predicted from the in-memory run."""
    out = {GT: [], GT_JS: []}
    for i, t in enumerate(r.t):
        out[GT].append((sec_to_ns(t), r.q[i].tolist(), r.qdd[i].tolist(), r.zd[i].tolist(), int(r.branch[i]),
                        r.inputs[i].tolist()))
        out[GT_JS].append((sec_to_ns(t), r.q[i].tolist(), r.qd[i].tolist(), r.effort[i].tolist()))
    for s in sc.all_sensors:
        stamps, values = r.measurements[s.name]
        out[s.topic] = [(sec_to_ns(t), v.tolist()) for t, v in zip(stamps, values)]
    return out


def decode(topic, msg, sensors_by_topic):
    stamp_ns = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
    if topic == GT:
        return stamp_ns, list(msg.q), list(msg.qdd), list(msg.zd), int(msg.branch), list(msg.input_forces)
    if topic == GT_JS:
        return stamp_ns, list(msg.position), list(msg.velocity), list(msg.effort)
    s = sensors_by_topic[topic]
    if s.msg_type == cv.JOINT_STATE:
        assert list(msg.name) == s.channels
        return stamp_ns, cv.joint_state_values(msg, s.channels)
    return stamp_ns, cv.imu_values(msg, s.channels).tolist()


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_reads_back_identically_with_rosbags(tmp_path, all_sensors, storage):
    from rosbags.rosbag2 import Reader

    sc, r = all_sensors
    summary = write_simulation_bag(sc, tmp_path / "bag", storage)
    assert summary.truth_samples == len(r.t) and summary.phi_max == r.phi_max.max()
    want = expected_messages(sc, r)
    by_topic = {s.topic: s for s in sc.all_sensors}
    got = {}
    store = get_typestore()
    with Reader(tmp_path / "bag") as reader:
        for conn, t_ns, raw in reader.messages():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == DESC:
                assert t_ns == sc.start_ns and conn.msgtype == cv.STRING
                desc = yaml.safe_load(msg.data)
                continue
            item = decode(conn.topic, msg, by_topic)
            assert item[0] == t_ns  # header stamp == bag time, to the nanosecond
            got.setdefault(conn.topic, []).append(item)
            if conn.topic in by_topic:
                s = by_topic[conn.topic]
                assert msg.header.frame_id == s.frame_id
                if s.msg_type == cv.IMU:
                    check_imu_covariances(msg, s)
            else:
                assert msg.header.frame_id == "world"
    assert got == want  # float64-exact, bag-time order
    assert desc["scenario"]["seed"] == 7 and desc["truth"]["inputs"] == ["motor"]
    assert [d["topic"] for d in desc["topics"]["sensors"] if d["reference"]] == ["/mbde/reference/ref_enc"]


def check_imu_covariances(msg, sensor):
    var = sensor.noise.variance()
    assert msg.orientation_covariance[0] == -1.0
    gyro = "gyro_z" in sensor.channels
    accel = any(c.startswith("accel") for c in sensor.channels)
    assert (msg.angular_velocity_covariance[0] == -1.0) == (not gyro)
    assert (msg.linear_acceleration_covariance[0] == -1.0) == (not accel)
    for c, v in zip(sensor.channels, var):
        vec, axis, cov = cv.IMU_CHANNELS[c]
        assert getattr(msg, cov)[{"x": 0, "y": 4, "z": 8}[axis]] == v


@pytest.mark.filterwarnings("ignore:the .*mcap_ros1.reader. module is deprecated:DeprecationWarning")
def test_mcap_decodes_with_independent_readers(tmp_path, all_sensors):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    sc, r = all_sensors
    write_simulation_bag(sc, tmp_path / "bag", "mcap")
    (path,) = list((tmp_path / "bag").glob("*.mcap"))
    want = expected_messages(sc, r)
    by_topic = {s.topic: s for s in sc.all_sensors}
    got = {}
    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        for _, channel, message, ros in reader.iter_decoded_messages():
            if channel.topic == DESC:
                assert yaml.safe_load(ros.data)["scenario"]["name"] == "all_sensors"
                continue
            item = decode(channel.topic, ros, by_topic)
            assert item[0] == message.log_time
            got.setdefault(channel.topic, []).append(item)
    assert got == want


@pytest.fixture(scope="module", params=["sqlite3", "mcap"])
def small_bag(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "good"
    sc = load_scenario(scen("fourbar_encoder"), ["duration=0.05"])
    write_simulation_bag(sc, out, request.param)
    return out


@pytest.mark.parametrize("damage", ["missing", "no metadata", "truncated", "garbage", "bad metadata"])
def test_bag_info_on_broken_bags(tmp_path, capsys, small_bag, damage):
    bag = tmp_path / "bag"
    shutil.copytree(small_bag, bag)
    (data,) = [p for p in bag.iterdir() if p.suffix in (".db3", ".mcap")]
    if damage == "missing":
        shutil.rmtree(bag)
    elif damage == "no metadata":
        (bag / "metadata.yaml").unlink()
    elif damage == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif damage == "garbage":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 3: len(raw) // 3 + 3000] = bytes(3000)
        data.write_bytes(bytes(raw))
    else:
        (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [1, 2\n")
    assert mbde(["bag-info", str(bag)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mbde bag-info: error: {bag}") and captured.out == ""
    assert mbde(["bag-info", str(small_bag)]) == 0  # the intact copy still reads
