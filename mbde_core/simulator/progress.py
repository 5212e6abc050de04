"""A progress bar on stderr (tqdm), shown only when stderr is a terminal."""
from __future__ import annotations

import sys

from tqdm import tqdm

FORMAT = "{desc} [{bar:30}] {percentage:5.1f}%  {elapsed_s:5.1f} s, {remaining_s:5.1f} s left "


class ProgressBar:
    """Call with (k, total) (steps done, steps in all; the total may grow); redraws at
    most ``fps`` times a second; ``close()`` ends the line.

    Silent (no output at all) when the stream is not a terminal, e.g. in CI or a pipe
    (tqdm's ``disable=None``), unless ``enabled`` says otherwise.
    """

    def __init__(self, label: str, stream=None, fps: float = 8.0, enabled: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.label = label
        self.mininterval = 1.0 / fps
        self.disable = None if enabled is None else not enabled
        self.bar = None

    def __call__(self, k: int, total: int) -> None:
        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.label, file=self.stream, mininterval=self.mininterval,
                            miniters=1, disable=self.disable, bar_format=FORMAT, ascii="-#", leave=True)
        if self.bar.disable:
            return
        if total != self.bar.total:
            self.bar.total = total
        self.bar.update(k - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
