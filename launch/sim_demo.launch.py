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
Node parameters: config/params/<executable>.yaml; the launch arguments override them.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "mbde"


def params_file(executable):
    return PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "params", executable + ".yaml"])


def estimator_nodes(context):
    names = [n.strip() for n in LaunchConfiguration("estimators").perform(context).split(",") if n.strip()]
    return [
        Node(package=PACKAGE, executable="estimator", name=name, namespace="mbde", output="screen",
             parameters=[params_file("estimator"),
                         {"estimator": name, "config_file": LaunchConfiguration("config"), "use_sim_time": True}])
        for name in names
    ]


def generate_launch_description():
    scenario = LaunchConfiguration("scenario")
    return LaunchDescription([
        DeclareLaunchArgument("scenario", default_value="scenarios/pf_sim.yaml",
                              description="scenario YAML (relative: config/ of the package)"),
        DeclareLaunchArgument("estimators", default_value="pf,ukf,errorekf,adekf",
                              description="comma-separated estimators, one node each in /mbde/<name>"),
        DeclareLaunchArgument("config", default_value="",
                              description="estimator options YAML ('' = each estimator's shipped one)"),
        DeclareLaunchArgument("real_time_factor", default_value="1.0",
                              description="simulated seconds per wall-clock second"),
        DeclareLaunchArgument("loop", default_value="true", description="restart the scenario at its end"),
        DeclareLaunchArgument("rviz", default_value="true", description="start RViz"),
        Node(package=PACKAGE, executable="mechanism_model", name="mechanism_model", output="screen",
             parameters=[params_file("mechanism_model"), {"scenario_file": scenario, "use_sim_time": True}]),
        Node(package=PACKAGE, executable="simulator", name="simulator", output="screen",
             parameters=[params_file("simulator"),
                         {"scenario_file": scenario, "publish_clock": True, "loop": LaunchConfiguration("loop"),
                          "real_time_factor": LaunchConfiguration("real_time_factor"),
                          "wait_for_subscribers": 1}]),
        Node(package=PACKAGE, executable="imu_driver", name="imu_driver", output="screen",
             parameters=[params_file("imu_driver"), {"use_sim_time": True}]),
        Node(package=PACKAGE, executable="encoder_driver", name="encoder_driver", output="screen",
             parameters=[params_file("encoder_driver"), {"use_sim_time": True}]),
        OpaqueFunction(function=estimator_nodes),
        Node(package="rviz2", executable="rviz2", name="rviz2", output="log",
             arguments=["-d", PathJoinSubstitution([FindPackageShare(PACKAGE), "rviz", "mbde.rviz"])],
             parameters=[{"use_sim_time": True}], condition=IfCondition(LaunchConfiguration("rviz"))),
    ])
