"""`mbde live` with real rclpy: the whole simulated loop as processes, its TF tree, a loop
wrap, and a silent Ctrl-C; the console scripts and a misspelt parameter.

Runs in .venv-ros (see conftest.py). The loop is the one of launch/sim_demo.launch.py
(mbde_core.live.graph): mechanism_model, simulator (/clock, /tf, /tf_static), the drivers
and one UKF in /mbde/ukf.
"""
from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import rosutil

TRUTH = {"crank", "coupler", "rocker"}  # the four-bar's moving bodies


def tf_entries(messages):
    """[(parent, child, stamp [s], x, y, yaw)] of TFMessages."""
    out = []
    for msg in messages:
        for ts in msg.transforms:
            r, t = ts.transform.rotation, ts.transform.translation
            out.append((ts.header.frame_id, ts.child_frame_id, ts.header.stamp.sec + 1e-9 * ts.header.stamp.nanosec,
                        t.x, t.y, 2 * math.atan2(r.z, r.w)))
    return out


def test_live_loop_tf_loop_wrap_and_silent_ctrl_c(node_processes, probe):
    from mbde_msgs.msg import MechanismState
    from rosgraph_msgs.msg import Clock
    from tf2_msgs.msg import TFMessage

    wall0 = time.time()
    tf = probe.subscribe("/tf", TFMessage, rosutil.qos_profile(depth=200))
    static = probe.subscribe("/tf_static", TFMessage, rosutil.qos_profile(depth=10, transient_local=True))
    states = probe.subscribe("/mbde/ukf/state", MechanismState, rosutil.qos_profile(depth=200))
    clock = probe.subscribe("/clock", Clock, rosutil.qos_profile(depth=10))
    live = node_processes.start([sys.executable, "-m", "mbde_core.cli", "live", "scenarios/fourbar_gyro.yaml",
                                 "--estimators", "ukf", "--set", "duration=2.5"], label="mbde-live")
    live.wait_for_output(r"started /mechanism_model .*/mbde/ukf", timeout=30, stream="stderr")
    # the estimate's frames arrive once the motion runs
    ok = rosutil.wait_until(lambda: any(c == "ukf/crank" for _, c, *_ in tf_entries(tf.messages)), 90)
    assert ok, live.logs()
    live.wait_for_output(r"lap 2 starts \(the clock jumps back\)", timeout=90, stream="stderr")
    live.wait_for_output(r"\[mbde\.ukf\]: estimator reset \(clock jumped back", timeout=30, stream="stderr")
    time.sleep(2.0)  # the estimator runs on after the wrap
    probe.check()

    # /tf_static: sensor mounts below the truth (simulator) and the estimate (estimator)
    mounts = {(p, c) for p, c, *_ in tf_entries(static.messages)}
    assert ("coupler", "gyro_coupler") in mounts and ("ukf/coupler", "ukf/gyro_coupler") in mounts, mounts
    # /tf: world -> body frames (REP 105) of the truth and of the estimate
    entries = tf_entries(tf.messages)
    children = {c for _, c, *_ in entries}
    assert TRUTH <= children and {f"ukf/{b}" for b in TRUTH} <= children
    assert {p for p, *_ in entries} == {"world"}
    # stamps: simulated time from an epoch of now (not 1970), the estimate's equal its states'
    stamps = [s for *_, s, _, _, _ in entries]
    epoch = min(stamps)
    assert wall0 - 10 <= epoch <= time.time() + 1, (epoch, wall0)
    assert max(stamps) - epoch <= 2.5 + 1e-6  # one lap of the scenario
    state_stamps = {round(m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec, 6) for m in states.messages}
    est_stamps = {round(s, 6) for _, c, s, *_ in entries if c == "ukf/crank"}
    assert est_stamps and est_stamps <= state_stamps
    clocks = [m.clock.sec + 1e-9 * m.clock.nanosec for m in clock.messages]
    assert clocks and min(clocks) >= epoch - 1e-6
    # the truth's crank frame turns about the fixed pivot A = (0, 0) of FourBars1
    crank = [(x, y) for _, c, _, x, y, _ in entries if c == "crank"]
    assert max(math.hypot(x, y) for x, y in crank) < 1e-9

    # Ctrl-C: every node stops, exit status 130 (stopped by SIGINT), no traceback
    t_stop = time.monotonic()
    live.popen.send_signal(signal.SIGINT)
    live.popen.wait(30)
    print(f"mbde live stopped {time.monotonic() - t_stop:.2f} s after SIGINT")
    out = live.stdout() + live.stderr()
    assert live.returncode == 130, live.logs()
    assert "mbde live: stopped 5 nodes (SIGINT)" in out  # model, simulator, two drivers, ukf
    assert "Traceback" not in out and "RCLError" not in out, out
    assert "another clock" not in out  # the loop wrap is not a clock mismatch


def test_nodes_stop_silently_on_sigint_while_publishing(node_processes, probe):
    """SIGINT to each node while its timers publish: exit 0, nothing on stderr after it."""
    from mbde_msgs.msg import MechanismState

    sim = node_processes.start("mbde_nodes.simulator", params={"scenario_file": "scenarios/fourbar_gyro.yaml",
                                                               "loop": True, "marker_rate": 50.0, "tf_rate": 200.0})
    imu = node_processes.start("mbde_nodes.imu_driver", params={"scenario_file": "scenarios/fourbar_gyro.yaml"})
    est = node_processes.start("mbde_nodes.estimator", params={"scenario_file": "scenarios/fourbar_gyro.yaml",
                                                               "publish_rate": 0.0}, name="ukf")
    got = probe.collect("/ukf/state", MechanismState, rosutil.qos_profile(depth=50), count=20, timeout=90)
    assert len(got) >= 20, est.logs() + sim.logs()
    for proc in (sim, imu, est):
        before = len(proc.stderr())
        proc.popen.send_signal(signal.SIGINT)
        proc.popen.wait(20)
        assert proc.returncode == 0, proc.logs()
        tail = proc.stderr()[before:]
        assert "Traceback" not in proc.stderr() and "RCLError" not in tail, proc.logs()


def test_console_scripts_and_a_misspelt_parameter(node_processes):
    bin_dir = sys.executable.rsplit("/", 1)[0]
    proc = node_processes.start([f"{bin_dir}/mbde-estimator"], params={"publsh_rate": 10.0})
    assert rosutil.wait_until(lambda: not proc.running(), 30), proc.logs()
    lines = [ln for ln in proc.stderr().splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.logs()
    assert re.search(r"\[ERROR\].*unknown parameter 'publsh_rate' \(did you mean 'publish_rate'\?\)", lines[0])
    # without rclpy (a plain Python): one clear line, exit 2
    bare = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path[:0] = [p for p in "
                           "__import__('os').environ['MBDE_PATH'].split(':')]; from mbde_nodes.entry import "
                           "estimator; sys.exit(estimator())"], capture_output=True, text=True,
                          env={"MBDE_PATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin"})
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1, bare.stderr
    assert bare.stderr.startswith("mbde-estimator: needs ROS 2 (rclpy is not installed)")
