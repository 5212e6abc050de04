"""The real-rclpy test environment works: messages, serialisation, loopback DDS, QoS.

Runs in .venv-ros (tools/ros_venv.sh): rclpy 7.1.6 (Jazzy) with rmw_fastrtps_cpp from
the PyPI wheels, and mbde_msgs built from mbde_msgs/ into the venv.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import rosutil
from talker_process import mechanism_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TALKER = str(HERE / "talker_process.py")


def full_particle_set():
    from mbde_msgs.msg import ParticleSet

    p = ParticleSet()
    p.header.stamp.sec = 7
    p.header.stamp.nanosec = 123
    p.header.frame_id = "world"
    p.num_particles = 3
    p.dof = 2
    p.independent_names = ["theta1", "theta2"]
    p.z = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    p.zd = [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]
    p.branch = [0, 1, -1]
    p.weight = [0.5, 0.25, 0.25]
    p.effective_sample_size = 1.0 / (0.5**2 + 2 * 0.25**2)
    p.unique_particles = 3
    return p


def msg_fields(msg_file: Path) -> list[str]:
    """Field names of a .msg file, in order (constants and comments skipped)."""
    names = []
    for line in msg_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and "=" not in line:
            names.append(line.split()[1])
    return names


def assert_all_fields_set(msg) -> None:
    """Every field differs from its default: the round trip really carries each one."""
    default = type(msg)()
    same = [f for f in msg.get_fields_and_field_types() if getattr(msg, f) == getattr(default, f)]
    assert not same, f"fields left at their default: {same}"


def frame_index(msg) -> int:
    """``i`` of a talker message ``mechanism_state(i)`` (its frame_id is ``frame<i>``)."""
    return int(msg.header.frame_id.removeprefix("frame"))


def assert_same_content(got, expected) -> None:
    """Field-by-field equality of two messages (rclpy or rosbags objects)."""
    for field in expected.get_fields_and_field_types():
        a, b = getattr(got, field), getattr(expected, field)
        if field == "header":
            assert (a.stamp.sec, a.stamp.nanosec, a.frame_id) == (b.stamp.sec, b.stamp.nanosec, b.frame_id)
        elif isinstance(b, str) or not hasattr(b, "__len__"):
            assert a == b, field
        else:
            assert list(a) == list(b), field


# ----------------------------------------------------------------- environment


def test_venv_has_real_rclpy_and_mbde_core():
    import rclpy
    from rclpy.utilities import get_rmw_implementation_identifier

    import mbde_core

    assert Path(mbde_core.__file__).resolve().parent == REPO / "mbde_core"  # editable install
    assert Path(rclpy.__file__).resolve().is_relative_to(Path(sys.prefix).resolve())
    assert get_rmw_implementation_identifier() == "rmw_fastrtps_cpp"


@pytest.mark.parametrize("module, names", [
    ("std_msgs.msg", ["Header", "Float64MultiArray"]),
    ("std_srvs.srv", ["Trigger.Request", "SetBool.Response", "Empty.Request"]),
    ("geometry_msgs.msg", ["PoseStamped", "TransformStamped", "WrenchStamped"]),
    ("sensor_msgs.msg", ["JointState", "Imu"]),
    ("visualization_msgs.msg", ["Marker", "MarkerArray"]),
    ("diagnostic_msgs.msg", ["DiagnosticArray", "DiagnosticStatus"]),
    ("rosgraph_msgs.msg", ["Clock"]),
    ("builtin_interfaces.msg", ["Time", "Duration"]),
    ("mbde_msgs.msg", ["MechanismState", "ParticleSet"]),
])
def test_interface_packages_import(module, names):
    from rclpy.serialization import serialize_message

    mod = importlib.import_module(module)
    for name in names:
        cls = mod
        for part in name.split("."):
            cls = getattr(cls, part)
        serialize_message(cls())  # loads the C type support


@pytest.mark.parametrize("name", ["MechanismState", "ParticleSet"])
def test_built_mbde_msgs_match_the_msg_files(name):
    """The installed mbde_msgs is built from this checkout (no stale build)."""
    from mbde_msgs import msg

    cls = getattr(msg, name)
    assert list(cls.get_fields_and_field_types()) == msg_fields(REPO / "mbde_msgs" / "msg" / f"{name}.msg")


# --------------------------------------------------------------- serialisation


@pytest.mark.parametrize("make", [lambda: mechanism_state(8), full_particle_set],
                         ids=["MechanismState", "ParticleSet"])
def test_mbde_msgs_serialization_round_trip(make):
    from rclpy.serialization import deserialize_message, serialize_message

    original = make()
    assert_all_fields_set(original)
    data = serialize_message(original)
    assert isinstance(data, bytes) and data[:4] == b"\x00\x01\x00\x00"  # CDR little endian
    back = deserialize_message(data, type(original))
    assert back == original
    assert_same_content(back, original)


def test_mbde_msgs_round_trip_with_empty_arrays():
    """Unknown quantities are empty arrays (see MechanismState.msg)."""
    from rclpy.serialization import deserialize_message, serialize_message

    from mbde_msgs.msg import MechanismState

    m = MechanismState(branch=-1)
    m.header.frame_id = "world"
    m.z = [0.5]
    back = deserialize_message(serialize_message(m), MechanismState)
    assert back == m
    assert list(back.q) == [] and list(back.input_covariance) == [] and back.branch == -1


# ------------------------------------------------------------- loopback DDS


def test_talker_process_to_probe_over_loopback(node_processes, probe, ros_env):
    """A separate node process publishes MechanismState; the test process receives it.

    The raw (wire) bytes also deserialise with ``rosbags`` (what ``mbde replay`` reads
    from bags recorded by rosbag2, which stores exactly these bytes) to the same content,
    also for the odd messages whose trailing arrays are empty. (Not so the output of
    ``rclpy.serialization.serialize_message`` for those: rmw_fastrtps sizes it with
    its estimate, up to 4 uninitialised bytes per empty float64 array more than the
    payload, which rosbags rejects as "CDR message size mismatch".)
    """
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from mbde_msgs.msg import MechanismState

    topic = f"/mbde_test/state_{ros_env['domain_id']}"
    typed = probe.subscribe(topic, MechanismState, rosutil.qos_profile(depth=50))
    raw = probe.subscribe(topic, MechanismState, rosutil.qos_profile(depth=50), raw=True)

    talker = node_processes.start(TALKER, params={"topic": topic, "rate_hz": 40.0})
    talker.wait_for_output(r"^ready topic=" + re.escape(topic))
    assert typed.wait_for_publishers(1, timeout=15.0), "talker not discovered"

    n = 20
    got = typed.wait_for(n, timeout=20.0)
    probe.check()
    assert len(got) >= n, f"received {len(got)} < {n} messages\n{talker.logs()}"
    indices = [frame_index(m) for m in got]
    # reliable + depth 50: once matched, nothing is lost or reordered
    assert indices == list(range(indices[0], indices[0] + len(indices)))
    for i, m in zip(indices, got):
        assert m == mechanism_state(i)

    # a second, short-lived subscription on the running stream (subscribe-wait-unsubscribe)
    more = probe.collect(topic, MechanismState, rosutil.qos_profile(depth=50), count=5, timeout=15.0)
    assert len(more) >= 5
    assert all(m == mechanism_state(frame_index(m)) for m in more)
    assert min(frame_index(m) for m in more) > indices[0]

    assert talker.stop() == 0, talker.logs()
    assert "stopped" in talker.stdout()

    store = get_typestore(Stores.ROS2_HUMBLE)
    for name in ("MechanismState", "ParticleSet"):
        text = (REPO / "mbde_msgs" / "msg" / f"{name}.msg").read_text()
        store.register(get_types_from_msg(text, f"mbde_msgs/msg/{name}"))
    received = raw.wait_for(n, timeout=5.0)
    assert len(received) >= n
    for data in received[:n]:
        decoded = store.deserialize_cdr(bytes(data), "mbde_msgs/msg/MechanismState")
        assert_same_content(decoded, mechanism_state(frame_index(decoded)))


def test_transient_local_message_reaches_late_subscriber(node_processes, probe, ros_env):
    """A latched (transient-local) publisher's last ``depth`` messages reach a subscriber
    created after they were published, if it asks for transient-local; a volatile one
    matched at the same time gets nothing."""
    from mbde_msgs.msg import MechanismState

    topic = f"/mbde_test/latched_{ros_env['domain_id']}"
    talker = node_processes.start(
        "talker_process",  # as a module: python -m talker_process
        params={"topic": topic, "rate_hz": 50.0, "count": 3, "depth": 2, "transient_local": True},
        env={"PYTHONPATH": str(HERE)})
    talker.wait_for_output(r"^done 3$")

    latched = probe.subscribe(topic, MechanismState, rosutil.qos_profile(depth=10, transient_local=True))
    volatile = probe.subscribe(topic, MechanismState, rosutil.qos_profile(depth=10))
    got = latched.wait_for(2, timeout=15.0)
    probe.check()
    assert [m.header.frame_id for m in got] == ["frame1", "frame2"]  # the last depth=2
    assert got == [mechanism_state(1), mechanism_state(2)]

    assert volatile.wait_for_publishers(1, timeout=10.0), "volatile subscription never matched"
    rosutil.wait_until(lambda: False, 1.0)  # give a wrongly delivered history time to arrive
    assert len(volatile) == 0
    assert len(latched) == 2
    assert talker.running(), talker.logs()
