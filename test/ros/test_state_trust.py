"""The live estimator node's trust verdict on its state topic, real rclpy and mbde_msgs:
every mbde_msgs/MechanismState on ``/mbde/<name>/state`` carries ``trust_level``
(OK=0 / DEGRADED=1 / LOST=2, the message's constants) and the verdict's sentence in
``trust_reason``; a well-tracked four-bar ends OK with the stage's "consistent" reason
(mbde_core/estimators/stage/trust.py), the same verdict as the node's diagnostics."""
from __future__ import annotations

from pathlib import Path

import rosutil

REPO = Path(__file__).resolve().parents[2]
SCENARIO = "scenarios/fourbar_encoder.yaml"


def _params(executable: str) -> list[str]:
    return ["--ros-args", "--params-file", str(REPO / "config" / "params" / f"{executable}.yaml")]


def test_state_topic_carries_the_trust_verdict(node_processes, probe, ros_env):
    from diagnostic_msgs.msg import DiagnosticArray
    from mbde_msgs.msg import MechanismState

    assert (MechanismState.TRUST_OK, MechanismState.TRUST_DEGRADED, MechanismState.TRUST_LOST) == (0, 1, 2)
    big = rosutil.qos_profile(depth=5000)
    truth = probe.subscribe("/mbde/ground_truth", MechanismState, big)  # counted by wait_for_subscribers
    states = probe.subscribe("/mbde/ukf/state", MechanismState, big)
    diags = probe.subscribe("/diagnostics", DiagnosticArray, rosutil.qos_profile(depth=200))
    node_processes.start("mbde_nodes.mechanism_model", args=_params("mechanism_model"), params={"scenario_file": SCENARIO})
    driver = node_processes.start("mbde_nodes.encoder_driver", args=_params("encoder_driver"))
    est = node_processes.start("mbde_nodes.estimator", params={"estimator": "ukf", "diagnostics_period": 0.5},
                               name="ukf", remaps={"__ns": "/mbde"}, args=_params("estimator"))
    est.wait_for_output(r"listening to /mbde/sensors/", timeout=30, stream="stderr")
    driver.wait_for_output(r"on /mbde/sensors/", timeout=30, stream="stderr")
    sim = node_processes.start("mbde_nodes.simulator", args=_params("simulator"), params={
        "scenario_file": SCENARIO, "duration": 2.5, "loop": False, "wait_for_subscribers": 2})
    sim.wait_for_output(r"scenario finished", timeout=40, stream="stderr")
    assert rosutil.wait_until(lambda: len(states) > 100, 20), f"no states\n{est.logs()}"
    rosutil.wait_until(lambda: False, 1.5)  # the last messages and one more diagnostics period
    probe.check()
    msgs = states.messages
    assert len(truth) > 0
    assert {m.trust_level for m in msgs} <= {0, 1, 2} and all(m.trust_reason for m in msgs)
    last = msgs[-1]
    assert last.trust_level == MechanismState.TRUST_OK, last.trust_reason
    assert last.trust_reason.startswith("readings consistent with the estimate over the last 1 s")
    found = [s for m in diags.messages for s in m.status if " /mbde/ukf (" in s.name]
    assert found, "no diagnostics of /mbde/ukf"
    values = {kv.key: kv.value for kv in found[-1].values}
    assert values.get("trust") == "OK"
