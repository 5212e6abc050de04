"""mbde live [SCENARIO]: the simulated loop as real ROS 2 processes, without ``ros2 launch``."""
from __future__ import annotations

from mbde_core.cli.argtypes import float_range, nonnegative
from mbde_core.errors import DataError
from mbde_core.live.graph import SIM_DEMO_DEFAULTS, sim_demo_nodes
from mbde_core.live.launcher import Launcher

HELP = "run the live loop (model, simulator, drivers, estimators) as rclpy processes; Ctrl-C stops it"
DESCRIPTION = """Start the nodes of launch/sim_demo.launch.py -- mechanism_model, simulator
(publishing /clock, /tf and /tf_static), imu_driver, encoder_driver and one estimator
per observer in /mbde/<name> -- as real rclpy processes, with the same parameters (one
definition: mbde_core.live.graph; parameter files config/params/<node>.yaml), and stop
them cleanly on Ctrl-C or SIGTERM (every node exits 0 without a traceback).

Needs rclpy, mbde_msgs and tf2_msgs in this Python: a sourced ROS 2 installation with
mbde built by colcon, or .venv-ros (`make live`, which builds it from PyPI wheels, see
tools/ros_venv.sh). Watch it with `ros2 topic echo`, RViz (rviz/mbde.rviz) or Foxglove.
Exit status: 130 / 143 after a clean stop by Ctrl-C / SIGTERM, 0 after --duration, 2 if
ROS is missing or a node could not start, 1 if a node died."""

STOP_TIMEOUT = 10.0  # s to wait for every node after SIGINT, then SIGKILL


def add_arguments(p):
    p.add_argument("scenario", nargs="?", default=SIM_DEMO_DEFAULTS["scenario"],
                   help="scenario YAML (relative: the current directory, then config/) (default: %(default)s)")
    p.add_argument("--estimators", default=SIM_DEMO_DEFAULTS["estimators"],
                   help="comma-separated observers, one node each in /mbde/<name> (default: %(default)s)")
    p.add_argument("--config", default=SIM_DEMO_DEFAULTS["config"],
                   help="estimator options YAML ('' = each estimator's shipped estimators/<name>.yaml)")

    p.add_argument("--real-time-factor", type=float_range(0.0, 1000.0, lo_open=True),
                   default=float(SIM_DEMO_DEFAULTS["real_time_factor"]),
                   help="simulated seconds per wall-clock second (default: %(default)s)")
    p.add_argument("--no-loop", action="store_true", help="do not restart the scenario at its end")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="scenario override as in `mbde simulate --set`, e.g. --set duration=3 (repeatable)")
    p.add_argument("--duration", type=nonnegative, default=0.0,
                   help="stop after this many wall-clock seconds (default 0: until Ctrl-C)")


def missing_ros() -> str | None:
    """The first ROS package this Python lacks (None if the loop can run)."""
    import importlib.util

    for name in ("rclpy", "tf2_msgs", "mbde_msgs", "sensor_msgs", "diagnostic_msgs", "visualization_msgs"):
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def run(args) -> int:
    lacking = missing_ros()
    if lacking is not None:
        raise DataError(f"needs ROS 2 ({lacking} is not importable by this Python): run `make live` (builds "
                        ".venv-ros with rclpy from PyPI) or source a ROS 2 installation with mbde built by colcon")
    nodes = sim_demo_nodes(args.scenario, args.estimators, args.config, args.real_time_factor, not args.no_loop,
                           args.settings)
    return Launcher(nodes).run(duration=args.duration or None, stop_timeout=STOP_TIMEOUT)
