"""Finding shipped config files: repository checkout, pip install or colcon install.

A relative path given to a node (``estimators/default.yaml``, ``scenarios/pf_sim.yaml``)
is looked up, in order, in the current directory and in every ``config/`` folder of the
package: the checkout's ``config/``, ``<sys.prefix>/share/mbde/config`` (pip) and
``<prefix>/share/mbde/config`` for each prefix of ``AMENT_PREFIX_PATH`` (colcon).
"""
from __future__ import annotations

import os
import sys

from mbde_core.errors import ConfigError

PACKAGE = "mbde"


def config_dirs() -> list[str]:
    """Existing package config folders, in search order."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.normpath(os.path.join(here, os.pardir, os.pardir, "config")),
                  os.path.join(sys.prefix, "share", PACKAGE, "config")]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(os.path.join(prefix, "share", PACKAGE, "config"))
    out = []
    for c in candidates:
        if os.path.isdir(c) and c not in out:
            out.append(c)
    return out


def resolve(path: str, what: str = "file") -> str:
    """Absolute path of an existing file (see the module docstring); ConfigError if none."""
    p = os.path.expanduser(path)
    if os.path.isabs(p):
        if os.path.isfile(p):
            return p
        raise ConfigError(path, "", f"{what} not found")
    tried = [os.path.abspath(p)]
    if os.path.isfile(tried[0]):
        return tried[0]
    for base in config_dirs():
        cand = os.path.normpath(os.path.join(base, p))
        tried.append(cand)
        if os.path.isfile(cand):
            return cand
    raise ConfigError(path, "", f"{what} not found (looked in: {', '.join(tried)})")


def config_path(*parts: str) -> str:
    """The package file ``config/<parts...>``: the first config folder (:func:`config_dirs`)
    that holds it, else its path under the first folder (for a ConfigError to name)."""
    dirs = config_dirs()
    for base in dirs:
        path = os.path.normpath(os.path.join(base, *parts))
        if os.path.exists(path):
            return path
    here = os.path.dirname(os.path.abspath(__file__))
    first = dirs[0] if dirs else os.path.normpath(os.path.join(here, os.pardir, os.pardir, "config"))
    return os.path.normpath(os.path.join(first, *parts))
