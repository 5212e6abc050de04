"""One rule for every file or directory the ``mbde`` commands write (:class:`Output`).

- Nothing the command did not create is ever deleted or overwritten. ``--out`` equal to,
  inside or above one of the command's inputs (bag, config, mechanism, ...) is refused
  before anything is touched.
- An output that exists is replaced only with ``--force``, and only when it carries this
  tool's own marker of an earlier output of the same command: a folder holds the manifest
  ``.mbde-output.json`` (command, version, time, the files written; written last) and
  nothing else; a file has the sidecar ``.<name>.mbde-output.json`` with the SHA-256 of
  its content. A folder that merely looks like an output is never replaced.
- Atomic: everything is written into a hidden staging folder beside it
  (``.<name>.part-<pid>/<name>``, marked ``.mbde-incomplete``) and renamed into place
  when complete. An
  interrupted, failed or concurrent run leaves the previous output (or nothing) and at
  worst a hidden folder marked incomplete, never a complete-looking partial output.
- Two runs into the same output: the second is refused while the first holds the lock
  ``.<name>.lock`` (``fcntl.flock``).
- Outputs go where ``--out`` says; nothing is written into the source tree by default.
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import os
import shutil

from mbde_core import __version__
from mbde_core.errors import DataError
from mbde_core.rosio.bag_writer import INCOMPLETE_MARKER
from mbde_core.runs import stop

DEFAULT_STORAGE = "mcap"  # the rosbag2 default of ROS 2 Jazzy (the current LTS); sqlite3 on request
MANIFEST = ".mbde-output.json"
TOOL = "mbde"
_ABANDONED: list[str] = []  # what abandoned outputs left, for the command's last line


_STAGED: dict[str, str] = {}  # staging path -> the path the user gave, of this process's outputs


def abandoned() -> list[str]:
    """One phrase per output this process abandoned (not written, earlier output kept)."""
    return list(_ABANDONED)


def as_given(text: str) -> str:
    """``text`` (an error message) with the staging paths of this process's outputs
    replaced by the paths the user gave (``--out``)."""
    for tmp, given in _STAGED.items():
        text = text.replace(tmp, given)
    return text


def _real(path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def check_not_input(path, inputs, what: str = "--out") -> None:
    """DataError if ``path`` is, is inside or holds one of ``inputs`` (None entries skipped)."""
    out = _real(path)
    for given in inputs:
        if given is None or given == "":
            continue
        inp = _real(given)
        if out == inp:
            raise DataError(f"{what}: {path} is the input {given}; give another output path")
        if out.startswith(inp.rstrip(os.sep) + os.sep):
            raise DataError(f"{what}: {path} is inside the input {given}; give a path outside it")
        if inp.startswith(out.rstrip(os.sep) + os.sep):
            raise DataError(f"{what}: {path} holds the input {given}; give another output path")


def sidecar(path: str) -> str:
    """The marker file of a single-file output: ``.<name>.mbde-output.json`` beside it."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}{MANIFEST}")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _files(root: str) -> list[str]:
    """Every file and symlink under root, relative, sorted (the manifest's list)."""
    out = []
    for base, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            rel = os.path.relpath(os.path.join(base, name), root)
            if rel != MANIFEST:
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def earlier_output(path: str, command: str, kind: str) -> str | None:
    """None if ``path`` holds an earlier, unchanged output of ``mbde command`` (of ``kind``
    'dir' or 'file'), else why it may not be replaced."""
    if os.path.islink(path):
        return "is a symbolic link"
    if kind == "dir":
        if not os.path.isdir(path):
            return "is not a directory"
        doc = _read_json(os.path.join(path, MANIFEST))
        if doc is None or doc.get("tool") != TOOL:
            return f"carries no {MANIFEST} of an earlier mbde output"
        if doc.get("command") != command:
            return f"holds the output of `mbde {doc.get('command')}`, not of `mbde {command}`"
        extra = sorted(set(_files(path)) - set(doc.get("files") or []))
        if extra:
            return f"holds files mbde did not write ({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})"
        return None
    if not os.path.isfile(path):
        return "is not a regular file"
    doc = _read_json(sidecar(path))
    if doc is None or doc.get("tool") != TOOL or doc.get("file") != os.path.basename(path):
        return f"has no {os.path.basename(sidecar(path))} marker of an earlier mbde output"
    if doc.get("command") != command:
        return f"is the output of `mbde {doc.get('command')}`, not of `mbde {command}`"
    if doc.get("sha256") != _sha256(path):
        return "was changed since mbde wrote it"
    return None


