"""One estimator against real sensor topics (a robot, or any driver publishing
sensor_msgs/Imu / JointState), with topic remapping.

    ros2 launch mbde estimator.launch.py estimator:=ukf \
        mechanism:=/path/to/linkage.yaml sensors:=/path/to/sensors.yaml \
        remappings:=/mbde/sensors/gyro_coupler:=/imu/data_raw

Launch arguments (``ros2 launch mbde estimator.launch.py --show-args``):
  estimator     pf | ukf | errorekf | adekf | dekf | cekf | diekfpm        [ukf]
  name          node name (its topics: /<namespace>/<name>/state, ...)    [= estimator]
  namespace     node namespace                                            [mbde]
  config        estimator options YAML ('': estimators/<name>.yaml, else   ['']
                estimators/default.yaml)
  mechanism     mechanism YAML ('' with scenario '': wait for /mbde/description) ['']
  sensors       sensors YAML (a `sensors:` list; '' = the mechanism's own)  ['']
  scenario      scenario YAML instead of mechanism/sensors                  ['']
  remappings    'from:=to' pairs separated by ';' or ',', e.g. the sensor topics of the
                model (/mbde/sensors/<name>) to the robot's topics          ['']
  use_sim_time  use /clock                                                 [false]
  params_file   ROS parameter file of the node                  [config/params/estimator.yaml]
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "mbde"


def parse_remappings(text):
    """'a:=b;c:=d' (or ',') -> [('a', 'b'), ('c', 'd')]."""
    pairs = []
    for item in text.replace(",", ";").split(";"):
        item = item.strip()
        if not item:
            continue
        if ":=" not in item:
            raise ValueError(f"remapping {item!r}: expected from:=to")
        src, dst = (s.strip() for s in item.split(":=", 1))
        pairs.append((src, dst))
    return pairs


def estimator_node(context):
    value = lambda key: LaunchConfiguration(key).perform(context)  # noqa: E731
    estimator = value("estimator")
    return [Node(
        package=PACKAGE, executable="mbde-estimator", name=value("name") or estimator, namespace=value("namespace"),
        output="screen", remappings=parse_remappings(value("remappings")),
        parameters=[value("params_file"),
                    {"estimator": estimator, "config_file": value("config"), "mechanism_file": value("mechanism"),
                     "sensors_file": value("sensors"), "scenario_file": value("scenario"),
                     "use_sim_time": value("use_sim_time").lower() in ("true", "1", "yes")}])]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("estimator", default_value="ukf", description="the observer"),
        DeclareLaunchArgument("name", default_value="", description="node name ('' = the estimator name)"),
        DeclareLaunchArgument("namespace", default_value="mbde", description="node namespace"),
        DeclareLaunchArgument("config", default_value="",
                              description="estimator options YAML ('' = the estimator's shipped one)"),
        DeclareLaunchArgument("mechanism", default_value="", description="mechanism YAML"),
        DeclareLaunchArgument("sensors", default_value="", description="sensors YAML"),
        DeclareLaunchArgument("scenario", default_value="", description="scenario YAML"),
        DeclareLaunchArgument("remappings", default_value="", description="'from:=to' pairs, ';'-separated"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="use /clock"),
        DeclareLaunchArgument("params_file", description="ROS parameter file of the node",
                              default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "params",
                                                                  "estimator.yaml"])),
        OpaqueFunction(function=estimator_node),
    ])
