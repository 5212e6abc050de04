"""``simulator`` node: the ground truth of a scenario, integrated in (simulated) time.

Parameters (mbde_core.live.params): scenario_file, settings, rate, real_time_factor,
duration, loop, publish_clock, publish_description, marker_rate, wait_for_subscribers,
start_timeout. The scenario's mechanism, loads, speed controller and integrator are
those of ``mbde simulate`` (mbde_core.simulator.simulate), paced by the wall clock
(``real_time_factor``). Publishes:

- ``/mbde/ground_truth`` (mbde_msgs/MechanismState: q, qd, qdd, z, zd, zdd, branch,
  true inputs) and ``/mbde/ground_truth/joint_states`` (sensor_msgs/JointState, effort =
  generalized input per coordinate) at ``rate`` (default: every sensor reading instant);
- ``/mbde/ground_truth/markers`` (MarkerArray) at ``marker_rate``;
- ``/tf`` (tf2_msgs/TFMessage) at ``tf_rate``: ``frame_id`` (world) -> ``<tf_prefix><body>``
  of the ground truth (REP 105), and once, latched, ``/tf_static``: ground links and the
  sensor mounts (each sensor's ``frame_id`` below its body), :mod:`mbde_core.viz.frames`;
- ``/clock`` (rosgraph_msgs/Clock) with ``publish_clock`` (stamps = simulated time from
  ``start_time``, default the scenario's or now rounded to the second, as the bags of
  ``mbde simulate``); otherwise stamps = wall clock at start + simulated time.

With ``wait_for_subscribers`` = N it starts when /mbde/ground_truth and each sensor topic
have N subscribers (drivers, estimators: they see the motion from its first instant).
"""
from __future__ import annotations

import sys
import time

from mbde_msgs.msg import MechanismState
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import MarkerArray

from mbde_core.errors import MbdeError
from mbde_core.live import topics
from mbde_core.live.diagnostics import Throttle
from mbde_core.live.model_source import load_source
from mbde_core.live.params import ParameterError
from mbde_core.live.simulator import PacedSimulation, stamp_msg, truth_messages, with_truth_period
from mbde_core.rosio.tf import TF_STATIC_TOPIC, TF_TOPIC, tf_message
from mbde_core.scenario.description import write_description
from mbde_core.scenario.epoch import with_start_time
from mbde_core.viz.frames import MechanismFrames
from mbde_core.viz.marker_msgs import marker_array
from mbde_core.viz.markers import MechanismDrawer, truth_shapes
from mbde_nodes.common import LATCHED, STREAM, RclpyFactory, declare_parameters, fail, run, wall_clock

MAX_BURST = 0.25  # s of simulated time per timer tick at most (then it runs slower than asked)