class _Lock:
    """An exclusive, non-blocking lock file (fcntl.flock), removed when released."""

    def __init__(self, path: str):
        self.path, self.fd = path, None

    def acquire(self) -> int | None:
        """Take the lock; returns None, or the pid of the process holding it."""
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                return int(holder) if holder.isdigit() else -1
            try:  # the holder may have released and removed the file since we opened it
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                self.fd = fd
                return None
            os.close(fd)
        raise DataError(f"{self.path}: cannot take the lock")

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None


class Output:
    """One output of a command, a directory (``kind`` 'dir') or a file ('file'), written
    atomically (module doc). Use::

        with Output(args.out, "replay", force=args.force, inputs=[...]) as out:
            ...write into out.tmp...
            out.commit()          # renamed into place; only then print "wrote"

    Leaving the block without :meth:`commit` (an error, an interrupt, a failed run)
    removes the temporary sibling and leaves the previous output as it was.
    ``create``: make the temporary directory (False: the writer creates it, e.g. a bag).
    """

    def __init__(self, path, command: str, *, force: bool = False, inputs=(), kind: str = "dir",
                 what: str = "--out", create: bool = True):
        if kind not in ("dir", "file"):
            raise ValueError(f"kind {kind!r}")
        self.given = os.fspath(path)
        self.path = os.path.abspath(self.given)
        self.command, self.force, self.kind, self.what, self.create = command, force, kind, what, create
        self.inputs = [os.fspath(p) for p in inputs if p]
        self.parent, self.name = os.path.split(self.path.rstrip(os.sep) or os.sep)
        # the staging folder (hidden, marked incomplete) holds the output under its own
        # name, so what a writer derives from the name (a bag's storage file) is right
        self.stage = os.path.join(self.parent, f".{self.name}.part-{os.getpid()}")
        self.tmp = os.path.join(self.stage, self.name)
        self.replaces = False
        self.committed = False
        self._lock = _Lock(os.path.join(self.parent, f".{self.name}.lock"))
        self._made: list[str] = []  # parent folders this output created

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self) -> "Output":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.committed:
            self.abort()
        return False

    def open(self) -> "Output":
        """Check (inputs, lock, an earlier output), then make the temporary sibling."""
        if not self.name or self.name in (".", ".."):
            raise DataError(f"{self.what}: {self.given!r} is not a usable output path")
        check_not_input(self.path, self.inputs, self.what)
        here = _real(os.getcwd())
        if here == _real(self.path) or here.startswith(_real(self.path).rstrip(os.sep) + os.sep):
            raise DataError(f"{self.what}: {self.given} holds the current directory; give another output path")
        if self.kind == "file" and os.path.isdir(self.path):
            raise DataError(f"{self.what}: {self.given} is a directory; give a file name")
        if not os.path.isdir(self.parent):
            if os.path.lexists(self.parent):
                raise DataError(f"{self.what}: {self.parent} is not a directory")
            self._make_parents()
        try:
            holder = self._lock.acquire()
        except OSError as exc:
            raise DataError(f"{self.what}: cannot write into {self.parent} ({exc.strerror})") from None
        if holder is not None:
            raise DataError(f"{self.what}: {self.given} is being written by another mbde run"
                            + (f" (pid {holder})" if holder > 0 else "") + "; not writing into it")
        try:
            self._check_existing()
            self._clean_stale()
            os.mkdir(self.stage)
            _STAGED[self.tmp] = self.given
            mark_incomplete(self.stage, self.command)
            if self.kind == "dir" and self.create:
                os.mkdir(self.tmp)
                mark_incomplete(self.tmp, self.command)
        except OSError as exc:
            self.abort()
            raise DataError(f"{self.what}: cannot write into {self.parent} ({exc.strerror})") from None
        except BaseException:
            self.abort()
            raise
        return self

    def _check_existing(self) -> None:
        if not os.path.lexists(self.path):
            return
        if (self.kind == "dir" and os.path.isdir(self.path) and not os.path.islink(self.path)
                and not os.path.ismount(self.path) and not os.listdir(self.path)):
            self.replaces = True  # an empty folder (e.g. made for the output): nothing to lose
            return
        if not self.force:
            raise DataError(f"{self.what}: {self.given} exists (use --force to replace it)")
        why = earlier_output(self.path, self.command, self.kind)
        if why is not None:
            raise DataError(f"{self.what}: {self.given} {why}; not replacing it (--force replaces only an earlier "
                            f"output of `mbde {self.command}`)")
        self.replaces = True

    def _make_parents(self) -> None:
        missing, p = [], self.parent
        while p and not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            except OSError as exc:
                raise DataError(f"{self.what}: cannot create folder {d} ({exc.strerror})") from None
            self._made.append(d)

    def _clean_stale(self) -> None:
        """Remove staging folders of this output left by runs that were killed."""
        prefix = f".{self.name}.part-"
        for entry in os.listdir(self.parent):
            pid = entry[len(prefix):]
            full = os.path.join(self.parent, entry)
            if (entry.startswith(prefix) and pid.isdigit() and not _alive(int(pid)) and os.path.isdir(full)
                    and not os.path.islink(full) and os.path.isfile(os.path.join(full, INCOMPLETE_MARKER))):
                shutil.rmtree(full, ignore_errors=True)

    def commit(self, info: dict | None = None) -> None:
        """Mark the temporary output complete (manifest last) and rename it into place
        (not after a Ctrl-C or SIGTERM, even one whose exception was lost on the way)."""
        if self.committed:
            return
        stop.check()
        doc = {"tool": TOOL, "command": self.command, "version": _version(),
               "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               **(info or {})}
        if self.kind == "dir":
            marker = os.path.join(self.tmp, INCOMPLETE_MARKER)
            if os.path.exists(marker):
                os.remove(marker)
            doc["files"] = _files(self.tmp)
            _write_json(os.path.join(self.tmp, MANIFEST), doc)
            try:
                if self.replaces:
                    os.rename(self.path, os.path.join(self.stage, ".earlier"))
                os.rename(self.tmp, self.path)
            except OSError as exc:
                raise DataError(f"{self.what}: cannot put {self.given} in place ({exc.strerror})") from None
        else:
            doc.update(file=self.name, sha256=_sha256(self.tmp))
            side_tmp = sidecar(self.tmp)
            _write_json(side_tmp, doc)
            try:
                os.replace(self.tmp, self.path)
                os.replace(side_tmp, sidecar(self.path))
            except OSError as exc:
                raise DataError(f"{self.what}: cannot put {self.given} in place ({exc.strerror})") from None
        self.committed = True
        shutil.rmtree(self.stage, ignore_errors=True)
        self._lock.release()

    def abort(self) -> None:
        """Remove what this run wrote (the temporary sibling); keep the previous output."""
        if self._lock.fd is not None:
            _ABANDONED.append(f"{self.given} not written" + (" (the earlier output is kept)" if self.replaces else ""))
        if self._lock.fd is not None and os.path.isdir(self.stage) and not os.path.islink(self.stage):
            shutil.rmtree(self.stage, ignore_errors=True)
        self._lock.release()
        for d in reversed(self._made):
            try:
                os.rmdir(d)
            except OSError:
                break
        self._made = []

    # -- paths ------------------------------------------------------------------------------
    def shown(self, path) -> str:
        """A path under the staged output as the user will find it (under ``--out``)."""
        p = os.fspath(path)
        for tmp in (self.tmp, os.path.abspath(self.tmp)):
            if p == tmp or p.startswith(tmp + os.sep):
                return self.given + p[len(tmp):]
        return p


def mark_incomplete(folder: str, command: str) -> None:
    """Mark ``folder`` as an output being written (removed when it is complete)."""
    _write_json(os.path.join(folder, INCOMPLETE_MARKER),
                {"tool": TOOL, "command": command, "pid": os.getpid(), "note": "incomplete: being written, "
                 "or its writer was interrupted or failed"})


def _write_json(path: str, doc: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _version() -> str:
    return __version__
