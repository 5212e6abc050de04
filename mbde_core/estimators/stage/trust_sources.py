"""What the trust verdict (:mod:`.trust`) reads besides the window's counts: the running
sums of each channel's normalised innovations (the bias tests), the angular independent
coordinates of the model (the jump test, :mod:`.trust_faults`), the verdict of a
particle filter's Gaussian follower while it publishes the estimate and the sensor fault
its monitor found when it was dropped."""
from __future__ import annotations

import math

import numpy as np


def add_sum(sums: dict, key, e) -> None:
    st = sums.get(key)
    if st is None or len(st[0]) != len(e):
        st = sums[key] = [np.zeros(len(e)), 0]
    st[0] += e
    st[1] += 1


def remove_sum(sums: dict, key, e) -> None:
    st = sums[key]
    st[0] -= e
    st[1] -= 1
    if not st[1]:
        del sums[key]


def most_biased(sums: dict, minimum: int):
    """(channel name, |sum e| / sqrt(n) with its sign) of the most biased channel of
    ``sums`` (key -> [sum of e, n]), None if no channel has ``minimum`` innovations."""
    best = None
    for key, (total, n) in sums.items():
        if n < minimum:
            continue
        z = total / math.sqrt(n)
        i = int(np.argmax(np.abs(z)))
        if best is None or abs(z[i]) > abs(best[1]):
            best = ("+".join(key) + (f"[{i}]" if len(z) > 1 else ""), float(z[i]))
    return best


def angular_coordinates(mech):
    """Which independent coordinates of a mechanism are angles (None if unknown)."""
    try:  # per step: a set lookup (np.isin costs ~50 us a call)
        rel = {int(c) for c in np.asarray(mech.rel_columns).ravel()}
        return np.array([int(c) in rel for c in np.asarray(mech.independent).ravel()], dtype=bool)
    except AttributeError:
        return None


def follower_verdict(est):
    """(level, sentence) of a particle filter with a Gaussian follower
    (:mod:`mbde_core.estimators.particle.refine`), else None. The stage's window judges the
    cloud's innovations, which its spread widens (the cloud on adekf_slider_crank read a
    mean NIS of 0.05 x its dof, OK as conservative, while the published estimate was 20-900
    NEES off). While the follower publishes, its own monitor judges the estimate published,
    from its seed on (acquiring for its first 0.5 s: a fresh seed is not yet trusted); while
    the cloud publishes (before the first seed, after a drop) the particles have not
    settled on one mode with a small spread: DEGRADED (level 1)."""
    f = getattr(est, "follower", None)
    if f is None or getattr(f, "est", None) is None:
        return None
    name = getattr(f.est, "name", "follower")
    mon = getattr(f, "monitor", None)
    if not getattr(f, "following", False):
        return 1, (f"the particle cloud publishes: no {name} follower on one mode of it "
                   "(acquiring, or the follower was dropped)")
    if mon is None or mon.last is None:
        return None
    return mon.last.level, f"the published {name} following the particles: {mon.last.reason}"


def follower_fault(est):
    """The sentence of the sensor-fault test (:mod:`.trust_faults`: a step, a burst or a jump)
    whose LOST verdict dropped a particle filter's published follower, else None. Its
    readings shifted: the cloud, published after the drop, follows the shifted sensor within
    a few readings (its spread makes the shift look consistent: pendulum_release's PF after
    a 10-sigma bias step of its 1 kHz encoder, five readings combined per 5 ms step, read
    innovations of 3.8 and 3.6 sigma of the cloud, then white ones, while 20-28 sigma of
    the follower's covariance off), so the fault holds the stage's verdict as it does a
    Gaussian estimator's."""
    f = getattr(est, "follower", None)
    mon = getattr(f, "monitor", None)
    v = getattr(mon, "last", None)
    if f is None or getattr(f, "following", False) or v is None or v.level < 2 or v.code != "step":
        return None
    name = getattr(getattr(f, "est", None), "name", "follower")
    return f"the published {name} following the particles was dropped: {v.detail}"
