"""Virtual sensor driver nodes ``imu_driver`` and ``encoder_driver`` (one implementation).

They stand in for real drivers: each samples the simulator's ground truth
(``/mbde/ground_truth``) and publishes, per driven sensor, sensor_msgs/Imu (gyroscopes,
accelerometers, IMUs) or sensor_msgs/JointState (encoders, slider position sensors) on
the sensor's topic, with its noise, rate, frame_id and REP 145 covariances
(mbde_core.live.drivers). Publishers are reliable with a history of 100 (REP 2003:
subscribers choose best effort; a slow reliable subscriber does not lose readings). The model comes from scenario_file / mechanism_file, or from /mbde/description.
"""
from __future__ import annotations

from mbde_msgs.msg import MechanismState
from rclpy.node import Node
from std_msgs.msg import String

from mbde_core.errors import DataError, MbdeError
from mbde_core.live import topics
from mbde_core.live.diagnostics import Throttle
from mbde_core.live.drivers import DriverSet
from mbde_core.live.model_source import from_description, load_source
from mbde_nodes.common import LATCHED, STREAM, RclpyFactory, declare_parameters, fail, wall_clock


class Driver(Node):
    def __init__(self, executable: str):
        super().__init__(executable)
        self.executable = executable
        try:
            self.p = p = declare_parameters(self, executable)
            scenario = load_source(p["scenario_file"], p["mechanism_file"], p["sensors_file"], p["settings"])
            self.factory = RclpyFactory()
            self.drivers = None
            self.pubs = {}
            self.desc_text = None
            self.truth_count = 0
            self.errors = 0
            self.throttle = Throttle(5.0)
            if scenario is not None:
                self._build(scenario)
        except MbdeError as exc:
            raise fail(self, exc) from None
        self.desc_sub = None
        if scenario is None:
            self.desc_sub = self.create_subscription(String, topics.DESCRIPTION, self.on_description, LATCHED)
        self.truth_sub = self.create_subscription(MechanismState, topics.GROUND_TRUTH, self.on_truth, STREAM)
        self.timer = self.create_timer(1.0, self.on_timer, clock=wall_clock())
        self.on_timer()

    def _build(self, scenario) -> None:
        p = self.p
        drivers = DriverSet(scenario, self.executable, self.factory, p["sensors"], p["rate"], p["seed"], p["noise"],
                            p["frame_id"])
        kind = self.executable.replace("_driver", "")
        if len(drivers) == 0:
            self.get_logger().warning(f"the model {scenario.name!r} has no {kind} sensor: nothing to publish")
        for d in drivers.drivers:
            if d.sensor.topic not in self.pubs:
                cls = self.factory.cls(d.sensor.msg_type)
                self.pubs[d.sensor.topic] = self.create_publisher(cls, d.sensor.topic, STREAM)
            sigma = ", ".join(f"{v:.3g}" for v in d.sensor.noise.sigma)
            self.get_logger().info(
                f"{d.sensor.name}: {d.sensor.msg_type} on {self.pubs[d.sensor.topic].topic_name} at {d.rate:g} Hz, "
                f"frame {d.frame_id}, noise sigma [{sigma}]" + ("" if d.seed is not None else " (noise off)")
                + f", from {scenario.name!r}")
        self.drivers = drivers

    def on_description(self, msg) -> None:
        if msg.data == self.desc_text:
            return
        try:
            scenario = from_description(msg.data, topics.DESCRIPTION)
            if self.desc_text is not None:
                self.get_logger().warning("the description changed: rebuilding the drivers")
            self._build(scenario)
            self.desc_text = msg.data
        except MbdeError as exc:
            self.get_logger().error(str(exc))

    def on_truth(self, msg) -> None:
        if self.drivers is None:
            return
        self.truth_count += 1
        try:
            out = self.drivers.on_truth(msg)
        except (DataError, ValueError) as exc:
            self.errors += 1
            if self.throttle("truth"):
                self.get_logger().warning(f"skipping ground truth ({exc}); {self.errors} skipped so far")
            return
        for topic, m in out:
            self.pubs[topic].publish(m)

    def on_timer(self) -> None:
        if self.drivers is None:
            if self.throttle("desc"):
                n = self.count_publishers(topics.DESCRIPTION)
                self.get_logger().info(f"waiting for the model description on {topics.DESCRIPTION} ({n} publisher(s)): "
                                       "start mechanism_model, or set scenario_file / mechanism_file")
        elif self.truth_count == 0 and self.throttle("truth-wait"):
            n = self.count_publishers(self.truth_sub.topic_name)
            self.get_logger().info(f"waiting for ground truth on {self.truth_sub.topic_name} ({n} publisher(s)): "
                                   "start the simulator")
