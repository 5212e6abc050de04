"""Helpers for the real-rclpy integration tests of test/ros (run in .venv-ros only).

Three pieces, used through the fixtures of conftest.py:

- ``claim_domain_id`` / ``ros_environment``: a ROS_DOMAIN_ID in 1..101 that no other
  test of any pytest process on this machine holds (an ``flock`` on a file in the
  temporary folder), and the environment that keeps DDS on loopback
  (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, no static peers, Fast DDS).
- ``NodeProcesses``: starts node processes (``python -m module --ros-args -p k:=v``,
  a script, or any argv) with that environment, their stdout/stderr in files, and
  stops them at teardown with SIGINT, then SIGKILL.
- ``ProbeNode``: an rclpy node in the test process, on its own Context, spun by a
  background thread, that collects the messages of a topic with a given QoS.

Everything waits with a deadline: a test never hangs on a missing publisher.
"""
from __future__ import annotations

import fcntl
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

# 1..101: not the default 0, and (on Linux) below the ids whose DDS ports fall into the
# ephemeral port range.
DOMAIN_IDS = range(1, 102)
RMW = "rmw_fastrtps_cpp"
# Variables that would take DDS off loopback or off this test's domain if inherited.
STALE_VARS = ("ROS_LOCALHOST_ONLY", "ROS_DISCOVERY_SERVER", "ROS_SUPER_CLIENT",
              "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE",
              "RMW_FASTRTPS_USE_QOS_FROM_XML")


# --------------------------------------------------------------------------- domain


