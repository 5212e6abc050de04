"""The mbde nodes for real, robustness: waiting messages, malformed / non-finite / late
readings counted, ~/reset and backward clock jumps reset the estimator, which never dies;
parameter and configuration errors are one error line and exit status 2.

Runs in .venv-ros (tools/ros_venv.sh), as test_nodes_tracking.py does.
"""
from __future__ import annotations

import re
import time

import rosutil
from node_helpers import call, diag_values, level, our_status, start_estimator, wait_status


# ------------------------------------------------------------------------------ robustness
def test_estimator_survives_bad_input_resets_and_clock_jumps(node_processes, probe, ros_env):
    """Probe-driven (no simulator): waiting messages, malformed / non-finite / late readings
    counted, ~/reset, and a backward /clock jump resets the estimator; it never dies."""
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Imu, JointState
    from std_srvs.srv import Trigger

    from mbde_core.live.model_source import load_source
    from mbde_core.simulator import run as simulate_run

    scenario = load_source(scenario_file="scenarios/fourbar_gyro.yaml")
    topic = "/mbde/sensors/gyro_coupler"
    diags = probe.subscribe("/diagnostics", DiagnosticArray, rosutil.qos_profile(depth=500))
    est = start_estimator(node_processes, "ukf", scenario_file="scenarios/fourbar_gyro.yaml", use_sim_time=True)

    # waiting: nobody publishes the sensor topic, nor /clock
    est.wait_for_output(rf"waiting for {topic} \(sensor_msgs/msg/Imu, sensor gyro_coupler\): no publisher yet",
                        timeout=30, stream="stderr")
    est.wait_for_output(r"use_sim_time is true but nothing publishes /clock", timeout=10, stream="stderr")
    wrong = probe.publisher(topic, JointState)  # a publisher of the wrong type
    est.wait_for_output(r"offers sensor_msgs/msg/JointState, expected sensor_msgs/msg/Imu", timeout=15,
                        stream="stderr")
    probe.node.destroy_publisher(wrong)
    waiting = wait_status(diags, "/mbde/ukf", lambda s: "waiting for" in s.message)
    assert level(waiting) == 1

    # readings of a short simulation, stamped from t = 100 s, with the clock
    res = simulate_run(scenario.with_overrides(duration=1.0))
    stamps, values = res.measurements["gyro_coupler"]
    clock = probe.publisher("/clock", Clock)
    imu = probe.publisher(topic, Imu, rosutil.qos_profile(depth=50))
    sub = rosutil.wait_until(lambda: imu.get_subscription_count() >= 1 and clock.get_subscription_count() >= 1, 15)
    assert sub, "estimator did not subscribe"
    time.sleep(0.5)

    def reading(t, value, cov0=None):
        m = Imu()
        m.header.stamp = Time(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))
        m.header.frame_id = "gyro_coupler"
        m.orientation_covariance[0] = -1.0
        m.linear_acceleration_covariance[0] = -1.0
        m.angular_velocity.z = float(value)
        m.angular_velocity_covariance[8] = 1e-4
        if cov0 is not None:
            m.angular_velocity_covariance[0] = cov0
        return m

    def tick(t):
        clock.publish(Clock(clock=Time(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))))

    t0 = 100.0
    for k, (t, v) in enumerate(zip(stamps, values[:, 0])):
        tick(t0 + t)
        imu.publish(reading(t0 + t, v))
        if k == 50:
            imu.publish(reading(t0 + t, v, cov0=-1.0))  # malformed: "angular velocity not provided"
            imu.publish(reading(t0 + t, float("nan")))  # non-finite
        if k == 120:
            imu.publish(reading(t0 + t - 0.3, v))  # late: older than the filter time
        time.sleep(0.005)
    time.sleep(1.0)
    before = diag_values(our_status(diags.messages, "/mbde/ukf"))
    assert int(before["malformed"]) == 1 and int(before["non-finite"]) == 1 and int(before["late (out of order)"]) == 1
    assert int(before["readings fused"]) >= 0.9 * len(stamps) and before["state"] in ("running", "stale")
    assert "gyro_coupler: last malformed" in before

    reply = call(probe, Trigger, "/mbde/ukf/reset", Trigger.Request())
    assert reply.success and "reset" in reply.message
    tick(t0 + 1.5)
    tick(t0 - 50.0)  # the clock jumps back (a bag loop)
    est.wait_for_output(r"estimator reset \(clock jumped back by 5\d\.\d+ s\)", timeout=10, stream="stderr")
    for t, v in zip(stamps[:40], values[:40, 0]):  # a new track after the jump
        tick(t0 - 50.0 + t)
        imu.publish(reading(t0 - 50.0 + t, v))
        time.sleep(0.005)
    time.sleep(1.2)
    after = diag_values(our_status(diags.messages, "/mbde/ukf"))
    print("\ndiagnostics after bad input, ~/reset and a clock jump:\n  "
          + "\n  ".join(f"{k}: {v}" for k, v in after.items()))
    assert "reset service: 1" in after["reset reasons"] and "clock jumped back: 1" in after["reset reasons"]
    assert int(after["resets"]) >= 2 and int(after["estimator errors"]) == 0
    assert float(after["filter time [s]"]) < t0
    assert est.running(), est.logs()
    logs = est.stderr()
    assert "skipping a malformed message on /mbde/sensors/gyro_coupler" in logs
    assert "Traceback" not in logs


def test_config_errors_are_one_error_line_and_exit_2(node_processes):
    bad = {
        "model": node_processes.start("mbde_nodes.mechanism_model", params={"mechanism_file": "no/such.yaml"}),
        "rate": node_processes.start("mbde_nodes.estimator", params={"publish_rate": -5.0}),
        "name": node_processes.start("mbde_nodes.estimator", params={"estimator": "kalman"}),
        "int": node_processes.start("mbde_nodes.simulator", params={"scenario_file": "scenarios/pf_sim.yaml",
                                                                    "rate": 333}),
        "sim": node_processes.start("mbde_nodes.simulator"),
    }
    expected = {
        "model": r"no/such\.yaml: mechanism file not found",
        "rate": r"parameter 'publish_rate': must be >= 0, got -5\.0",
        "name": r"parameter 'estimator': must be one of ukf, errorekf, .*got 'kalman'",
        "int": r"333 Hz is not a whole number of internal steps",
        "sim": r"set parameter 'scenario_file'",
    }
    for key, proc in bad.items():
        assert rosutil.wait_until(lambda: not proc.running(), 30), proc.logs()
        assert proc.returncode == 2, proc.logs()
        err = proc.stderr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("[ERROR]"), proc.logs()
        assert re.search(expected[key], lines[0]), proc.logs()
    # an integer for a double parameter is fine (plain rclpy would refuse it)
    ok = node_processes.start("mbde_nodes.simulator", params={"scenario_file": "scenarios/pf_sim.yaml", "rate": 200})
    ok.wait_for_output(r"ground truth at 200 Hz", timeout=30, stream="stderr")
    assert ok.running()
