"""Stopping cleanly: Ctrl-C (SIGINT) and SIGTERM end an ``mbde`` command and its children.

- The command's process turns SIGTERM into :class:`Terminated` (a KeyboardInterrupt, so
  every cleanup that handles Ctrl-C handles it too), raised in the main thread: outputs
  are abandoned (:mod:`mbde_core.cli.outputs`), the command exits 130 (SIGINT) or 143
  (SIGTERM) with one line and no traceback.
- Its worker processes (:mod:`mbde_core.runs.engine`, the replay's plot renderer, the
  simulator's integrator) call :func:`child_setup` first: they ignore SIGINT (a
  terminal's Ctrl-C reaches the whole process group; only the parent decides), die
  on SIGTERM without a traceback, and get SIGTERM when the parent dies (Linux
  ``PR_SET_PDEATHSIG``: a parent killed by SIGKILL leaves no orphan working on).
- :func:`stop_children` terminates and reaps every child process the parent started
  (``multiprocessing.active_children``): SIGTERM, then SIGKILL after ``timeout``.
"""
from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""

    signal = signal.SIGTERM


_RECEIVED: list[int] = []  # the signals received since install()


def _on_signal(signum, frame):
    """Raise the interrupt in the main thread, and remember it: an exception raised where
    Python cannot propagate it (a finalizer, a callback from C) is lost, the record is not
    (:func:`check`, called before an output is put in place)."""
    _RECEIVED.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def received() -> int | None:
    """The first SIGINT/SIGTERM received since :func:`install` (None: none)."""
    return _RECEIVED[0] if _RECEIVED else None


def check() -> None:
    """Raise the interrupt again if one was received (its exception may have been lost)."""
    sig = received()
    if sig is not None:
        raise Terminated() if sig == signal.SIGTERM else KeyboardInterrupt()


def _unraisable(info) -> None:
    """``sys.unraisablehook``: an interrupt raised where Python cannot propagate it (a
    weakref callback, a finalizer) is not printed as "Exception ignored in ..." (it is
    recorded, :func:`check` raises it again); anything else goes to Python's hook."""
    if isinstance(info.exc_value, KeyboardInterrupt):
        return
    sys.__unraisablehook__(info)


def install() -> dict:
    """SIGTERM raises :class:`Terminated` in the main thread; SIGINT the usual
    KeyboardInterrupt (call from the main thread). Returns the previous handlers, for
    :func:`restore`."""
    import threading

    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        return {}
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    old["unraisablehook"] = sys.unraisablehook
    sys.unraisablehook = _unraisable
    _RECEIVED.clear()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return old


def restore(old: dict) -> None:
    """Put back the handlers :func:`install` replaced (a command run in-process, e.g. by tests)."""
    for sig, handler in old.items():
        if sig == "unraisablehook":
            sys.unraisablehook = handler
        elif handler is not None:
            signal.signal(sig, handler)


def ignore() -> None:
    """Ignore further SIGINT/SIGTERM (while cleaning up after the first)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for SIGINT (Ctrl-C), 143 for SIGTERM: 128 + the signal number."""
    return 128 + int(getattr(exc, "signal", signal.SIGINT))


def child_setup() -> None:
    """In a forked worker: ignore SIGINT, default SIGTERM, SIGTERM when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's stop_children still stops it
        return
    if os.getppid() != parent:  # the parent died before the call
        os._exit(0)


def stop_children(timeout: float = 1.0) -> int:
    """SIGTERM to every live child process of this one started by multiprocessing,
    SIGKILL to those still alive after ``timeout`` s; all are reaped. Returns how many
    were stopped."""
    import multiprocessing
    import time

    children = multiprocessing.active_children()
    for p in children:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    deadline = time.monotonic() + timeout
    for p in children:
        try:
            p.join(max(deadline - time.monotonic(), 0.0))
            if p.is_alive():
                p.kill()
                p.join(timeout)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass
    return len(children)
