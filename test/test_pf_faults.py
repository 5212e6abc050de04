"""The particle filter under the stage's disturbances (issue 18): it carries both
explanations of a jump back to the first stamp, and after a silence mixes its open-loop
cloud with fresh hypotheses (ParticleFilter.add_restart_hypotheses, pf_inject)."""
from __future__ import annotations

import numpy as np

from test_faults import rig, stage_for, z_of  # noqa: F401  (rig: the shared fixture)
from mbde_core.types import Measurement


def _pf_error(st, truth, by=0.0, back=None):
    z = z_of(st)
    t = z[:, 0] + (by if back is None else np.where(np.arange(len(z)) > back, by, 0.0))
    return z, np.abs((z[:, 1] - np.interp(t, truth[:, 0], truth[:, 1]) + np.pi) % (2 * np.pi) - np.pi)


def test_pf_carries_both_explanations_of_a_jump_to_the_first_stamp(rig):
    """The particle filter keeps its cloud at a jump back to the first stamp and adds the
    uniform prior's hypotheses (PF.add_restart_hypotheses): the readings decide. The clock
    stepped back while the mechanism moved on: the track goes on (the stage alone would
    restart it from the uniform prior, as for a bag loop); a real loop: the readings of the
    restarted motion win."""
    m, ss, ms, truth = rig
    by = 1.2
    st = stage_for(m, ss, "pf")
    st.feed([x if x.stamp < by else Measurement(x.stamp - by, x.sensor, x.value) for x in ms])
    st.flush()
    z = z_of(st)
    back = int(np.flatnonzero(np.diff(z[:, 0]) < -0.5 * by)[0])
    _, err = _pf_error(st, truth, by, back)
    assert err[back - 20:back + 1].max() < 0.05  # on track before the jump
    assert err[back + 1:].max() < 0.1 and err[back + 10:].max() < 0.05
    d = st.est.diagnostics()
    assert d["recovery_reasons"]["jump"] == 1 and d["recoveries"] == 0
    loop = stage_for(m, ss, "pf")  # a loop of the first 1.5 s
    loop.feed(ms + [x for x in ms if x.stamp < 1.5])
    loop.flush()
    z, err = _pf_error(loop, truth)
    second = np.flatnonzero(np.diff(z[:, 0]) < -1.0)[0] + 1
    late = np.arange(len(z)) > second
    assert err[second + 10:].max() < 0.1  # the restarted motion's hypotheses won within 0.05 s
    assert err[late & (z[:, 0] > 0.6)].max() < 0.02


def test_pf_after_a_silence_mixes_the_prediction_with_fresh_hypotheses(rig):
    m, ss, ms, truth = rig
    st = stage_for(m, ss, "pf")
    st.feed([x for x in ms if not 1.0 <= x.stamp < 1.3])
    st.flush()
    z, err = _pf_error(st, truth)
    assert st.est.diagnostics()["recovery_reasons"]["silence"] == 1
    assert err[z[:, 0] > 1.4].max() < 0.05