class DomainClaim:
    """A ROS_DOMAIN_ID held exclusively (across processes) until ``release()``."""

    def __init__(self, domain_id: int, lock_file):
        self.domain_id = domain_id
        self._lock_file = lock_file

    def release(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


def claim_domain_id(rng: random.Random | None = None) -> DomainClaim:
    """Claim a random free domain id in DOMAIN_IDS (non-blocking flock per id)."""
    rng = rng or random.SystemRandom()
    ids = list(DOMAIN_IDS)
    rng.shuffle(ids)
    lock_dir = Path(tempfile.gettempdir())
    for domain_id in ids:
        f = open(lock_dir / f"mbde-ros-domain-{domain_id}.lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return DomainClaim(domain_id, f)
    raise RuntimeError(f"all ROS domain ids {DOMAIN_IDS.start}..{DOMAIN_IDS.stop - 1} are in use")


def ros_environment(domain_id: int, log_dir: os.PathLike | str, base: Mapping[str, str] | None = None) -> dict:
    """Environment for ROS processes of one test: its domain, loopback-only discovery.

    ``base`` defaults to ``os.environ`` (which, in .venv-ros, already carries the wheels'
    LD_LIBRARY_PATH and the flag that stops their bootstrap from re-executing children).
    """
    env = dict(os.environ if base is None else base)
    for stale in STALE_VARS:
        env.pop(stale, None)
    env.update(
        ROS_DOMAIN_ID=str(domain_id),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_STATIC_PEERS="",
        RMW_IMPLEMENTATION=RMW,
        ROS_LOG_DIR=str(log_dir),
        PYTHONUNBUFFERED="1",
        RCUTILS_COLORIZED_OUTPUT="0",
    )
    return env


# --------------------------------------------------------------------- processes


def ros_args(params: Mapping[str, Any] | None = None, remaps: Mapping[str, str] | None = None,
             name: str | None = None) -> list[str]:
    """``--ros-args -p k:=v ... -r from:=to ...`` (values as ROS parses them: YAML)."""
    out: list[str] = []
    for key, value in (params or {}).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(_scalar(v) for v in value) + "]"
        else:
            text = _scalar(value)
        out += ["-p", f"{key}:={text}"]
    if name:
        out += ["-r", f"__node:={name}"]
    for src, dst in (remaps or {}).items():
        out += ["-r", f"{src}:={dst}"]
    return ["--ros-args", *out] if out else []


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class NodeProcess:
    """One child process; stdout/stderr go to ``<log_dir>/<label>.out|.err``."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_dir: Path, label: str,
                 cwd: os.PathLike | str | None = None):
        self.argv = list(argv)
        self.label = label
        self.stdout_path = log_dir / f"{label}.out"
        self.stderr_path = log_dir / f"{label}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # Own session: a Ctrl-C at the terminal does not reach it twice, and
            # killpg stops any grandchildren (wrapper scripts) too.
            self.popen = subprocess.Popen(self.argv, env=dict(env), stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        self.started = time.monotonic()
        self._interrupted = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def running(self) -> bool:
        return self.popen.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for_output(self, pattern: str, timeout: float = 15.0, stream: str = "stdout") -> re.Match:
        """Wait until ``pattern`` (regex) appears in stdout (or stderr); fail if the process dies."""
        rx = re.compile(pattern, re.MULTILINE)
        read = self.stdout if stream == "stdout" else self.stderr
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(read())
            if m:
                return m
            if not self.running():
                m = rx.search(read())  # the last lines before it exited
                if m:
                    return m
                raise AssertionError(f"{self.label} exited with {self.returncode} before printing "
                                     f"{pattern!r}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.label} did not print {pattern!r} within {timeout} s\n{self.logs()}")
            time.sleep(0.05)

    def interrupt(self) -> None:
        """Send SIGINT once (a second one would hit a process already shutting down)."""
        if not self._interrupted and self.popen.poll() is None:
            self._interrupted = True
            self._signal(signal.SIGINT)

    def stop(self, sigint_timeout: float = 10.0) -> int:
        """SIGINT (what Ctrl-C / ros2 launch send), then SIGKILL; returns the exit code."""
        if self.popen.poll() is None:
            self.interrupt()
            try:
                self.popen.wait(sigint_timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait(10)
        return self.popen.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def logs(self) -> str:
        rc = self.popen.poll()
        state = "running" if rc is None else f"exit code {rc}"
        return (f"===== {self.label} ({state}): {' '.join(self.argv)}\n"
                f"----- stdout\n{self.stdout()}----- stderr\n{self.stderr()}===== end {self.label}\n")


class NodeProcesses:
    """The node processes of one test (see the ``node_processes`` fixture)."""

    def __init__(self, env: Mapping[str, str], log_dir: Path, cwd: os.PathLike | str | None = None):
        self.env = dict(env)
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self.procs: list[NodeProcess] = []

    def start(self, target: str | Sequence[str], params: Mapping[str, Any] | None = None,
              remaps: Mapping[str, str] | None = None, name: str | None = None,
              args: Iterable[str] = (), label: str | None = None,
              env: Mapping[str, str] | None = None) -> NodeProcess:
        """Start a node.

        target: a module name (``mbde_nodes.estimator`` -> ``python -m ...``), a path to a
        ``.py`` script (run with this interpreter), or a full argv (e.g. a console script).
        params / remaps / name become ``--ros-args -p k:=v -r a:=b -r __node:=name``;
        ``args`` go before ``--ros-args``; ``env`` adds variables to the test's ROS env.
        """
        if isinstance(target, str):
            if target.endswith(".py"):
                argv = [sys.executable, target]
            else:
                argv = [sys.executable, "-m", target]
            base = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]
        else:
            argv = list(target)
            base = Path(argv[0]).name
        argv += list(args) + ros_args(params, remaps, name)
        label = label or f"{len(self.procs):02d}-{name or base}"
        proc = NodeProcess(argv, {**self.env, **(env or {})}, self.log_dir, label, self.cwd)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> dict[str, int]:
        # SIGINT to all first, so they shut down in parallel, then collect.
        for p in self.procs:
            p.interrupt()
        return {p.label: p.stop() for p in self.procs}

    def logs(self) -> str:
        return "".join(p.logs() for p in self.procs)


# ------------------------------------------------------------------------ probe


def qos_profile(depth: int = 10, reliable: bool = True, transient_local: bool = False):
    """A QoSProfile from the three knobs the tests care about."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if transient_local else DurabilityPolicy.VOLATILE,
    )


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.02):
    """Poll ``predicate`` until truthy (returned) or ``timeout`` s passed (returns last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


class Collector:
    """Messages of one subscription, appended by the probe's spin thread.

    With ``raw=True`` the messages are the serialized CDR bytes as received from the
    wire (what rosbag2 records).
    """

    def __init__(self, probe: "ProbeNode", topic: str, msg_type, qos, raw: bool = False):
        self.topic = topic
        self._lock = threading.Lock()
        self._items: list[tuple[float, Any]] = []
        self._probe = probe
        self.subscription = probe.node.create_subscription(msg_type, topic, self._on_msg, qos, raw=raw)

    def _on_msg(self, msg) -> None:
        with self._lock:
            self._items.append((time.monotonic(), msg))

    @property
    def messages(self) -> list:
        with self._lock:
            return [m for _, m in self._items]

    @property
    def receive_times(self) -> list[float]:
        with self._lock:
            return [t for t, _ in self._items]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def matched_publishers(self) -> int:
        return self.subscription.get_publisher_count()

    def wait_for(self, count: int, timeout: float) -> list:
        """Wait until ``count`` messages arrived or ``timeout`` s passed; return them all."""
        wait_until(lambda: len(self) >= count, timeout)
        return self.messages

    def wait_for_publishers(self, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until the subscription matched ``count`` publishers (DDS discovery done)."""
        return wait_until(lambda: self.matched_publishers() >= count, timeout) and self.matched_publishers()

    def close(self) -> None:
        if self.subscription is not None:
            self._probe.node.destroy_subscription(self.subscription)
            self.subscription = None


