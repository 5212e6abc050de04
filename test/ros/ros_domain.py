"""A ROS_DOMAIN_ID per test and the environment that keeps DDS on loopback (test/ros).

``claim_domain_id``: an id in 1..101 that no other test of any pytest process on this
machine holds (an ``flock`` on a file in the temporary folder); ``ros_environment``:
that domain, ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, no static peers, Fast DDS.
"""
from __future__ import annotations

import fcntl
import os
import random
import tempfile
from pathlib import Path
from typing import Mapping

# 1..101: not the default 0, and (on Linux) below the ids whose DDS ports fall into the
# ephemeral port range.
DOMAIN_IDS = range(1, 102)
RMW = "rmw_fastrtps_cpp"
# Variables that would take DDS off loopback or off this test's domain if inherited.
STALE_VARS = ("ROS_LOCALHOST_ONLY", "ROS_DISCOVERY_SERVER", "ROS_SUPER_CLIENT",
              "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE",
              "RMW_FASTRTPS_USE_QOS_FROM_XML")


class DomainClaim:
    """A ROS_DOMAIN_ID held exclusively (across processes) until ``release()``."""

    def __init__(self, domain_id: int, lock_file):
        self.domain_id = domain_id
        self._lock_file = lock_file

    def release(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


def claim_domain_id(rng: random.Random | None = None) -> DomainClaim:
    """Claim a random free domain id in DOMAIN_IDS (non-blocking flock per id)."""
    rng = rng or random.SystemRandom()
    ids = list(DOMAIN_IDS)
    rng.shuffle(ids)
    lock_dir = Path(tempfile.gettempdir())
    for domain_id in ids:
        f = open(lock_dir / f"mbde-ros-domain-{domain_id}.lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return DomainClaim(domain_id, f)
    raise RuntimeError(f"all ROS domain ids {DOMAIN_IDS.start}..{DOMAIN_IDS.stop - 1} are in use")


def ros_environment(domain_id: int, log_dir: os.PathLike | str, base: Mapping[str, str] | None = None) -> dict:
    """Environment for ROS processes of one test: its domain, loopback-only discovery.

    ``base`` defaults to ``os.environ`` (which, in .venv-ros, already carries the wheels'
    LD_LIBRARY_PATH and the flag that stops their bootstrap from re-executing children).
    """
    env = dict(os.environ if base is None else base)
    for stale in STALE_VARS:
        env.pop(stale, None)
    env.update(
        ROS_DOMAIN_ID=str(domain_id),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_STATIC_PEERS="",
        RMW_IMPLEMENTATION=RMW,
        ROS_LOG_DIR=str(log_dir),
        PYTHONUNBUFFERED="1",
        RCUTILS_COLORIZED_OUTPUT="0",
    )
    return env
