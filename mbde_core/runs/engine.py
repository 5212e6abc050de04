"""Run many independent tasks serially, on local processes or on a Dask distributed cluster.

One engine for every Monte Carlo loop of mbde (``mbde replay`` over estimators and bags,
``mbde bench accuracy``, ``mbde bench pf``): the caller gives a module-level function
``fn(shared, task) -> value``, a list of tasks (small, picklable; every random seed is
inside the task) and optionally one ``shared`` object (e.g. the simulated ground truths)
that every task reads. Because a task's result depends on (shared, task) only, the three
backends give identical results; outcomes come back in task order whatever the order in
which they finish.

Backends (:func:`run_tasks`):

- ``jobs == 1`` (or one task): in this process, one task after the other (the reference);
- ``jobs > 1``: a pool of local worker processes (``fork``: ``shared`` is inherited, not
  copied or pickled);
- ``scheduler="tcp://HOST:PORT"``: a running Dask distributed scheduler (the optional
  extra ``pip install 'mbde[cluster]'``); ``shared`` is sent once to every worker
  (``Client.scatter(broadcast=True)``) and each task is one ``Client.submit``. Workers
  need the same mbde installed, and paths in tasks (bags) must be readable by them.

A task that raises does not stop the others: its outcome carries ``error`` ("Type:
message (file:line)") and ``value`` None; a crashed worker process or a lost Dask worker
is reported the same way for the tasks it held. A progress bar (tqdm, on stderr when it
is a terminal) counts finished tasks.
"""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from mbde_core.errors import DataError
from mbde_core.runs.stop import child_setup

CLUSTER_HINT = "pip install 'mbde[cluster]'"
CONNECT_TIMEOUT = "20s"  # to reach the scheduler


@dataclass
class Outcome:
    """Result of one task: ``value`` or ``error`` (one line), with the worker that ran it."""

    index: int
    value: Any = None
    error: str | None = None
    worker: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def describe_error(exc: BaseException) -> str:
    """'Type: message (file:line)' of an exception, the line where it was raised."""
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        frame = tb[-1]
        where = f" ({os.path.basename(frame.filename)}:{frame.lineno})"
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return (text[:400] + where).strip()


def call_task(fn: Callable, shared, task, index: int) -> Outcome:
    """Run one task and wrap its value or its exception (every backend goes through here)."""
    host = f"{os.uname().nodename}:{os.getpid()}"
    try:
        return Outcome(index, fn(shared, task), None, host)
    except Exception as exc:  # noqa: BLE001 - a failed task is reported, the others go on
        return Outcome(index, None, describe_error(exc), host)


def run_tasks(fn: Callable, tasks: Sequence, shared=None, *, jobs: int | None = None, scheduler: str | None = None,
              label: str = "tasks", progress: bool | None = None, on_outcome: Callable[[Outcome], None] | None = None,
              parent_busy: bool = False, on_start: Callable[[], None] | None = None) -> list[Outcome]:
    """Run ``fn(shared, task)`` for every task; outcomes in task order (see module doc).

    jobs: local processes (None: CPU count); ignored with ``scheduler``. progress: show a
    tqdm bar (None: when stderr is a terminal). on_outcome(outcome) is called in the
    calling process as each task finishes (e.g. to write its part of an output).
    parent_busy: the caller works meanwhile in another thread (e.g. merging outputs), so
    with jobs > 1 even a single task runs in a worker process. on_start() is called once
    the local worker processes are forked (before the first task runs otherwise): a
    thread started then is not inherited by them.
    """
    tasks = list(tasks)
    out: list[Outcome | None] = [None] * len(tasks)
    if not tasks:
        return []
    bar = _bar(len(tasks), label, progress)
    outcomes = _backend(fn, tasks, shared, jobs, scheduler, parent_busy, on_start)
    try:
        for outcome in outcomes:
            out[outcome.index] = outcome
            if on_outcome is not None:
                on_outcome(outcome)
            if bar is not None:
                bar.update(1)
                if not outcome.ok:
                    bar.set_postfix_str(f"{sum(o is not None and not o.ok for o in out)} failed")
    finally:
        outcomes.close()  # an interrupted run ends its workers now (see _processes)
        if bar is not None:
            bar.close()
    return out  # type: ignore[return-value]


