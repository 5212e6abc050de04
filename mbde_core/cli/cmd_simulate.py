"""mbde simulate SCENARIO.yaml --out DIR: simulate a scenario into a ROS 2 bag."""
from __future__ import annotations

import os
import shutil

HELP = "simulate a scenario (ground truth + noisy sensors) into a ROS 2 bag"
DESCRIPTION = """Integrate the true mechanism of a scenario YAML (config/scenarios/) at its
internal step, sample every sensor at its own rate with seeded noise, and write a ROS 2
bag: sensor_msgs/Imu or sensor_msgs/JointState per sensor, the ground truth on
/mbde/ground_truth (mbde_msgs/MechanismState) and /mbde/ground_truth/joint_states
(sensor_msgs/JointState), and the scenario description on /mbde/description.
Default storage: sqlite3 with rosbag2 format 8 (ROS 2 Humble and newer); --storage mcap
for mcap. A progress bar is shown when stderr is a terminal. Exit status 2 on a bad
scenario, an existing output directory (see --force) or a failed simulation."""


def add_arguments(p):
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--out", required=True, help="output bag directory (must not exist, see --force)")
    p.add_argument("--storage", choices=("sqlite3", "mcap"), default="sqlite3", help="bag storage (default sqlite3)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario value, e.g. --set duration=2 --set sensors[0].period=0.025 "
                        "--set model_errors.gravity=4 (repeatable; VALUE is YAML)")
    p.add_argument("--force", action="store_true", help="replace an existing output bag directory")


def _prepare_out(path: str, force: bool) -> None:
    from mbde_core.errors import DataError

    if not os.path.lexists(path):
        return
    if not force:
        raise DataError(f"{path}: already exists (use --force to replace it)")
    if not os.path.isdir(path) or os.path.islink(path):
        raise DataError(f"{path}: exists and is not a directory; not replacing it")
    entries = os.listdir(path)
    bag_files = all(e == "metadata.yaml" or e.endswith((".db3", ".mcap", ".db3-shm", ".db3-wal")) for e in entries)
    if entries and not ("metadata.yaml" in entries and bag_files):
        raise DataError(f"{path}: exists and is not a rosbag2 bag directory; not replacing it")
    shutil.rmtree(path)


def run(args) -> int:
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import write_simulation_bag
    from mbde_core.simulator.progress import ProgressBar

    scenario = load_scenario(args.scenario, args.settings)
    _prepare_out(args.out, args.force)
    bar = ProgressBar(f"simulating {scenario.name}")
    try:
        summary = write_simulation_bag(scenario, args.out, args.storage, progress=bar)
    finally:
        bar.close()
    truth = scenario.truth_mechanism()
    print(f"scenario {scenario.name}: {truth.name}, {scenario.duration:g} s at step {scenario.step * 1e3:g} ms "
          f"({scenario.integrator}), seed {scenario.seed}, model errors: {scenario.model_errors.describe()}")
    print(f"ground truth: {summary.truth_samples} samples, max |Phi| = {summary.phi_max:.2e}, "
          f"branch {scenario.initial_state.branch}; wall time {summary.wall_time:.1f} s")
    total = sum(summary.counts.values())
    print(f"wrote {summary.path} ({summary.storage}, rosbag2 format {summary.version}): {total} messages")
    width = max(len(t) for t in summary.counts)
    for topic, count in summary.counts.items():
        print(f"  {topic:<{width}}  {summary.types[topic]:<30} {count:>7}")
    return 0
