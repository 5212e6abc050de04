"""A live estimator that falls behind its readings: thin them, count them, keep the track.

When the node cannot process readings as fast as they come (a loaded CPU, an observer
slower than real time), they wait in the subscription's reader queue. Left alone, that
queue overflows and the middleware drops the *oldest* readings: a contiguous stretch of
the stream is lost, and an estimator predicting open loop across it can lose its track
(measured, `mbde replay` of adekf_slider_crank with readings removed: a 50 ms hole in
the 1 kHz slider accelerometer can send the ADE-KF to the mirrored crank motion, RMS
1.4 rad; keeping one reading in 2 or 4 over 0.3-1 s keeps it, RMS 0.007-0.009 rad).
So when the node is behind it drops readings itself, evenly: per sensor it keeps one
reading in :data:`KEEP_ONE_IN` and skips the others without processing them, which
costs nothing, and publishes only the estimates of steps that fused a reading, until it
has caught up.

"Behind" is measured by how long a reading waited in the reader queue (the middleware's
reception time to the callback, wall clock: independent of the stamps' clock and of
the simulation's real-time factor): above :data:`BEHIND` s the node thins, below
``BEHIND / 2`` it stops. Every reading skipped is counted (per sensor and in total)
and reported in the diagnostics with a warning.
"""
from __future__ import annotations

BEHIND = 0.25       # s a reading waited in the reader queue: the node is behind
KEEP_ONE_IN = 4     # while behind, per sensor: one reading processed, the next ones skipped
STALLED = 0.15      # s of wall time between two ticks of the node (every 0.05 s): it was not running


class Backlog:
    """Which readings a node that falls behind processes (see the module doc)."""

    def __init__(self, behind: float = BEHIND, keep_one_in: int = KEEP_ONE_IN):
        self.behind_after, self.keep_one_in = float(behind), int(keep_one_in)
        self.behind = False
        self.skipped: dict[str, int] = {}
        self.episodes = 0  # times the node fell behind
        self.period = 0  # readings skipped in the current diagnostics period
        self.worst = 0.0  # longest wait in the queue seen [s]
        self.unpublished = 0  # estimates of steps without a reading not published while behind
        self.lost = 0  # readings the transport lost (gaps in the publishers' sequence numbers)
        self._since: dict[str, int] = {}  # per sensor: readings skipped since the last one processed
        self._seq: dict[str, int] = {}  # per topic: the last publication sequence number

    def admit(self, sensor: str, queued: float | None) -> bool:
        """Process this reading of ``sensor`` that waited ``queued`` s in the reader queue
        (None: unknown, never thinned)?"""
        if queued is None:
            return True
        self.worst = max(self.worst, queued)
        if not self.behind and queued > self.behind_after:
            self.behind = True
            self.episodes += 1
        elif self.behind and queued < 0.5 * self.behind_after:
            self.behind = False
        if not self.behind:
            self._since[sensor] = 0
            return True
        since = self._since.get(sensor, self.keep_one_in)
        if since + 1 >= self.keep_one_in:
            self._since[sensor] = 0
            return True
        self._since[sensor] = since + 1
        self.skipped[sensor] = self.skipped.get(sensor, 0) + 1
        self.period += 1
        return False

    def sequence(self, topic: str, number: int | None) -> None:
        """Count the readings lost before this one of ``topic`` (publication sequence
        number; a number that does not grow is a new publisher: nothing counted)."""
        if not number:
            return
        last = self._seq.get(topic)
        if last is not None and number > last + 1:
            self.lost += number - last - 1
        self._seq[topic] = number

    def publish(self, fused: bool) -> bool:
        """Publish the estimate of a step? While behind, only those of steps that fused a
        reading (a stale intermediate prediction costs the time the node lacks)."""
        if self.behind and not fused:
            self.unpublished += 1
            return False
        return True

    @property
    def total(self) -> int:
        return sum(self.skipped.values())

    def values(self) -> list[tuple[str, object]]:
        """Diagnostic values: the skipped readings and the longest queue wait."""
        return [("skipped (node behind)", self.total), ("behind episodes", self.episodes),
                ("estimates not published (node behind)", self.unpublished),
                ("longest queue wait [ms]", f"{1e3 * self.worst:.1f}"), ("lost in transport", self.lost)]

    def warning(self) -> str:
        return (f"falling behind: skipping readings (one in {self.keep_one_in} processed while readings wait more "
                f"than {1e3 * self.behind_after:.0f} ms in the queue; {self.total} skipped so far)")

    def problem(self) -> str | None:
        """The warning of the diagnostics period that ends, if readings were skipped in it
        (None: none were); starts the next period."""
        n, self.period = self.period, 0
        if not n:
            return None
        return (f"falling behind: {n} reading(s) skipped this period (one in {self.keep_one_in} "
                f"processed while readings wait more than {1e3 * self.behind_after:.0f} ms in the queue)")
