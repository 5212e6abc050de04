"""Fixtures of the real-rclpy integration tests (test/ros runs in .venv-ros, see Makefile).

Each test gets its own ROS_DOMAIN_ID (random in 1..101, held exclusively across pytest
processes of this machine) and discovery restricted to localhost, both in the test
process (``ros_env`` sets os.environ) and in every node process it starts.

- ``ros_env``: dict with ``domain_id``, ``env`` (for child processes), ``log_dir``.
- ``node_processes``: ``node_processes.start("pkg.module", params={...})`` or a script
  path or an argv; all are stopped (SIGINT, then SIGKILL) at teardown, and their
  stdout/stderr are printed when the test failed.
- ``probe``: a ``rosutil.ProbeNode`` on the test's domain (subscribe/collect/publish).
"""
from __future__ import annotations

from pathlib import Path

import pytest

try:
    import rclpy  # noqa: F401
except ImportError as exc:  # e.g. `pytest test` from .venv
    raise ImportError("test/ros needs real rclpy: it runs in .venv-ros (`make test`, or "
                      "`make ros-venv && .venv-ros/bin/python -m pytest test/ros`)") from exc

import rosutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def pytest_configure(config):
    # lark-parser 0.12 (pulled in by rosidl_generator_py, which every generated message
    # module imports for its type support) imports modules deprecated in Python 3.11.
    for mod in ("sre_parse", "sre_constants"):
        config.addinivalue_line("filterwarnings", f"ignore:module '{mod}' is deprecated:DeprecationWarning")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item, so fixtures know at teardown whether the
    # test failed (and then print the node processes' logs).
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def _failed(request) -> bool:
    return any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture(scope="session")
def ros_log_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ros")


@pytest.fixture
def ros_env(monkeypatch, tmp_path, ros_log_root):
    claim = rosutil.claim_domain_id()
    try:
        # The probe node's rcl logging writes under ROS_LOG_DIR once per process: keep
        # that one session-wide, give children a per-test one.
        env = rosutil.ros_environment(claim.domain_id, tmp_path / "ros_log")
        for key in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_STATIC_PEERS",
                    "RMW_IMPLEMENTATION"):
            monkeypatch.setenv(key, env[key])
        monkeypatch.setenv("ROS_LOG_DIR", str(ros_log_root / "test_process"))
        for key in rosutil.STALE_VARS:
            monkeypatch.delenv(key, raising=False)
        yield {"domain_id": claim.domain_id, "env": env, "log_dir": tmp_path}
    finally:
        claim.release()


@pytest.fixture
def node_processes(request, ros_env):
    procs = rosutil.NodeProcesses(ros_env["env"], ros_env["log_dir"] / "nodes", cwd=REPO)
    yield procs
    codes = procs.stop_all()
    if _failed(request) and procs.procs:
        print(f"\nROS_DOMAIN_ID={ros_env['domain_id']}; node processes' exit codes: {codes}")
        print(procs.logs())


@pytest.fixture
def probe(ros_env):
    node = rosutil.ProbeNode(ros_env["domain_id"])
    yield node
    node.close()
