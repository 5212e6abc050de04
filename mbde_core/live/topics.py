"""Topic names and message types of the mbde nodes (one table, used by nodes and tests).

Absolute topics are fixed names (change them with ROS remapping, ``-r from:=to``);
``~/name`` topics are private to the node (``/<namespace>/<node name>/name``): the
estimator node launched as ``ukf`` in namespace ``/mbde`` publishes ``/mbde/ukf/state``,
the topic names ``mbde replay`` writes into its estimates bag.
"""
from __future__ import annotations

from mbde_core.rosio.convert import JOINT_STATE, MECHANISM_STATE, PARTICLE_SET, STRING

MARKER_ARRAY = "visualization_msgs/msg/MarkerArray"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
CLOCK = "rosgraph_msgs/msg/Clock"
TRIGGER = "std_srvs/srv/Trigger"

DESCRIPTION = "/mbde/description"
MODEL_MARKERS = "/mbde/model/markers"
GROUND_TRUTH = "/mbde/ground_truth"
GROUND_TRUTH_JOINTS = "/mbde/ground_truth/joint_states"
GROUND_TRUTH_MARKERS = "/mbde/ground_truth/markers"
DIAGNOSTICS = "/diagnostics"
CLOCK_TOPIC = "/clock"

# executable -> [(topic, type, QoS)], QoS one of: latched (reliable, transient local,
# depth 1), reliable (depth 10), sensor (SensorDataQoS: best effort; the estimator reads
# with a history of 2 x rate x reorder_window, 100 to 20000 readings). As REP 2003
# recommends, the sensor drivers publish reliable and the estimator subscribes with
# SensorDataQoS (best effort), which matches reliable and best-effort publishers alike.
PUBLISHES = {
    "mechanism_model": [(DESCRIPTION, STRING, "latched"), (MODEL_MARKERS, MARKER_ARRAY, "latched")],
    "simulator": [(GROUND_TRUTH, MECHANISM_STATE, "reliable"), (GROUND_TRUTH_JOINTS, JOINT_STATE, "reliable"),
                  (GROUND_TRUTH_MARKERS, MARKER_ARRAY, "reliable"), (CLOCK_TOPIC, CLOCK, "reliable"),
                  (DESCRIPTION, STRING, "latched")],
    "imu_driver": [("<sensor topic>", "sensor_msgs/msg/Imu", "reliable")],
    "encoder_driver": [("<sensor topic>", JOINT_STATE, "reliable")],
    "estimator": [("~/state", MECHANISM_STATE, "reliable"), ("~/joint_states", JOINT_STATE, "reliable"),
                  ("~/particles", PARTICLE_SET, "reliable"), ("~/markers", MARKER_ARRAY, "reliable"),
                  (DIAGNOSTICS, DIAGNOSTIC_ARRAY, "reliable")],
}

SUBSCRIBES = {
    "mechanism_model": [],
    "simulator": [],
    "imu_driver": [(GROUND_TRUTH, MECHANISM_STATE, "reliable"), (DESCRIPTION, STRING, "latched")],
    "encoder_driver": [(GROUND_TRUTH, MECHANISM_STATE, "reliable"), (DESCRIPTION, STRING, "latched")],
    "estimator": [("<sensor topics>", "sensor_msgs/msg/Imu | sensor_msgs/msg/JointState", "sensor"),
                  (DESCRIPTION, STRING, "latched"), (CLOCK_TOPIC, CLOCK, "use_sim_time")],
}

SERVICES = {"estimator": [("~/reset", TRIGGER)]}


def estimator_topics(namespace: str, name: str) -> dict[str, str]:
    """Private topics of an estimator node ``name`` in ``namespace`` ('/mbde', 'ukf')."""
    base = "/".join(p for p in (namespace.strip("/"), name) if p)
    return {key: f"/{base}/{key}" for key in ("state", "joint_states", "particles", "markers")}
