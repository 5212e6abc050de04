"""Sensor faults injected into the live estimator node (real rclpy) give replay's counters.

One stream of gyro readings carries outliers, non-finite values, duplicate stamps,
readings from the future and a backward stamp jump (``mbde_core.faults.kinds``), then a
clean tail (so that nothing of interest waits in the node's reorder window at the end).
The probe publishes it, message by message, to the ``estimator`` node (shipped dekf
options, no /clock: the node runs on the stamps alone); its /diagnostics counters must
equal those of ``mbde replay`` (:func:`mbde_core.replay.runner.run_estimator`) on the
same readings.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

import rosutil
from node_helpers import diag_values, start_estimator, wait_status

TOPIC = "/mbde/sensors/gyro_coupler"


def _faulty_stream(inputs):
    from mbde_core.faults.kinds import inject

    sigma = {s.name: np.sqrt(np.diag(s.covariance())) for s in inputs.sensors}
    ms = inject("backward_jump", inputs.measurements, "gyro_coupler", sigma).measurements
    body, tail = ms[:-60], ms[-60:]  # the last 0.3 s stay clean
    for fault in ("outliers", "nan_inf", "duplicate_stamps", "future_stamps"):
        body = inject(fault, body, "gyro_coupler", sigma, seed=3).measurements
    return body + tail


def test_live_node_counts_faults_as_replay(node_processes, probe, ros_env, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import Imu

    from mbde_core.live.estimator import load_config
    from mbde_core.live.model_source import load_source
    from mbde_core.replay.inputs import load_inputs
    from mbde_core.replay.runner import run_estimator
    from mbde_core.simulator.bag import sensor_message_builder, write_simulation_bag
    from mbde_nodes.common import RclpyFactory

    scenario = load_source(scenario_file="scenarios/fourbar_gyro.yaml", settings=["duration=3.5"])
    write_simulation_bag(scenario, tmp_path / "bag")
    inputs = load_inputs(str(tmp_path / "bag"))
    stream = _faulty_stream(inputs)
    run = run_estimator(dataclasses.replace(inputs, measurements=stream), "dekf", load_config("dekf"))
    expected = run.counters
    assert expected["duplicates"] >= 10 and expected["future"] == 10 and expected["resets"] == 1
    assert expected["non_finite"] == 20 and expected["rejected_gate"] >= 10

    diags = probe.subscribe("/diagnostics", DiagnosticArray, rosutil.qos_profile(depth=500))
    est = start_estimator(node_processes, "dekf", scenario_file="scenarios/fourbar_gyro.yaml")
    imu = probe.publisher(TOPIC, Imu, rosutil.qos_profile(depth=100))
    assert rosutil.wait_until(lambda: imu.get_subscription_count() >= 1, 20), "estimator did not subscribe"
    time.sleep(0.5)
    build = sensor_message_builder(inputs.sensors["gyro_coupler"], RclpyFactory())
    for m in stream:
        imu.publish(build(m.stamp, m.value))
        time.sleep(0.003)
    status = wait_status(diags, "/mbde/dekf",
                         lambda s: int(diag_values(s)["readings received"]) >= len(stream), timeout=20)
    time.sleep(1.2)  # one more diagnostics period: every reading processed
    status = wait_status(diags, "/mbde/dekf")
    v = diag_values(status)
    print("\nlive diagnostics after the faulty stream:\n  " + "\n  ".join(f"{k}: {x}" for k, x in v.items()))
    print("replay counters:", {k: x for k, x in expected.items() if not isinstance(x, dict)})
    assert int(v["readings received"]) == len(stream), "the node lost readings (best-effort transport)"
    assert int(v["duplicate stamps"]) == expected["duplicates"]
    assert int(v["future stamps"]) == expected["future"]
    assert int(v["non-finite"]) == expected["non_finite"]
    assert int(v["rejected by gate"]) == expected["rejected_gate"]
    assert int(v["late (out of order)"]) == expected["out_of_order"]
    assert int(v["gate re-acquisitions"]) == expected["reacquisitions"]
    assert int(v["gap resets"]) == expected["gap_resets"]
    assert f"backward stamp: {expected['resets']}" in v["reset reasons"]
    assert v["backward jump [s] (last, largest)"].startswith(f"{expected['backward_jump_last']:.3f}")
    assert int(v["readings fused"]) >= expected["fused"] - 10  # the tail may still wait in the reorder window
    assert int(v["estimator errors"]) == 0 and est.running()
    assert "Traceback" not in est.stderr()
