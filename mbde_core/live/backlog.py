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
costs nothing, until it has caught up.

"Behind" is measured by how long a reading waited in the reader queue (the middleware's
reception time to the callback, wall clock: independent of the stamps' clock and of
the simulation's real-time factor): above :data:`BEHIND` s the node thins, below
``BEHIND / 2`` it stops. Every reading skipped is counted (per sensor and in total)
and reported in the diagnostics with a warning.
"""
from __future__ import annotations

BEHIND = 0.25       # s a reading waited in the reader queue: the node is behind
KEEP_ONE_IN = 4     # while behind, per sensor: one reading processed, the next ones skipped


class Backlog:
    """Which readings a node that falls behind processes (see the module doc)."""

    def __init__(self, behind: float = BEHIND, keep_one_in: int = KEEP_ONE_IN):
        self.behind_after, self.keep_one_in = float(behind), int(keep_one_in)
        self.behind = False
        self.skipped: dict[str, int] = {}
        self.episodes = 0  # times the node fell behind
        self.worst = 0.0  # longest wait in the queue seen [s]
        self._since: dict[str, int] = {}  # per sensor: readings skipped since the last one processed

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
        return False

    @property
    def total(self) -> int:
        return sum(self.skipped.values())

    def values(self) -> list[tuple[str, object]]:
        """Diagnostic values: the skipped readings and the longest queue wait."""
        return [("skipped (node behind)", self.total), ("behind episodes", self.episodes),
                ("longest queue wait [ms]", f"{1e3 * self.worst:.1f}")]

    def warning(self) -> str:
        return (f"falling behind: skipping readings (one in {self.keep_one_in} processed while readings wait more "
                f"than {1e3 * self.behind_after:.0f} ms in the queue; {self.total} skipped so far)")

    def problem(self, skipped_this_period: int) -> str | None:
        """The warning of a period in which readings were skipped (None: none were)."""
        if not skipped_this_period:
            return None
        return (f"falling behind: {skipped_this_period} reading(s) skipped this period (one in {self.keep_one_in} "
                f"processed while readings wait more than {1e3 * self.behind_after:.0f} ms in the queue)")
