"""Test publisher of mbde_msgs/MechanismState, run as a separate process by test/ros tests.

    python test/ros/talker_process.py --ros-args -p topic:=/state -p rate_hz:=20.0 \
        -p count:=0 -p depth:=10 -p transient_local:=false

Publishes ``mechanism_state(i)`` for i = 0, 1, ... at ``rate_hz`` (``count`` messages,
0 = until stopped), then idles until SIGINT. Prints ``published <i>`` after each
publish and ``done <count>`` when finished, on stdout (the tests wait on these lines).
"""
from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from rosutil import qos_profile

from mbde_msgs.msg import MechanismState


def mechanism_state(i: int) -> MechanismState:
    """Deterministic content of message ``i``, so the receiver can check it: every field
    set for even ``i``; for odd ``i`` the covariance and the trailing input arrays are
    empty (an estimator without them) and the verdict OK without a reason, the case where ``rclpy.serialization`` output and
    rosbags disagree (see test_ros_env.py)."""
    m = MechanismState()
    m.header.stamp.sec = 1000 + i
    m.header.stamp.nanosec = 500_000_000
    m.header.frame_id = f"frame{i}"
    m.coordinate_names = ["x1", "y1", "theta"]
    m.q = [float(i), i + 0.5, -0.25 * i]
    m.qd = [1.0, 2.0, 3.0]
    m.qdd = [-1.0, -2.0, 1e-300]
    m.independent_names = ["theta"]
    m.z = [-0.25 * i]
    m.zd = [3.0]
    m.zdd = [1e-300]
    m.covariance = [0.1, 0.01, 0.01, 0.2]
    m.branch = 1 - i % 2
    m.branch_probabilities = [0.25, 0.75] if m.branch else [0.75, 0.25]
    m.input_names = ["motor"]
    m.input_forces = [float(i) * 1.5]
    m.input_covariance = [0.04]
    m.trust_level = MechanismState.TRUST_DEGRADED
    m.trust_reason = f"reason {i}"
    if i % 2:
        m.covariance = []
        m.input_names = []
        m.input_forces = []
        m.input_covariance = []
        m.trust_level = MechanismState.TRUST_OK
        m.trust_reason = ""
    return m


class Talker(Node):
    def __init__(self):
        super().__init__("mbde_test_talker")
        self.topic = self.declare_parameter("topic", "mechanism_state").value
        rate_hz = float(self.declare_parameter("rate_hz", 20.0).value)
        self.count = int(self.declare_parameter("count", 0).value)
        depth = int(self.declare_parameter("depth", 10).value)
        latched = bool(self.declare_parameter("transient_local", False).value)
        self.pub = self.create_publisher(
            MechanismState, self.topic, qos_profile(depth=depth, transient_local=latched))
        self.i = 0
        self.timer = self.create_timer(1.0 / rate_hz, self.tick)
        print(f"ready topic={self.pub.topic_name} rate_hz={rate_hz} count={self.count} "
              f"depth={depth} transient_local={latched}", flush=True)

    def tick(self) -> None:
        if self.count and self.i >= self.count:
            return
        self.pub.publish(mechanism_state(self.i))
        print(f"published {self.i}", flush=True)
        self.i += 1
        if self.count and self.i == self.count:
            self.timer.cancel()
            print(f"done {self.count}", flush=True)


def main(argv=None) -> int:
    rclpy.init(args=argv)
    node = Talker()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