class Simulator(Node):
    def __init__(self):
        super().__init__("simulator")
        try:
            p = declare_parameters(self, "simulator")
            if not p["scenario_file"]:
                raise ParameterError("simulator: set parameter 'scenario_file' (e.g. scenarios/pf_sim.yaml)")
            base = load_source(p["scenario_file"], settings=p["settings"])
            if p["publish_clock"]:  # simulated time starts at an epoch, not 1970
                base = with_start_time(base, None if p["start_time"] < 0 else p["start_time"])
            self.scenario = sc = with_truth_period(base, p["rate"], p["duration"])
        except MbdeError as exc:
            raise fail(self, exc) from None
        self.p = p
        self.factory = RclpyFactory()
        truth = sc.truth_mechanism()
        self.cnames, self.inames = list(truth.coordinate_names), list(truth.independent_names)
        self.rtf = p["real_time_factor"]
        self.gt_pub = self.create_publisher(MechanismState, topics.GROUND_TRUTH, STREAM)
        self.js_pub = self.create_publisher(JointState, topics.GROUND_TRUTH_JOINTS, STREAM)
        self.marker_pub = self.create_publisher(MarkerArray, topics.GROUND_TRUTH_MARKERS, 10)
        self.clock_pub = self.create_publisher(Clock, topics.CLOCK_TOPIC, 10) if p["publish_clock"] else None
        if p["publish_description"]:
            self.desc_pub = self.create_publisher(String, topics.DESCRIPTION, LATCHED)
            self.desc_pub.publish(String(data=write_description(sc)))
        self.marker_period = 1.0 / p["marker_rate"] if p["marker_rate"] > 0 else None
        self._next_marker = None
        self.frames = MechanismFrames(truth, sc.sensors, world=sc.frame_id, prefix=p["tf_prefix"])
        self.tf_period = 1.0 / p["tf_rate"] if p["tf_rate"] > 0 else None
        self._next_tf = None
        if self.tf_period is not None:
            self.tf_pub = self.create_publisher(TFMessage, TF_TOPIC, 100)
            self.tf_static_pub = self.create_publisher(TFMessage, TF_STATIC_TOPIC, LATCHED)
            self.tf_static_pub.publish(tf_message(self.factory, self.frames.static(),
                                                  stamp_msg(self.factory, self.sim_start_ns(sc, p))))
        self._drawer = None
        self.sim = PacedSimulation(sc, loop=p["loop"], offset_ns=0, clock=p["publish_clock"])
        self.period = sc.ground_truth_period
        self.wall = time.monotonic
        self.anchor = None  # wall time of tau = 0 of the current lap
        self.tau = -1.0  # simulated time published last (current lap)
        self.lap = 0
        self.published = 0
        self.throttle = Throttle(5.0)
        self.wait_since = self.wall()
        self.start_at = None if p["wait_for_subscribers"] > 0 else self.wall()
        self.timer = self.create_timer(max(self.period / self.rtf, 0.001), self.on_timer, clock=wall_clock())
        if self.clock_pub is not None:  # the clock stands at the start until the motion starts
            self.clock_pub.publish(Clock(clock=stamp_msg(self.factory, self.sim.stamp_ns(0))))
        self.get_logger().info(
            f"simulating {sc.name!r} ({truth.name}, {sc.integrator}, step {1e3 * sc.step:g} ms) for "
            f"{sc.n_steps * sc.step:g} s{' in a loop' if p['loop'] else ''}, real-time factor {self.rtf:g}: "
            f"ground truth at {1.0 / self.period:g} Hz on {self.gt_pub.topic_name}, "
            f"{self.js_pub.topic_name}" + (f", clock on {self.clock_pub.topic_name}" if self.clock_pub else
                                           " (stamps: wall clock)"))

    # -- start condition ------------------------------------------------------------------
    def _ready(self) -> bool:
        n = self.p["wait_for_subscribers"]
        have = {topics.GROUND_TRUTH: (self.count_subscribers(topics.GROUND_TRUTH), n)}
        for s in self.scenario.sensors:
            have[s.topic] = (self.count_subscribers(s.topic), n)
        missing = {t: f"{a}/{b}" for t, (a, b) in have.items() if a < b}
        if not missing:
            self.get_logger().info("subscribers present: starting the motion")
            return True
        waited = self.wall() - self.wait_since
        if waited > self.p["start_timeout"]:
            self.get_logger().warning(f"starting without all subscribers after {waited:.0f} s (have/need: "
                                      + ", ".join(f"{t} {v}" for t, v in missing.items()) + ")")
            return True
        if self.throttle("wait"):
            self.get_logger().info("waiting for subscribers before starting (have/need): "
                                   + ", ".join(f"{t} {v}" for t, v in missing.items()))
        return False

    # -- motion ---------------------------------------------------------------------------
    def on_timer(self) -> None:
        now = self.wall()
        if self.start_at is None:
            if self._ready():
                self.start_at = now + 0.5  # let the data paths of the new matches settle
            return
        if now < self.start_at or self.sim.finished:
            return
        if self.anchor is None:
            self.anchor = now
            if self.clock_pub is None:  # stamps: the wall clock from now on
                self.sim.offset_ns = self.get_clock().now().nanoseconds - self.scenario.start_ns
        tau = self.rtf * (now - self.anchor)
        if tau - max(self.tau, 0.0) > MAX_BURST:  # cannot keep up: slow down instead of bursting
            if self.throttle("slow"):
                self.get_logger().warning(f"the simulation runs slower than real_time_factor {self.rtf:g}; "
                                          "simulated time falls behind")
            tau = max(self.tau, 0.0) + MAX_BURST
            self.anchor = now - tau / self.rtf
        try:
            events = self.sim.advance(tau)
        except MbdeError as exc:
            self.get_logger().error(str(exc))
            self.sim.finished = True
            return
        for ev in events:
            self._publish(ev)
            self.tau = ev.step * self.scenario.step
        if events and self.clock_pub is not None:
            self.clock_pub.publish(Clock(clock=stamp_msg(self.factory, events[-1].stamp_ns)))
        if self.sim.lap != self.lap:  # a new lap starts one step after the end of this one
            self.lap = self.sim.lap
            self.anchor += self.sim.lap_ns * 1e-9 / self.rtf
            self.tau = -1.0
            self._next_marker = None
            self._next_tf = None
            self.get_logger().info(f"scenario ended: lap {self.lap + 1} starts"
                                   + (" (the clock jumps back)" if self.clock_pub else ""))
        if self.sim.finished:
            self.get_logger().info(f"scenario finished at t = {self.sim.duration:g} s after {self.published} "
                                   "ground-truth samples (loop:=true restarts it)")

    @staticmethod
    def sim_start_ns(sc, p) -> int:
        """Stamp of the first sample when known in advance (with /clock), else 0."""
        return sc.start_ns if p["publish_clock"] else 0

    def _publish(self, ev) -> None:
        state, joints = truth_messages(self.factory, ev, self.cnames, self.inames, self.scenario.frame_id)
        self.gt_pub.publish(state)
        self.js_pub.publish(joints)
        self.published += 1
        if self.tf_period is not None and (self._next_tf is None or ev.stamp >= self._next_tf - 1e-9):
            self.tf_pub.publish(tf_message(self.factory, self.frames.moving(ev.q), state.header.stamp))
            self._next_tf = ev.stamp + self.tf_period
        if self.marker_period is not None and (self._next_marker is None or ev.stamp >= self._next_marker - 1e-9):
            if self._drawer is None:
                self._drawer = MechanismDrawer(self.scenario.truth_mechanism())
            arr = marker_array(self.factory, truth_shapes(self._drawer, ev), self.scenario.frame_id, ev.stamp)
            for m in arr.markers:
                m.header.stamp = state.header.stamp
            self.marker_pub.publish(arr)
            self._next_marker = ev.stamp + self.marker_period


def main(argv=None) -> int:
    return run(Simulator, argv)


if __name__ == "__main__":
    sys.exit(main())
