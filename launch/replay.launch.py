"""Replay a ROS 2 bag through live estimators: `ros2 bag play --clock` + estimators on
simulated time + RViz. The bag must hold the sensor topics and /mbde/description (a bag
from `mbde simulate`, or a recording of the live nodes); the estimators build their model
from it, exactly as `mbde replay` does offline.

    ros2 launch mbde replay.launch.py bag:=/tmp/fourbar_gyro estimators:=ukf,errorekf

Launch arguments (``ros2 launch mbde replay.launch.py --show-args``):
  bag         bag directory (required)
  estimators  comma-separated observers, one node each in /mbde/<name>    [ukf,errorekf]
  config      estimator options YAML ('': estimators/<name>.yaml, else     ['']
              estimators/default.yaml)
  rate        playback rate                                               [1.0]
  loop        play in a loop (the clock jumps back: estimators reset)     [false]
  delay       seconds before playing (estimators subscribe first)         [2.0]
  rviz        start RViz with rviz/mbde.rviz                              [true]
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, TimerAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "mbde"


def nodes(context):
    value = lambda key: LaunchConfiguration(key).perform(context)  # noqa: E731
    names = [n.strip() for n in value("estimators").split(",") if n.strip()]
    play = ["ros2", "bag", "play", value("bag"), "--clock", "--rate", value("rate")]
    if value("loop").lower() in ("true", "1", "yes"):
        play.append("--loop")
    params = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "params", "estimator.yaml"])
    actions = [
        Node(package=PACKAGE, executable="mbde-estimator", name=name, namespace="mbde", output="screen",
             parameters=[params, {"estimator": name, "config_file": value("config"), "use_sim_time": True}])
        for name in names
    ]
    actions.append(TimerAction(period=float(value("delay")),
                               actions=[ExecuteProcess(cmd=play, output="screen", name="bag_play")]))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("bag", description="bag directory"),
        DeclareLaunchArgument("estimators", default_value="ukf,errorekf", description="comma-separated estimators"),
        DeclareLaunchArgument("config", default_value="",
                              description="estimator options YAML ('' = the estimator's shipped one)"),
        DeclareLaunchArgument("rate", default_value="1.0", description="playback rate"),
        DeclareLaunchArgument("loop", default_value="false", description="play in a loop"),
        DeclareLaunchArgument("delay", default_value="2.0", description="seconds before playing"),
        DeclareLaunchArgument("rviz", default_value="true", description="start RViz"),
        OpaqueFunction(function=nodes),
        Node(package="rviz2", executable="rviz2", name="rviz2", output="log",
             arguments=["-d", PathJoinSubstitution([FindPackageShare(PACKAGE), "rviz", "mbde.rviz"])],
             parameters=[{"use_sim_time": True}], condition=IfCondition(LaunchConfiguration("rviz"))),
    ])
