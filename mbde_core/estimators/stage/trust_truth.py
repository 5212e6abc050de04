"""The trust verdict checked against ground truth (replay's metrics, ``mbde bench trust``):
a run's verdicts summarised, and with the truth the share of OK steps within 3 sigma and
of the steps more than 10 sigma off called LOST (:mod:`.trust` gives the verdicts)."""
from __future__ import annotations

import numpy as np

from mbde_core.estimators.stage.trust import LEVELS, LOST, OK, WINDOW


class TrustSummary:
    """A run's verdicts, fed in time order (:meth:`add`: records, and with ground truth the
    checks of the verdict against it): the share of time at each level, the first LOST,
    the last verdict, the longest non-OK stretch's reason.

    Against truth (``within3``: every coordinate of z within 3 sigma of the estimate's own
    covariance; ``off10``: the error of [z, zd] beyond 10 sigma, sqrt(NEES) > 10): the
    fraction of OK steps within 3 sigma, and of the steps off by more than 10 sigma for at
    least ``WINDOW`` s the fraction the verdict calls LOST (and the delay to the first LOST
    of each such stretch)."""

    def __init__(self):
        self.counts = [0, 0, 0]
        self.t0 = None
        self.first_lost = None
        self.last = None
        self.run = None  # (level, start t, verdict) of the current stretch at one level
        self.worst = None  # (level, duration, start, reason) of the longest non-OK stretch, LOST first
        self.ok_n = self.ok_within = 0
        self.off_n = self.off_lost = 0
        self.off_start = None
        self.off_found = None  # a LOST seen in the current off stretch
        self.delays: list[float] = []

    def add(self, stamps, verdicts, within3=None, off10=None) -> None:
        for k, (t, v) in enumerate(zip(stamps, verdicts)):
            if v is None:
                continue
            t = float(t)
            if self.t0 is None:
                self.t0 = t
            lv = v.level
            self.counts[lv] += 1
            if lv == LOST and self.first_lost is None:
                self.first_lost = t - self.t0
            if self.run is None or self.run[0] != lv:
                self._close(t)
                self.run = (lv, t, v)
            else:  # the stretch's reason: its last verdict (the most evidence)
                self.run = (lv, self.run[1], v)
            self.last = (t, v)
            if within3 is not None and lv == OK:
                self.ok_n += 1
                self.ok_within += bool(within3[k])
            if off10 is not None:
                self._off(t, lv, bool(off10[k]))

    def _off(self, t, lv, off) -> None:
        if not off:
            self.off_start = None
            return
        if self.off_start is None:
            self.off_start, self.off_found = t, False
        if lv == LOST and not self.off_found:
            self.off_found = True
            self.delays.append(t - self.off_start)
        if t - self.off_start >= WINDOW:
            self.off_n += 1
            self.off_lost += lv == LOST

    def _close(self, t) -> None:
        if self.run is None or self.run[0] == OK:
            return
        lv, start, v = self.run
        cand = (lv, t - start, start - self.t0, v.reason)
        if self.worst is None or (cand[0], cand[1]) > (self.worst[0], self.worst[1]):
            self.worst = cand

    def result(self) -> dict:
        if self.last is None:
            return {}
        self._close(self.last[0])
        self.run = None
        n = max(sum(self.counts), 1)
        out = {"fraction": {name: c / n for name, c in zip(LEVELS, self.counts)},
               "final": self.last[1].as_dict(), "first_lost_after": self.first_lost}
        if self.worst is not None:
            lv, dur, start, reason = self.worst
            out["worst"] = {"level": LEVELS[lv], "from": start, "duration": dur, "reason": reason}
        if self.ok_n or self.off_n or self.delays:
            out["vs_truth"] = {"ok_steps_within_3_sigma": self.ok_within / self.ok_n if self.ok_n else None,
                               "off_10_sigma_steps_lost": self.off_lost / self.off_n if self.off_n else None,
                               "ok_steps": self.ok_n, "ok_within": self.ok_within,
                               "off_10_sigma_steps": self.off_n, "off_lost": self.off_lost,
                               "lost_delay_max": max(self.delays) if self.delays else None}
        return out


def trust_checks(ez, sig, nees):
    """(within3, off10) for :meth:`TrustSummary.add` from the errors of z (K, g), the
    estimate's sigmas of z (K, g) and the NEES of [z, zd] (K,): every coordinate of z within
    3 sigma; sqrt(NEES) above 10. (None, None) without a covariance."""
    if sig is None or nees is None:
        return None, None
    with np.errstate(invalid="ignore"):
        return np.all(np.abs(ez) <= 3.0 * sig, axis=1), np.asarray(nees) > 100.0
