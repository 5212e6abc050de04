"""The probe of a test/ros test: ``ProbeNode``, an rclpy node in the test process, on its own
Context, spun by a background thread, that collects the messages of a topic with a given
QoS (``Collector``) and publishes; ``qos_profile`` and ``wait_until`` (a deadline on
every wait: a test never hangs on a missing publisher).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


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
