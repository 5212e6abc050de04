"""The ``rosbags`` typestore of mbde: ROS 2 Humble types plus ``mbde_msgs`` types.

The ``mbde_msgs`` types are parsed from their ``.msg`` files (the single source of truth
shared with the rosidl build of ``mbde_msgs``), looked up in this order:

1. the repository checkout: ``<repo>/mbde_msgs/msg`` next to the ``mbde_core`` package;
2. the data files installed by ``setup.py``: ``<sys.prefix>/share/mbde/msg``;
3. every ``AMENT_PREFIX_PATH`` entry: ``<prefix>/share/mbde_msgs/msg`` (rosidl install)
   and ``<prefix>/share/mbde/msg`` (colcon install of this package).

The first directory holding ``MechanismState.msg`` wins; every ``*.msg`` file in it is
registered as ``mbde_msgs/msg/<FileStem>``. :func:`get_typestore` builds the store once
per process and returns the same object afterwards.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from mbde_core.errors import DataError

PACKAGE = "mbde_msgs"
MECHANISM_STATE = "mbde_msgs/msg/MechanismState"
PARTICLE_SET = "mbde_msgs/msg/ParticleSet"
_MARKER = "MechanismState.msg"


def msg_search_paths() -> list[Path]:
    """Candidate directories for the ``mbde_msgs`` ``.msg`` files, in lookup order."""
    paths = [Path(__file__).resolve().parents[2] / PACKAGE / "msg"]
    paths.append(Path(sys.prefix) / "share" / "mbde" / "msg")
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            paths.append(Path(prefix) / "share" / PACKAGE / "msg")
            paths.append(Path(prefix) / "share" / "mbde" / "msg")
    return paths


def find_msg_dir() -> Path:
    """The first directory of :func:`msg_search_paths` that holds the mbde_msgs files.

    Raises DataError (one line, listing the places searched) when there is none.
    """
    paths = msg_search_paths()
    for path in paths:
        if (path / _MARKER).is_file():
            return path
    raise DataError(
        "mbde_msgs message definitions not found; searched: " + ", ".join(str(p) for p in paths)
    )


def mbde_msg_definitions(msg_dir: Path | None = None) -> dict[str, str]:
    """Map ``mbde_msgs/msg/<Name>`` -> text of ``<Name>.msg`` for every file in msg_dir."""
    msg_dir = find_msg_dir() if msg_dir is None else Path(msg_dir)
    out = {}
    for path in sorted(msg_dir.glob("*.msg")):
        try:
            out[f"{PACKAGE}/msg/{path.stem}"] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{path}: cannot read message definition: {exc}") from None
    return out


def build_typestore(msg_dir: Path | None = None):
    """A new ``rosbags`` Typestore: ``Stores.ROS2_HUMBLE`` + the mbde_msgs types of msg_dir.

    Raises DataError if a definition cannot be parsed or clashes with a known type.
    """
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore as rosbags_store

    store = rosbags_store(Stores.ROS2_HUMBLE)
    typedefs = {}
    for name, text in mbde_msg_definitions(msg_dir).items():
        try:
            typedefs.update(get_types_from_msg(text, name))
        except Exception as exc:  # rosbags raises its own parser errors
            raise DataError(f"{name}: invalid message definition: {exc}".replace("\n", " ")) from None
    try:
        store.register(typedefs)
    except Exception as exc:
        raise DataError(f"cannot register mbde_msgs types: {exc}".replace("\n", " ")) from None
    return store


@functools.lru_cache(maxsize=1)
def get_typestore():
    """The process-wide typestore (built on first call by :func:`build_typestore`)."""
    return build_typestore()


def fielddefs(store) -> dict:
    """``typename -> (constants, fields)`` of a typestore (attribute name differs by version)."""
    defs = getattr(store, "fielddefs", None)
    return defs if defs is not None else store.FIELDDEFS
