"""Shared fixtures: repository paths and shipped mechanisms."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(REPO, os.pardir, "shared"))
MECH_DIR = os.path.join(REPO, "config", "mechanisms")
MSC_DIR = os.path.join(SHARED, "reference", "msc-adams-fourbar")


def mech_path(name: str) -> str:
    return os.path.join(MECH_DIR, name + ".yaml")


def run_mbde(*args, cwd=None, timeout=600):
    """Run the mbde command line in a subprocess; returns CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", "mbde_core.cli", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or REPO, timeout=timeout,
    )


@pytest.fixture
def split_at_any_size(monkeypatch):
    """The thread ranges split at any size (what the thread-count tests check), not only above
    the break-even of a hand-off (:func:`mbde_core.engine.thread_pools.parts`)."""
    from mbde_core.engine import thread_pools  # lazy: only the thread tests need it

    monkeypatch.setattr(thread_pools, "SPLIT_MIN_NS", 0)


@pytest.fixture(scope="session")
def fourbar():
    from mbde_core.model.mechanism import load_mechanism

    return load_mechanism(mech_path("fourbar"))


@pytest.fixture(scope="session")
def mechanisms():
    from mbde_core.model.mechanism import load_mechanism

    names = ["fourbar", "fourbar_pf", "fivebar", "slider_crank", "pendulum"]
    return {n: load_mechanism(mech_path(n)) for n in names}


COUPLER_GYRO = "- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 0.02}}"


def fd(f, x, eps=1e-6):
    """Central finite differences of f at x: d f / d x[k] in the last axis, step ``eps``."""
    import numpy as np

    cols = []
    for k in range(x.size):
        dx = np.zeros_like(x)
        dx[k] = eps
        cols.append((f(x + dx) - f(x - dx)) / (2 * eps))
    return np.stack(cols, axis=-1)


def random_states(m, N, seed):
    """(q, qd) (N, n) of N assembled states near the mechanism's q0 (z +/- 0.1, zd +/- 2)."""
    import numpy as np

    from mbde_core.engine import kinematics

    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-0.1, 0.1, (N, m.dof))
    q, ok = kinematics.solve_position(m, z, np.broadcast_to(m.q0, (N, m.n)))
    assert ok.all()
    return q, kinematics.velocity(m, q, rng.uniform(-2, 2, (N, m.dof)))


def in_forked_child(fn, timeout: float = 60.0):
    """fn()'s result computed in a forked child process (sent back through a pipe); the
    child is killed and the test fails if it does not answer within ``timeout`` s (a
    hang, e.g. a parent's thread pool copied into the child)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        send.send(fn())
        send.close()

    proc = ctx.Process(target=child)
    proc.start()
    done = recv.poll(timeout)
    if not done:
        proc.kill()
    assert done, f"the forked child did not answer within {timeout:g} s"
    out = recv.recv()
    proc.join(30)
    return out


def load_options(path, names) -> dict:
    """{name: its validated options as plain values} from an estimator config file (None:
    the defaults): the pipeline's load (mbde_core.estimators.configure), as dicts a test
    may edit and hand to make_estimator (which validates and resolves them)."""
    from mbde_core.estimators.configure import load

    return {n: s.as_dict() for n, s in load(path, names).items()}
