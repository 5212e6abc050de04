"""Compiled modules generated per mechanism (:mod:`numba_kernels`, :mod:`simd_kernels`):
import numba lazily, write a module's text to the cache folder, import it, and tell
whether numba's machine code for it is on disk.

A module text is written under a name keyed by the SHA-256 of the text and numba's version
(``MBDE_CACHE_DIR``, else ``$XDG_CACHE_HOME/mbde``, else ``~/.cache/mbde``; subfolder
``numba``; a temporary folder if that one is not writable), imported from there, and every
function in it is ``@njit(cache=True)``: numba stores the machine code next to it, so only
the first use of a mechanism on a machine compiles. Compiled modules are shared per process
by key.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

LOCK = threading.Lock()
MODULES: dict[str, object] = {}
SERIAL_MAX = 2048  # particle sets smaller than this are stepped in the calling thread alone
_NUMBA = None  # the numba module, False if not importable, None before the first try


def numba():
    """The numba module, or None if it cannot be imported."""
    global _NUMBA
    if _NUMBA is None:
        try:
            import numba as nb

            if "NUMBA_THREADING_LAYER" not in os.environ:
                nb.config.THREADING_LAYER = "workqueue"  # read at the first parallel launch
            _NUMBA = nb
        except ImportError:
            _NUMBA = False
    return _NUMBA or None


def cache_dir() -> str:
    base = os.environ.get("MBDE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mbde")
    return os.path.join(base, "numba")


def folders() -> list[str]:
    """Where module texts are written (the first writable one) and looked for."""
    return [cache_dir(), os.path.join(tempfile.gettempdir(), f"mbde-{os.getuid()}", "numba")]


def write(folder: str, name: str, text: str) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # atomic: concurrent processes write the same text
    return path


def module_key(text: str, numba_version: str, prefix: str = "mbde_nb_") -> str:
    """The module (and cache file) name of a module text for a numba version."""
    return prefix + hashlib.sha256((text + numba_version).encode()).hexdigest()[:24]


def version() -> str | None:
    """numba's version without importing it (unless it is imported already)."""
    if _NUMBA:
        return _NUMBA.__version__
    if _NUMBA is False:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version as dist_version

        return dist_version("numba")
    except (ImportError, PackageNotFoundError):
        return None


def import_text(key: str, text: str):
    """The module of ``text`` named ``key`` (written to the cache folder and imported once
    per process)."""
    with LOCK:
        mod = MODULES.get(key)
        if mod is None:
            try:
                path = write(cache_dir(), key, text)
            except OSError:
                path = write(folders()[1], key, text)
            spec = importlib.util.spec_from_file_location(key, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[key] = mod  # numba's disk cache re-imports the module by name
            spec.loader.exec_module(mod)
            MODULES[key] = mod
    return mod


def on_disk(key: str, funcs, modules=None, where=None) -> bool:
    """The module ``key`` is imported here (in ``modules``, default MODULES), or its text and
    numba's index of each of ``funcs`` are in a cache folder (``where``, default
    :func:`folders`): using it costs a load, not a compile."""
    if key in (MODULES if modules is None else modules):
        return True
    for folder in (folders() if where is None else where):
        pyc = os.path.join(folder, "__pycache__")
        if os.path.exists(os.path.join(folder, key + ".py")) and os.path.isdir(pyc):
            names = os.listdir(pyc)
            if all(any(f.startswith(f"{key}.{fn}-") and f.endswith(".nbi") for f in names) for fn in funcs):
                return True
    return False


def memo_on_disk(K, attr: str, key, test) -> bool:
    """``test()`` (is a compiled module on disk?) remembered on the mechanism kernels ``K``
    under ``K.<attr>[key]``: the disk is looked at once per kernels, key and process (a
    small particle set asks at every step)."""
    memo = getattr(K, attr, None)
    if memo is None:
        memo = {}
        setattr(K, attr, memo)
    if key not in memo:
        memo[key] = bool(test())
    return memo[key]
