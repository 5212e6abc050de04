"""One-line DataError messages for bag problems: ``<path>: <problem>: <reason>``."""
from __future__ import annotations

from mbde_core.errors import DataError


def one_line(text) -> str:
    """text with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(text).split())


def bag_error(path, problem: str, exc: BaseException | None = None) -> DataError:
    """DataError 'path: problem: reason' on one line (rosbags' own errors need no type name)."""
    reason = ""
    if exc is not None:
        own = type(exc).__module__.startswith("rosbags") and str(exc)
        reason = f": {exc}" if own else f": {type(exc).__name__}: {exc}"
    return DataError(one_line(f"{path}: {problem}{reason}"))
