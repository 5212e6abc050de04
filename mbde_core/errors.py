"""User-facing errors: one line, no traceback, exit status 2.

A :class:`ConfigError` names the file, the key path inside it (``planar_bodies[2].mass``)
and what is wrong; the command line prints ``str(err)`` and exits with status 2.
"""
from __future__ import annotations


class MbdeError(Exception):
    """Base class of errors that are reported to users as one line (exit status 2)."""

    exit_status = 2


class ConfigError(MbdeError):
    """A configuration file is invalid.

    Parameters
    ----------
    file: path of the offending file (or a label such as ``<string>``).
    path: key path inside the document, e.g. ``planar_bodies[2].mass`` ('' for the root).
    message: what is wrong, one short sentence.
    """

    def __init__(self, file: str, path: str, message: str):
        self.file = str(file)
        self.path = path
        self.message = message
        super().__init__(self.__str__())

    def __str__(self) -> str:  # one line, always
        where = f"{self.file}: {self.path}: " if self.path else f"{self.file}: "
        return (where + self.message).replace("\n", " ")


class DataError(MbdeError):
    """Input data (trajectory file, bag, measurement stream) is missing or corrupt."""


def keypath(*parts) -> str:
    """Join key-path parts: keypath('planar_bodies', 2, 'mass') -> 'planar_bodies[2].mass'."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif out:
            out += "." + str(p)
        else:
            out = str(p)
    return out
