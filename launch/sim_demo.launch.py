"""Simulated demo: mechanism model + ground-truth simulator + virtual sensor drivers +
estimators (PF, UKF, errorEKF, ADE-KF, each in /mbde/<name>) + RViz.

    ros2 launch mbde sim_demo.launch.py
    ros2 launch mbde sim_demo.launch.py scenario:=scenarios/fourbar_encoder.yaml estimators:=ukf,errorekf rviz:=false

Launch arguments (``ros2 launch mbde sim_demo.launch.py --show-args``):
  scenario          scenario YAML (config/scenarios/...)               [scenarios/pf_sim.yaml]
  estimators        comma-separated observers, one node each           [pf,ukf,errorekf,adekf]
  config            estimator options YAML ('': estimators/<name>.yaml,   ['']
                    else estimators/default.yaml)
  real_time_factor  simulated seconds per wall-clock second            [1.0]
  loop              restart the scenario at its end (estimators reset) [true]
  rviz              start RViz with rviz/mbde.rviz                     [true]

The simulator publishes /clock and every node runs on simulated time (use_sim_time).
Node parameters: config/params/<node>.yaml; the launch arguments override them. The node
list and the parameters each node gets are those of mbde_core.live.graph, which
`mbde live` (the same loop without a ROS installation, `make live`) starts too.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from mbde_core.live.graph import SIM_DEMO_DEFAULTS, sim_demo_nodes

PACKAGE = "mbde"


def params_file(executable):
    return PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "params", executable + ".yaml"])


def loop_nodes(context):
    """The nodes of mbde_core.live.graph (the same as `mbde live`), from the launch arguments."""
    args = {key: LaunchConfiguration(key).perform(context) for key in SIM_DEMO_DEFAULTS}
    return [
        Node(package=PACKAGE, executable=spec.executable, name=spec.name, namespace=spec.namespace or None,
             output="screen", parameters=[params_file(spec.node), spec.parameters])
        for spec in sim_demo_nodes(**args)
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("scenario", default_value=SIM_DEMO_DEFAULTS["scenario"],
                              description="scenario YAML (relative: config/ of the package)"),
        DeclareLaunchArgument("estimators", default_value=SIM_DEMO_DEFAULTS["estimators"],
                              description="comma-separated estimators, one node each in /mbde/<name>"),
        DeclareLaunchArgument("config", default_value=SIM_DEMO_DEFAULTS["config"],
                              description="estimator options YAML ('' = each estimator's shipped one)"),
        DeclareLaunchArgument("real_time_factor", default_value=SIM_DEMO_DEFAULTS["real_time_factor"],
                              description="simulated seconds per wall-clock second"),
        DeclareLaunchArgument("loop", default_value=SIM_DEMO_DEFAULTS["loop"],
                              description="restart the scenario at its end"),
        DeclareLaunchArgument("rviz", default_value="true", description="start RViz"),
        OpaqueFunction(function=loop_nodes),
        Node(package="rviz2", executable="rviz2", name="rviz2", output="log",
             arguments=["-d", PathJoinSubstitution([FindPackageShare(PACKAGE), "rviz", "mbde.rviz"])],
             parameters=[{"use_sim_time": True}], condition=IfCondition(LaunchConfiguration("rviz"))),
    ])
