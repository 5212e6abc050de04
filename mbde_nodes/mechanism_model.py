"""``mechanism_model`` node: publishes the mechanism description and its static geometry.

Parameters (mbde_core.live.params): scenario_file | mechanism_file (+ sensors_file),
settings, frame_id. Publishes once, latched (reliable, transient local, depth 1), so
late subscribers get them:

- ``/mbde/description`` (std_msgs/String): the YAML document ``mbde simulate`` writes
  into bags (mbde_core.scenario.description), from which the drivers and estimators
  build the model, the sensors and the initial guess;
- ``/mbde/model/markers`` (visualization_msgs/MarkerArray): fixed pivots with names,
  ground hatching and slider tracks.

A configuration error is one ERROR line and exit status 2.
"""
from __future__ import annotations

import sys

from rclpy.node import Node
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from mbde_core.errors import MbdeError
from mbde_core.live import topics
from mbde_core.live.model_source import load_source
from mbde_core.live.params import ParameterError
from mbde_core.scenario.description import write_description
from mbde_core.viz.marker_msgs import marker_array
from mbde_core.viz.markers import MechanismDrawer
from mbde_nodes.common import LATCHED, RclpyFactory, declare_parameters, fail, now_seconds, run


class MechanismModel(Node):
    def __init__(self):
        super().__init__("mechanism_model")
        try:
            p = declare_parameters(self, "mechanism_model")
            if not (p["scenario_file"] or p["mechanism_file"]):
                raise ParameterError("mechanism_model: set parameter 'mechanism_file' (e.g. "
                                     "mechanisms/fourbar.yaml) or 'scenario_file'")
            scenario = load_source(p["scenario_file"], p["mechanism_file"], p["sensors_file"], p["settings"])

            text = write_description(scenario)
            mech = scenario.estimator_mechanism()
            shapes = MechanismDrawer(mech).ground()
        except MbdeError as exc:
            raise fail(self, exc) from None
        factory = RclpyFactory()
        frame = p["frame_id"] or scenario.frame_id
        self.desc_pub = self.create_publisher(String, topics.DESCRIPTION, LATCHED)
        self.marker_pub = self.create_publisher(MarkerArray, topics.MODEL_MARKERS, LATCHED)
        self.desc_pub.publish(String(data=text))
        self.marker_pub.publish(marker_array(factory, shapes, frame, now_seconds(self) or 0.0))
        sensors = ", ".join(f"{s.name} ({s.kind}, {s.rate:g} Hz on {s.topic})" for s in scenario.sensors) or "none"
        self.get_logger().info(
            f"published {scenario.name!r} ({mech.name}: {mech.n} coordinates, z = {', '.join(mech.independent_names)}; "
            f"sensors: {sensors}) on {self.desc_pub.topic_name} and its geometry on {self.marker_pub.topic_name} "
            f"(frame {frame}); latched for late subscribers")


def main(argv=None) -> int:
    return run(MechanismModel, argv)


if __name__ == "__main__":
    sys.exit(main())
