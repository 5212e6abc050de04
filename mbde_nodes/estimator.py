"""``estimator`` node: one observer (pf | ukf | errorekf | adekf | dekf | cekf | diekfpm) live.

Runs :class:`mbde_core.live.estimator.LiveEstimator`, i.e. the EstimatorStage of
``mbde replay`` with the same model, sensors, initial guess and options, fed from
SensorDataQoS subscriptions to the sensor topics of the model. Publishes (node name =
estimator name in namespace /mbde gives the topics of ``mbde replay``'s estimates bag):

- ``~/state`` (mbde_msgs/MechanismState), ``~/joint_states`` (sensor_msgs/JointState:
  q, qd, effort = estimated generalized input) at ``publish_rate``;
- ``~/particles`` (mbde_msgs/ParticleSet, particle filters only) at ``particles_rate``;
- ``~/markers`` (MarkerArray: bars, 95 % ellipses, PF hypotheses, label) at ``marker_rate``;
- ``/tf`` (tf2_msgs/TFMessage, with ~/state): ``frame_id`` -> ``<tf_prefix><body>`` of the
  estimate (REP 105; ``tf_prefix`` '~' = ``<node name>/``), and once, latched,
  ``/tf_static``: its sensor mounts ``<tf_prefix><sensor frame_id>``;
- ``/diagnostics`` (diagnostic_msgs/DiagnosticArray) every ``diagnostics_period``: rates,
  received / fused / late / non-finite / malformed / gated counts, NIS or ESS, step time,
  resets, stamp lag, and what the node waits for.

Service ``~/reset`` (std_srvs/Trigger). A backward jump of the node clock (use_sim_time,
bag loop) resets the estimator. The model comes from scenario_file / mechanism_file or
from /mbde/description (then the node says it waits for it).
"""
from __future__ import annotations

import sys
import time

from diagnostic_msgs.msg import DiagnosticArray
from mbde_msgs.msg import MechanismState, ParticleSet
from rclpy.clock import ClockChange, JumpThreshold
from rclpy.duration import Duration
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import MarkerArray

from mbde_core.errors import MbdeError
from mbde_core.live import topics
from mbde_core.live.diagnostics import WARN, Status, Throttle, diagnostic_array
from mbde_core.live.estimator import EstimatorOptions, LiveEstimator, load_config
from mbde_core.live.model_source import from_description, load_source
from mbde_core.rosio.tf import TF_STATIC_TOPIC, TF_TOPIC
from mbde_nodes.common import (LATCHED, RELIABLE, RclpyFactory, declare_parameters, fail, now_seconds,
                               run, sensor_qos, wall_clock)

TICK = 0.05  # s (wall): how often the clock is checked for overdue readings


