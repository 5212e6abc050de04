"""Console-script entry points of the nodes (``mbde-estimator``, ...): ROS-free until the
node module is imported, so that a missing ROS installation is one clear line (exit 2),
not a ModuleNotFoundError traceback.

Each function imports ``mbde_nodes.<node>`` and runs its ``main``; the executables are
named ``mbde-<node>`` (prefixed: a pip install puts them on PATH next to ``mbde``).
"""
from __future__ import annotations

import importlib
import sys

# top-level packages that only a ROS 2 installation (or .venv-ros) provides
ROS_PACKAGES = {"rclpy", "rcl_interfaces", "builtin_interfaces", "std_msgs", "std_srvs", "sensor_msgs",
                "geometry_msgs", "visualization_msgs", "diagnostic_msgs", "rosgraph_msgs", "tf2_msgs", "mbde_msgs",
                "rpyutils", "rosidl_runtime_py"}


def executable(node: str) -> str:
    """'estimator' -> 'mbde-estimator' (the console script of a node)."""
    return "mbde-" + node.replace("_", "-")


def missing_ros_message(node: str, module: str) -> str:
    return (f"{executable(node)}: needs ROS 2 ({module} is not installed): source a ROS 2 installation "
            "(e.g. `source /opt/ros/jazzy/setup.bash` and a colcon workspace with mbde and mbde_msgs), "
            "or use `make live` / `.venv-ros/bin/mbde live` (real rclpy from PyPI, tools/ros_venv.sh)")


def _run(node: str) -> int:
    import importlib.util

    if importlib.util.find_spec("rclpy") is None:
        print(missing_ros_message(node, "rclpy"), file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"mbde_nodes.{node}")
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root not in ROS_PACKAGES:
            raise
        print(missing_ros_message(node, root), file=sys.stderr)
        return 2
    return module.main()


def mechanism_model() -> int:
    return _run("mechanism_model")


def simulator() -> int:
    return _run("simulator")


def imu_driver() -> int:
    return _run("imu_driver")


def encoder_driver() -> int:
    return _run("encoder_driver")


def estimator() -> int:
    return _run("estimator")
