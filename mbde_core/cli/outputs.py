"""One rule for every file or directory the ``mbde`` commands write.

- An output that exists is never replaced silently: the command stops with one line
  (exit 2) unless ``--force`` is given.
- ``--force`` replaces a file, or a directory that holds what the same kind of command
  writes (a rosbag2 bag, a replay, a benchmark's results) or nothing; it never deletes a
  directory of anything else (``--out ~ --force`` is refused).
- Outputs go where ``--out`` says; nothing is written into the source tree by default.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable

from mbde_core.errors import DataError

BAG_FILES = (".db3", ".mcap", ".db3-shm", ".db3-wal")
DEFAULT_STORAGE = "mcap"  # the rosbag2 default of ROS 2 Jazzy (the current LTS); sqlite3 on request


def check_output_file(path: str, force: bool, what: str = "--out") -> None:
    """Refuse to replace an existing file without ``force``; never replace a directory."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise DataError(f"{what}: {path} is a directory; give a file name")
    if os.path.lexists(path) and not force:
        raise DataError(f"{what}: {path} exists (use --force to replace it)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise DataError(f"{what}: folder {parent} does not exist")


def is_bag_dir(entries: list[str]) -> bool:
    """A rosbag2 bag directory: metadata.yaml and storage files only."""
    return "metadata.yaml" in entries and all(e == "metadata.yaml" or e.endswith(BAG_FILES) for e in entries)


def prepare_output_dir(path: str, force: bool, kind: str, looks_like: Callable[[str, list[str]], bool],
                       what: str = "--out", create: bool = True) -> None:
    """Make ``path`` a fresh directory for an output of ``kind`` ('bag', 'replay', ...).

    An existing directory is replaced only with ``force``, and only when it is empty or
    ``looks_like(path, entries)`` says it holds an earlier output of that kind. ``create``: make the directory (else leave it absent, for
    writers that create it themselves, e.g. a bag writer).
    """
    path = os.fspath(path)
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise DataError(f"{what}: {path} exists and is not a directory; not replacing it")
        if not force:
            raise DataError(f"{what}: {path} exists (use --force to replace it)")
        entries = os.listdir(path)
        if entries and not looks_like(path, entries):
            raise DataError(f"{what}: {path} exists and does not hold an earlier {kind}; not replacing it")
        shutil.rmtree(path)
    if create:
        os.makedirs(path)


def bag_like(path: str, entries: list[str]) -> bool:
    return is_bag_dir(entries)


def results_like(*markers: str) -> Callable[[str, list[str]], bool]:
    """looks_like for result folders: one of ``markers`` present, or only files (no
    sub-folders other than bags) written by a command."""

    def check(path: str, entries: list[str]) -> bool:
        if any(m in entries for m in markers):
            return True
        for e in entries:
            full = os.path.join(path, e)
            if os.path.isdir(full) and not is_bag_dir(os.listdir(full)):
                return False
        return True

    return check
