"""Helpers of the node tests (test_nodes_*.py): message classes and stamps, the nodes'
DiagnosticStatus (values, level, the newest of one node), service calls from the probe,
and starting an estimator node with the shipped parameter file."""
from __future__ import annotations

import importlib
from pathlib import Path

import rosutil

REPO = Path(__file__).resolve().parents[2]


def msg_class(typename: str):
    """'sensor_msgs/msg/Imu' -> the rclpy message class."""
    pkg, sub, name = typename.split("/")
    return getattr(importlib.import_module(f"{pkg}.{sub}"), name)


def stamp(msg) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def diag_values(status) -> dict:
    return {kv.key: kv.value for kv in status.values}


def level(status) -> int:
    lv = status.level
    return lv[0] if isinstance(lv, (bytes, bytearray)) else int(lv)


def our_status(messages, node: str):
    """The last DiagnosticStatus of the estimator node ``node`` (e.g. '/mbde/ukf')."""
    found = [s for m in messages for s in m.status if f" {node} (" in s.name]
    assert found, f"no diagnostics of {node}: {[s.name for m in messages for s in m.status]}"
    return found[-1]


def wait_status(collector, node: str, predicate=lambda s: True, timeout: float = 15.0):
    """The newest DiagnosticStatus of ``node`` satisfying predicate (waits for it)."""
    def find():
        found = [s for m in collector.messages for s in m.status if f" {node} (" in s.name and predicate(s)]
        return found[-1] if found else None

    status = rosutil.wait_until(find, timeout)
    assert status is not None, f"no matching diagnostics of {node}"
    return status


def call(probe, srv_type, name: str, request, timeout: float = 10.0):
    """Call a service from the probe node (its spin thread completes the future)."""
    client = probe.node.create_client(srv_type, name)
    try:
        assert client.wait_for_service(timeout_sec=timeout), f"service {name} not available"
        future = client.call_async(request)
        assert rosutil.wait_until(future.done, timeout), f"service {name} did not answer"
        return future.result()
    finally:
        probe.node.destroy_client(client)


def params_file(executable: str) -> list[str]:
    """Arguments loading the shipped parameter file (checked by rcl's own YAML parser);
    the test's -p values, given after it, override it."""
    return ["--ros-args", "--params-file", str(REPO / "config" / "params" / f"{executable}.yaml")]


def start_estimator(node_processes, name: str, **params):
    base = {"estimator": name, "diagnostics_period": 0.5}  # config_file '': the shipped options
    base.update(params)
    return node_processes.start("mbde_nodes.estimator", params=base, name=name, remaps={"__ns": "/mbde"},
                                args=params_file("estimator"))
