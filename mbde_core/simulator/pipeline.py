"""Two-process simulation: the truth integration in a child, sampling and writing here.

``mbde simulate`` spends about half of its time in the ground-truth integration
(:func:`mbde_core.simulator.core.truth_states`: ALI3-P at 1 ms) and half in sampling the
sensors, building the snapshots and serialising the bag. The two halves only meet in the
sampled true states, so with a second core they run side by side: a forked child
integrates and sends the states a block at a time (numpy arrays of ``BLOCK`` rows through
a pipe, at most ``AHEAD`` blocks in flight, so memory stays bounded however long the
run), and the parent turns them into events with :func:`~core.sample_events`, exactly
as the serial :func:`~core.simulate` does. The events are the same objects with the same
values (same code, same inputs; tested), only the time they take differs.

The child sends ``("block", k, tau, q, qd, qdd, values, effort)`` messages (values,
effort: the true inputs at every sampled step), then
``("end",)``, or ``("error", message)`` for a SimulationError (re-raised here with the
same message) or another exception (re-raised as a SimulationError naming it).
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Callable, Iterator

import numpy as np

from mbde_core.runs.stop import child_setup
from mbde_core.simulator.core import SimulationError, sample_events, simulate, truth_states

BLOCK = 512            # sampled states per message
AHEAD = 8              # blocks the child may run ahead of the parent (bounded memory)
MIN_STEPS = 20000      # shorter runs are simulated in one process (fork costs ~50 ms)


def pipelined_events(scenario, progress: Callable[[int, int], None] | None = None, *,
                     processes: int | None = None) -> Iterator:
    """The events of :func:`core.simulate`, with the integration in a forked child when
    there is a second core (``processes`` None: ``os.cpu_count() > 1`` and a run of at
    least ``MIN_STEPS`` steps; 1: serial; 2: always the child)."""
    if processes is None:
        processes = 2 if (os.cpu_count() or 1) > 1 and scenario.n_steps >= MIN_STEPS else 1
    if processes < 2 or "fork" not in mp.get_all_start_methods():
        return simulate(scenario, progress)
    return sample_events(scenario, _child_states(scenario), progress)


def _child_states(scenario) -> Iterator[tuple]:
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    credit_recv, credit_send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_integrate, args=(scenario, send, credit_recv, (recv, credit_send)), daemon=True,
                        name="mbde-simulate-truth")
    child.start()
    send.close()
    credit_recv.close()
    done = False
    try:
        for _ in range(AHEAD):
            _credit(credit_send)
        while True:
            try:
                msg = recv.recv()
            except EOFError:
                raise SimulationError(f"{scenario.file}: the ground-truth process ended without a result "
                                      f"(exit code {child.exitcode})") from None
            kind = msg[0]
            if kind == "end":
                break
            if kind == "error":
                raise SimulationError(msg[1])
            _credit(credit_send)
            _, ks, taus, q, qd, qdd, values, effort = msg
            for i in range(len(ks)):
                yield int(ks[i]), float(taus[i]), q[i], qd[i], qdd[i], values[i], effort[i]
        done = True
    finally:
        recv.close()
        credit_send.close()
        if done:
            child.join(timeout=5)
        if child.is_alive():  # interrupted or failed here: the child's work is not wanted
            child.terminate()
            child.join(1.0)
            if child.is_alive():
                child.kill()
                child.join()


def _credit(conn) -> None:
    """Let the child send one more block (it may have finished and closed its end)."""
    try:
        conn.send_bytes(b"1")
    except (BrokenPipeError, ConnectionResetError):
        pass


def _integrate(scenario, send, credit, parent_ends=()) -> None:
    """Child: run truth_states, send blocks of BLOCK states, one per credit received.

    The parent's ends of both pipes are closed here first: when the parent ends, this
    child's writes then fail (EPIPE) instead of blocking on a pipe that it holds open
    itself; it also gets SIGTERM then (:func:`~mbde_core.runs.stop.child_setup`)."""
    child_setup()
    for conn in parent_ends:
        conn.close()
    rows: list = []

    def flush():
        credit.recv_bytes()
        ks = np.array([r[0] for r in rows], dtype=np.int64)
        taus = np.array([r[1] for r in rows])
        q = np.array([r[2] for r in rows])
        qd = np.array([r[3] for r in rows])
        qdd = np.array([r[4] for r in rows])
        values = np.array([r[5] for r in rows]).reshape(len(rows), -1)
        effort = np.array([r[6] for r in rows])
        send.send(("block", ks, taus, q, qd, qdd, values, effort))
        rows.clear()

    try:
        for k, tau, q, qd, qdd, values, effort in truth_states(scenario):
            rows.append((k, tau, q.copy(), qd.copy(), qdd.copy(), values, effort))
            if len(rows) >= BLOCK:
                flush()
        if rows:
            flush()
        send.send(("end",))
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        pass  # the parent is gone or stopped reading
    except SimulationError as e:
        _report(send, str(e))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent, which raises
        _report(send, f"{scenario.file}: ground truth failed: {type(e).__name__}: {e}")
    finally:
        try:
            send.close()
        finally:
            os._exit(0)


def _report(send, text: str) -> None:
    try:
        send.send(("error", text))
    except OSError:
        pass