class ProbeNode:
    """An rclpy node in the test process, on its own Context and domain.

    Its executor spins in a daemon thread; use ``subscribe`` (a Collector filled in the
    background) or ``collect`` (subscribe, wait, unsubscribe). ``close()`` shuts it down.
    """

    def __init__(self, domain_id: int, name: str = "mbde_test_probe"):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self.context = rclpy.Context()
        # No signal handlers: pytest keeps Ctrl-C.
        rclpy.init(context=self.context, domain_id=domain_id,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._collectors: list[Collector] = []
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name=f"spin-{name}", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException, ShutdownException

        try:
            while not self._stop.is_set() and self.context.ok():
                self.executor.spin_once(timeout_sec=0.05)
        except (ExternalShutdownException, ShutdownException):
            pass
        except BaseException as exc:  # surfaced by check()/close()
            if self.context.ok():
                self._error = exc

    def check(self) -> None:
        """Raise what the spin thread raised (e.g. an exception in a callback)."""
        if self._error is not None:
            raise AssertionError(f"probe spin thread failed: {self._error!r}") from self._error

    def subscribe(self, topic: str, msg_type, qos=10, raw: bool = False) -> Collector:
        col = Collector(self, topic, msg_type, qos, raw)
        self._collectors.append(col)
        return col

    def collect(self, topic: str, msg_type, qos=10, seconds: float | None = None,
                count: int | None = None, timeout: float = 15.0) -> list:
        """Subscribe and return what arrives: for ``seconds`` s, or until ``count``
        messages arrived (at most ``timeout`` s), whichever is asked (both: either)."""
        if seconds is None and count is None:
            raise ValueError("give seconds and/or count")
        col = self.subscribe(topic, msg_type, qos)
        try:
            if count is None:
                time.sleep(seconds)
            else:
                col.wait_for(count, seconds if seconds is not None else timeout)
            self.check()
            return col.messages
        finally:
            col.close()
            self._collectors.remove(col)

    def publisher(self, topic: str, msg_type, qos=10):
        return self.node.create_publisher(msg_type, topic, qos)

    def close(self) -> None:
        # Stop the spin thread first, so no entity is destroyed under a running wait.
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.executor.shutdown(timeout_sec=5.0)
        self._collectors.clear()
        self.node.destroy_node()  # with its subscriptions and publishers
        self.context.try_shutdown()
        self.check()

    def __enter__(self) -> "ProbeNode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
