"""Shared rclpy plumbing of the mbde nodes: message factory, QoS, parameters, main loop."""
from __future__ import annotations

import array
import importlib
import math
import signal
import sys

import numpy as np
import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions

from mbde_core.errors import MbdeError
from mbde_core.live.params import ParameterError, schema, validate_values
from mbde_core.rosio.stamps import sec_to_stamp

# QoS profiles (see mbde_core.live.topics)
LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
RELIABLE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)
STREAM = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)  # ground truth: nothing lost in bursts
# SensorDataQoS (best effort, volatile) with a deeper reader history: a Python callback
# stalled for a few tens of ms (GC, a marker frame, a busy CPU) must not lose readings.
SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=qos_profile_sensor_data.reliability,
                    durability=qos_profile_sensor_data.durability)


QUEUE_SECONDS = 4.0  # s of readings a sensor subscription's reader history holds at least


def sensor_qos(rate_hz: float, reorder_window: float) -> QoSProfile:
    """SENSOR with a reader history that holds QUEUE_SECONDS of readings or twice one
    reorder window, whichever is more (at least 100, at most 20000): a 1 kHz IMU read by a
    node that a busy CPU stalls keeps its readings instead of losing the oldest ones (a
    hole in the stream); a node that stays behind skips readings evenly instead
    (:mod:`mbde_core.live.backlog`)."""
    span = max(QUEUE_SECONDS, 2.0 * reorder_window)
    depth = int(min(20000, max(100, math.ceil(rate_hz * span))))
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=SENSOR.reliability,
                      durability=SENSOR.durability)


class StartupError(Exception):
    """The node cannot start; the reason was logged as one ERROR line."""


class RclpyFactory:
    """MessageFactory (:mod:`mbde_core.rosio.factory`) over rclpy-generated message classes."""

    TYPECODES = {"float64": "d", "float32": "f", "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q",
                 "int16": "h", "uint16": "H", "int8": "b", "uint8": "B"}

    def __init__(self):
        self._classes = {}

    def cls(self, typename: str):
        """The message class of 'pkg/msg/Name'."""
        c = self._classes.get(typename)
        if c is None:
            pkg, sub, name = typename.split("/")
            c = self._classes[typename] = getattr(importlib.import_module(f"{pkg}.{sub}"), name)
        return c

    def new(self, typename: str):
        return self.cls(typename)()

    def array(self, values, dtype: str):
        arr = np.ascontiguousarray(values, dtype=dtype).ravel()
        return array.array(self.TYPECODES[dtype], arr.tobytes())

    def time(self, t: float):
        from builtin_interfaces.msg import Time

        sec, nanosec = sec_to_stamp(t)
        return Time(sec=sec, nanosec=nanosec)


def wall_clock() -> Clock:
    """A steady clock for timers that must run while simulated time stands still."""
    return Clock(clock_type=ClockType.STEADY_TIME)


def descriptor(p) -> ParameterDescriptor:
    """The ParameterDescriptor of a schema entry (read-only; ints accepted for doubles)."""
    d = ParameterDescriptor(description=p.description, read_only=True, dynamic_typing=True,
                            additional_constraints=p.constraint_text())
    if p.type == "double" and p.min is not None and p.max is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(p.min), to_value=float(p.max), step=0.0)]
    if p.type == "integer" and p.min is not None and p.max is not None:
        d.integer_range = [IntegerRange(from_value=int(p.min), to_value=int(p.max), step=1)]
    return d


def declare_parameters(node, executable: str) -> dict:
    """Declare every parameter of ``executable`` from the schema; return validated values.

    Raises ParameterError (one line) for a wrong type or value, and for a parameter given
    to the node (``-p``, a parameter file, a launch file) that it does not have, e.g. a
    misspelt ``publsh_rate``.
    """
    values = {}
    for p in schema()[executable]:
        try:
            values[p.name] = node.declare_parameter(p.name, p.default, descriptor(p)).value
        except Exception as exc:  # rclpy's own range check (InvalidParameterValueException)
            reason = str(exc).split("Reason: ")[-1].rsplit(":", 1)[0]
            override = getattr(node, "_parameter_overrides", {}).get(p.name)  # to word it like the schema
            if override is not None:
                try:
                    p.coerce(override.value)
                except ValueError as why:
                    reason = str(why)
            raise ParameterError(f"{node.get_name()}: parameter {p.name!r}: {reason}") from None
    for name, override in getattr(node, "_parameter_overrides", {}).items():
        if not node.has_parameter(name) and not name.startswith("qos_overrides."):
            values[name] = override.value  # unknown: validate_values names it
    return validate_values(executable, values, label=node.get_name())


def now_seconds(node) -> float | None:
    """The node clock [s] (simulated time with use_sim_time), None while it reads 0."""
    ns = node.get_clock().now().nanoseconds
    return None if ns == 0 else ns * 1e-9


def fail(node, exc: Exception) -> StartupError:
    """Log a user error as one ERROR line; returns the StartupError to raise."""
    node.get_logger().error(str(exc).replace("\n", " "))
    return StartupError(str(exc))


class _Stop:
    """SIGINT / SIGTERM: finish the callback in progress, then leave the spin loop."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self)

    def __call__(self, signum, frame) -> None:
        self.requested = True


def run(make_node, argv=None) -> int:
    """rclpy main loop: 0 on Ctrl-C / SIGTERM / shutdown, 2 when the node could not start.

    Shutdown is silent: rclpy's own signal handler would invalidate the context while a
    callback publishes ("RCLError: publisher's context is invalid"); here a signal only
    sets a flag, the executor finishes the callback in progress, and the node is
    destroyed before the context is shut down.
    """
    stop = _Stop()
    rclpy.init(args=sys.argv if argv is None else argv, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    code = 0
    try:
        node = make_node()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.requested and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        code = 0
    except StartupError:
        code = 2
    except MbdeError as exc:  # not logged yet (raised before the node had a logger)
        print(f"[ERROR] {exc}", file=sys.stderr)
        code = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the cleanup
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code
