"""The estimates bag of a replay: the estimators' part files merged in time order.

Each streamed run writes its messages into a part file (:mod:`mbde_core.replay.encode`)
in time order; :func:`merge_parts` merges them by (time, kind, run, position): at equal
times the estimates of every estimator come before the particle sets, in run order.
Topics are added to the bag as the part files declare them; the latched topics (the
description, and when the runs carry TF the sensor mounts on /tf_static and the model's
markers, :func:`~mbde_core.replay.viewables.static_messages`) come first.

:class:`LiveMerge` runs :func:`merge_parts` in a thread of the replay's parent process
while the estimators still run in worker processes: it follows the part files as they
grow (:func:`~mbde_core.replay.encode.read_part` with ``follow``), so the bag is written
alongside the filters instead of after them, on the core the parent would leave idle.
A run's part ends with its END record, or when its task is reported finished
(:meth:`LiveMerge.ended`: a failed task's messages so far are kept).
"""
from __future__ import annotations

import heapq
import os
import tempfile
import threading

from mbde_core.replay.encode import read_part
from mbde_core.replay.viewables import static_messages
from mbde_core.rosio.bag_writer import BagWriter
from mbde_core.rosio.convert import STRING, string_msg
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.tf import TF_TOPIC

BATCH = 4096  # messages per bag write


class Cancelled(Exception):
    """The merge was cancelled (:meth:`LiveMerge.cancel`)."""


def merge_parts(path: str, source, runs: list[tuple[str, str]], storage: str = "sqlite3",
                description: str | None = None, follow=None, cancelled=None) -> dict:
    """Write the estimates bag ``path`` from the part files of runs [(name, part path)].

    follow: None (the part files are complete) or a callable follow(k) telling whether
    run k's writer has ended (see :func:`read_part`). cancelled: None or a callable; when
    it returns true the merge stops (:class:`Cancelled`) at the next batch. Streams:
    memory does not grow with the bag. Returns {topic: messages written}."""
    f = RosbagsFactory()
    with BagWriter(path, storage) as bag:
        m = _Merger(bag, runs, follow)
        m.cancelled = cancelled
        m.prime()  # every run's leading declarations are read
        _write_header(bag, f, source, runs, description, TF_TOPIC in m.declared)
        m.run()
        return dict(bag.counts)


def _write_header(bag, f, source, runs, description, viewable: bool) -> None:
    """The latched messages at the bag's start: description; TF static and model markers."""
    if description:
        bag.add_topic("/mbde/description", STRING, "transient_local")
        bag.write("/mbde/description", source.start, string_msg(f, description))
    if viewable:  # streamed runs carry TF
        for topic, typename, msg in static_messages(f, source, [name for name, _ in runs]):
            bag.add_topic(topic, typename, "transient_local")
            bag.write(topic, source.start, msg)


class _Merger:
    """The part files of runs merged into an open bag."""

    def __init__(self, bag, runs, follow):
        self.bag, self.runs = bag, list(runs)
        self.names: list[dict] = [{} for _ in self.runs]  # per run: topic index -> topic name
        self.declared: dict[str, str] = {}
        self.added: set = set()
        self.streams = [_tagged(read_part(part, self._on_declare(k), None if follow is None else (lambda k=k: follow(k))), k)
                        for k, (_, part) in enumerate(self.runs)]
        self.heads = None
        self.cancelled = None

    def _on_declare(self, k):
        def on_declare(index, topic, typename):
            self.names[k][index] = topic
            self.declared.setdefault(topic, typename)
        return on_declare

    def prime(self) -> None:
        self.heads = [next(s, None) for s in self.streams]

    def _topic(self, run: int, index: int) -> str:
        topic = self.names[run][index]
        if topic not in self.added:  # /tf is shared by the estimators
            self.bag.add_topic(topic, self.declared[topic])
            self.added.add(topic)
        return topic

    def run(self) -> None:
        if self.heads is None:
            self.prime()
        merged = heapq.merge(*[_chain(h, s) for h, s in zip(self.heads, self.streams)])
        batch = []
        for t_ns, _, run, _, index, data in merged:
            batch.append((self._topic(run, index), t_ns, data))
            if len(batch) >= BATCH:
                if self.cancelled is not None and self.cancelled():
                    raise Cancelled()
                self.bag.write_raw_many(batch)
                batch = []
        self.bag.write_raw_many(batch)
        for k in range(len(self.runs)):  # topics declared without messages (e.g. an empty run)
            for index in sorted(self.names[k]):
                self._topic(k, index)


def _tagged(records, run: int):
    for seq, (t_ns, kind, topic, data) in enumerate(records):
        yield t_ns, kind, run, seq, topic, data


def _chain(head, stream):
    if head is not None:
        yield head
        yield from stream


class LiveMerge:
    """:func:`merge_parts` in a thread while the runs write their part files (module doc).

    The thread must not import anything (a process forked meanwhile, e.g. the plot
    renderer, would inherit a held module lock and hang): what opening and writing the
    bag imports is imported here first, in the calling thread, by writing a throwaway
    bag of the same storage. The bag itself is opened in the thread (sqlite3
    connections belong to their thread); :meth:`start` after the workers are forked."""

    def __init__(self, path: str, source, runs: list[tuple[str, str]], storage: str, description: str | None):
        self.runs = list(runs)
        self._ended = [threading.Event() for _ in self.runs]
        self._cancel = threading.Event()
        self.counts: dict | None = None
        self.error: BaseException | None = None
        with tempfile.TemporaryDirectory() as tmp:  # warm up: the imports of writing a bag
            merge_parts(os.path.join(tmp, "bag"), source, [], storage, description or "-")
            with BagWriter(os.path.join(tmp, "bag2"), storage) as bag:
                _write_header(bag, RosbagsFactory(), source, self.runs, None, True)
        self._thread = threading.Thread(target=self._run, args=(path, source, storage, description),
                                        name="mbde-replay-merge", daemon=True)

    def start(self) -> None:
        """Start merging (after the worker processes are forked)."""
        if self._thread.ident is None:
            self._thread.start()

    def _run(self, path, source, storage, description):
        try:
            self.counts = merge_parts(path, source, self.runs, storage, description,
                                      follow=lambda k: self._ended[k].is_set() or self._cancel.is_set(),
                                      cancelled=self._cancel.is_set)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in join()
            self.error = exc

    def ended(self, name: str) -> None:
        """Run ``name``'s task has finished (successfully or not)."""
        for k, (n, _) in enumerate(self.runs):
            if n == name:
                self._ended[k].set()

    def cancel(self, timeout: float = 1.0) -> None:
        """Stop merging (the bag is abandoned: its run was interrupted or failed); waits at
        most ``timeout`` s for the thread (a daemon)."""
        self._cancel.set()
        for e in self._ended:
            e.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def join(self) -> dict:
        """Wait for the bag (after every run has ended); re-raise the merge's error."""
        for e in self._ended:
            e.set()
        self.start()
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.counts or {}
