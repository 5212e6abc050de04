"""mbde simulate SCENARIO.yaml --out DIR: simulate a scenario into a ROS 2 bag."""
from __future__ import annotations

from mbde_core.cli.outputs import DEFAULT_STORAGE, Output
from mbde_core.errors import DataError
from mbde_core.scenario import load_scenario
from mbde_core.scenario.epoch import with_start_time
from mbde_core.simulator.bag import write_simulation_bag
from mbde_core.simulator.progress import ProgressBar
from mbde_core.simulator.size import check_disk, check_times

HELP = "simulate a scenario (ground truth + noisy sensors) into a ROS 2 bag"
DESCRIPTION = """Integrate the true mechanism of a scenario YAML (config/scenarios/) at its
internal step, sample every sensor at its own rate with seeded noise, and write a ROS 2
bag: sensor_msgs/Imu or sensor_msgs/JointState per sensor, the ground truth on
/mbde/ground_truth (mbde_msgs/MechanismState) and /mbde/ground_truth/joint_states
(sensor_msgs/JointState), and the scenario description on /mbde/description.
Default storage: mcap (the default of ROS 2 Jazzy, the current LTS; readable by Humble
with rosbag2_storage_mcap and by Foxglove); --storage sqlite3 for rosbag2 format 8.
Stamps start at --start-time (default: the scenario's start_time if it sets one, else
now, rounded down to the whole second). A progress bar is shown when stderr is a terminal. Exit
status 2 on a bad scenario, an existing output directory (see --force), a bag that
would not fit on the disk, or a failed simulation. The bag is written into a hidden
sibling of --out and renamed into place when complete: Ctrl-C or SIGTERM (exit 130 /
143) leaves no bag, or the earlier one that --force was to replace."""


def add_arguments(p):
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--out", required=True, help="output bag directory (must not exist, see --force)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default=DEFAULT_STORAGE,
                   help="bag storage (default %(default)s)")
    p.add_argument("--start-time", metavar="now|SECONDS",
                   help="stamp of the first sample [s since 1970] (default: the scenario's start_time, else now, "
                        "rounded down to the whole second)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario value, e.g. --set duration=2 --set sensors[0].period=0.025 "
                        "--set model_errors.gravity=4 (repeatable; VALUE is YAML)")
    p.add_argument("--force", action="store_true", help="replace an earlier bag of `mbde simulate` at --out")


def run(args) -> int:
    scenario = load_scenario(args.scenario, args.settings)
    try:
        scenario = with_start_time(scenario, args.start_time)
    except ValueError:
        raise DataError(f"--start-time: expected 'now' or seconds, got {args.start_time!r}") from None
    check_times(scenario)
    check_disk(scenario, args.out)
    inputs = [args.scenario, scenario.mechanism_file, scenario.sensors_file]
    with Output(args.out, "simulate", force=args.force, inputs=inputs, create=False) as out:
        bar = ProgressBar(f"simulating {scenario.name}")
        try:
            summary = write_simulation_bag(scenario, out.tmp, args.storage, progress=bar)
        finally:
            bar.close()
        out.commit()
    truth = scenario.truth_mechanism()
    print(f"scenario {scenario.name}: {truth.name}, {scenario.duration:g} s at step {scenario.step * 1e3:g} ms "
          f"({scenario.integrator}), seed {scenario.seed}, model errors: {scenario.model_errors.describe()}")
    print(f"ground truth: {summary.truth_samples} samples, max |Phi| = {summary.phi_max:.2e}, "
          f"branch {scenario.initial_state.branch}; wall time {summary.wall_time:.1f} s")
    total = sum(summary.counts.values())
    print(f"wrote {out.given} ({summary.storage}, rosbag2 format {summary.version}): {total} messages")
    width = max(len(t) for t in summary.counts)
    for topic, count in summary.counts.items():
        print(f"  {topic:<{width}}  {summary.types[topic]:<30} {count:>7}")
    return 0
