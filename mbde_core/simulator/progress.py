"""A dependency-free progress bar on stderr, shown only when stderr is a terminal."""
from __future__ import annotations

import sys
import time


class ProgressBar:
    """Call with (k, total); redraws at most ``fps`` times a second; ``close()`` ends the line.

    Silent (no output at all) when the stream is not a terminal, e.g. in CI or a pipe.
    """

    def __init__(self, label: str, stream=None, width: int = 30, fps: float = 8.0, enabled: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = _isatty(self.stream) if enabled is None else enabled
        self.label = label
        self.width = width
        self.interval = 1.0 / fps
        self.t_start = time.monotonic()
        self.t_last = 0.0
        self.drawn = False

    def __call__(self, k: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if k < total and now - self.t_last < self.interval:
            return
        self.t_last = now
        frac = min(max(k / total if total else 1.0, 0.0), 1.0)
        fill = int(round(frac * self.width))
        bar = "#" * fill + "-" * (self.width - fill)
        elapsed = now - self.t_start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        self.stream.write(f"\r{self.label} [{bar}] {100 * frac:5.1f}%  {elapsed:5.1f} s, {eta:5.1f} s left ")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.enabled and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
