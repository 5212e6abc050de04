"""Initial trajectory of a recording from its encoder readings (paper 001 sec. 4.4).

Paper 001 smooths the observed joint angles with a second-order Butterworth low-pass
filter (10 Hz cutoff) applied forwards and backwards (no lag), takes the configurations
from them and the velocities from differences. Here that is possible when every
independent coordinate z_k is read directly by an encoder (its reading equals z_k plus
a constant, checked on configurations around the initial one); the readings are
unwrapped, interpolated onto the grid, filtered (scipy.signal.butter + filtfilt), and
zd, zdd are central differences of the filtered z. Positions q follow by continuation
along the trajectory (each step's position problem starts from the previous q, so the
assembly branch is kept). Otherwise the smoother's forward filter gives the guess.
"""
from __future__ import annotations

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.sensors.base import wrap_angle


def encoder_channels(mech, sensors, q_hint, samples: int = 8, seed: int = 0) -> dict | None:
    """{independent coordinate k: (sensor name, offset)} if every z_k is read by an
    encoder as z_k - offset; None otherwise."""
    rng = np.random.default_rng(seed)
    z0 = np.asarray(q_hint, dtype=float)[mech.independent]
    Z = z0 + 0.3 * rng.standard_normal((samples, mech.dof))
    try:
        Q = kinematics.solve_position_continuation(mech, Z, q_hint, steps=16)
    except ValueError:
        return None
    out = {}
    for s in sensors:
        if s.kind != "encoder" or s.dim != 1:
            continue
        h = s.h(Q, np.zeros_like(Q), np.zeros_like(Q))[:, 0]
        for k in range(mech.dof):
            d = wrap_angle(Z[:, k] - h)
            if k not in out and np.ptp(np.unwrap(d)) < 1e-9:
                out[k] = (s.name, float(d[0]))
    return out if len(out) == mech.dof else None


def lowpass_guess(readings, mech, channels: dict, q_hint, cutoff: float = 10.0):
    """(X0 (N, 3g), q0 (N, n)) on the readings' grid from the encoder channels."""
    import scipy.signal

    N, dt, g = readings.N, readings.dt, mech.dof
    grid = np.arange(N)
    rows = {s.name: s for s in readings.sensors}
    Z = np.empty((N, g))
    for k, (name, offset) in channels.items():
        s = rows[name]
        z = np.unwrap(s.values[:, 0] + offset)
        Z[:, k] = np.interp(grid, s.idx, z)
    wn = 2.0 * cutoff * dt
    if N > 12 and wn < 1.0:
        b, a = scipy.signal.butter(2, wn)
        Z = scipy.signal.filtfilt(b, a, Z, axis=0, padlen=min(3 * max(len(a), len(b)), N - 1))
    ZD = np.gradient(Z, dt, axis=0) if N > 1 else np.zeros_like(Z)
    ZDD = np.gradient(ZD, dt, axis=0) if N > 1 else np.zeros_like(Z)
    return np.hstack([Z, ZD, ZDD]), follow(mech, Z, q_hint)


def follow(mech, Z, q_hint, max_move: float = 0.3):
    """q (N, n) along independent coordinates Z (N, g), each pose on the branch of the
    previous one: chunks in which z moves by at most ``max_move`` [rad or m] are solved
    at once from the chunk's first pose (Newton converges from there), a failing chunk
    step by step."""
    N = Z.shape[0]
    q = np.empty((N, mech.n))
    guess = np.asarray(q_hint, dtype=float)
    if np.max(np.abs(guess[mech.independent] - Z[0])) > 1e-3:  # move the hint to the first pose
        guess = kinematics.solve_position_continuation(mech, Z[0], guess, steps=16)
    i = 0
    while i < N:
        moved = np.max(np.abs(Z[i:] - Z[i]), axis=1)
        j = i + max(int(np.argmax(moved > max_move)) if np.any(moved > max_move) else N - i, 1)
        qc, ok = kinematics.solve_position(mech, Z[i:j], np.tile(guess, (j - i, 1)))
        if not np.all(ok) or np.max(np.abs(qc[:, mech.dependent] - guess[mech.dependent])) > 4 * max_move * mech.length_scale:
            for k in range(i, j):  # step by step
                qc_k, okk = kinematics.solve_position(mech, Z[k], guess)
                if not okk:
                    qc_k = kinematics.solve_position_continuation(mech, Z[k], guess, steps=16)
                q[k] = guess = qc_k
        else:
            q[i:j] = qc
            guess = qc[-1]
        i = j
    return q