def default_jobs() -> int:
    """Local worker processes by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def failures(outcomes: Sequence[Outcome], describe: Callable[[int], str] = str) -> list[str]:
    """One line per failed task: '<describe(index)>: <error>'."""
    return [f"{describe(o.index)}: {o.error}" for o in outcomes if not o.ok]


# ------------------------------------------------------------------------------ backends
def _backend(fn, tasks, shared, jobs, scheduler, parent_busy: bool = False, on_start=None) -> Iterator[Outcome]:
    if scheduler:
        return _started(_dask(fn, tasks, shared, scheduler), on_start)
    jobs = default_jobs() if jobs is None else int(jobs)
    if jobs < 1:
        raise DataError(f"--jobs must be >= 1, got {jobs}")
    if jobs == 1 or (len(tasks) == 1 and not parent_busy):
        return _started(_serial(fn, tasks, shared), on_start)
    return _processes(fn, tasks, shared, min(jobs, len(tasks)), on_start)


def _started(outcomes: Iterator[Outcome], on_start) -> Iterator[Outcome]:
    if on_start is not None:
        on_start()
    yield from outcomes


def _serial(fn, tasks, shared) -> Iterator[Outcome]:
    for i, task in enumerate(tasks):
        yield call_task(fn, shared, task, i)


_SHARED: dict[int, Any] = {}  # token -> shared object, inherited by forked workers


def _forked_call(fn, token, task, index):
    return call_task(fn, _SHARED[token], task, index)


def _processes(fn, tasks, shared, workers: int, on_start=None) -> Iterator[Outcome]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    token = id(shared) ^ os.getpid()
    _SHARED[token] = shared
    try:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        if method is None:  # no fork (Windows): the shared object travels with every task
            pool = ProcessPoolExecutor(workers, initializer=child_setup)
            futures = {pool.submit(call_task, fn, shared, t, i): i for i, t in enumerate(tasks)}
        else:
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method), initializer=child_setup)
            futures = {pool.submit(_forked_call, fn, token, t, i): i for i, t in enumerate(tasks)}
        if on_start is not None:  # the fork context starts every worker at the first submit
            on_start()
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except Exception as exc:  # noqa: BLE001 - the worker process died
                    yield Outcome(futures[fut], None, f"worker process failed: {describe_error(exc)}")
        except BaseException:  # interrupted (Ctrl-C, SIGTERM) or the caller stopped: end the workers now
            _terminate(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        _SHARED.pop(token, None)


def _terminate(pool) -> None:
    """SIGTERM to the pool's worker processes (a task may run for minutes), reaped by the
    pool's shutdown; the workers ignore SIGINT and die on SIGTERM (:func:`child_setup`)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):
            pass


def connect(scheduler: str):
    """A distributed.Client on ``scheduler`` (DataError if the extra is missing or it fails)."""
    try:
        from distributed import Client
    except ImportError:
        raise DataError(f"--scheduler needs Dask distributed: {CLUSTER_HINT}") from None
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, ValueError ...
        raise DataError(f"--scheduler {scheduler}: cannot connect ({describe_error(exc)})") from None


def _dask(fn, tasks, shared, scheduler) -> Iterator[Outcome]:
    from distributed import as_completed

    client = scheduler if not isinstance(scheduler, str) else connect(scheduler)
    own = isinstance(scheduler, str)
    try:
        shared_f = client.scatter(shared, broadcast=True, hash=False) if shared is not None else None
        futures = {client.submit(call_task, fn, shared_f, t, i, pure=False): i for i, t in enumerate(tasks)}
        for fut in as_completed(list(futures), loop=client.loop):
            try:
                yield fut.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker, CancelledError, lost connection
                yield Outcome(futures[fut], None, f"dask: {describe_error(exc)}")
    finally:
        if own:
            client.close()


def _bar(total: int, label: str, progress: bool | None):
    enabled = _isatty(sys.stderr) if progress is None else bool(progress)
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="task", file=sys.stderr, dynamic_ncols=True)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
