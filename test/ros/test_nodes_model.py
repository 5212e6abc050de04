"""The mechanism model node for real: it publishes the description (latched, transient
local) and the model's geometry markers, which rebuild the scenario.

Runs in .venv-ros (tools/ros_venv.sh), as test_nodes_tracking.py does.
"""
from __future__ import annotations

import time

import rosutil


# ------------------------------------------------------------------------------ model node
def test_mechanism_model_publishes_latched_description_and_geometry(node_processes, probe):
    from std_msgs.msg import String
    from visualization_msgs.msg import MarkerArray

    from mbde_core.live.model_source import load_source
    from mbde_core.scenario.description import scenario_from_description, write_description

    proc = node_processes.start("mbde_nodes.mechanism_model", params={"scenario_file": "scenarios/pf_sim.yaml"})
    proc.wait_for_output(r"published 'pf_sim'", timeout=30, stream="stderr")
    time.sleep(0.5)  # subscribe late: transient local delivers anyway
    latched = rosutil.qos_profile(depth=1, transient_local=True)
    text = probe.collect("/mbde/description", String, latched, count=1, timeout=15)
    geo = probe.collect("/mbde/model/markers", MarkerArray, latched, count=1, timeout=15)
    assert text and geo
    assert text[0].data == write_description(load_source(scenario_file="scenarios/pf_sim.yaml"))
    sc = scenario_from_description(text[0].data)
    assert sc.name == "pf_sim" and sc.sensors.names == ["gyro_rocker"]
    spaces = {m.ns for m in geo[0].markers}
    assert {"model/pivots", "model/ground", "model/names"} <= spaces
    names = sorted(m.text for m in geo[0].markers if m.ns == "model/names")
    assert names == ["A", "B"]
    assert proc.running()
