"""Helpers for the real-rclpy integration tests of test/ros (run in .venv-ros only).

Three pieces, used through the fixtures of conftest.py, each in a module of its own:

- ros_domain.py, ``claim_domain_id`` / ``ros_environment``: a ROS_DOMAIN_ID in 1..101
  that no other test of any pytest process on this machine holds (an ``flock`` on a
  file in the temporary folder), and the environment that keeps DDS on loopback
  (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, no static peers, Fast DDS).
- ros_processes.py, ``NodeProcesses``: starts node processes (``python -m module
  --ros-args -p k:=v``, a script, or any argv) with that environment, their
  stdout/stderr in files, and stops them at teardown with SIGINT, then SIGKILL.
- ros_probe.py, ``ProbeNode``: an rclpy node in the test process, on its own Context,
  spun by a background thread, that collects the messages of a topic with a given QoS.

Everything waits with a deadline: a test never hangs on a missing publisher.
"""
from __future__ import annotations

from ros_domain import DOMAIN_IDS, RMW, STALE_VARS, DomainClaim, claim_domain_id, ros_environment
from ros_probe import Collector, ProbeNode, qos_profile, wait_until
from ros_processes import NodeProcess, NodeProcesses, ros_args

__all__ = ["DOMAIN_IDS", "RMW", "STALE_VARS", "DomainClaim", "claim_domain_id", "ros_environment",
           "NodeProcess", "NodeProcesses", "ros_args", "Collector", "ProbeNode", "qos_profile", "wait_until"]
