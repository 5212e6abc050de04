"""diagnostic_msgs/DiagnosticArray of the nodes, built through a message factory (ROS-free).

A :class:`Status` is plain data (level, name, message, hardware_id, key/value pairs);
:func:`diagnostic_array` turns statuses into the message that ``rqt_runtime_monitor`` and
``ros2 topic echo /diagnostics`` show. Levels follow diagnostic_msgs/DiagnosticStatus.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

OK, WARN, ERROR, STALE = 0, 1, 2, 3
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR", STALE: "STALE"}
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"


@dataclass
class Status:
    level: int
    name: str
    message: str
    hardware_id: str = ""
    values: list = field(default_factory=list)  # [(key, value)] (values formatted with str())

    def as_dict(self) -> dict:
        return {k: v for k, v in self.values}


def fmt(value, spec: str = ".4g") -> str:
    """A number for a diagnostic value ('-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _set_level(status_msg, level: int) -> None:
    # diagnostic_msgs/DiagnosticStatus.level is a `byte`: bytes of length 1 in rclpy,
    # an int in rosbags.
    if isinstance(status_msg.level, (bytes, bytearray)):
        status_msg.level = bytes([int(level)])
    else:
        status_msg.level = int(level)


def diagnostic_array(factory, stamp: float, statuses) -> object:
    """DiagnosticArray message of statuses at ``stamp`` [s]."""
    arr = factory.new(DIAGNOSTIC_ARRAY)
    arr.header.stamp = factory.time(stamp)
    out = []
    for st in statuses:
        m = factory.new("diagnostic_msgs/msg/DiagnosticStatus")
        _set_level(m, st.level)
        m.name, m.message, m.hardware_id = str(st.name), str(st.message), str(st.hardware_id)
        kvs = []
        for key, value in st.values:
            kv = factory.new("diagnostic_msgs/msg/KeyValue")
            kv.key, kv.value = str(key), fmt(value)
            kvs.append(kv)
        m.values = kvs
        out.append(m)
    arr.status = out
    return arr


def level_of(msg_status) -> int:
    """The int level of a DiagnosticStatus message (bytes or int)."""
    lv = msg_status.level
    return lv[0] if isinstance(lv, (bytes, bytearray)) else int(lv)


class Throttle:
    """Allow an event per key at most once per ``period`` seconds (monotonic clock)."""

    def __init__(self, period: float, clock=_time.monotonic):
        self.period = float(period)
        self.clock = clock
        self._last: dict = {}

    def __call__(self, key) -> bool:
        now = self.clock()
        last = self._last.get(key)
        if last is None or now - last >= self.period:
            self._last[key] = now
            return True
        return False


def stamp_anomaly_values(c: dict) -> list:
    """Diagnostic values of the stage's stamp and gate anomaly counters (StageCounters dict)."""
    out = [("duplicate stamps", c["duplicates"]), ("future stamps", c["future"]),
           ("gate re-acquisitions", c["reacquisitions"]), ("gap resets", c["gap_resets"])]
    if c.get("gate_scale_max", 1.0) > 1.0:  # the filter's innovations exceeded its S (stage_guards.AdaptiveGate)
        out.append(("gate scale (largest)", f"{c['gate_scale_max']:.2f}"))
    if c.get("diverged", 0):
        out.append(("diverged (restarted)", c["diverged"]))
    if c.get("gate_believed", 0):
        out.append(("readings believed over the gate", c["gate_believed"]))
    if c["resets"]:
        out.append(("backward jump [s] (last, largest)", f"{c['backward_jump_last']:.3f}, {c['backward_jump_max']:.3f}"))
    if c["reconvergence_last"] is not None:
        out.append(("re-convergence [s] (last, largest)", f"{c['reconvergence_last']:.3f}, {c['reconvergence_max']:.3f}"))
    return out


def reading_problems(d: dict) -> list:
    """Warnings for the faulty-reading counts of one diagnostics period (counter differences)."""
    out = []
    if d["out_of_order"]:
        out.append((WARN, f"{d['out_of_order']} late reading(s) this period (raise reorder_window?)"))
    if d["non_finite"]:
        out.append((WARN, f"{d['non_finite']} non-finite reading(s) this period"))
    if d["rejected_gate"]:
        out.append((WARN, f"{d['rejected_gate']} reading(s) rejected by the gate this period"))
    if d["duplicates"]:
        out.append((WARN, f"{d['duplicates']} reading(s) with a duplicate stamp this period"))
    if d["future"]:
        out.append((WARN, f"{d['future']} reading(s) stamped in the future this period"))
    if d["reacquisitions"]:
        out.append((WARN, f"{d['reacquisitions']} gate re-acquisition(s) this period (readings kept disagreeing)"))
    return out
