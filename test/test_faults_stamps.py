"""The stage (shared by `mbde replay` and the live node) under stamp anomalies: duplicate
stamps, backward jumps and bag loops, readings from the future, silences and forward gaps
(the multi-start bank and its energy ceiling)."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from mbde_core.estimators import make_estimator
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.configure import defaults
from mbde_core.types import Measurement
from stage_rig import rig, stage_for, z_of  # noqa: F401  (rig: the shared fixture)


def test_duplicate_stamps_one_fused_rest_counted(rig):
    m, ss, ms, _ = rig
    doubled = []
    for k, x in enumerate(ms):
        doubled.append(x)
        if k % 37 == 0:
            doubled.append(Measurement(x.stamp, x.sensor, x.value + 0.3))  # same stamp, another value
    a, b = stage_for(m, ss), stage_for(m, ss)
    a.feed(ms)
    a.flush()
    b.feed(doubled)
    b.flush()
    assert b.counters.duplicates == len(doubled) - len(ms)
    assert b.counters.fused == a.counters.fused == len(ms)
    assert np.array_equal(z_of(a), z_of(b))


def _jumped_back(rig, at: float, by: float):
    """The rig's readings with the stamps from ``at`` on moved back by ``by`` seconds, fed
    through a stage: (stage, z rows [t, z], index of the last step before the jump, error
    of z against the truth at the true times)."""
    m, ss, ms, truth = rig
    jump = [x if x.stamp < at else Measurement(x.stamp - by, x.sensor, x.value) for x in ms]
    st = stage_for(m, ss)
    st.feed(jump)
    st.flush()
    z = z_of(st)
    back = int(np.flatnonzero(np.diff(z[:, 0]) < -0.5 * by)[0])
    true_t = np.where(np.arange(len(z)) > back, z[:, 0] + by, z[:, 0])
    return st, z, back, z[:, 1] - np.interp(true_t, truth[:, 0], truth[:, 1])


def test_backward_jump_restarts_from_the_estimate_counted_with_size(rig):
    st, z, back, err = _jumped_back(rig, 1.0, 2.0)
    c = st.counters
    assert c.resets == 1 and abs(c.backward_jump_last - 2.0) < 0.01 and c.backward_jump_max == c.backward_jump_last
    assert abs(z[back + 1, 1] - z[back, 1]) < 0.05  # the track goes on from the last estimate
    assert np.max(np.abs(err[back + 1:])) < 0.1
    assert c.reacquisitions == 0 and c.reconvergence_last is not None and c.reconvergence_last < 0.2


@pytest.mark.parametrize("start", [0.0, 0.5])
def test_bag_loop_restarts_from_the_initial_guess(rig, start):
    """A loop of the recording: the initial guess. Whether the jump goes back to the first
    stamp or further (a node that started mid-recording), the readings decide between the
    track going on and the initial guess (a two-hypothesis bank): no re-acquisition."""
    m, ss, ms, truth = rig
    st = stage_for(m, ss)
    st.feed([x for x in ms if x.stamp >= start] + [x for x in ms if x.stamp < 1.5])
    st.flush()
    assert st.counters.resets == 1 and st.counters.reacquisitions == 0 and st.counters.multistarts == 1
    z = z_of(st)
    tail = z[-50:]
    assert np.max(np.abs(tail[:, 1] - np.interp(tail[:, 0], truth[:, 0], truth[:, 1]))) < 0.05


def test_backward_jump_to_the_first_stamp_while_the_mechanism_moved_on(rig):
    """A clock that steps back by exactly the elapsed time lands on the first stamp, as a
    bag loop does; the readings, not the stamps, decide: the two-hypothesis bank keeps the
    track (the initial guess at rest no longer fits) instead of restarting at rest."""
    st, z, back, err = _jumped_back(rig, 1.2, 1.2)
    c = st.counters
    assert c.resets == 1 and c.multistarts == 1 and c.reacquisitions == 0 and c.rejected_gate == 0
    assert np.max(np.abs(err[back + 1:])) < 0.05  # never the initial guess (0.3+ rad away by then)


def test_gap_bank_keeps_the_prediction_as_a_hypothesis(rig):
    """After a silence the open-loop prediction is one member of the bank (the estimator
    itself, member 0), next to candidates over its 3-sigma range, also when not lost."""
    from mbde_core.estimators.stage import multistart

    m, ss, ms, truth = rig
    seen = []
    real = multistart.MultiStart.__init__

    def spy(self, est, t, starts, window, cap, keep=False, **kw):
        real(self, est, t, starts, window, cap, keep, **kw)
        seen.append((keep, self.members[0] is est, len(self.members), self.ceiling))

    st = stage_for(m, ss)
    try:
        multistart.MultiStart.__init__ = spy
        st.feed([x for x in ms if not 1.0 <= x.stamp < 1.3])
        st.flush()
    finally:
        multistart.MultiStart.__init__ = real
    assert st.counters.multistarts == 1 and seen and seen[0][0] and seen[0][1] and seen[0][2] > 2
    assert seen[0][3] is not None  # gravity only, no force limits: a passive mechanism, bounded energy
    z = z_of(st)
    late = z[:, 0] > 1.6
    assert np.max(np.abs(z[late, 1] - np.interp(z[late, 0], truth[:, 0], truth[:, 1]))) < 0.05


def test_energy_ceiling_of_a_passive_mechanism_only(rig):
    """A linkage under gravity alone cannot gain energy: the ceiling is its energy plus
    ENERGY_MARGIN x range(V); with unknown forces expected (force limits) there is none."""
    from mbde_core.estimators.options.mechanism_scales import mechanism_scales
    from mbde_core.estimators.stage.multistart import ENERGY_MARGIN, energy_ceiling

    m, ss, _, _ = rig
    est = make_estimator("dekf", m, ss, defaults("dekf"))
    init = InitialState(m.q0[m.independent], m.qd0[m.independent], np.array([0.05]), np.array([0.5]), m.q0)
    est.reset(0.0, init)
    snap = est.estimate()
    sc = mechanism_scales(m)
    V = m.potential_energy(sc.configurations)
    got = energy_ceiling(est, snap)
    assert got == pytest.approx(float(m.energy(snap.q, snap.qd)) + ENERGY_MARGIN * float(V.max() - V.min()))
    motor = copy.copy(m)
    motor.__dict__ = dict(m.__dict__)
    motor.__dict__["_scales_cache"] = {"k": dataclasses.replace(sc, a_f=np.ones_like(sc.a_f))}
    est.mech = motor
    assert energy_ceiling(est, snap) is None


def test_bank_emits_the_best_candidate_within_the_energy_ceiling():
    """Scores rank the candidates; one whose energy exceeds the ceiling is skipped (the
    best overall if none is within it)."""
    import types

    from mbde_core.estimators.stage.multistart import MultiStart

    class Member:
        def __init__(self, energy):
            self.e = energy

        def estimate(self):
            return types.SimpleNamespace(q=np.array([self.e]), qd=np.zeros(1))

    bank = MultiStart.__new__(MultiStart)
    bank.est = types.SimpleNamespace(mech=types.SimpleNamespace(energy=lambda q, qd: float(q[0])))
    bank.members = [Member(5.0), Member(1.0), Member(0.5)]
    bank.scores = np.array([-10.0, -8.0, -9.0])
    bank.ceiling = 2.0
    assert bank._admissible_best() == 2
    bank.ceiling = 0.1
    assert bank._admissible_best() == 0
    bank.ceiling = None
    assert bank._admissible_best() == 0


def test_future_stamps_skipped_without_reset(rig):
    m, ss, ms, _ = rig
    bad = list(ms)
    idx = list(range(100, len(ms), 150))
    for j, i in enumerate(idx):
        bad[i] = Measurement(ms[i].stamp + (5.0 if j % 2 else 1000.0), ms[i].sensor, ms[i].value)
    a, b = stage_for(m, ss), stage_for(m, ss)
    a.feed([x for k, x in enumerate(ms) if k not in idx])
    a.flush()
    b.feed(bad)
    b.flush()
    assert b.counters.future == len(idx)
    assert b.counters.resets == 0 and b.counters.gap_resets == 0
    assert np.array_equal(z_of(a), z_of(b))
    # a future reading at the very end (nothing after it to confirm it) is dropped too
    c = stage_for(m, ss)
    c.feed(ms[:50] + [Measurement(ms[50].stamp + 100.0, "gyro", ms[50].value)])
    c.flush()
    assert c.counters.future == 1 and c.time < 1.0


def test_forward_gap_confirmed_by_the_next_reading(rig):
    m, ss, ms, _ = rig
    st = stage_for(m, ss, max_gap=1.0)
    st.feed([x for x in ms if not 0.5 <= x.stamp < 2.0 - 1e-9] + [Measurement(x.stamp + 2.0, x.sensor, x.value)
                                                                  for x in ms if x.stamp < 0.5])
    st.flush()
    assert st.counters.gap_resets == 1 and st.counters.future == 0 and st.counters.resets == 0
    assert st.counters.reconvergence_last is not None