class Estimator(Node):
    def __init__(self):
        super().__init__("estimator")
        try:
            self.p = p = declare_parameters(self, "estimator")
            self.config = load_config(p["estimator"], p["config_file"])
            scenario = load_source(p["scenario_file"], p["mechanism_file"], p["sensors_file"], p["settings"])
        except MbdeError as exc:
            raise fail(self, exc) from None
        self.name = p["estimator"]
        self.factory = RclpyFactory()
        self.core: LiveEstimator | None = None
        self.subs = []
        self.desc_text = None
        self.log_throttle = Throttle(5.0)
        self.pubs = {
            "state": self.create_publisher(MechanismState, "~/state", RELIABLE),
            "joint_states": self.create_publisher(JointState, "~/joint_states", RELIABLE),
            "markers": self.create_publisher(MarkerArray, "~/markers", RELIABLE),
        }
        if p["publish_tf"]:
            self.pubs["tf"] = self.create_publisher(TFMessage, TF_TOPIC, 100)
            self.tf_static_pub = self.create_publisher(TFMessage, TF_STATIC_TOPIC, LATCHED)
        self.diag_pub = self.create_publisher(DiagnosticArray, topics.DIAGNOSTICS, 10)
        self.reset_srv = self.create_service(Trigger, "~/reset", self.on_reset)
        self.desc_sub = None
        if scenario is not None:
            try:
                self._build(scenario)
            except MbdeError as exc:
                raise fail(self, exc) from None
        else:
            self.desc_sub = self.create_subscription(String, topics.DESCRIPTION, self.on_description, LATCHED)
            self.get_logger().info(f"{self.name}: waiting for the model description on {self.desc_sub.topic_name} "
                                   "(start mechanism_model or play an mbde bag, or set scenario_file / mechanism_file)")
        self.jump_handle = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-1), on_clock_change=False),
            post_callback=self.on_jump)
        self.tick_timer = self.create_timer(TICK, self.on_tick, clock=wall_clock())
        self.diag_timer = self.create_timer(p["diagnostics_period"], self.on_diagnostics, clock=wall_clock())

    # -- model ------------------------------------------------------------------------------
    def _build(self, scenario) -> None:
        prefix = self.p["tf_prefix"]
        opts = EstimatorOptions.from_params(self.p, self.config, self.get_name() + "/" if prefix == "~" else prefix)
        core = LiveEstimator(scenario, opts, self.factory, self.publish, self.log)
        if opts.publish_tf:
            self.tf_static_pub.publish(core.static_tf(now_seconds(self) or 0.0))
        for sub in self.subs:
            self.destroy_subscription(sub)
        self.subs = []
        self.core = core
        rates = {}
        for s in core.sensors:
            rates[s.topic] = rates.get(s.topic, 0.0) + float(s.rate)
        for topic, typename in core.topic_types.items():
            cls = self.factory.cls(typename)
            qos = sensor_qos(rates.get(topic, 0.0), opts.reorder_window)
            self.subs.append(self.create_subscription(cls, topic, lambda msg, info, t=topic: self.on_reading(t, msg, info),
                                                      qos))
        listening = ", ".join(f"{s.topic_name} [{core.topic_types[t]}]" for s, t in zip(self.subs, core.topic_types))
        mech = core.mech
        self.get_logger().info(
            f"{self.name} on {scenario.name!r} ({mech.name}, z = {', '.join(mech.independent_names)}, step "
            f"{1e3 * core.step:g} ms): listening to {listening} (best effort); publishing "
            f"{self.pubs['state'].topic_name}, {self.pubs['joint_states'].topic_name}, "
            f"{self.pubs['markers'].topic_name}, {self.diag_pub.topic_name}")

    def on_description(self, msg) -> None:
        if msg.data == self.desc_text:
            return
        try:
            scenario = from_description(msg.data, topics.DESCRIPTION)
            if self.core is not None:
                self.get_logger().warning("the model description changed: rebuilding the estimator")
            self._build(scenario)
            self.desc_text = msg.data
        except MbdeError as exc:
            self.get_logger().error(str(exc))

    # -- data -------------------------------------------------------------------------------
    def on_reading(self, topic: str, msg, info=None) -> None:
        # how long the reading waited in the reader queue: the middleware's reception time
        # (system clock, ns) to now; a node that falls behind skips readings evenly
        info = info if isinstance(info, dict) else {}
        received = info.get("received_timestamp")
        queued = max(time.time_ns() - received, 0) * 1e-9 if received else None
        self.core.backlog.sequence(topic, info.get("publication_sequence_number"))
        self.core.on_message(topic, msg, now_seconds(self), queued)

    def on_tick(self) -> None:
        if self.core is not None:
            self.core.tick(now_seconds(self))

    def on_jump(self, jump) -> None:
        if self.core is not None and jump.clock_change == ClockChange.ROS_TIME_NO_CHANGE and jump.delta.nanoseconds < 0:
            self.core.reset("clock jumped back", f"by {-jump.delta.nanoseconds * 1e-9:.3f} s")

    def on_reset(self, request, response):
        if self.core is None:
            response.success = False
            response.message = f"{self.name}: no estimator yet (waiting for the model description)"
            return response
        t = self.core.time
        self.core.reset("reset service")
        response.success = True
        response.message = (f"{self.name} reset" + (f" at filter time {t:.3f} s" if t is not None else "")
                            + "; the next reading restarts it from the initial guess")
        return response

    # -- output -----------------------------------------------------------------------------
    def publish(self, key: str, msg) -> None:
        pub = self.pubs.get(key)
        if pub is None and key == "particles":
            pub = self.pubs[key] = self.create_publisher(ParticleSet, "~/particles", RELIABLE)
        pub.publish(msg)

    def log(self, level: str, text: str) -> None:
        # (rclpy requires one severity per call site: one call per level)
        if level == "error":
            self.get_logger().error(text)
        elif level == "warn":
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _waiting_problems(self) -> list:
        """What the node waits for, as [(level, text)] (publishers looked up in the graph)."""
        out = []
        if self.core is None:
            n = self.count_publishers(self.desc_sub.topic_name)
            out.append((WARN, f"waiting for the model description on {self.desc_sub.topic_name} "
                              f"({n} publisher(s); start mechanism_model, play an mbde bag, or set "
                              "scenario_file / mechanism_file)"))
            return out
        for sub, topic in zip(self.subs, self.core.topic_types):
            sensors = [st for st in self.core.waiting_for() if st.topic == topic]
            if not sensors:
                continue
            name = sub.topic_name
            want = self.core.topic_types[topic]
            infos = self.get_publishers_info_by_topic(name)
            what = f"waiting for {name} ({want}, sensor {', '.join(st.name for st in sensors)}): "
            wrong = [i for i in infos if i.topic_type != want]
            if not infos:
                what += "no publisher yet"
            elif wrong:
                what += (f"publisher {wrong[0].node_namespace.rstrip('/')}/{wrong[0].node_name} offers "
                         f"{wrong[0].topic_type}, expected {want}")
            elif any(st.received for st in sensors):
                what += f"{sum(st.malformed for st in sensors)} message(s) received, none usable: " + \
                        "; ".join(st.last_error for st in sensors if st.last_error)
            else:
                what += f"{len(infos)} publisher(s), no message yet"
            out.append((WARN, what))
        if self.get_parameter("use_sim_time").value and self.count_publishers(topics.CLOCK_TOPIC) == 0:
            out.append((WARN, "use_sim_time is true but nothing publishes /clock (ros2 bag play --clock, or the "
                              "simulator with publish_clock:=true)"))
        return out

    def on_diagnostics(self) -> None:
        problems = self._waiting_problems()
        for _, text in problems:
            if self.log_throttle(text):
                self.get_logger().warning(text)
        name = f"mbde estimator {self.get_fully_qualified_name()} ({self.name})"
        if self.core is None:
            status = Status(WARN, name, problems[0][1], values=[("estimator", self.name),
                                                                 ("state", "waiting for the model description")])
        else:
            status = self.core.status(name, now_seconds(self), problems)
        self.diag_pub.publish(diagnostic_array(self.factory, now_seconds(self) or 0.0, [status]))


def main(argv=None) -> int:
    return run(Estimator, argv)


if __name__ == "__main__":
    sys.exit(main())
